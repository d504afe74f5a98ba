//! The two clocks ringblast reads: `CLOCK_MONOTONIC` for pacing and durations, and
//! `CLOCK_REALTIME` for the send timestamp in every header (one-way latency needs clocks that
//! agree across hosts, e.g. with PTP). Both go through the vDSO, so they cost tens of ns.

use nix::time::{ClockId, clock_gettime};

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
}
