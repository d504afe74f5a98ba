//! TCP test helpers: a `sink --proto tcp` started and stopped on its own lines, and a
//! `send --proto tcp` run to its summary.

use std::time::Duration;

use serde_json::Value;

use super::{last_summary, proc::Proc};

pub const WAIT: Duration = Duration::from_secs(15);

pub fn start_sink(ns: Option<&str>, listen: &str) -> Proc {
    let mut sink = Proc::ringblast(
        ns,
        &[
            "sink",
            "--proto",
            "tcp",
            "--listen",
            listen,
            "--json",
            "--interval",
            "100ms",
        ],
    );
    sink.wait_line("tcp sink listening on", WAIT);
    sink
}

/// Stops a sink once it has accepted `accepts` connections and all of them ended; returns
/// its summary.
pub fn stop_sink(mut sink: Proc, accepts: u64) -> Value {
    sink.wait_line(&format!("conns 0 open  accepted {accepts} "), WAIT);
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "sink failed: {status}\n{err}");
    last_summary(&out, "sink")
}

pub fn send(ns: Option<&str>, args: &[&str]) -> Value {
    let mut all = vec!["send", "--proto", "tcp", "--json"];
    all.extend_from_slice(args);
    let (status, out, err) = Proc::ringblast(ns, &all).finish();
    assert!(status.success(), "sender failed: {status}\n{err}");
    last_summary(&out, "send")
}
