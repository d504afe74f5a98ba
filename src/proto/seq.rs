//! Exact sequence accounting for one (epoch, flow) stream at the sink: received, lost,
//! reordered, duplicate and late packets, using a sliding window of [`WINDOW`] sequence numbers
//! held in a bitmap that is allocated once in [`SeqTracker::new`]; [`SeqTracker::observe`]
//! never allocates.
//!
//! Rules, with `highest` the highest sequence number seen so far and the window the `WINDOW`
//! sequence numbers ending at `highest`:
//! - A packet above `highest` moves the window forward. Sequence numbers that fall off the back
//!   of the window without having been received are added to `lost` at that moment, so a late
//!   packet that still lands inside the window is never counted as lost. A jump of more than
//!   `WINDOW` counts the skipped range arithmetically (cost O(WINDOW/64), not O(jump)).
//! - A packet inside the window not seen before: `received += 1`, `reordered += 1`.
//! - A packet inside the window already seen: `duplicates += 1` only. Duplicates are never
//!   netted against loss.
//! - A packet older than the window: `received += 1`, `late_beyond_window += 1`. It was already
//!   counted lost (or is a duplicate nobody can tell apart any more), so this is the one case
//!   where `received + lost` can exceed the number of packets sent.
//! - First packet: it is where the session starts, so a sink that joins a running stream never
//!   counts the stream's past as lost. Earlier numbers that still arrive inside the window count
//!   as received and reordered, never as lost. When the sender says where the flow really
//!   started (its HELLO on the control channel), [`SeqTracker::extend_start`] moves the start
//!   back: numbers between it and the first packet that never arrive become lost like any gap.
//! - [`SeqTracker::finish`] closes the session: every missing number still in the window is
//!   added to `lost`, and everything up to `highest` is settled. A second call adds nothing.
//!   Observing after `finish` is allowed: a settled number that arrives late counts as
//!   `late_beyond_window` (it was already counted lost), anything above `highest` starts a
//!   continuation that a later `finish` settles the same way.
//! - Loss after the last packet that arrives (tail loss) cannot be seen here; compare with the
//!   sender's final sequence number for that.
//!
//! Arithmetic near `u64::MAX` saturates (window bounds) or is guarded by `seq > highest`
//! comparisons, so no input panics; a stream that reaches `u64::MAX` simply stops advancing.

/// Number of sequence numbers the tracker can still reorder or deduplicate exactly.
pub const WINDOW: u64 = 1 << 14;
const WORDS: usize = (WINDOW / 64) as usize;

/// What one observed sequence number meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exactly one above the previous highest (or the very first packet with nothing missing).
    InOrder,
    /// Above the previous highest, leaving this many newly missing sequence numbers.
    Gap(u64),
    /// Inside the window, not seen before, below the highest.
    Reordered,
    /// Inside the window and already seen.
    Duplicate,
    /// Older than the window, or already declared lost by [`SeqTracker::finish`].
    LateBeyondWindow,
}

/// Monotonic counters of one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqCounters {
    /// Packets accepted (not counting duplicates seen inside the window).
    pub received: u64,
    /// Sequence numbers declared lost.
    pub lost: u64,
    /// Packets that arrived after a higher sequence number, inside the window.
    pub reordered: u64,
    /// Extra copies of packets seen inside the window.
    pub duplicates: u64,
    /// Packets older than the window (already counted lost).
    pub late_beyond_window: u64,
}

/// Sequence accounting for a single (epoch, flow) stream; see the module docs for the rules.
#[derive(Clone, Debug)]
pub struct SeqTracker {
    /// Bit `seq % WINDOW` is set when `seq` inside the window was received.
    seen: Box<[u64; WORDS]>,
    started: bool,
    /// Lowest sequence number that counts (the first packet, or the sender's stated start).
    baseline: u64,
    /// A start the sender stated before the first packet arrived.
    start_hint: Option<u64>,
    highest: u64,
    /// Sequence numbers below this are settled: no longer candidates for `lost`.
    open_from: u64,
    counters: SeqCounters,
}

impl Default for SeqTracker {
    fn default() -> Self {
        Self::new()
    }
}

/// Lowest sequence number of the window that ends at `highest`.
fn window_low(highest: u64) -> u64 {
    highest.saturating_sub(WINDOW - 1)
}

