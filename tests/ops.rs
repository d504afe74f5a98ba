//! Every send operation and every sink receive mode end to end: `--send-op send-zc` and
//! `write-fixed` (the UDP default `send` runs everywhere else), `--no-gro` under a GSO sender, and
//! `--rx-wait spin`, `sleep` and `inline` (the default `batch` runs everywhere else). Each run is paced
//! and counted: the sink must receive exactly what the sender says it sent, less what its
//! kernel dropped (none on an idle host; on a busy one, exactly the kernel's `RcvbufErrors`),
//! and the sender exactly the packets asked for. Full GRO buffers also shrink the buffers the
//! sink keeps in circulation, and small datagrams keep the whole ring.
//!
//! Every run is also counted by the kernel: the pair runs alone in a network namespace this
//! test creates (loopback only, deleted afterwards), so that namespace's `Udp` counters of
//! `/proc/net/snmp` and two nft counters (UDP on the output and the input hook) count
//! ringblast's datagrams and nothing else. The control channel is TCP and is not in them.
//! How the kernel (6.x) counts a GSO train, measured here and in `udp_send_skb`/`udp_recvmsg`:
//! - `OutDatagrams` counts one per send, so a train of G segments is one; nft's output and
//!   input hooks see that train as one skb too (loopback never segments it), of
//!   20 + 8 + G × size bytes.
//! - `InDatagrams` counts one per datagram a receive returns: with GRO (`UDP_GRO`) loopback
//!   hands the socket each train whole, one datagram; without it (`--no-gro`) the socket
//!   splits it, one per segment.
//! - `RcvbufErrors` counts the datagrams dropped on a full receive queue: the sink's kernel
//!   drops.
//!
//! These runs need root (network namespaces, nftables): `#[ignore = "needs root: ..."]`, and
//! run as root a missing prerequisite fails the test.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use common::*;

const COUNT: u64 = 20_000;

/// IPv4 and UDP header bytes of every skb at the nft hooks.
const HEADERS: u64 = 20 + 8;

fn exact_run(extra: &[&str]) -> serde_json::Value {
    exact_run_at(COUNT, "100kpps", extra)
}

/// The value of `--flag VALUE` in `args`.
fn arg<'a>(args: &[&'a str], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| *a == flag).map(|i| args[i + 1])
}

/// Runs a paced pair alone in a fresh namespace, checks its counts are exact against each
/// other and against the namespace's kernel counters; returns the sink's summary.
fn exact_run_at(count: u64, rate: &str, extra: &[&str]) -> serde_json::Value {
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let _guard = traffic_lock();
    assert!(
        is_root(),
        "tests/ops.rs needs root (network namespaces, nftables): run it as root"
    );
    let ns = Netns::create(&format!("ops{}x", RUNS.fetch_add(1, Ordering::Relaxed)));
    nft(
        &ns.0,
        "table inet rbops {\n counter sent { }\n counter arrived { }\n chain out {\n type filter hook output priority 0; policy accept;\n meta l4proto udp counter name sent\n }\n chain in {\n type filter hook input priority 0; policy accept;\n meta l4proto udp counter name arrived\n }\n}\n",
    );
    let before = UdpSnmp::read(&ns.0);
    let count_arg = count.to_string();
    let mut args = vec!["--count", &count_arg, "--rate", rate];
    args.extend_from_slice(extra);
    let (send, sink, _) = pair_in(&ns.0, &args);
    let kernel = UdpSnmp::read(&ns.0).since(before);
    let sent = nft_named(&ns.0, "inet", "rbops", "sent");
    let arrived = nft_named(&ns.0, "inet", "rbops", "arrived");
    assert_eq!(u(&send, "tx_packets"), count, "{extra:?}: {send}");
    // Exact on a busy host too: whatever the sink's kernel dropped (its CPU taken by other
    // work) is counted as kernel drops, equal to the kernel's own count below, never as loss.
    assert_eq!(u(&send, "tx_errors"), 0, "{send}");
    assert_eq!(
        u(&send, "tx_packets"),
        u(&sink, "rx_packets") + u(&sink, "rx_kernel_drops"),
        "sent = received + kernel drops: send {send}\nsink {sink}"
    );
    for key in ["rx_lost", "rx_duplicates", "rx_invalid", "rx_reordered"] {
        assert_eq!(u(&sink, key), 0, "{key} in {sink}");
    }

    // The kernel's count. Every train is whole: G divides the count in every run here.
    let gso: u64 = arg(extra, "--gso").map_or(1, |g| g.parse().unwrap());
    assert_eq!(count % gso, 0, "a whole number of trains");
    let sends = count / gso;
    let gro = gso > 1 && !extra.contains(&"--no-gro");
    let ctx = format!("{extra:?}: {kernel:?}\nsend {send}\nsink {sink}");
    assert_eq!(kernel.out_datagrams, sends, "Udp OutDatagrams, {ctx}");
    assert_eq!(
        kernel.out_datagrams,
        send_sqes(&send),
        "one send per SQE, {ctx}"
    );
    let wire = (sends, sends * HEADERS + u(&send, "tx_bytes"));
    assert_eq!(sent, wire, "nft at the output hook, {ctx}");
    assert_eq!(arrived, wire, "nft at the input hook, {ctx}");
    // With GRO each datagram the kernel delivers or drops is a whole train of `gso`.
    let per_datagram = if gro { gso } else { 1 };
    let received = u(&sink, "rx_packets");
    assert_eq!(
        kernel.in_datagrams * per_datagram,
        received,
        "Udp InDatagrams, {ctx}"
    );
    assert_eq!(
        kernel.rcvbuf_errors * per_datagram,
        u(&sink, "rx_kernel_drops"),
        "Udp RcvbufErrors, {ctx}"
    );
    assert_eq!(kernel.sndbuf_errors, 0, "Udp SndbufErrors, {ctx}");
    // A receive-buffer drop is an input error too, and there is no other.
    assert_eq!(
        kernel.in_errors, kernel.rcvbuf_errors,
        "Udp InErrors, {ctx}"
    );
    eprintln!("{extra:?}: {kernel:?}, nft {sent:?}");
    sink
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn send_zc_delivers_every_packet() {
    exact_run(&["--send-op", "send-zc"]);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn write_fixed_delivers_every_packet() {
    exact_run(&["--send-op", "write-fixed", "--size", "1200"]);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn gso_trains_without_gro_are_counted_one_by_one() {
    exact_run(&["--no-gro", "--gso", "8", "--size", "200"]);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn spinning_sink_counts_every_packet_paced_slow_and_with_gro() {
    // Paced at 100 kpps: back-to-back batches of non-blocking receives, never a sleep.
    exact_run(&["--rx-wait", "spin", "--queues", "2", "--flows", "4"]);
    // Paced at 2 kpps: traffic counts as stopped between packets; the sink waits on a poll.
    exact_run_at(4_000, "2kpps", &["--rx-wait", "spin"]);
    // GSO trains coalesced by GRO and split again.
    exact_run(&["--rx-wait", "spin", "--gso", "8", "--size", "1000"]);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn sleeping_sink_counts_every_packet() {
    exact_run(&["--rx-wait", "sleep", "--queues", "2", "--flows", "4"]);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
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
#[ignore = "needs root: network namespaces and nftables"]
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
    let circulating = u(&sink, "rx_buffers_circulating");
    assert!((64..=80).contains(&circulating), "{sink}");
}
