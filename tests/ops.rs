//! Every send operation and every sink receive mode end to end: `--send-op send-zc` and
//! `write-fixed` (the UDP default `send` runs everywhere else), `--no-gro` under a GSO sender, and
//! `--rx-wait spin`, `sleep` and `inline` (the default `batch` runs everywhere else). Each run is paced
//! (no kernel drops) and counted: the sink must receive exactly what the sender says it sent,
//! and the sender exactly the packets asked for. Full GRO buffers also shrink the buffers the
//! sink keeps in circulation, and small datagrams keep the whole ring.

mod common;

use common::*;

const COUNT: u64 = 20_000;

fn exact_run(extra: &[&str]) -> serde_json::Value {
    exact_run_at(COUNT, "100kpps", extra)
}

/// Runs a paced pair and checks its counts are exact; returns the sink's summary.
fn exact_run_at(count: u64, rate: &str, extra: &[&str]) -> serde_json::Value {
    let _guard = traffic_lock();
    let count_arg = count.to_string();
    let mut args = vec!["--count", &count_arg, "--rate", rate];
    args.extend_from_slice(extra);
    let (send, sink, _) = pair(&args);
    assert_eq!(u(&send, "tx_packets"), count, "{extra:?}: {send}");
    assert_exact(&send, &sink);
    sink
}

#[test]
fn send_zc_delivers_every_packet() {
    exact_run(&["--send-op", "send-zc"]);
}

#[test]
fn write_fixed_delivers_every_packet() {
    exact_run(&["--send-op", "write-fixed", "--size", "1200"]);
}

#[test]
fn gso_trains_without_gro_are_counted_one_by_one() {
    exact_run(&["--no-gro", "--gso", "8", "--size", "200"]);
}

#[test]
fn spinning_sink_counts_every_packet_paced_slow_and_with_gro() {
    // Paced at 100 kpps: back-to-back batches of non-blocking receives, never a sleep.
    exact_run(&["--rx-wait", "spin", "--queues", "2", "--flows", "4"]);
    // Paced at 2 kpps: traffic counts as stopped between packets; the sink waits on a poll.
    exact_run_at(4_000, "2kpps", &["--rx-wait", "spin"]);
    // GSO trains coalesced by GRO and split again.
    exact_run(&["--rx-wait", "spin", "--gso", "8", "--size", "1000"]);
}

#[test]
fn sleeping_sink_counts_every_packet() {
    exact_run(&["--rx-wait", "sleep", "--queues", "2", "--flows", "4"]);
}

#[test]
fn inline_sink_counts_every_packet_paced_and_unpaced_with_and_without_gro() {
    // Paced at 100 kpps: batches between 50 µs sleeps.
    exact_run(&["--rx-wait", "inline", "--queues", "2", "--flows", "4"]);
    // Paced at 2 kpps: the sink goes idle between packets and waits on its one poll.
    exact_run_at(4_000, "2kpps", &["--rx-wait", "inline"]);
    // GSO trains, coalesced by GRO and split again, and one by one without GRO.
    exact_run(&["--rx-wait", "inline", "--gso", "8", "--size", "1000"]);
    exact_run(&[
        "--rx-wait",
        "inline",
        "--gso",
        "8",
        "--size",
        "200",
        "--no-gro",
    ]);
}

#[test]
fn full_gro_buffers_shrink_the_buffers_in_circulation_small_datagrams_keep_the_ring() {
    // 46 segments of 1400 B fill each 64 KiB buffer: about 4 MiB is 64 buffers of 512.
    let sink = exact_run_at(46_000, "100kpps", &["--gso", "46", "--size", "1400"]);
    let circulating = u(&sink, "rx_buffers_circulating");
    assert!((64..=80).contains(&circulating), "{sink}");
    // One 64 B datagram per buffer: the whole ring circulates.
    let sink = exact_run(&["--size", "64"]);
    assert_eq!(u(&sink, "rx_buffers_circulating"), 512, "{sink}");
    // Inline receives return buffers the same way.
    let sink = exact_run_at(
        46_000,
        "100kpps",
        &["--rx-wait", "inline", "--gso", "46", "--size", "1400"],
    );
    assert!(u(&sink, "rx_buffers_circulating") <= 80, "{sink}");
}