/// Word index and bit mask of `seq` in the bitmap.
fn slot(seq: u64) -> (usize, u64) {
    let bit = (seq % WINDOW) as usize;
    (bit / 64, 1 << (bit % 64))
}

/// Calls `visit(word, mask)` for the bitmap words covering `len` (at most `WINDOW`) consecutive
/// sequence numbers starting at `first`, wrapping around the end of the bitmap.
fn for_each_span(first: u64, len: u64, mut visit: impl FnMut(usize, u64)) {
    let window = WINDOW as usize;
    let mut bit = (first % WINDOW) as usize;
    let mut remaining = len.min(WINDOW) as usize;
    while remaining > 0 {
        let offset = bit % 64;
        let take = (64 - offset).min(remaining);
        let mask = if take == 64 {
            u64::MAX
        } else {
            ((1u64 << take) - 1) << offset
        };
        visit(bit / 64, mask);
        remaining -= take;
        bit = (bit + take) % window;
    }
}

impl SeqTracker {
    /// An empty tracker; allocates the window bitmap (`WINDOW / 8` bytes) once.
    pub fn new() -> Self {
        Self {
            seen: Box::new([0; WORDS]),
            started: false,
            baseline: 0,
            start_hint: None,
            highest: 0,
            open_from: 0,
            counters: SeqCounters::default(),
        }
    }

    /// Forgets everything, keeping the bitmap allocation, so a slot can start a new session
    /// without allocating.
    pub fn reset(&mut self) {
        self.seen.fill(0);
        self.started = false;
        self.baseline = 0;
        self.start_hint = None;
        self.highest = 0;
        self.open_from = 0;
        self.counters = SeqCounters::default();
    }

    /// Current counters.
    pub fn counters(&self) -> SeqCounters {
        self.counters
    }

    /// Highest sequence number seen, `None` before the first packet.
    pub fn highest(&self) -> Option<u64> {
        self.started.then_some(self.highest)
    }

    /// The number a 32-bit sequence number is extended next to: the highest so far, or before
    /// the first packet the start the sender stated.
    pub fn reference(&self) -> Option<u64> {
        self.highest().or(self.start_hint)
    }

    /// Accounts one received sequence number. Never allocates.
    pub fn observe(&mut self, seq: u64) -> Outcome {
        if !self.started {
            return self.start(seq);
        }
        if seq > self.highest {
            return self.advance(seq);
        }
        if self.highest - seq >= WINDOW {
            self.counters.received += 1;
            self.counters.late_beyond_window += 1;
            return Outcome::LateBeyondWindow;
        }
        let (word, mask) = slot(seq);
        if self.seen[word] & mask != 0 {
            self.counters.duplicates += 1;
            return Outcome::Duplicate;
        }
        self.seen[word] |= mask;
        self.counters.received += 1;
        if seq >= self.baseline && seq < self.open_from {
            self.counters.late_beyond_window += 1;
            Outcome::LateBeyondWindow
        } else {
            self.counters.reordered += 1;
            Outcome::Reordered
        }
    }

    /// Closes the session: missing numbers still inside the window become lost. Idempotent.
    pub fn finish(&mut self) {
        if !self.started {
            return;
        }
        let still_missing = self.missing_between(self.open_lower_bound(), self.highest);
        self.counters.lost = self.counters.lost.saturating_add(still_missing);
        self.open_from = self.highest.saturating_add(1);
    }

    /// Missing sequence numbers inside the window that are not yet declared lost.
    pub fn pending_gaps(&self) -> u64 {
        if !self.started {
            return 0;
        }
        self.missing_between(self.open_lower_bound(), self.highest)
    }

    /// Lowest sequence number inside the window that can still become lost.
    fn open_lower_bound(&self) -> u64 {
        window_low(self.highest).max(self.open_from)
    }

    fn start(&mut self, seq: u64) -> Outcome {
        self.started = true;
        self.highest = seq;
        self.baseline = self.start_hint.take().map_or(seq, |s| s.min(seq));
        // Stated-start numbers already behind the window are settled at once.
        let low = window_low(seq).max(self.baseline);
        self.counters.lost = self.counters.lost.saturating_add(low - self.baseline);
        self.open_from = low;
        self.mark_seen(seq);
        self.counters.received += 1;
        match seq - self.baseline {
            0 => Outcome::InOrder,
            missing => Outcome::Gap(missing),
        }
    }

