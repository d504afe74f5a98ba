//! How far a paced sender run's sequence numbers can have reached: the bound that makes a
//! forged jump `implausible` by the run's own rate, not only by the line's.
//!
//! A paced queue follows an absolute schedule: by `e` seconds after its pacer started it has
//! sent at most `floor(rate × e) + 1` datagrams (`pacing`), catching up after a stall but never
//! getting ahead, and each of its flows numbers a share of those. So a flow's datagram
//! numbered `seq` was sent only if `seq − first_seq ≤ flow_pps × e`, where `flow_pps` is the
//! peak rate of the fastest queue (a rate schedule's peak, a search trial's rate) and `e`
//! runs from the sender run's start.
//!
//! The sink holds that bound on its own clock as a [`RunReach`]: the run started no earlier
//! than `since_ns`. Over the network that lower bound is causal: the sender builds its Hello
//! (which says how long ago the run started) only after the sink's side of the handshake, so
//! the run cannot have started before the sink accepted the connection minus that age. The
//! two monotonic clocks may tick at slightly different rates, so the elapsed time is
//! stretched by [`DRIFT_PER_MILLE`] per mille plus [`SLACK_NS`]. A datagram beyond the reach at
//! its arrival could not have been sent: it is refused, and a legitimate one always passes.

/// The elapsed time is stretched by this many parts per thousand (1000 ppm: ten times any
/// crystal's tolerance) for clocks that tick at different rates.
pub(crate) const DRIFT_PER_MILLE: u64 = 1;
/// Added to the elapsed time, for a clock read's granularity and the pacer's rounding.
pub(crate) const SLACK_NS: u64 = 10_000_000;

/// A paced sender run's reach, on the sink's monotonic clock; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunReach {
    /// The lowest first sequence number of the run's flows.
    first_seq: u64,
    /// The most datagrams per second any one of its flows is paced at, in millionths
    /// (rounded up), so the bound is integer arithmetic.
    flow_micro_pps: u64,
    /// The run started no earlier than this (monotonic ns on the sink's clock).
    since_ns: u64,
}

impl RunReach {
    /// The reach of a run whose flows start at `first_seq` or later, none paced above
    /// `flow_pps`, that started no earlier than `since_ns`; `None` for a rate that is not a
    /// positive finite number (an unpaced run reaches anything the line can carry).
    pub(crate) fn new(first_seq: u64, flow_pps: f64, since_ns: u64) -> Option<RunReach> {
        (flow_pps.is_finite() && flow_pps > 0.0).then(|| RunReach {
            first_seq,
            // `as` saturates: a rate beyond 1.8e13 pps bounds nothing.
            flow_micro_pps: (flow_pps * 1e6).ceil() as u64,
            since_ns,
        })
    }

    /// One past the highest sequence number any flow of the run can have sent by monotonic
    /// `now_ns` (saturating).
    pub(crate) fn limit(&self, now_ns: u64) -> u64 {
        let elapsed = now_ns.saturating_sub(self.since_ns);
        let stretched = elapsed
            .saturating_add(elapsed / 1000 * DRIFT_PER_MILLE)
            .saturating_add(SLACK_NS);
        let due = (u128::from(self.flow_micro_pps) * u128::from(stretched))
            .div_ceil(1_000_000_000_000_000);
        // The pacer's `+ 1`, and one more for the rate's rounding.
        self.first_seq
            .saturating_add(u64::try_from(due).unwrap_or(u64::MAX))
            .saturating_add(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unpaced_or_broken_rate_has_no_reach() {
        assert_eq!(RunReach::new(0, 0.0, 0), None);
        assert_eq!(RunReach::new(0, -1.0, 0), None);
        assert_eq!(RunReach::new(0, f64::NAN, 0), None);
        assert_eq!(RunReach::new(0, f64::INFINITY, 0), None);
    }

    #[test]
    fn the_reach_is_the_rate_times_the_stretched_elapsed_time() {
        let r = RunReach::new(1000, 10_000.0, 5_000_000_000).unwrap();
        // Before the start: the slack alone (10 ms at 10 kpps = 100) and the margin.
        assert_eq!(r.limit(0), 1000 + 100 + 2);
        // 10 s later: 10.01 s stretched, plus 10 ms: 100 200 numbers.
        assert_eq!(r.limit(15_000_000_000), 1000 + 100_200 + 2);
        // A schedule on time is well inside it.
        let on_time = 1000 + 10_000 * 10 + 1;
        assert!(on_time < r.limit(15_000_000_000));
    }

    #[test]
    fn the_limit_saturates_and_never_falls() {
        let r = RunReach::new(u64::MAX - 5, 1e9, 0).unwrap();
        assert_eq!(r.limit(u64::MAX), u64::MAX);
        let r = RunReach::new(0, 1e300, 0).unwrap();
        assert_eq!(r.limit(u64::MAX), u64::MAX);
        let r = RunReach::new(7, 123_456.7, 42).unwrap();
        let mut last = 0;
        for now in (0..10_000_000_000u64).step_by(333_333_333) {
            assert!(r.limit(now) >= last);
            last = r.limit(now);
        }
    }
}
