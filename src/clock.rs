//! The two clocks ringblast reads: `CLOCK_MONOTONIC` for pacing and durations, and
//! `CLOCK_REALTIME` for the send timestamp in every header (one-way latency needs clocks that
//! agree across hosts, e.g. with PTP). Both go through the vDSO, so they cost tens of ns.

//!
//! The launch instant is taken once, first thing in `main`, so start-up time (launch to the
//! first packet) can be reported.

use std::sync::OnceLock;

use nix::time::{ClockId, clock_gettime};

static LAUNCH_NS: OnceLock<u64> = OnceLock::new();

fn now_ns(clock: ClockId) -> u64 {
    clock_gettime(clock)
        .map(|ts| ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Nanoseconds on the monotonic clock.
#[inline]
pub fn monotonic_ns() -> u64 {
    now_ns(ClockId::CLOCK_MONOTONIC)
}

/// Nanoseconds since the Unix epoch.
#[inline]
pub fn realtime_ns() -> u64 {
    now_ns(ClockId::CLOCK_REALTIME)
}

/// The monotonic ns of launch: the first call marks it (`main` calls it before anything else).
pub fn launch_ns() -> u64 {
    *LAUNCH_NS.get_or_init(monotonic_ns)
}

/// Milliseconds from launch to monotonic instant `ns`, rounded to µs.
pub fn ms_since_launch(ns: u64) -> f64 {
    (ns.saturating_sub(launch_ns()) as f64 / 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a && a > 0);
        assert!(realtime_ns() > 1_600_000_000_000_000_000);
    }

    #[test]
    fn launch_is_marked_once() {
        let launch = launch_ns();
        assert_eq!(launch_ns(), launch);
        assert_eq!(ms_since_launch(launch + 1_234_567), 1.235);
        assert_eq!(ms_since_launch(0), 0.0);
    }
}
