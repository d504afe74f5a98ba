//! A sink worker's latency and jitter figures per sender run: a fixed pool of slots, each the
//! [`SharedFigures`] of one epoch's sessions on this worker. The worker takes a free slot when
//! a run's first session opens here and hands it back when the run's last session here closes
//! (before that session's answer goes into the outbox); the registry adds a handed-back slot
//! into its sender's figures and frees it. A slot's owner word says whose it is, so neither
//! side ever locks: the worker writes a slot only while it is in use, the registry only while
//! it is handed back. Sessions opened by data alone may hold at most half the slots, so
//! forged runs never take the figures of senders that said hello.

use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

use crate::figures::SharedFigures;

const FREE: u64 = 0;
const IN_USE: u64 = 1 << 32;
const HANDED_BACK: u64 = 2 << 32;
const STATE: u64 = 3 << 32;

/// One slot: its owner word, its run's source (of its first session here: the name of a run
/// without a hello) and its two distributions.
#[derive(Debug, Default)]
pub(crate) struct FigureSlot {
    owner: AtomicU64,
    source: [AtomicU64; 3],
    /// Corrected one-way latency, in ns.
    pub(crate) latency: SharedFigures,
    /// |D| of consecutive samples of one session, in ns.
    pub(crate) jitter: SharedFigures,
}

/// A worker's slots, shared with the registry.
#[derive(Debug, Default)]
pub(crate) struct FigurePool {
    slots: Vec<FigureSlot>,
}

impl FigureSlot {
    /// Its run's source, as `mailbox::encode_source` packs it.
    pub(crate) fn source(&self) -> [u64; 3] {
        [0, 1, 2].map(|i| self.source[i].load(Relaxed))
    }
}

impl FigurePool {
    /// `slots` slots, allocated now.
    pub(crate) fn new(slots: usize) -> FigurePool {
        FigurePool {
            slots: (0..slots).map(|_| FigureSlot::default()).collect(),
        }
    }

    /// How many slots it has.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Slot `at`.
    pub(crate) fn slot(&self, at: u16) -> &FigureSlot {
        &self.slots[at as usize]
    }

    /// For the registry: each handed-back slot's epoch and distributions; `take` adds them
    /// where they belong, then the slot is cleared and freed.
    pub(crate) fn harvest(&self, mut take: impl FnMut(u32, &FigureSlot)) {
        for slot in &self.slots {
            let owner = slot.owner.load(Acquire);
            if owner & STATE == HANDED_BACK {
                take(owner as u32, slot);
                slot.latency.clear();
                slot.jitter.clear();
                slot.owner.store(FREE, Release);
            }
        }
    }

    /// For the registry's live view: each slot in use, with its epoch.
    pub(crate) fn in_use(&self, mut look: impl FnMut(u32, &FigureSlot)) {
        for slot in &self.slots {
            let owner = slot.owner.load(Acquire);
            if owner & STATE == IN_USE {
                look(owner as u32, slot);
            }
        }
    }
}

/// The worker's side: which epoch holds which slot, and how many of its sessions are live.
#[derive(Debug, Default)]
pub(crate) struct FigureLeases {
    /// (epoch, slot, live sessions, opened by data alone).
    held: Vec<(u32, u16, u32, bool)>,
}

impl FigureLeases {
    /// Leases for a pool of `slots` (allocated now).
    pub(crate) fn new(slots: usize) -> FigureLeases {
        FigureLeases {
            held: Vec::with_capacity(slots),
        }
    }

    /// The slot of one more live session of `epoch`: the epoch's own, or a free one (`None`
    /// when the pool has none for it: that session's samples go into no figures).
    pub(crate) fn open(
        &mut self,
        pool: &FigurePool,
        epoch: u32,
        announced: bool,
        source: [u64; 3],
    ) -> Option<u16> {
        if let Some(h) = self.held.iter_mut().find(|h| h.0 == epoch) {
            h.2 += 1;
            return Some(h.1);
        }
        let unannounced = self.held.iter().filter(|h| h.3).count();
        if !announced && unannounced >= pool.slots.len() / 2 {
            return None;
        }
        let at = pool
            .slots
            .iter()
            .position(|s| s.owner.load(Acquire) == FREE)?;
        for (word, value) in pool.slots[at].source.iter().zip(source) {
            word.store(value, Relaxed);
        }
        pool.slots[at]
            .owner
            .store(IN_USE | u64::from(epoch), Release);
        self.held.push((epoch, at as u16, 1, !announced));
        Some(at as u16)
    }

    /// A session of `epoch` holding `slot` closed: the epoch's last live session here hands
    /// the slot back to the registry.
    pub(crate) fn close(&mut self, pool: &FigurePool, epoch: u32, slot: u16) {
        let Some(i) = self.held.iter().position(|h| h.0 == epoch && h.1 == slot) else {
            return;
        };
        self.held[i].2 -= 1;
        if self.held[i].2 == 0 {
            self.held.swap_remove(i);
            pool.slots[slot as usize]
                .owner
                .store(HANDED_BACK | u64::from(epoch), Release);
        }
    }

    /// A session opened by data alone said hello: its epoch's slot no longer counts against
    /// the data-alone share.
    pub(crate) fn announce(&mut self, epoch: u32) {
        if let Some(h) = self.held.iter_mut().find(|h| h.0 == epoch) {
            h.3 = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::FigureCells;

    #[test]
    fn a_slot_goes_to_the_registry_when_its_runs_last_session_closes() {
        let pool = FigurePool::new(4);
        let mut leases = FigureLeases::new(4);
        let a = leases.open(&pool, 7, true, [0; 3]).unwrap();
        assert_eq!(leases.open(&pool, 7, true, [0; 3]), Some(a));
        pool.slot(a).latency.record(5_000);
        leases.close(&pool, 7, a);
        let mut seen = Vec::new();
        pool.harvest(|epoch, _| seen.push(epoch));
        assert!(seen.is_empty(), "one session of epoch 7 is still live");
        pool.in_use(|epoch, _| seen.push(epoch));
        assert_eq!(seen, [7]);
        leases.close(&pool, 7, a);
        let mut cells = FigureCells::default();
        pool.harvest(|epoch, slot| {
            assert_eq!(epoch, 7);
            slot.latency.add_into(&mut cells);
        });
        assert_eq!(cells.figures().unwrap().p50_ns, 5_000);
        // Freed and cleared: the next run starts from nothing.
        let b = leases.open(&pool, 8, true, [0; 3]).unwrap();
        let mut again = FigureCells::default();
        pool.slot(b).latency.add_into(&mut again);
        assert_eq!(again.figures(), None);
    }

    #[test]
    fn runs_without_a_hello_hold_at_most_half_the_slots() {
        let pool = FigurePool::new(4);
        let mut leases = FigureLeases::new(4);
        assert!(leases.open(&pool, 1, false, [0; 3]).is_some());
        assert!(leases.open(&pool, 2, false, [0; 3]).is_some());
        assert_eq!(leases.open(&pool, 3, false, [0; 3]), None);
        assert!(leases.open(&pool, 4, true, [0; 3]).is_some());
        leases.announce(1);
        assert!(leases.open(&pool, 5, false, [0; 3]).is_some());
        assert!(
            leases.open(&pool, 6, true, [0; 3]).is_none(),
            "the pool is full"
        );
    }
}
