//! The vocabulary of a sender's verdict that every protocol shares: how long a goodbye waits,
//! how a sender run's latency relates to its clock, at the hello, in the verdict's message
//! and back, and its latency (cell bounds) read from the verdict's message. It is the bottom of `run/`: it imports nothing from it, nor from any protocol.

use std::time::Duration;

use crate::{
    clock,
    control::msg::{Hello, Verdict, VerdictClock},
    latency_clock::{ClockKind, LatencyClock, NO_ESTIMATE_YET},
    stats::Latency,
};

/// How long a goodbye waits for the sink's verdict.
pub(crate) const GOODBYE_WAIT: Duration = Duration::from_secs(3);

/// The clock of `pair`'s sender at its in-process sink: the same clock (moved by the test
/// skew, which the one process knows exactly, when that hook is set).
pub(crate) fn in_process_clock() -> LatencyClock {
    LatencyClock {
        offset_ns: clock::test_skew_ns().unwrap_or(0),
        ..LatencyClock::same_clock()
    }
}

/// The clock of a sender at its hello in protocol `version`, as far as the hello tells.
pub(crate) fn hello_clock(hello: &Hello, version: u8) -> LatencyClock {
    if version < 3 {
        LatencyClock::unknown(format!(
            "no clock estimate: the sender speaks control protocol version {version}, without the clock exchange (upgrade it)"
        ))
    } else if clock::same_kernel(hello.boot_id.as_deref()) {
        LatencyClock::same_clock()
    } else {
        LatencyClock::unknown(NO_ESTIMATE_YET)
    }
}

/// A run's clock, with its packets without a sample and its clamped samples, for a verdict.
pub(crate) fn verdict_clock(clock: &LatencyClock, unknown: u64, clamped: u64) -> VerdictClock {
    let known = clock.kind != ClockKind::Unknown;
    VerdictClock {
        kind: clock.kind,
        offset_ns: known.then_some(clock.offset_ns),
        error_bound_ns: known.then_some(clock.error_bound_ns),
        control_rtt_ns: clock.control_rtt_ns,
        latency_unknown_packets: unknown,
        latency_clamped_packets: clamped,
        reason: (!known).then(|| clock.reason.clone()),
    }
}

/// The clock a verdict carries (an older sink says nothing of it).
pub(crate) fn clock_of(v: Option<&VerdictClock>) -> LatencyClock {
    match v {
        Some(c) if c.kind != ClockKind::Unknown => LatencyClock {
            kind: c.kind,
            offset_ns: c.offset_ns.unwrap_or(0),
            error_bound_ns: c.error_bound_ns.unwrap_or(0),
            control_rtt_ns: c.control_rtt_ns,
            reason: String::new(),
        },
        Some(c) => LatencyClock {
            control_rtt_ns: c.control_rtt_ns,
            ..LatencyClock::unknown(c.reason.clone().unwrap_or_default())
        },
        None => LatencyClock::unknown(
            "the sink's verdict does not say how its latency relates to this sender's clock",
        ),
    }
}

/// The latency a verdict carries: its cell bounds (0 without samples) and its figures.
pub(crate) fn latency_of(v: &Verdict) -> Latency {
    Latency {
        p50_ns: v.latency_p50_ns,
        p99_ns: v.latency_p99_ns,
        // A sink older than protocol version 5 gives no p99.9 (0): it lies between the p99 and
        // the max, so the max is the true upper bound it can be given.
        p999_ns: match v.latency_p999_ns {
            0 => v.latency_max_ns,
            p999 => p999,
        },
        max_ns: v.latency_max_ns,
        figures: v.latency_figures.as_deref().copied(),
    }
}
