//! The trials of `ringblast search`, posted one at a time to sender workers that stay up for the
//! whole search: each trial is the next part (session epoch, see `parts`) of one long sender
//! run, so a trial costs no process start, no ring or socket set-up and no control handshake.
//!
//! The board is sized in setup: one slot per trial the search may run. The search thread writes
//! a slot's rate and duration, then publishes it by raising the posted count (a release store);
//! each worker waits between trials for the next slot to be posted (an acquire load), sends it
//! from its own clock for its duration, lets every send complete, and moves to the next part so
//! the finished one settles. Nothing here allocates after setup.

use std::sync::atomic::{AtomicU64, Ordering};

/// One posted trial, as a worker reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TrialSpec {
    /// This worker's share of the trial's rate (packets per second); `None`: unpaced.
    pub(crate) rate_pps: Option<f64>,
    /// How long the trial sends.
    pub(crate) duration_ns: u64,
}

#[derive(Debug, Default)]
struct Slot {
    /// The whole trial's rate as `f64` bits; 0: unpaced.
    rate_bits: AtomicU64,
    duration_ns: AtomicU64,
}

/// The search's trials, shared by the search thread and every sender worker.
#[derive(Debug)]
pub(crate) struct TrialBoard {
    slots: Vec<Slot>,
    posted: AtomicU64,
    /// Sender queues sharing each trial's rate equally.
    queues: usize,
}

impl TrialBoard {
    /// A board for at most `capacity` trials, sent by `queues` sender queues.
    pub(crate) fn new(capacity: usize, queues: usize) -> TrialBoard {
        TrialBoard {
            slots: (0..capacity).map(|_| Slot::default()).collect(),
            posted: AtomicU64::new(0),
            queues: queues.max(1),
        }
    }

    /// Trials the board has room for.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Trials posted so far.
    pub(crate) fn posted(&self) -> usize {
        self.posted.load(Ordering::Acquire) as usize
    }

    /// Posts the next trial: `rate_pps` over all queues (`None`: unpaced) for `duration_ns`.
    /// Returns its number (from 0), or `None` when the board is full.
    pub(crate) fn post(&self, rate_pps: Option<f64>, duration_ns: u64) -> Option<usize> {
        let k = self.posted.load(Ordering::Relaxed) as usize;
        let slot = self.slots.get(k)?;
        let bits = rate_pps
            .filter(|r| r.is_finite() && *r > 0.0)
            .map_or(0, f64::to_bits);
        slot.rate_bits.store(bits, Ordering::Relaxed);
        slot.duration_ns
            .store(duration_ns.max(1), Ordering::Relaxed);
        self.posted.store(k as u64 + 1, Ordering::Release);
        Some(k)
    }

    /// Trial `k` as one worker sends it, once it is posted.
    pub(crate) fn get(&self, k: usize) -> Option<TrialSpec> {
        if k >= self.posted() {
            return None;
        }
        let slot = &self.slots[k];
        let bits = slot.rate_bits.load(Ordering::Relaxed);
        Some(TrialSpec {
            rate_pps: (bits != 0).then(|| f64::from_bits(bits) / self.queues as f64),
            duration_ns: slot.duration_ns.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_is_seen_only_once_posted_and_each_queue_gets_its_share() {
        let board = TrialBoard::new(2, 4);
        assert_eq!(board.get(0), None);
        assert_eq!(board.post(Some(1000.0), 5), Some(0));
        assert_eq!(
            board.get(0),
            Some(TrialSpec {
                rate_pps: Some(250.0),
                duration_ns: 5
            })
        );
        assert_eq!(board.get(1), None);
        assert_eq!(board.post(None, 7), Some(1));
        assert_eq!(board.get(1).map(|t| t.rate_pps), Some(None), "unpaced");
        assert_eq!(board.post(Some(1.0), 1), None, "the board is full");
        assert_eq!(board.posted(), 2);
    }
}
