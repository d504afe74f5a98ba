//! Every send operation and every sink receive mode end to end: `--send-op send-zc` and
//! `send` (the default `write-fixed` runs everywhere else), `--no-gro` under a GSO sender, and
//! `--rx-wait spin` and `sleep` (the default `batch` runs everywhere else). Each run is paced
//! (no kernel drops) and counted: the sink must receive exactly what the sender says it sent,
//! and the sender exactly the packets asked for.

mod common;

use common::*;

const COUNT: u64 = 20_000;

fn exact_run(extra: &[&str]) {
    let _guard = traffic_lock();
    let count = COUNT.to_string();
    let mut args = vec!["--count", &count, "--rate", "100kpps"];
    args.extend_from_slice(extra);
    let (send, sink, _) = pair(&args);
    assert_eq!(u(&send, "tx_packets"), COUNT, "{extra:?}: {send}");
    assert_exact(&send, &sink);
}

#[test]
fn send_zc_delivers_every_packet() {
    exact_run(&["--send-op", "send-zc"]);
}

#[test]
fn plain_send_delivers_every_packet() {
    exact_run(&["--send-op", "send", "--size", "1200"]);
}

#[test]
fn gso_trains_without_gro_are_counted_one_by_one() {
    exact_run(&["--no-gro", "--gso", "8", "--size", "200"]);
}

#[test]
fn spinning_sink_counts_every_packet() {
    exact_run(&["--rx-wait", "spin"]);
}

#[test]
fn sleeping_sink_counts_every_packet() {
    exact_run(&["--rx-wait", "sleep", "--queues", "2", "--flows", "4"]);
}
