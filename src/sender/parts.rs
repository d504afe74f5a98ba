//! Each part of a rate schedule (each `--rate-steps` step, each reported second of a `--ramp`)
//! is its own session epoch, so the sink keeps its books per part and its verdict for a part is
//! exact. At a part's end on its own monotonic clock every sender worker switches its headers to
//! the next part's epoch and starts every flow's sequence numbers and failed-send count afresh.
//!
//! A send belongs to the part it was stamped in: a failure reaped after the switch counts in its
//! own part. Once a finished part has no send left in flight, the worker publishes its flows'
//! true ends and failed sends and marks it settled; the control side then says goodbye for that
//! epoch. A run without a schedule is a single part that lasts the whole run.
//!
//! Everything is sized in setup; the worker loop only indexes fixed vectors and stores relaxed
//! atomics (a release store marks a part settled after its numbers).

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::Release},
};

/// One part's published state for one worker's flows.
#[derive(Debug, Default)]
pub(crate) struct PartMarks {
    /// Per flow (in the worker's flow order): one past the highest sequence number stamped.
    pub(crate) next_seq: Vec<AtomicU64>,
    /// Per flow: sends of this part that failed.
    pub(crate) failed: Vec<AtomicU64>,
    /// Every send of this part has completed: the numbers above are final.
    pub(crate) settled: AtomicBool,
}

impl PartMarks {
    /// Marks for `flows` flows, each starting at `first_seq`.
    pub(crate) fn new(flows: usize, first_seq: u64) -> PartMarks {
        PartMarks {
            next_seq: (0..flows).map(|_| AtomicU64::new(first_seq)).collect(),
            failed: (0..flows).map(|_| AtomicU64::new(0)).collect(),
            settled: AtomicBool::new(false),
        }
    }
}

/// The epochs of a schedule's parts: the run's own epoch first, then distinct random ones.
pub(crate) fn part_epochs(first: u32, parts: usize) -> Arc<[u32]> {
    let mut epochs = vec![first];
    while epochs.len() < parts {
        let e = rand::random::<u32>().max(1);
        if !epochs.contains(&e) {
            epochs.push(e);
        }
    }
    epochs.into()
}

/// A worker's view of the schedule's parts.
#[derive(Debug)]
pub(super) struct PartClock {
    /// Monotonic ns at which each part ends (the last: never, when unscheduled).
    ends: Vec<u64>,
    epochs: Arc<[u32]>,
    current: usize,
    first_unsettled: usize,
    /// Sends in flight per part.
    in_flight: Vec<u64>,
    /// Failed sends per part, per flow.
    failed: Vec<Vec<u64>>,
    /// Stamped ends per part, per flow (final once the part is over).
    next_seq: Vec<Vec<u64>>,
    /// The part each slot's send belongs to.
    slot_part: Vec<u32>,
}

impl PartClock {
    /// Parts ending `part_ends[i]` ns after the start, or one endless part when `part_ends` is
    /// empty.
    pub(super) fn new(
        part_ends: &[u64],
        epochs: Arc<[u32]>,
        flows: usize,
        slots: usize,
        first_seq: u64,
    ) -> PartClock {
        let ends: Vec<u64> = if part_ends.is_empty() {
            vec![u64::MAX]
        } else {
            part_ends.to_vec()
        };
        let n = ends.len();
        PartClock {
            ends,
            epochs,
            current: 0,
            first_unsettled: 0,
            in_flight: vec![0; n],
            failed: vec![vec![0; flows]; n],
            next_seq: vec![vec![first_seq; flows]; n],
            slot_part: vec![0; slots],
        }
    }

    /// Sending starts at monotonic `started_ns`: the ends become times on the worker's clock.
    pub(super) fn begin(&mut self, started_ns: u64) {
        for end in self.ends.iter_mut().filter(|e| **e != u64::MAX) {
            *end += started_ns;
        }
    }

    /// The part the worker is in.
    pub(super) fn current(&self) -> usize {
        self.current
    }

    /// The epoch to stamp now.
    pub(super) fn epoch(&self) -> u32 {
        self.epochs.get(self.current).copied().unwrap_or(0)
    }

    /// The next sequence number of `flow` in the current part.
    pub(super) fn next_seq(&self, flow: usize) -> u64 {
        self.next_seq[self.current][flow]
    }

    /// The current part's failed sends of `flow` (stamped into its headers).
    pub(super) fn failed(&self, flow: usize) -> u64 {
        self.failed[self.current][flow]
    }

    /// A send of `segs` packets of `flow` left from `slot` in the current part.
    pub(super) fn sent(&mut self, slot: u32, flow: usize, segs: u64) {
        self.next_seq[self.current][flow] += segs;
        self.in_flight[self.current] += 1;
        self.slot_part[slot as usize] = self.current as u32;
    }

    /// The send in `slot` completed; `failed_segs` of its packets failed.
    pub(super) fn completed(&mut self, slot: u32, flow: usize, failed_segs: u64) {
        let part = self.slot_part[slot as usize] as usize;
        self.in_flight[part] = self.in_flight[part].saturating_sub(1);
        self.failed[part][flow] += failed_segs;
    }

