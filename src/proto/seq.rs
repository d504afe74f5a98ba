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
pub(crate) const WINDOW: u64 = 1 << 14;
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
pub(crate) struct SeqCounters {
    /// Packets accepted (not counting duplicates seen inside the window).
    pub(crate) received: u64,
    /// Sequence numbers declared lost.
    pub(crate) lost: u64,
    /// Packets that arrived after a higher sequence number, inside the window.
    pub(crate) reordered: u64,
    /// Extra copies of packets seen inside the window.
    pub(crate) duplicates: u64,
    /// Packets older than the window (already counted lost).
    pub(crate) late_beyond_window: u64,
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
    pub(crate) fn reset(&mut self) {
        self.seen.fill(0);
        self.started = false;
        self.baseline = 0;
        self.start_hint = None;
        self.highest = 0;
        self.open_from = 0;
        self.counters = SeqCounters::default();
    }

    /// Current counters.
    pub(crate) fn counters(&self) -> SeqCounters {
        self.counters
    }

    /// Highest sequence number seen, `None` before the first packet.
    pub(crate) fn highest(&self) -> Option<u64> {
        self.started.then_some(self.highest)
    }

    /// The number a 32-bit sequence number is extended next to: the highest so far, or before
    /// the first packet the start the sender stated.
    pub(crate) fn reference(&self) -> Option<u64> {
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
    pub(crate) fn finish(&mut self) {
        if !self.started {
            return;
        }
        let still_missing = self.missing_between(self.open_lower_bound(), self.highest);
        self.counters.lost = self.counters.lost.saturating_add(still_missing);
        self.open_from = self.highest.saturating_add(1);
    }

    #[cfg(test)]
    /// Missing sequence numbers inside the window that are not yet declared lost.
    pub(crate) fn pending_gaps(&self) -> u64 {
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
    pub(crate) fn extend_start(&mut self, start: u64) {
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
        if seq - previous == 1 {
            return self.advance_by_one(seq);
        }
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

    /// `advance` for the next number in order, the common case, without the span loops: the
    /// one number that falls off the back of the window (`seq - WINDOW`) shares `seq`'s bit, so
    /// that bit says whether it was lost, and then marks `seq` as seen.
    fn advance_by_one(&mut self, seq: u64) -> Outcome {
        let fallen = window_low(self.highest);
        let (word, mask) = slot(seq);
        if window_low(seq) > fallen && fallen >= self.open_from && self.seen[word] & mask == 0 {
            self.counters.lost = self.counters.lost.saturating_add(1);
        }
        self.seen[word] |= mask;
        self.highest = seq;
        self.counters.received += 1;
        Outcome::InOrder
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
#[path = "seq_tests.rs"]
mod tests;
