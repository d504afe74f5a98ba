//! Unit tests of the sequence tracker, and randomized streams checked against an independent model.

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

/// The in-order step (`advance_by_one`) settles the one number that falls off the window, the
/// same way a wider step does: a hole is lost exactly when it leaves the window, never before,
/// and a continuation after `finish` never counts the settled part again.
#[test]
fn in_order_steps_lose_a_hole_exactly_when_it_leaves_the_window() {
    let hole = 100;
    let mut tracker = track((0..WINDOW + hole).filter(|&s| s != hole));
    assert_eq!(
        tracker.counters().lost,
        0,
        "the hole is still inside the window"
    );
    tracker.observe(WINDOW + hole);
    assert_eq!(
        tracker.counters().lost,
        1,
        "the hole left the window with this step"
    );
    for seq in WINDOW + hole + 1..3 * WINDOW {
        assert_eq!(tracker.observe(seq), Outcome::InOrder);
    }
    assert_eq!(tracker.counters().lost, 1);
    tracker.finish();
    let settled = tracker.counters();
    for seq in 3 * WINDOW..5 * WINDOW {
        assert_eq!(tracker.observe(seq), Outcome::InOrder);
    }
    tracker.finish();
    let c = tracker.counters();
    assert_eq!(c.lost, settled.lost, "a continuation re-counts nothing");
    assert_eq!(c.received, 5 * WINDOW - 1);
}