    /// Switches to the part `now` falls in (never past the last); true when it switched.
    pub(super) fn advance(&mut self, now: u64) -> bool {
        let before = self.current;
        while self.current + 1 < self.ends.len() && now >= self.ends[self.current] {
            self.current += 1;
        }
        self.current != before
    }

    /// Moves to the next part now (never past the last), whatever the clock says: a search's
    /// trial ends when its sends do, not at a time set in advance.
    pub(super) fn next_part(&mut self) {
        if self.current + 1 < self.ends.len() {
            self.current += 1;
        }
    }

    /// Publishes the current part's progress and settles finished parts with nothing in
    /// flight (all of them with `end`, when the worker is done).
    pub(super) fn publish(&mut self, marks: &[PartMarks], end: bool) {
        if let Some(m) = marks.get(self.current) {
            self.store(m, self.current);
        }
        while self.first_unsettled < self.ends.len()
            && (end
                || (self.first_unsettled < self.current
                    && self.in_flight[self.first_unsettled] == 0))
        {
            if let Some(m) = marks.get(self.first_unsettled) {
                self.store(m, self.first_unsettled);
                m.settled.store(true, Release);
            }
            self.first_unsettled += 1;
        }
    }

    fn store(&self, m: &PartMarks, part: usize) {
        for (a, v) in m.next_seq.iter().zip(&self.next_seq[part]) {
            a.store(*v, Relaxed);
        }
        for (a, v) in m.failed.iter().zip(&self.failed[part]) {
            a.store(*v, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reaped_after_the_switch_counts_in_its_own_part() {
        let epochs = part_epochs(7, 3);
        assert_eq!(epochs.len(), 3);
        assert_eq!(epochs[0], 7);
        assert!(epochs[1] != epochs[2] && epochs[1] != 7 && epochs[2] != 7);
        let marks: Vec<PartMarks> = (0..3).map(|_| PartMarks::new(2, 100)).collect();
        let mut c = PartClock::new(&[10, 20, 30], Arc::clone(&epochs), 2, 4, 100);
        c.begin(1_000);
        c.sent(0, 0, 4);
        c.sent(1, 1, 2);
        assert_eq!((c.epoch(), c.next_seq(0), c.next_seq(1)), (7, 104, 102));
        assert!(!c.advance(1_009));
        assert!(c.advance(1_010));
        assert_eq!((c.epoch(), c.next_seq(0), c.failed(0)), (epochs[1], 100, 0));
        c.sent(2, 0, 1);
        c.publish(&marks, false);
        assert!(
            !marks[0].settled.load(Relaxed),
            "two sends of part 1 in flight"
        );
        c.completed(0, 0, 0);
        c.completed(1, 1, 2);
        c.publish(&marks, false);
        assert!(marks[0].settled.load(Relaxed));
        assert_eq!(marks[0].next_seq[0].load(Relaxed), 104);
        assert_eq!(
            marks[0].failed[1].load(Relaxed),
            2,
            "counted in its own part"
        );
        assert_eq!(marks[1].failed[1].load(Relaxed), 0);
        assert_eq!(marks[1].next_seq[0].load(Relaxed), 101, "live progress");
        assert!(!marks[1].settled.load(Relaxed));
        // Past every end, the clock stays in the last part; the end settles everything.
        assert!(c.advance(5_000));
        assert_eq!(c.epoch(), epochs[2]);
        c.publish(&marks, true);
        assert!(marks.iter().all(|m| m.settled.load(Relaxed)));
        assert_eq!(marks[2].next_seq[0].load(Relaxed), 100, "never sent");
    }

    #[test]
    fn a_trial_part_settles_once_the_next_one_starts_and_its_sends_completed() {
        let marks: Vec<PartMarks> = (0..2).map(|_| PartMarks::new(1, 0)).collect();
        let mut c = PartClock::new(&[u64::MAX, u64::MAX], part_epochs(3, 2), 1, 2, 0);
        c.begin(10);
        c.sent(0, 0, 5);
        assert!(
            !c.advance(u64::MAX - 1),
            "a trial part has no end on the clock"
        );
        c.completed(0, 0, 1);
        c.next_part();
        c.publish(&marks, false);
        assert!(marks[0].settled.load(Relaxed));
        assert_eq!(
            (
                marks[0].next_seq[0].load(Relaxed),
                marks[0].failed[0].load(Relaxed)
            ),
            (5, 1)
        );
        c.next_part();
        assert_eq!(c.current(), 1, "never past the last part");
    }

    #[test]
    fn an_unscheduled_run_is_one_endless_part() {
        let mut c = PartClock::new(&[], part_epochs(9, 1), 1, 1, 0);
        c.begin(5);
        assert!(!c.advance(u64::MAX - 1));
        c.sent(0, 0, 3);
        assert_eq!((c.epoch(), c.next_seq(0)), (9, 3));
    }
}