    /// The sender says this session really started at `start`: numbers from `start` up to the
    /// current start are expected too. Inside the window they become open gaps (a late arrival
    /// still fills them); behind it they are lost at once. A later start changes nothing.
    pub fn extend_start(&mut self, start: u64) {
        if !self.started {
            self.start_hint = Some(self.start_hint.map_or(start, |h| h.min(start)));
            return;
        }
        let old = self.baseline;
        if start >= old {
            return;
        }
        let low = window_low(self.highest);
        let finished = self.open_from > old;
        let open_start = if finished {
            old
        } else {
            start.max(low).min(old)
        };
        let behind = low.min(open_start).saturating_sub(start);
        let inside = if open_start > start.max(low) {
            self.missing_between(start.max(low), open_start - 1)
        } else {
            0
        };
        self.counters.lost = self.counters.lost.saturating_add(behind + inside);
        if !finished {
            self.open_from = open_start;
        }
        self.baseline = start;
    }

    /// Moves the window so it ends at `seq` (> `highest`), settling what falls off its back.
    fn advance(&mut self, seq: u64) -> Outcome {
        let previous = self.highest;
        let old_low = window_low(previous);
        let new_low = window_low(seq);
        if new_low > old_low {
            let fallen_last = new_low - 1;
            let fallen_seen_range = old_low.max(self.open_from)..=fallen_last.min(previous);
            let mut newly_lost =
                self.missing_between(*fallen_seen_range.start(), *fallen_seen_range.end());
            // Numbers above the old highest that are already behind the new window never
            // entered it; all of them are at or above `open_from`.
            newly_lost += fallen_last.saturating_sub(previous);
            self.counters.lost = self.counters.lost.saturating_add(newly_lost);
        }
        // The slots of previous+1..=seq held the numbers that just fell off: clear them.
        let span = seq - previous;
        if span >= WINDOW {
            self.seen.fill(0);
        } else {
            let seen = &mut self.seen;
            for_each_span(previous + 1, span, |word, mask| seen[word] &= !mask);
        }
        self.mark_seen(seq);
        self.highest = seq;
        self.counters.received += 1;
        match span - 1 {
            0 => Outcome::InOrder,
            missing => Outcome::Gap(missing),
        }
    }

    fn mark_seen(&mut self, seq: u64) {
        let (word, mask) = slot(seq);
        self.seen[word] |= mask;
    }

