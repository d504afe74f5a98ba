//! The sink's per-worker table of flows: one sequence tracker per flow id for the current
//! session epoch, and the rule that turns sequence gaps into `lost` only where the kernel's own
//! drop counter does not already explain them.
//!
//! A packet with a new epoch for a flow closes that flow's session (its open gaps become lost)
//! and opens a new one, so a restarted sender never shows up as false loss or reordering. The
//! table has a fixed capacity chosen at set-up; it never allocates while packets are counted.

use crate::{
    proto::seq::{SeqCounters, SeqTracker},
    stats::RxFlow,
};

/// One flow id's state.
#[derive(Debug)]
struct FlowSlot {
    epoch: Option<u32>,
    tracker: SeqTracker,
    /// Tracker counters already folded into `totals` for the current session.
    folded: SeqCounters,
    totals: RxFlow,
}

/// Sequence accounting for the flows one sink worker sees.
#[derive(Debug)]
pub struct FlowTable {
    slots: Vec<FlowSlot>,
    /// Kernel drops reported but not yet matched with a sequence gap.
    unexplained_drops: u64,
    /// Gaps matched with kernel drops so far.
    explained_drops: u64,
}

impl FlowTable {
    /// A table for flow ids `0..capacity`.
    pub fn new(capacity: usize) -> FlowTable {
        FlowTable {
            slots: (0..capacity)
                .map(|_| FlowSlot {
                    epoch: None,
                    tracker: SeqTracker::new(),
                    folded: SeqCounters::default(),
                    totals: RxFlow::default(),
                })
                .collect(),
            unexplained_drops: 0,
            explained_drops: 0,
        }
    }

    /// Number of flow ids the table can hold.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Tells the table the kernel dropped `n` more datagrams on this socket.
    pub fn add_kernel_drops(&mut self, n: u64) {
        self.unexplained_drops += n;
    }

    /// Counts one valid packet; false when `flow` is outside the table.
    pub fn record(&mut self, flow: u32, epoch: u32, seq: u64, bytes: u64) -> bool {
        let Some(slot) = self.slots.get_mut(flow as usize) else {
            return false;
        };
        if slot.epoch != Some(epoch) {
            if slot.epoch.is_some() {
                slot.tracker.finish();
                fold(slot, &mut self.unexplained_drops, &mut self.explained_drops);
                slot.tracker.reset();
                slot.folded = SeqCounters::default();
            }
            slot.epoch = Some(epoch);
        }
        slot.tracker.observe(seq);
        slot.totals.bytes += bytes;
        fold(slot, &mut self.unexplained_drops, &mut self.explained_drops);
        true
    }

    /// Closes every open session: gaps still inside the reorder window become lost.
    pub fn finish(&mut self) {
        for slot in &mut self.slots {
            if slot.epoch.is_some() {
                slot.tracker.finish();
                fold(slot, &mut self.unexplained_drops, &mut self.explained_drops);
            }
        }
    }

    /// Counters of flow `flow`.
    pub fn flow(&self, flow: usize) -> RxFlow {
        self.slots.get(flow).map(|s| s.totals).unwrap_or_default()
    }

    /// Missing sequence numbers still inside some reorder window.
    pub fn pending_gaps(&self) -> u64 {
        self.slots.iter().map(|s| s.tracker.pending_gaps()).sum()
    }
}

/// Moves the tracker's new counts into the slot totals, charging new gaps to unexplained
/// kernel drops first.
fn fold(slot: &mut FlowSlot, unexplained: &mut u64, explained: &mut u64) {
    let now = slot.tracker.counters();
    let before = slot.folded;
    let new_gaps = now.lost - before.lost;
    let by_kernel = new_gaps.min(*unexplained);
    *unexplained -= by_kernel;
    *explained += by_kernel;
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
        let mut t = FlowTable::new(4);
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
        assert_eq!(f.lost, 2, "5 missing, 3 of them dropped by the kernel");
        assert_eq!(f.bytes, 15 * 64);
    }

    #[test]
    fn new_epoch_opens_a_new_session_without_false_loss() {
        let mut t = FlowTable::new(2);
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
        let mut t = FlowTable::new(1);
        t.record(0, 1, 0, 1);
        t.record(0, 1, 5, 1);
        t.record(0, 2, 0, 1);
        assert_eq!(t.flow(0).lost, 4);
    }

    #[test]
    fn flow_outside_table_is_refused_and_duplicates_stay_apart() {
        let mut t = FlowTable::new(1);
        assert!(!t.record(1, 1, 0, 1));
        t.record(0, 1, 0, 1);
        t.record(0, 1, 0, 1);
        t.record(0, 1, 2, 1);
        t.finish();
        let f = t.flow(0);
        assert_eq!((f.packets, f.lost, f.duplicates), (2, 1, 1));
    }
}
