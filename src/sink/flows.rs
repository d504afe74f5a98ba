//! The sink's per-worker table of flows: one sequence tracker per flow id for the current
//! session epoch, and the rule that turns sequence gaps into `lost` only where the kernel's own
//! drop counter does not already explain them.
//!
//! The kernel counts drops per socket buffer (`SO_RXQ_OVFL`), and with GRO one dropped buffer
//! may hold up to 64 datagrams. So a gap that opens in a flow while the socket's drop counter has
//! moved since that flow's previous packet is charged, datagram by datagram, to kernel drops;
//! every other gap becomes `lost` once it leaves the reorder window. Drops after the last
//! received packet (no gap follows) are taken from the kernel's counter as is.
//!
//! A packet with a new epoch for a flow closes that flow's session (its open gaps become lost)
//! and opens a new one, so a restarted sender never shows up as false loss or reordering. The
//! table has a fixed capacity chosen at set-up; it never allocates while packets are counted.

use crate::{
    proto::seq::{Outcome, SeqCounters, SeqTracker},
    stats::RxFlow,
};

/// One flow id's state.
#[derive(Debug)]
struct FlowSlot {
    epoch: Option<u32>,
    tracker: SeqTracker,
    /// The socket's drop counter when this flow's previous packet arrived.
    drops_mark: u64,
    /// Missing datagrams of this flow charged to kernel drops, not yet settled.
    kernel_budget: u64,
    /// Tracker counters already folded into `totals` for the current session.
    folded: SeqCounters,
    totals: RxFlow,
}

/// Sequence accounting for the flows one sink worker sees.
#[derive(Debug)]
pub struct FlowTable {
    slots: Vec<FlowSlot>,
    /// The socket's drop counter as the kernel reports it (buffers).
    socket_drops: u64,
    /// Datagrams in gaps charged to kernel drops.
    charged_drops: u64,
    /// The socket coalesces with GRO, so one kernel drop may stand for many datagrams.
    gro: bool,
}

impl FlowTable {
    /// A table for flow ids `0..capacity`; `gro` says whether one kernel drop may be a
    /// coalesced buffer of several datagrams (otherwise charges never exceed the counter).
    pub fn new(capacity: usize, gro: bool) -> FlowTable {
        FlowTable {
            slots: (0..capacity)
                .map(|_| FlowSlot {
                    epoch: None,
                    tracker: SeqTracker::new(),
                    drops_mark: 0,
                    kernel_budget: 0,
                    folded: SeqCounters::default(),
                    totals: RxFlow::default(),
                })
                .collect(),
            socket_drops: 0,
            charged_drops: 0,
            gro,
        }
    }

    /// Number of flow ids the table can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Tells the table the kernel dropped `n` more buffers on this socket.
    pub fn add_kernel_drops(&mut self, n: u64) {
        self.socket_drops += n;
    }

    /// Datagrams the kernel dropped on this socket: the gaps charged to it, or its own counter
    /// when that is larger (drops after the last packet leave no gap).
    pub fn kernel_drops(&self) -> u64 {
        self.charged_drops.max(self.socket_drops)
    }

    /// Counts one valid packet; false when `flow` is outside the table.
    pub fn record(&mut self, flow: u32, epoch: u32, seq: u64, bytes: u64) -> bool {
        let Some(slot) = self.slots.get_mut(flow as usize) else {
            return false;
        };
        if slot.epoch != Some(epoch) {
            if slot.epoch.is_some() {
                slot.tracker.finish();
                fold(slot);
                slot.tracker.reset();
                slot.folded = SeqCounters::default();
                slot.kernel_budget = 0;
            }
            slot.epoch = Some(epoch);
        }
        if let Outcome::Gap(missing) = slot.tracker.observe(seq)
            && self.socket_drops > slot.drops_mark
        {
            let charged = chargeable(self.gro, self.socket_drops, self.charged_drops, missing);
            slot.kernel_budget += charged;
            self.charged_drops += charged;
        }
        slot.drops_mark = self.socket_drops;
        slot.totals.bytes += bytes;
        fold(slot);
        true
    }

    /// Tells the table that flow `flow` of session `epoch` sent sequence numbers below `end`
    /// (known when the sender runs in this process). Numbers above the highest received are a
    /// tail gap: charged to kernel drops when the socket dropped since the flow's last packet,
    /// otherwise lost. Call before `finish`; a flow this table never saw is left alone.
    pub fn close_tail(&mut self, flow: u32, epoch: u32, end: u64) {
        let Some(slot) = self.slots.get_mut(flow as usize) else {
            return;
        };
        let Some(highest) = slot.tracker.highest().filter(|_| slot.epoch == Some(epoch)) else {
            return;
        };
        let tail = end.saturating_sub(highest.saturating_add(1));
        if tail == 0 {
            return;
        }
        let charged = if self.socket_drops > slot.drops_mark {
            chargeable(self.gro, self.socket_drops, self.charged_drops, tail)
        } else {
            0
        };
        self.charged_drops += charged;
        slot.drops_mark = self.socket_drops;
        slot.totals.lost += tail - charged;
    }

    /// Closes every open session: gaps still inside the reorder window become lost.
    pub fn finish(&mut self) {
        for slot in &mut self.slots {
            if slot.epoch.is_some() {
                slot.tracker.finish();
                fold(slot);
            }
        }
    }

