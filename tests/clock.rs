//! One-way latency across clocks that differ (issue 27), end to end between two network
//! namespaces this test creates. A test cannot move the host's clock, so the sink runs with the
//! test hook `RINGBLAST_TEST_CLOCK_SKEW_NS`, which moves every realtime read of the sink and
//! makes it treat the sender as another host: the true offset is then known exactly (the skew),
//! and the estimate must hold it within its own error bound. The neutral observers are the
//! skew itself and the kernel's `Udp InDatagrams` of the sink's namespace; every packet is
//! either a latency sample or counted as `latency_unknown`, never both, never neither.
//!
//! A sink whose clock is behind is tested in `tests/faults/nfq.rs`, under a 5 ms hold the
//! injector records: a veth transit of microseconds is within the estimate's error bound, so
//! its corrected value may be negative (taken as 0, counted as clamped) and proves nothing.

mod common;

use std::{process::Command, time::Duration};

use common::{proc::Proc, *};
use serde_json::Value;

const SKEW_ENV: &str = "RINGBLAST_TEST_CLOCK_SKEW_NS";
const FIVE_S: i64 = 5_000_000_000;
const WAIT: Duration = Duration::from_secs(15);

fn require_root() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
}

/// `ringblast ARGS` inside `ns`, with the sink's clock moved by `skew` ns when given.
fn ringblast_in(ns: &str, skew: Option<i64>, args: &[&str]) -> Proc {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, bin()]).args(args);
    match skew {
        Some(s) => cmd.env(SKEW_ENV, s.to_string()),
        None => cmd.env_remove(SKEW_ENV),
    };
    Proc::spawn(cmd)
}

fn summary(out: &str, role: &str) -> Value {
    last_summary(out, role)
}

/// A UDP sink in `lab.rx` (its clock moved by `skew`), a 2-second 10 kpps sender in `lab.tx`
/// (`extra` appended); returns the sender's and the sink's summaries and the datagrams the
/// sink namespace's kernel delivered meanwhile. The sink is stopped once it has counted the
/// whole run: the sender's verdict says so, or, without a control channel, the session's end
/// after a second without packets.
fn run_udp(lab: &Lab, net: u8, skew: Option<i64>, extra: &[&str]) -> (Value, Value, u64) {
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let listen = format!("10.{net}.0.2:7400");
    let before = snmp(&lab.rx, "Udp", "InDatagrams");
    let mut sink = ringblast_in(
        &lab.rx,
        skew,
        &[
            "sink",
            "--listen",
            &listen,
            "--json",
            "--interval",
            "0",
            "--secret-file",
            secret,
            "--session-idle",
            "1s",
        ],
    );
    sink.wait_line("control: listening", WAIT);
    let mut args = vec![
        "send",
        "--to",
        &listen,
        "--rate",
        "10kpps",
        "--duration",
        "2s",
        "--json",
        "--interval",
        "0",
        "--secret-file",
        secret,
    ];
    args.extend_from_slice(extra);
    let (status, out, err) = ringblast_in(&lab.tx, None, &args).finish();
    assert!(status.success(), "sender failed: {status}\n{err}");
    let send = summary(&out, "send");
    if extra.contains(&"off") {
        sink.wait_line("ended: idle for --session-idle", WAIT);
    }
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "sink failed: {status}\n{err}");
    let received = snmp(&lab.rx, "Udp", "InDatagrams") - before;
    (send, summary(&out, "sink"), received)
}

fn only_sender(sink: &Value) -> &Value {
    let senders = sink["senders"].as_array().expect("senders");
    assert_eq!(senders.len(), 1, "{sink}");
    &senders[0]
}

fn i(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {key} in {v}"))
}

/// Every datagram the kernel delivered was counted, and is a sample or unknown, not both.
fn assert_counted(send: &Value, sink: &Value, received: u64) {
    assert_eq!(u(sink, "rx_packets"), received, "{sink}");
    assert_eq!(u(send, "tx_packets"), received, "{send}");
    let samples = sink["latency"]["count"].as_u64().unwrap_or(0);
    assert_eq!(
        samples + u(sink, "latency_unknown_packets"),
        received,
        "{sink}"
    );
    let row = &only_sender(sink)["latency_clock"];
    assert_eq!(
        u(row, "latency_unknown_packets"),
        u(sink, "latency_unknown_packets"),
        "{sink}"
    );
}

/// The estimate holds the true offset within its bound, and the bound is tight.
fn assert_estimate(clock: &Value, true_offset: i64) {
    assert_eq!(clock["kind"], "offset_corrected", "{clock}");
    let (offset, bound) = (i(clock, "offset_ns"), u(clock, "error_bound_ns"));
    assert!(
        (offset - true_offset).unsigned_abs() <= bound,
        "offset {offset} is not within {bound} of {true_offset}: {clock}"
    );
    assert!(bound < 50_000_000, "{clock}");
    assert!(u(clock, "control_rtt_ns") > 0, "{clock}");
    assert!(clock.get("reason").is_none(), "{clock}");
}

