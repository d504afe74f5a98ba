//! Decides how many packets a sender may transmit now to hold a target packet rate. The pacer
//! never reads a clock: callers pass monotonic time in nanoseconds, which keeps it pure and
//! testable. The schedule is absolute — packet `k` (counting from 0) is due at
//! `start + ceil(k * 1e9 / rate)` ns — so the total sent never exceeds
//! `floor(rate * elapsed) + 1` and there is no drift from accumulating intervals. After a stall
//! each call lets at most `max_burst` packets out, but the schedule does not move, so the
//! sender catches up over the following calls and the long-run rate stays exact.
//!
//! The rate is held in nano-packets per second and all schedule math is integer (`u128`); any
//! result beyond `u64` saturates.
//!
//! It also holds the one test of whether a paced sender kept its schedule: `send`, each
//! `--rate-steps` step and each search trial call a run that offered less than was due, by more
//! than a tolerance, *sender-limited*.

use crate::schedule::RateSchedule;

/// How far below what was due a paced run may offer and still count as offering its rate: 1 %
/// (`ringblast search --offered-tolerance`, whose default this is, sets its own).
pub(crate) const OFFERED_TOLERANCE: f64 = 0.01;

/// Whether a paced run that sent `sent` packets (the kernel accepted them) where `due` fell
/// due is sender-limited: short by more than `tolerance`. What such a run measured is its own
/// host's limit, not the network's.
pub(crate) fn sender_limited(sent: u64, due: f64, tolerance: f64) -> bool {
    (sent as f64) < due * (1.0 - tolerance)
}

const NANOS_PER_SECOND: u128 = 1_000_000_000;
/// The rate is stored as packets per second times this factor.
const RATE_SCALE: f64 = 1e9;
/// `NANOS_PER_SECOND * RATE_SCALE`: converts `elapsed_ns * scaled_rate` into packets.
const SCALED_NANOS_PER_SECOND: u128 = NANOS_PER_SECOND * 1_000_000_000;

/// Packet pacer for one sending loop; see the module docs.
#[derive(Clone, Debug)]
pub struct Pacer {
    /// Packets per second times `RATE_SCALE`, at least 1; `None` when unpaced.
    scaled_rate: Option<u128>,
    /// A rate schedule instead of one rate (`--rate-steps`, `--ramp`), and where in it we are.
    schedule: Option<(std::sync::Arc<RateSchedule>, std::cell::Cell<usize>)>,
    rate_pps: Option<f64>,
    start_ns: u64,
    max_burst: u64,
    sent: u64,
}

impl Pacer {
    /// A pacer whose first packet is due at `start_ns`. `rate_pps` of `None`, or a rate that is
    /// not a positive finite number, means unpaced. `max_burst` caps each
    /// [`allowance`](Self::allowance) (a value of 0 is treated as 1).
    pub fn new(rate_pps: Option<f64>, start_ns: u64, max_burst: u64) -> Self {
        let rate_pps = rate_pps.filter(|rate| rate.is_finite() && *rate > 0.0);
        // `as` saturates for huge values; rates below 1e-9 pps round up to the smallest step.
        let scaled_rate = rate_pps.map(|rate| ((rate * RATE_SCALE).round() as u128).max(1));
        Self {
            scaled_rate,
            schedule: None,
            rate_pps,
            start_ns,
            max_burst: max_burst.max(1),
            sent: 0,
        }
    }

    /// A pacer that follows `schedule` from `start_ns` (packet `k` is due once the schedule's
    /// integral reaches `k`); nothing is due after its end.
    pub(crate) fn scheduled(
        schedule: std::sync::Arc<RateSchedule>,
        start_ns: u64,
        max_burst: u64,
    ) -> Self {
        let mut pacer = Self::new(Some(schedule.rate_at(0).max(1.0)), start_ns, max_burst);
        pacer.schedule = Some((schedule, std::cell::Cell::new(0)));
        pacer
    }

    /// The target rate at `now_ns`: the schedule's, or the constant one (for the gauge).
    pub(crate) fn rate_at(&self, now_ns: u64) -> Option<f64> {
        match &self.schedule {
            Some((s, _)) => Some(s.rate_at(now_ns.saturating_sub(self.start_ns))),
            None => self.rate_pps,
        }
    }

