//! The vocabulary of a sender's verdict that every protocol shares: how long a goodbye waits,
//! and how a sender run's latency relates to its clock at its hello (the verdict's message
//! says it back: `control::msg::VerdictClock`). It is the bottom of `run/`: it imports nothing from
//! it, nor from any protocol.

use std::time::Duration;

use crate::{
    clock,
    control::msg::Hello,
    latency_clock::{LatencyClock, NO_ESTIMATE_YET},
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