#[test]
#[ignore = "needs root: network namespaces with their own clocks (a skewed ringblast per namespace)"]
fn a_sink_5_s_ahead_reports_the_true_latency_and_the_offset() {
    require_root();
    let _guard = traffic_lock();
    let lab = Lab::create("ck", 221);
    let (send, sink, received) = run_udp(&lab, 221, Some(FIVE_S), &[]);
    assert_counted(&send, &sink, received);
    let row = only_sender(&sink);
    assert_estimate(&row["latency_clock"], FIVE_S);
    // Without the correction every packet was 5 s late (the open top cell, once a sentinel).
    let p99 = u(&row["latency"], "p99_ns_at_most");
    assert!(p99 < 1_000_000_000, "{row}");
    assert!(u(&sink["latency"], "p99_ns") < 1_000_000_000, "{sink}");
    assert!(!sink.to_string().contains("18446744073709551615"), "{sink}");
    // The sender's copy of the verdict says the same, and it measured the channel itself.
    let verdict = &send["sink"];
    assert_eq!(verdict["latency_clock"], row["latency_clock"], "{send}");
    assert_eq!(verdict["latency"], row["latency"], "{send}");
    assert!(u(&send, "control_rtt_ns") <= u(&row["latency_clock"], "control_rtt_ns"));
    // Jitter is taken only from corrected samples, and a new estimate forgets the previous
    // transit: no difference holds the 5 s offset or a change of its estimate.
    let jitter = &row["jitter"];
    assert!(
        u(jitter, "samples") > 0 && u(jitter, "samples") < received,
        "{row}"
    );
    assert!(u(jitter, "max_ns_at_most") < 1_000_000_000, "{row}");
    assert!(jitter.get("max_ns_at_least").is_none(), "{row}");
    assert_eq!(verdict["jitter"], row["jitter"], "{send}");
}

#[test]
#[ignore = "needs root: network namespaces with their own clocks (a skewed ringblast per namespace)"]
fn without_a_control_channel_latency_is_unknown_not_zero() {
    require_root();
    let _guard = traffic_lock();
    let lab = Lab::create("ck", 223);
    let (send, sink, received) = run_udp(&lab, 223, None, &["--control", "off"]);
    assert_counted(&send, &sink, received);
    let row = only_sender(&sink);
    assert_eq!(row["latency"], Value::Null, "{row}");
    let clock = &row["latency_clock"];
    assert_eq!(clock["kind"], "unknown", "{clock}");
    assert_eq!(clock["offset_ns"], Value::Null, "{clock}");
    assert_eq!(clock["error_bound_ns"], Value::Null, "{clock}");
    assert!(
        clock["reason"].as_str().unwrap().contains("--control off"),
        "{clock}"
    );
    assert_eq!(u(clock, "latency_unknown_packets"), received, "{clock}");
    assert_eq!(
        row["jitter"],
        Value::Null,
        "no jitter without a clock either: {row}"
    );
    assert_eq!(sink["latency"], Value::Null, "no corrected samples: {sink}");
    assert_eq!(send["sink"], Value::Null, "{send}");
    assert_eq!(send["control_rtt_ns"], Value::Null, "{send}");
}

#[test]
#[ignore = "needs root: network namespaces with their own clocks (a skewed ringblast per namespace)"]
fn namespaces_of_one_kernel_share_its_clock() {
    require_root();
    let _guard = traffic_lock();
    let lab = Lab::create("ck", 224);
    let (send, sink, received) = run_udp(&lab, 224, None, &[]);
    assert_counted(&send, &sink, received);
    let clock = &only_sender(&sink)["latency_clock"];
    assert_eq!(clock["kind"], "same_clock", "{clock}");
    assert_eq!((i(clock, "offset_ns"), u(clock, "error_bound_ns")), (0, 0));
    assert!(u(&send, "control_rtt_ns") > 0, "{send}");
}

#[test]
#[ignore = "needs root: network namespaces with their own clocks (a skewed ringblast per namespace)"]
fn a_tcp_sink_5_s_behind_corrects_its_records_latency() {
    require_root();
    let _guard = traffic_lock();
    let lab = Lab::create("ck", 225);
    let listen = "10.225.0.2:7401";
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let mut sink = ringblast_in(
        &lab.rx,
        Some(-FIVE_S),
        &[&tcp::sink_args(listen)[..], &["--secret-file", secret]].concat(),
    );
    sink.wait_line("tcp sink listening on", WAIT);
    let args = [
        "send",
        "--proto",
        "tcp",
        "--to",
        listen,
        "--conns",
        "2",
        "--size",
        "1400",
        "--rate",
        "5kpps",
        "--duration",
        "2s",
        "--json",
        "--secret-file",
        secret,
    ];
    let (status, out, err) = ringblast_in(&lab.tx, None, &args).finish();
    assert!(status.success(), "sender failed: {status}\n{err}");
    let send = summary(&out, "send");
    sink.wait_tcp_sink_conns(2, 0, WAIT);
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "sink failed: {status}\n{err}");
    let sink = summary(&out, "sink");
    let row = only_sender(&sink);
    assert_estimate(&row["latency_clock"], -FIVE_S);
    assert_eq!(
        send["verdict"]["latency_clock"], row["latency_clock"],
        "{send}"
    );
    let p50 = u(&sink, "latency_p50_ns_le");
    assert!(p50 > 1_000 && p50 < 1_000_000_000, "{sink}");
    assert_eq!(
        u(&row["latency_clock"], "latency_unknown_packets"),
        u(&sink, "latency_unknown"),
        "{sink}"
    );
    // The sender's own latency, in the sink's books and in its verdict, corrected alike: the
    // only sender's cells are the sink's.
    assert_eq!(u(&row["latency"], "p50_ns_at_most"), p50, "{sink}");
    assert_eq!(send["verdict"]["latency"], row["latency"], "{send}\n{sink}");
}