    /// Counters of flow `flow`.
    pub fn flow(&self, flow: usize) -> RxFlow {
        self.slots.get(flow).map(|s| s.totals).unwrap_or_default()
    }
}

/// How many of `missing` datagrams a kernel drop can explain: all of them with GRO (one
/// dropped buffer may hold many), otherwise no more than the drops not yet charged.
fn chargeable(gro: bool, socket_drops: u64, charged: u64, missing: u64) -> u64 {
    if gro {
        missing
    } else {
        missing.min(socket_drops.saturating_sub(charged))
    }
}

/// Moves the tracker's new counts into the slot totals; newly settled gaps are charged to the
/// flow's kernel-drop budget first.
fn fold(slot: &mut FlowSlot) {
    let now = slot.tracker.counters();
    let before = slot.folded;
    let new_gaps = now.lost - before.lost;
    let by_kernel = new_gaps.min(slot.kernel_budget);
    slot.kernel_budget -= by_kernel;
    let t = &mut slot.totals;
    t.packets += now.received - before.received;
    t.lost += new_gaps - by_kernel;
    t.reordered += now.reordered - before.reordered;
    t.duplicates += now.duplicates - before.duplicates;
    t.late += now.late_beyond_window - before.late_beyond_window;
    slot.folded = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_explained_by_kernel_drops_are_not_lost() {
        let mut t = FlowTable::new(4, true);
        for seq in 0..10 {
            t.record(1, 7, seq, 64);
        }
        t.add_kernel_drops(3);
        for seq in 15..20 {
            t.record(1, 7, seq, 64);
        }
        t.finish();
        let f = t.flow(1);
        assert_eq!(f.packets, 15);
        assert_eq!(
            f.lost, 0,
            "the gap opened right after the kernel counted drops"
        );
        assert_eq!(
            t.kernel_drops(),
            5,
            "one GRO buffer may hold several datagrams"
        );
        assert_eq!(f.bytes, 15 * 64);
    }

    #[test]
    fn gaps_without_kernel_drops_are_lost_and_tail_drops_use_the_counter() {
        let mut t = FlowTable::new(2, false);
        t.record(0, 1, 0, 1);
        t.record(0, 1, 4, 1);
        t.add_kernel_drops(2);
        t.record(1, 1, 0, 1);
        t.record(1, 1, 1, 1);
        t.finish();
        assert_eq!(t.flow(0).lost, 3);
        assert_eq!(t.flow(1).lost, 0);
        assert_eq!(
            t.kernel_drops(),
            2,
            "no gap followed, so the kernel's count stands"
        );
    }

    #[test]
    fn tail_gaps_follow_the_kernel_counter() {
        for (gro, want_kernel, want_lost_1) in [(true, 66, 0), (false, 1, 2)] {
            let mut t = FlowTable::new(2, gro);
            for seq in 0..10 {
                t.record(0, 3, seq, 1);
                t.record(1, 3, seq, 1);
            }
            t.add_kernel_drops(1);
            t.close_tail(0, 3, 74);
            t.close_tail(1, 3, 12);
            t.close_tail(1, 9, 50);
            t.finish();
            assert_eq!(t.kernel_drops(), want_kernel, "gro {gro}");
            assert_eq!(t.flow(1).lost, want_lost_1, "gro {gro}");
            let lost0 = t.flow(0).lost;
            assert_eq!(
                t.kernel_drops() + lost0 + t.flow(1).lost,
                66,
                "every missing datagram is counted once"
            );
        }
    }

    #[test]
    fn without_gro_charges_never_exceed_the_kernel_counter() {
        let mut t = FlowTable::new(1, false);
        t.record(0, 1, 0, 1);
        t.add_kernel_drops(2);
        t.record(0, 1, 10, 1);
        t.finish();
        assert_eq!(t.kernel_drops(), 2);
        assert_eq!(t.flow(0).lost, 7);
    }

    #[test]
    fn tail_gap_without_drops_is_lost() {
        let mut t = FlowTable::new(1, false);
        t.record(0, 3, 0, 1);
        t.close_tail(0, 3, 5);
        t.finish();
        assert_eq!(t.flow(0).lost, 4);
    }

    #[test]
    fn new_epoch_opens_a_new_session_without_false_loss() {
        let mut t = FlowTable::new(2, false);
        for seq in 0..100 {
            t.record(0, 1, seq, 10);
        }
        for seq in 0..50 {
            t.record(0, 2, seq, 10);
        }
        t.finish();
        let f = t.flow(0);
        assert_eq!(f.packets, 150);
        assert_eq!((f.lost, f.reordered, f.duplicates), (0, 0, 0));
    }

    #[test]
    fn epoch_change_closes_open_gaps_as_lost() {
        let mut t = FlowTable::new(1, false);
        t.record(0, 1, 0, 1);
        t.record(0, 1, 5, 1);
        t.record(0, 2, 0, 1);
        assert_eq!(t.flow(0).lost, 4);
    }

    #[test]
    fn flow_outside_table_is_refused_and_duplicates_stay_apart() {
        let mut t = FlowTable::new(1, false);
        assert!(!t.record(1, 1, 0, 1));
        t.record(0, 1, 0, 1);
        t.record(0, 1, 0, 1);
        t.record(0, 1, 2, 1);
        t.finish();
        let f = t.flow(0);
        assert_eq!((f.packets, f.lost, f.duplicates), (2, 1, 1));
    }
}