    /// Packets recorded with [`commit`](Self::commit) so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// How many packets may be sent at `now_ns`: the number due by the absolute schedule and
    /// not yet sent, capped at `max_burst`. `u64::MAX` when unpaced.
    pub fn allowance(&self, now_ns: u64) -> u64 {
        let Some(scaled_rate) = self.scaled_rate else {
            return u64::MAX;
        };
        if let Some((schedule, hint)) = &self.schedule {
            let Some(elapsed) = now_ns.checked_sub(self.start_ns) else {
                return 0;
            };
            let mut at = hint.get();
            let due = schedule.due_by(elapsed, &mut at);
            hint.set(at);
            return due.saturating_sub(self.sent).min(self.max_burst);
        }
        self.due_by(scaled_rate, now_ns)
            .saturating_sub(self.sent)
            .min(self.max_burst)
    }

    /// Records `n` packets as sent.
    pub fn commit(&mut self, n: u64) {
        self.sent = self.sent.saturating_add(n);
    }

    /// Absolute time the next unsent packet is due; `None` when unpaced.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.due_ns_for(1)
    }

    /// Absolute time at which `packets` more packets (at least 1) may go, so a GSO train can
    /// wait for its whole length instead of leaving short; `None` when unpaced.
    pub(crate) fn due_ns_for(&self, packets: u64) -> Option<u64> {
        let scaled_rate = self.scaled_rate?;
        let index = self.sent.saturating_add(packets.max(1) - 1);
        if let Some((schedule, _)) = &self.schedule {
            // Beyond the schedule nothing is ever due.
            return Some(
                schedule
                    .time_of(index)
                    .map_or(u64::MAX, |t| self.start_ns.saturating_add(t)),
            );
        }
        let offset = (u128::from(index) * SCALED_NANOS_PER_SECOND).div_ceil(scaled_rate);
        let offset = u64::try_from(offset).unwrap_or(u64::MAX);
        Some(self.start_ns.saturating_add(offset))
    }

    /// How far behind schedule the sender is at `now_ns`: time since the next unsent packet
    /// became due, 0 when on or ahead of schedule or unpaced.
    pub(crate) fn lag_ns(&self, now_ns: u64) -> u64 {
        self.next_due_ns()
            .map_or(0, |due| now_ns.saturating_sub(due))
    }

    /// Total packets due by `now_ns`: `floor(rate * elapsed) + 1`, or 0 before the start.
    fn due_by(&self, scaled_rate: u128, now_ns: u64) -> u64 {
        let Some(elapsed) = now_ns.checked_sub(self.start_ns) else {
            return 0;
        };
        let Some(scaled) = u128::from(elapsed).checked_mul(scaled_rate) else {
            return u64::MAX;
        };
        u64::try_from(scaled / SCALED_NANOS_PER_SECOND + 1).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_train_is_due_later_than_its_first_packet() {
        let p = Pacer::new(Some(1000.0), 0, 64);
        assert_eq!(p.due_ns_for(1), Some(0));
        assert_eq!(p.due_ns_for(16), Some(15_000_000));
        assert_eq!(p.allowance(15_000_000), 16);
        assert_eq!(p.allowance(14_999_999), 15);
    }

    const SECOND: u64 = 1_000_000_000;
    const START: u64 = 123_456_789_000;

    struct XorShift(u64);

    impl XorShift {
        fn below(&mut self, bound: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % bound
        }
    }

    /// `floor(numerator / denominator pps * elapsed) + 1`, computed independently of the pacer.
    fn expected_total(numerator: u128, denominator: u128, now: u64) -> u64 {
        let elapsed = u128::from(now - START);
        (elapsed * numerator / (denominator * u128::from(SECOND)) + 1) as u64
    }

    #[test]
    fn unpaced_allows_everything() {
        let mut pacer = Pacer::new(None, START, 64);
        assert_eq!(pacer.allowance(START), u64::MAX);
        pacer.commit(1_000_000);
        assert_eq!(pacer.allowance(0), u64::MAX);
        assert_eq!(pacer.next_due_ns(), None);
        assert_eq!(pacer.lag_ns(u64::MAX), 0);
        for odd in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(Pacer::new(Some(odd), START, 1).next_due_ns(), None, "{odd}");
        }
    }

    #[test]
    fn nothing_is_due_before_start_and_one_packet_at_start() {
        let pacer = Pacer::new(Some(1000.0), START, 64);
        assert_eq!(pacer.allowance(START - 1), 0);
        assert_eq!(pacer.next_due_ns(), Some(START));
        assert_eq!(pacer.allowance(START), 1);
        assert_eq!(pacer.lag_ns(START - 1), 0);
    }

    #[test]
    fn fractional_rate_follows_the_exact_schedule() {
        // 1.5 pps = 3 packets every 2 s; packet k is due at ceil(k * 2e9 / 3) ns.
        let mut pacer = Pacer::new(Some(1.5), START, 64);
        for k in 0..10u64 {
            let due = START + (u128::from(k) * 2 * u128::from(SECOND)).div_ceil(3) as u64;
            assert_eq!(pacer.next_due_ns(), Some(due), "packet {k}");
            assert_eq!(pacer.allowance(due - 1), 0);
            assert_eq!(pacer.allowance(due), 1);
            assert_eq!(expected_total(3, 2, due), k + 1);
            pacer.commit(1);
        }
    }

    #[test]
    fn rates_from_one_to_100m_pps_never_exceed_and_end_exact() {
        let mut rng = XorShift(7);
        for rate in [1u64, 7, 1_000, 100_000, 1_000_000, 10_000_000, 100_000_000] {
            let mut pacer = Pacer::new(Some(rate as f64), START, 64);
            let duration = (2_000_000 * SECOND / rate).min(20 * SECOND);
            let mut now = START;
            while now < START + duration {
                let limit = expected_total(rate.into(), 1, now);
                pacer.commit(pacer.allowance(now));
                assert!(
                    pacer.sent() <= limit,
                    "rate {rate}: {} > {limit}",
                    pacer.sent()
                );
                let due = pacer.next_due_ns().expect("paced");
                now = due.max(now) + rng.below(duration / 1000 + 1);
            }
            while pacer.allowance(now) > 0 {
                pacer.commit(pacer.allowance(now));
            }
            assert_eq!(
                pacer.sent(),
                expected_total(rate.into(), 1, now),
                "rate {rate}"
            );
            assert_eq!(pacer.lag_ns(now), 0);
        }
    }

    #[test]
    fn batched_loop_with_jitter_hits_the_rate_within_a_tenth_of_a_percent() {
        let (rate, batch, seconds) = (100_000.0, 64, 5);
        let mut pacer = Pacer::new(Some(rate), START, 1024);
        let mut rng = XorShift(0xC0FFEE);
        let end = START + seconds * SECOND;
        let mut now = START;
        while now < end {
            let n = pacer.allowance(now).min(batch);
            pacer.commit(n);
            let due = pacer.next_due_ns().expect("paced");
            // Sleep until due, overshooting by up to 200 us, sometimes by 3 ms.
            let overshoot = match rng.below(100) {
                0 => 3_000_000,
                _ => rng.below(200_000),
            };
            now = due.max(now) + overshoot;
        }
        let target = rate * seconds as f64;
        let error = (pacer.sent() as f64 - target).abs() / target;
        assert!(error <= 0.001, "sent {} for target {target}", pacer.sent());
    }

    #[test]
    fn catch_up_after_a_stall_is_capped_per_call_but_keeps_the_schedule() {
        let max_burst = 32;
        let mut pacer = Pacer::new(Some(1_000_000.0), START, max_burst);
        let mut now = START;
        while now < START + SECOND / 1000 {
            pacer.commit(pacer.allowance(now));
            now = pacer.next_due_ns().expect("paced");
        }
        let stalled_until = now + 10_000_000;
        let owed = expected_total(1_000_000, 1, stalled_until) - pacer.sent();
        assert!(owed > max_burst);
        assert_eq!(pacer.allowance(stalled_until), max_burst);
        assert!(pacer.lag_ns(stalled_until) >= 9_000_000);
        let mut calls = 0;
        while pacer.allowance(stalled_until) > 0 {
            let n = pacer.allowance(stalled_until);
            assert!(n <= max_burst);
            pacer.commit(n);
            calls += 1;
        }
        assert_eq!(calls, owed.div_ceil(max_burst));
        assert_eq!(pacer.sent(), expected_total(1_000_000, 1, stalled_until));
        assert_eq!(pacer.lag_ns(stalled_until), 0);
    }

    #[test]
    fn extreme_times_and_rates_saturate_instead_of_panicking() {
        let mut pacer = Pacer::new(Some(1e300), 0, u64::MAX);
        assert_eq!(pacer.allowance(u64::MAX), u64::MAX);
        pacer.commit(u64::MAX);
        pacer.commit(1);
        assert_eq!(pacer.sent(), u64::MAX);
        assert!(pacer.next_due_ns().is_some());
        let slow = Pacer::new(Some(1e-12), u64::MAX - 5, 1);
        assert_eq!(slow.allowance(u64::MAX), 1);
        let mut slow = slow;
        slow.commit(1);
        assert_eq!(slow.next_due_ns(), Some(u64::MAX));
    }
}
