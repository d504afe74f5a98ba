//! Flow steering over the sink's queues (`--steer flow`, the default): one sender's flows, and
//! several senders' flows, are split evenly and exactly over the queues, where the kernel's hash
//! (`--steer hash`) often puts 2 of 8 flows on one queue and 6 on the other (so the exact
//! halves below fail without the program in about 3 runs of 4). Foreign datagrams
//! still reach a queue (by the kernel's hash) and are counted as invalid.

mod common;

use std::{
    net::UdpSocket,
    process::{Child, Command, Stdio},
};

use common::*;
use serde_json::Value;

fn sink(port: u16, queues: &str, extra: &[&str]) -> Child {
    let child = Command::new(bin())
        .args(["sink", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--queues", queues, "--duration", "4s", "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Every queue's socket must be in the reuseport group before a datagram arrives: one sent
    // while the group is incomplete gets an index the group lacks and goes by the kernel's hash.
    wait_bound_sockets(None, port, queues.parse().unwrap());
    child
}

fn send(port: u16, name: &str, flows: &str, count: &str) -> Value {
    let out = ringblast(&[
        "send",
        "--to",
        &format!("127.0.0.1:{port}"),
        "--name",
        name,
        "--flows",
        flows,
        "--count",
        count,
        "--rate",
        "40kpps",
        "--json",
    ]);
    assert_ok(&out);
    summaries(&out).send.unwrap()
}

fn per_queue(sink: &Value) -> Vec<u64> {
    sink["per_queue"]
        .as_array()
        .unwrap_or_else(|| panic!("no per_queue in {sink}"))
        .iter()
        .map(|q| u(q, "rx_packets"))
        .collect()
}

fn finish(child: Child) -> (Value, String) {
    let out = child.wait_with_output().unwrap();
    assert_ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (summaries(&out).sink.unwrap(), stderr)
}

#[test]
fn eight_flows_split_exactly_over_two_and_four_queues() {
    let _guard = traffic_lock();
    for (queues, each) in [("2", 20_000), ("4", 10_000)] {
        let port = free_port();
        let child = sink(port, queues, &[]);
        let sent = send(port, "steer8", "8", "40000");
        let (summary, stderr) = finish(child);
        assert_eq!(u(&sent, "tx_packets"), 40_000, "{sent}");
        assert_eq!(u(&summary, "rx_packets"), 40_000, "{summary}");
        let shares = per_queue(&summary);
        assert_eq!(shares.len(), queues.parse::<usize>().unwrap(), "{summary}");
        assert!(
            shares.iter().all(|&n| n == each),
            "{queues} queues: {shares:?}"
        );
        assert_eq!(summary["busiest_queue_over_mean"], 1.0, "{summary}");
        assert!(
            stderr.contains("queue shares:") && stderr.contains("busiest 1.00x the mean"),
            "{stderr}"
        );
    }
}

#[test]
fn every_senders_flows_alternate_over_the_queues() {
    let _guard = traffic_lock();
    let port = free_port();
    let child = sink(port, "2", &[]);
    // Each sender's two flows land on different queues whatever its (random) epoch is.
    let a = send(port, "steer-a", "2", "10000");
    let b = send(port, "steer-b", "2", "6000");
    let (summary, _) = finish(child);
    assert_eq!(u(&a, "tx_packets") + u(&b, "tx_packets"), 16_000);
    assert_eq!(per_queue(&summary), vec![8_000, 8_000], "{summary}");
}

#[test]
fn foreign_datagrams_fall_back_to_the_hash_and_count_as_invalid() {
    let _guard = traffic_lock();
    let port = free_port();
    let child = sink(port, "2", &[]);
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..200 {
        sock.send_to(&[0xAB; 100], ("127.0.0.1", port)).unwrap();
        sock.send_to(b"tiny", ("127.0.0.1", port)).unwrap();
    }
    let (summary, _) = finish(child);
    assert_eq!(u(&summary, "rx_invalid"), 400, "{summary}");
    assert_eq!(summary["rx_invalid_by_reason"]["magic"], 200, "{summary}");
    assert_eq!(summary["rx_invalid_by_reason"]["short"], 200, "{summary}");
}

#[test]
fn imix_compact_and_full_headers_are_steered_alike() {
    let _guard = traffic_lock();
    let port = free_port();
    let child = sink(port, "2", &[]);
    let out = ringblast(&[
        "send",
        "--to",
        &format!("127.0.0.1:{port}"),
        "--size",
        "imix",
        "--flows",
        "8",
        "--count",
        "48000",
        "--rate",
        "40kpps",
        "--json",
    ]);
    assert_ok(&out);
    let sent = summaries(&out).send.unwrap();
    let (summary, _) = finish(child);
    assert_eq!(u(&sent, "tx_packets"), 48_000, "{sent}");
    // 64-byte frames carry the compact header: were they not steered, the kernel's hash would
    // split them by flow unevenly while the full-header classes stayed even.
    assert_eq!(per_queue(&summary), vec![24_000, 24_000], "{summary}");
}
