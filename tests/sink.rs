//! A standalone `ringblast sink` fed by a standalone sender or by foreign datagrams.

mod common;

use std::{
    net::UdpSocket,
    process::{Child, Command, Stdio},
};

use common::*;
use serde_json::Value;

fn start_sink(port: u16, duration: &str) -> Child {
    start_sink_with(port, duration, &[])
}

fn start_sink_with(port: u16, duration: &str, extra: &[&str]) -> Child {
    let child = Command::new(bin())
        .args([
            "sink",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--duration",
            duration,
            "--json",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bound(None, port);
    child
}

#[test]
fn foreign_datagrams_count_as_invalid_and_nothing_else() {
    let _guard = traffic_lock();
    let port = free_port();
    let sink = start_sink(port, "2s");
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = ("127.0.0.1", port);
    let mut bad_version = [0u8; 64];
    bad_version[..4].copy_from_slice(&0x5242_4C53u32.to_be_bytes());
    bad_version[4] = 9;
    for _ in 0..10 {
        sock.send_to(b"short", to).unwrap();
        sock.send_to(&[0xAB; 100], to).unwrap();
        sock.send_to(&bad_version, to).unwrap();
    }
    let out = sink.wait_with_output().unwrap();
    assert_ok(&out);
    let sink = summaries(&out).sink.unwrap();
    assert_eq!(u(&sink, "rx_invalid"), 30, "{sink}");
    assert_eq!(sink["rx_invalid_by_reason"]["short"], 10);
    assert_eq!(sink["rx_invalid_by_reason"]["magic"], 10);
    assert_eq!(sink["rx_invalid_by_reason"]["version"], 10);
    for key in [
        "rx_packets",
        "rx_bytes",
        "rx_lost",
        "rx_reordered",
        "rx_duplicates",
        "rx_kernel_drops",
    ] {
        assert_eq!(u(&sink, key), 0, "{key}: {sink}");
    }
}

#[test]
fn sequence_numbers_crossing_2_pow_32_and_a_new_epoch_are_exact() {
    let _guard = traffic_lock();
    let port = free_port();
    let sink = start_sink(port, "4s");
    let to = format!("127.0.0.1:{port}");
    let first = ringblast(&[
        "send",
        "--to",
        &to,
        "--first-seq",
        "4294966296",
        "--count",
        "2000",
        "--rate",
        "20kpps",
        "--json",
    ]);
    assert_ok(&first);
    let second = ringblast(&[
        "send", "--to", &to, "--count", "1000", "--rate", "20kpps", "--json",
    ]);
    assert_ok(&second);
    let (s1, s2) = (
        summaries(&first).send.unwrap(),
        summaries(&second).send.unwrap(),
    );
    assert_ne!(
        s1["epoch"], s2["epoch"],
        "every sender run has its own epoch"
    );
    let out = sink.wait_with_output().unwrap();
    assert_ok(&out);
    let sink = summaries(&out).sink.unwrap();
    assert_eq!(u(&sink, "rx_packets"), 3000, "{sink}");
    for key in [
        "rx_lost",
        "rx_reordered",
        "rx_duplicates",
        "rx_invalid",
        "rx_kernel_drops",
    ] {
        assert_eq!(u(&sink, key), 0, "{key}: {sink}");
    }
}

#[test]
fn sink_reports_interval_lines_then_the_summary_last() {
    let _guard = traffic_lock();
    let port = free_port();
    let sink = start_sink(port, "2500ms");
    let send = ringblast(&[
        "send",
        "--to",
        &format!("127.0.0.1:{port}"),
        "--rate",
        "10kpps",
        "--duration",
        "1500ms",
        "--json",
    ]);
    assert_ok(&send);
    let sent = u(&summaries(&send).send.unwrap(), "tx_packets");
    // 10 kpps for 1.5 s, give or take the pacer's lag at the deadline on a busy host.
    assert!((14_900..=15_000).contains(&sent), "{sent}");
    let out = sink.wait_with_output().unwrap();
    assert_ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = common::schema::records(&stdout);
    assert!(lines.len() >= 2, "{stdout}");
    let last = lines.pop().unwrap();
    // First the start record; before the summary: interval lines, and the sender's session
    // ending (its goodbye).
    assert_eq!(lines.remove(0)["type"], "start", "{stdout}");
    assert!(lines.iter().any(|l| l["type"] == "interval"), "{stdout}");
    assert!(
        lines
            .iter()
            .all(|l| l["type"] == "interval" || l["type"] == "session"),
        "{stdout}"
    );
    assert_eq!(last["type"], "summary");
    assert_eq!(u(&last, "rx_packets"), sent);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("q0 n0 "), "{stderr}");
    assert!(stderr.contains("kdrops: 0"), "{stderr}");
}

#[test]
fn a_full_session_table_counts_table_full_and_says_so_once() {
    let _guard = traffic_lock();
    let port = free_port();
    let sink = start_sink_with(port, "3s", &["--max-sessions", "1"]);
    let to = format!("127.0.0.1:{port}");
    let mut sent = Vec::new();
    for _ in 0..3 {
        let run = ringblast(&[
            "send",
            "--to",
            &to,
            "--count",
            "500",
            "--rate",
            "20kpps",
            "--json",
            "--control",
            "off",
        ]);
        assert_ok(&run);
        sent.push(u(&summaries(&run).send.unwrap(), "tx_packets"));
    }
    let out = sink.wait_with_output().unwrap();
    assert_ok(&out);
    let sink = summaries(&out).sink.unwrap();
    // The first run holds the only slot (idle sessions close after --session-idle, 10 s).
    assert_eq!(u(&sink, "rx_packets"), sent[0], "{sink}");
    assert_eq!(
        sink["rx_invalid_by_reason"]["table_full"],
        sent[1] + sent[2],
        "{sink}"
    );
    assert_eq!(u(&sink, "rx_lost"), 0, "{sink}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("session table full"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(said[0].contains("raise --max-sessions"), "{stderr}");
}

/// Waits on events, not timers: the second sender starts once the sink has said the first
/// session ended idle, and the sink is stopped by a signal once it said the second said goodbye.
#[test]
fn sessions_are_logged_as_they_start_and_end_and_rates_skip_idle_gaps() {
    let _guard = traffic_lock();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut sink = proc::Proc::ringblast(
        None,
        &[
            "sink",
            "--listen",
            &listen,
            "--duration",
            "60s",
            "--json",
            "--session-idle",
            "500ms",
        ],
    );
    wait_bound(None, port);
    let quiet = ringblast(&[
        "send",
        "--to",
        &listen,
        "--count",
        "2000",
        "--rate",
        "10kpps",
        "--control",
        "off",
    ]);
    assert_ok(&quiet);
    let wait = std::time::Duration::from_secs(10);
    sink.wait_line("ended: idle for --session-idle", wait);
    let paired = ringblast(&[
        "send", "--to", &listen, "--count", "2000", "--rate", "10kpps",
    ]);
    assert_ok(&paired);
    sink.wait_line("ended: the sender said goodbye", wait);
    sink.interrupt();
    let (status, stdout, stderr) = sink.finish();
    assert!(status.success(), "{status}: {stderr}");
    let count = |needle: &str| stderr.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(count("sink: new session of 127.0.0.1/"), 1, "{stderr}");
    assert_eq!(count("ended: idle for --session-idle"), 1, "{stderr}");
    assert_eq!(count("ended: the sender said goodbye"), 1, "{stderr}");
    // With --json the same three events are `"type":"session"` records.
    let records = common::schema::records(&stdout);
    let events: Vec<&Value> = records.iter().filter(|v| v["type"] == "session").collect();
    let starts: Vec<&&Value> = events.iter().filter(|v| v["event"] == "start").collect();
    assert_eq!(starts.len(), 1, "{events:?}");
    assert_eq!(starts[0]["hello"], false, "{events:?}");
    assert!(
        starts[0]["sender"]
            .as_str()
            .is_some_and(|s| s.starts_with("127.0.0.1/")),
        "{events:?}"
    );
    for cause in ["idle", "goodbye"] {
        let ends = events
            .iter()
            .filter(|v| v["event"] == "end" && v["cause"] == cause)
            .count();
        assert_eq!(ends, 1, "{cause}: {events:?}");
    }
    let sink = last_summary(&stdout, "sink");
    assert_eq!(u(&sink, "rx_packets"), 4000, "{sink}");
    let (active, span) = (
        sink["duration_s"].as_f64().unwrap(),
        sink["span_s"].as_f64().unwrap(),
    );
    // The gap between the two senders lasted at least --session-idle (500 ms): the second
    // started only after the sink had waited that long and said so.
    assert!(
        active + 0.4 < span,
        "the idle gap is not active time: {sink}"
    );
}