    /// Unreceived numbers in `first..=last`, which must lie inside the current window.
    fn missing_between(&self, first: u64, last: u64) -> u64 {
        if first > last {
            return 0;
        }
        let mut missing = 0;
        for_each_span(first, last - first + 1, |word, mask| {
            missing += u64::from((mask & !self.seen[word]).count_ones());
        });
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next() % bound
        }
    }

    fn track(seqs: impl IntoIterator<Item = u64>) -> SeqTracker {
        let mut tracker = SeqTracker::new();
        for seq in seqs {
            tracker.observe(seq);
        }
        tracker
    }

    #[test]
    fn in_order_stream_loses_nothing() {
        let mut tracker = track(0..3 * WINDOW);
        tracker.finish();
        let expected = SeqCounters {
            received: 3 * WINDOW,
            ..SeqCounters::default()
        };
        assert_eq!(tracker.counters(), expected);
        assert_eq!(tracker.highest(), Some(3 * WINDOW - 1));
    }

    #[test]
    fn gap_filled_later_is_reordered_not_lost() {
        let mut tracker = SeqTracker::new();
        let outcomes: Vec<_> = [0, 1, 3, 4, 2, 5].map(|s| tracker.observe(s)).into();
        use Outcome::*;
        assert_eq!(
            outcomes,
            [InOrder, InOrder, Gap(1), InOrder, Reordered, InOrder]
        );
        assert_eq!(tracker.pending_gaps(), 0);
        tracker.finish();
        let c = tracker.counters();
        assert_eq!((c.received, c.reordered, c.lost), (6, 1, 0));
    }

    #[test]
    fn unfilled_gap_is_lost_at_finish() {
        let mut tracker = track((0..100).filter(|s| !(40..47).contains(s)));
        assert_eq!(tracker.pending_gaps(), 7);
        assert_eq!(
            tracker.counters().lost,
            0,
            "not lost while still in the window"
        );
        tracker.finish();
        assert_eq!(tracker.counters().lost, 7);
        assert_eq!(tracker.pending_gaps(), 0);
        tracker.finish();
        assert_eq!(tracker.counters().lost, 7, "finish is idempotent");
    }

    #[test]
    fn gap_falling_off_the_window_is_lost_before_finish() {
        let mut tracker = track((0..10).chain(12..WINDOW + 10));
        assert_eq!(
            tracker.counters().lost,
            0,
            "seq 10 is still inside the window"
        );
        assert_eq!(tracker.pending_gaps(), 2);
        tracker.observe(WINDOW + 10);
        assert_eq!(tracker.counters().lost, 1, "seq 10 fell off");
        assert_eq!(tracker.pending_gaps(), 1);
        tracker.finish();
        assert_eq!(tracker.counters().lost, 2);
    }

    #[test]
    fn duplicate_inside_window_is_never_netted_against_loss() {
        let mut tracker = track([0, 1, 2, 4, 2, 5]);
        assert_eq!(tracker.observe(4), Outcome::Duplicate);
        tracker.finish();
        let c = tracker.counters();
        assert_eq!((c.received, c.lost, c.duplicates), (5, 1, 2));
    }

    #[test]
    fn copy_older_than_the_window_is_late() {
        let mut tracker = track(0..WINDOW + 10);
        assert_eq!(tracker.observe(3), Outcome::LateBeyondWindow);
        let c = tracker.counters();
        assert_eq!(
            (c.received, c.late_beyond_window, c.duplicates),
            (WINDOW + 11, 1, 0)
        );
    }

    #[test]
    fn first_packet_is_the_start_unless_the_sender_says_otherwise() {
        let mut joined = SeqTracker::new();
        assert_eq!(joined.observe(5), Outcome::InOrder);
        assert_eq!(joined.observe(2), Outcome::Reordered);
        joined.finish();
        assert_eq!(joined.counters().lost, 0, "nothing before the join is lost");

        let mut told = SeqTracker::new();
        told.extend_start(0);
        assert_eq!(told.observe(5), Outcome::Gap(5));
        assert_eq!(told.observe(2), Outcome::Reordered);
        told.finish();
        assert_eq!(told.counters().lost, 4);

        // Told after the first packets arrived: inside the window the head is an open gap.
        let mut late = track([7, 8, 3]);
        late.extend_start(0);
        assert_eq!(late.pending_gaps(), 6);
        late.observe(0);
        late.finish();
        assert_eq!(late.counters().lost, 5);
        assert_eq!(late.counters().received, 4);

        // Behind the window the head is lost at once; inside it, when it settles.
        let mut far = track(2 * WINDOW..2 * WINDOW + 10);
        far.extend_start(WINDOW);
        assert_eq!(far.counters().lost, 10);
        assert_eq!(far.pending_gaps(), WINDOW - 10);
        far.extend_start(WINDOW + 5);
        far.finish();
        assert_eq!(far.counters().lost, WINDOW, "a later start changes nothing");
    }

    #[test]
    fn mid_stream_join_counts_nothing_before_the_first_packet() {
        let first = 10 * WINDOW + 123;
        let mut tracker = SeqTracker::new();
        assert_eq!(tracker.observe(first), Outcome::InOrder);
        assert_eq!(tracker.pending_gaps(), 0);
        assert_eq!(tracker.observe(first - 1), Outcome::Reordered);
        assert_eq!(tracker.observe(first + 3), Outcome::Gap(2));
        for seq in first + 4..first + 2 * WINDOW {
            tracker.observe(seq);
        }
        tracker.finish();
        let c = tracker.counters();
        assert_eq!(
            (c.received, c.lost, c.reordered),
            (2 * WINDOW + 1 - 2, 2, 1)
        );
    }

    #[test]
    fn big_jump_counts_the_skipped_range_arithmetically() {
        let mut tracker = track(0..10);
        let target = 1_000_000 * WINDOW;
        assert_eq!(tracker.observe(target), Outcome::Gap(target - 10));
        assert_eq!(tracker.pending_gaps(), WINDOW - 1);
        assert_eq!(tracker.counters().lost, target - 10 - (WINDOW - 1));
        tracker.finish();
        assert_eq!(tracker.counters().lost, target - 10);
        assert_eq!(tracker.counters().received, 11);
    }

    #[test]
    fn extremes_near_u64_max_do_not_panic() {
        let mut tracker = track([0, u64::MAX]);
        assert_eq!(tracker.observe(u64::MAX), Outcome::Duplicate);
        assert_eq!(tracker.observe(u64::MAX - 1), Outcome::Reordered);
        assert_eq!(tracker.observe(7), Outcome::LateBeyondWindow);
        tracker.finish();
        tracker.finish();
        // 0..=u64::MAX minus 0, MAX - 1 and MAX; the late 7 was already counted lost.
        assert_eq!(tracker.counters().lost, u64::MAX - 2);
        let mut joined = track([u64::MAX - 3, u64::MAX, u64::MAX - 1]);
        joined.finish();
        assert_eq!(joined.counters().lost, 1);
    }

    #[test]
    fn finish_settles_and_later_arrivals_are_late() {
        let mut tracker = track([0, 1, 3]);
        tracker.finish();
        assert_eq!(tracker.observe(2), Outcome::LateBeyondWindow);
        assert_eq!(tracker.observe(2), Outcome::Duplicate);
        assert_eq!(tracker.observe(6), Outcome::Gap(2));
        tracker.finish();
        let c = tracker.counters();
        assert_eq!((c.received, c.lost, c.late_beyond_window), (5, 3, 1));
    }

    #[test]
    fn crossing_two_to_the_32_with_gaps_reorders_and_dups() {
        let start = (1u64 << 32) - 100;
        let end = start + 200;
        let mut order: Vec<u64> = (start..end).filter(|s| s % 17 != 0).collect();
        order.swap(50, 51);
        order.swap(99, 100);
        let distinct = order.len() as u64;
        order.extend([start + 120, 1 << 32, start + 151]);
        let copies = order[distinct as usize..]
            .iter()
            .filter(|s| order[..distinct as usize].contains(s))
            .count() as u64;
        assert!(copies > 0, "the test must include real duplicates");
        let mut tracker = track(order.iter().copied());
        tracker.finish();
        let c = tracker.counters();
        // Everything from the join point (first packet) up to the highest is expected.
        let expected_span = end - order[0];
        assert_eq!(c.received, distinct);
        assert_eq!(c.lost, expected_span - distinct);
        assert_eq!(c.duplicates, copies);
        assert_eq!(c.reordered, 2);
    }

    /// Delivers `sent` numbers with drops, copies and bounded displacement, then checks every
    /// counter against an independent model.
    fn check_against_model(seed: u64, sent: u64, displacement: u64) {
        let mut rng = XorShift(seed);
        let mut deliveries: Vec<(u64, u64)> = Vec::new();
        for seq in 0..sent {
            let last = seq == sent - 1; // tail loss is invisible, so the last always arrives
            let copies = match rng.below(100) {
                0..=4 if !last => 0,
                5..=7 => 2,
                8 => 3,
                _ => 1,
            };
            for _ in 0..copies {
                deliveries.push((seq + rng.below(displacement), seq));
            }
        }
        deliveries.sort_by_key(|&(arrival, _)| arrival);

        let mut tracker = SeqTracker::new();
        tracker.extend_start(0);
        let mut delivered = vec![false; sent as usize];
        let (mut distinct, mut extra, mut reordered, mut highest) = (0u64, 0u64, 0u64, None);
        for (i, &(_, seq)) in deliveries.iter().enumerate() {
            tracker.observe(seq);
            if delivered[seq as usize] {
                extra += 1;
            } else {
                delivered[seq as usize] = true;
                distinct += 1;
                reordered += u64::from(highest.is_some_and(|h| seq < h));
            }
            let top = highest.map_or(seq, |h: u64| h.max(seq));
            highest = Some(top);
            if i % 20_000 == 0 {
                let low = window_low(top) as usize;
                let missing = |range: std::ops::Range<usize>| {
                    delivered[range].iter().filter(|&&d| !d).count() as u64
                };
                assert_eq!(tracker.counters().lost, missing(0..low));
                assert_eq!(tracker.pending_gaps(), missing(low..top as usize + 1));
            }
        }
        tracker.finish();
        let expected = SeqCounters {
            received: distinct,
            lost: sent - distinct,
            reordered,
            duplicates: extra,
            late_beyond_window: 0,
        };
        assert_eq!(tracker.counters(), expected, "seed {seed}");
    }

    #[test]
    fn randomized_streams_match_the_model_exactly() {
        check_against_model(1, 200_000, 64);
        check_against_model(2, 300_000, 5_000);
        check_against_model(3, 300_000, WINDOW - 1);
        check_against_model(4, 1_000, 900);
    }
}
