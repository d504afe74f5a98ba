//! The sink's size classes travel in its verdict (control protocol 2): a remote sender's
//! summary carries them, class by class equal to its own per-class counts and to the sink's own
//! summary; a stepped run's verdict sums its steps' classes.

mod common;

use std::process::Command;

use common::{proc::Proc, *};
use serde_json::Value;

/// (payload, packets, bytes) per class, sorted.
fn classes(sizes: &Value) -> Vec<(u64, u64, u64)> {
    let mut out: Vec<_> = sizes
        .as_array()
        .unwrap_or_else(|| panic!("no size classes: {sizes}"))
        .iter()
        .map(|c| (u(c, "payload"), u(c, "packets"), u(c, "bytes")))
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn a_remote_senders_summary_carries_the_sinks_size_classes() {
    let _guard = traffic_lock();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut sink = Command::new(bin());
    sink.args(["sink", "--json", "--listen", &listen, "--interval", "0"]);
    sink.args(["--duration", "5s"]);
    let sink = Proc::spawn(sink);
    wait_bound(None, port);
    let send = ringblast(&[
        "send",
        "--json",
        "--to",
        &listen,
        "--size",
        "imix",
        "--rate",
        "24kpps",
        "--count",
        "24000",
        "--interval",
        "0",
    ]);
    assert_ok(&send);
    let (status, sink_out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let tx = summaries(&send).send.unwrap();
    let rx = sink_out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "summary" && v["role"] == "sink")
        .unwrap();
    let sent = classes(&tx["sizes"]);
    assert_eq!(
        sent.iter().map(|c| c.1).collect::<Vec<_>>(),
        [14_000, 8_000, 2_000],
        "7:4:1 over whole cycles: {tx}"
    );
    assert_eq!(
        classes(&tx["sink"]["sizes"]),
        sent,
        "the verdict's classes: {tx}"
    );
    assert_eq!(classes(&rx["sizes"]), sent, "the sink's own summary: {rx}");
}

#[test]
fn a_stepped_runs_verdict_sums_its_steps_size_classes() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair(&["--size", "imix", "--rate-steps", "12kpps:1s,24kpps:1s"]);
    let sent = classes(&send["sizes"]);
    assert_eq!(classes(&send["sink"]["sizes"]), sent, "{send}");
    assert_eq!(classes(&sink["sizes"]), sent, "{sink}");
    assert_eq!(
        sent.iter().map(|c| c.1).sum::<u64>(),
        u(&send, "tx_packets")
    );
}
