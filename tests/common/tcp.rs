//! TCP test helpers: a `sink --proto tcp` started and stopped on its own lines, and a
//! `send --proto tcp` run to its summary.

use std::time::Duration;

use serde_json::Value;

use super::{last_summary, proc::Proc};

pub const WAIT: Duration = Duration::from_secs(15);

/// The arguments of a TCP sink on `listen` with JSON lines every 100 ms.
pub fn sink_args(listen: &str) -> [&str; 8] {
    [
        "sink",
        "--proto",
        "tcp",
        "--listen",
        listen,
        "--json",
        "--interval",
        "100ms",
    ]
}

/// Starts a TCP sink (with `extra` arguments) and returns it once it listens.
pub fn start_sink_with(ns: Option<&str>, listen: &str, extra: &[&str]) -> Proc {
    let mut args = sink_args(listen).to_vec();
    args.extend_from_slice(extra);
    let mut sink = Proc::ringblast(ns, &args);
    sink.wait_line("tcp sink listening on", WAIT);
    sink
}

pub fn start_sink(ns: Option<&str>, listen: &str) -> Proc {
    start_sink_with(ns, listen, &[])
}

/// Stops a sink once it has accepted `accepts` connections and all of them ended; returns
/// its summary and its stderr.
pub fn stop_sink_with_err(mut sink: Proc, accepts: u64) -> (Value, String) {
    sink.wait_line(&format!("conns 0 open  accepted {accepts} "), WAIT);
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "sink failed: {status}\n{err}");
    (last_summary(&out, "sink"), err)
}

/// As [`stop_sink_with_err`], the summary alone.
pub fn stop_sink(sink: Proc, accepts: u64) -> Value {
    stop_sink_with_err(sink, accepts).0
}

fn run_send(ns: Option<&str>, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut all = vec!["send", "--proto", "tcp", "--json"];
    all.extend_from_slice(args);
    Proc::ringblast(ns, &all).finish()
}

/// Runs a TCP sender to its end; returns its exit code, summary and stderr.
pub fn send_status(ns: Option<&str>, args: &[&str]) -> (Option<i32>, Value, String) {
    let (status, out, err) = run_send(ns, args);
    (status.code(), last_summary(&out, "send"), err)
}

/// Runs a TCP sender that must succeed; returns its summary.
pub fn send(ns: Option<&str>, args: &[&str]) -> Value {
    let (status, out, err) = run_send(ns, args);
    assert!(status.success(), "sender failed: {status}\n{err}");
    last_summary(&out, "send")
}
