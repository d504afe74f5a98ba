//! The two clocks ringblast reads: `CLOCK_MONOTONIC` for pacing and durations, and
//! `CLOCK_REALTIME` for the send timestamp in every header. Both go through the vDSO, so they
//! cost tens of ns. Two hosts' realtime clocks differ by an offset, which the control channel
//! estimates (`control::clock`); a sink corrects its one-way latency by it, or knows its sender
//! shares its clock: the same kernel (equal `boot_id`s) has one `CLOCK_REALTIME`, network
//! namespaces included.
//!
//! The launch instant is taken once, first thing in `main`, so start-up time (launch to the
//! first packet) can be reported.
//!
//! **Test hook**: `RINGBLAST_TEST_CLOCK_SKEW_NS` (read once at start, a signed integer) moves
//! every realtime read of a sink ([`sink_realtime_ns`]: its packet receive times and its clock
//! replies) by that many ns and makes the sink treat every sender as another host (its
//! `boot_id` is not compared), so a test on one host can check the offset correction end to
//! end. It is not an option and has no other use.

use std::sync::OnceLock;

use crate::error::Error;

use nix::time::{ClockId, clock_gettime};

static LAUNCH_NS: OnceLock<u64> = OnceLock::new();

fn now_ns(clock: ClockId) -> u64 {
    clock_gettime(clock)
        .map(|ts| ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Nanoseconds on the monotonic clock.
#[inline]
pub(crate) fn monotonic_ns() -> u64 {
    now_ns(ClockId::CLOCK_MONOTONIC)
}

/// Nanoseconds since the Unix epoch.
#[inline]
pub(crate) fn realtime_ns() -> u64 {
    now_ns(ClockId::CLOCK_REALTIME)
}

/// The environment variable of the test clock skew (see the module documentation).
pub(crate) const TEST_SKEW_ENV: &str = "RINGBLAST_TEST_CLOCK_SKEW_NS";

static TEST_SKEW_NS: OnceLock<Option<i64>> = OnceLock::new();
static BOOT_ID: OnceLock<Option<String>> = OnceLock::new();

fn parse_skew(value: Option<std::ffi::OsString>) -> Result<Option<i64>, Error> {
    let Some(value) = value else {
        return Ok(None);
    };
    value
        .to_str()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(Some)
        .ok_or_else(|| {
            Error::Usage(format!(
                "{TEST_SKEW_ENV}={value:?} is not a whole number of nanoseconds; unset it (it is a test hook)"
            ))
        })
}

/// Reads the test clock skew once (`main` calls it at start); a value that is not a whole
/// number of ns is an error naming the variable.
pub fn init_test_skew() -> Result<(), Error> {
    let skew = parse_skew(std::env::var_os(TEST_SKEW_ENV))?;
    let _ = TEST_SKEW_NS.set(skew);
    Ok(())
}

/// The test clock skew, if the hook is set (read once; an unreadable value counts as unset
/// where `init_test_skew` did not run first).
pub(crate) fn test_skew_ns() -> Option<i64> {
    *TEST_SKEW_NS.get_or_init(|| parse_skew(std::env::var_os(TEST_SKEW_ENV)).unwrap_or(None))
}

/// The sink's realtime clock: [`realtime_ns`], moved by the test skew when that hook is set.
#[inline]
pub(crate) fn sink_realtime_ns() -> u64 {
    on_sink_clock(realtime_ns())
}

/// A `CLOCK_REALTIME` reading (a kernel stamp) on the sink's clock: moved by the test skew
/// when that hook is set.
#[inline]
pub(crate) fn on_sink_clock(realtime: u64) -> u64 {
    match test_skew_ns() {
        Some(skew) => realtime.saturating_add_signed(skew),
        None => realtime,
    }
}

/// This kernel's boot id (`/proc/sys/kernel/random/boot_id`, read once), if readable.
pub(crate) fn boot_id() -> Option<&'static str> {
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .as_deref()
}

/// Whether a sender that gave `sender_boot_id` runs on this kernel, so its realtime clock is
/// this one (never under the test skew, which stands for another host).
pub(crate) fn same_kernel(sender_boot_id: Option<&str>) -> bool {
    test_skew_ns().is_none() && sender_boot_id.is_some() && sender_boot_id == boot_id()
}

/// The monotonic ns of launch: the first call marks it (`main` calls it before anything else).
pub fn launch_ns() -> u64 {
    *LAUNCH_NS.get_or_init(monotonic_ns)
}

/// Milliseconds from launch to monotonic instant `ns`, rounded to µs.
/// A time on the monotonic clock as ns since the Unix epoch on the wall clock (read against
/// it now).
pub(crate) fn unix_of_monotonic(monotonic: u64) -> u64 {
    realtime_ns().saturating_sub(monotonic_ns().saturating_sub(monotonic))
}

/// Ns since the Unix epoch as RFC 3339 in UTC, to the microsecond.
pub(crate) fn rfc3339_micros(unix_ns: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(unix_ns);
    humantime::format_rfc3339_micros(at).to_string()
}

pub(crate) fn ms_since_launch(ns: u64) -> f64 {
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
    fn the_skew_hook_parses_whole_ns_and_names_itself_otherwise() {
        assert_eq!(parse_skew(None).unwrap(), None);
        assert_eq!(
            parse_skew(Some("-5000000000".into())).unwrap(),
            Some(-5_000_000_000)
        );
        let e = parse_skew(Some("5s".into())).unwrap_err().to_string();
        assert!(e.contains(TEST_SKEW_ENV), "{e}");
    }

    #[test]
    fn this_kernel_has_a_boot_id_and_matches_only_itself() {
        let id = boot_id().expect("/proc/sys/kernel/random/boot_id");
        assert_eq!(id.len(), 36, "{id}");
        assert!(same_kernel(Some(id)));
        assert!(!same_kernel(Some("00000000-0000-0000-0000-000000000000")));
        assert!(!same_kernel(None));
    }

    #[test]
    fn launch_is_marked_once() {
        let launch = launch_ns();
        assert_eq!(launch_ns(), launch);
        assert_eq!(ms_since_launch(launch + 1_234_567), 1.235);
        assert_eq!(ms_since_launch(0), 0.0);
    }
}
