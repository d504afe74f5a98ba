//! `ringblast pair` end to end over loopback: real packets through real rings, counted exactly.
//! The runs that need root run alone in a network namespace of their own, whose `Udp` counters
//! judge both sides' counts (`pair_counted`).

mod common;

use common::*;

#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn paced_run_delivers_every_packet() {
    let _guard = traffic_lock();
    let (send, sink, last) = pair_counted("paced", &["--rate", "20kpps", "--duration", "2s"]);
    assert_exact(&send, &sink);
    let n = u(&send, "tx_packets");
    assert!((39_000..=41_000).contains(&n), "2 s at 20 kpps sent {n}");
    assert_eq!(last["role"], "sink", "the last line is a summary");
}

/// [`pair_counted`] over IPv6: `Udp6OutDatagrams` and `Udp6InDatagrams` judge the two sides.
fn pair6_counted(args: &[&str]) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let ns = Netns::create("paced6");
    let (out0, in0) = (
        snmp6(&ns.0, "Udp6OutDatagrams"),
        snmp6(&ns.0, "Udp6InDatagrams"),
    );
    let (send, sink, last) = pair_in(&ns.0, args);
    let (sent, arrived) = (
        snmp6(&ns.0, "Udp6OutDatagrams") - out0,
        snmp6(&ns.0, "Udp6InDatagrams") - in0,
    );
    assert_eq!(u(&send, "tx_packets"), sent, "Udp6OutDatagrams: {send}");
    assert_eq!(u(&sink, "rx_packets"), arrived, "Udp6InDatagrams: {sink}");
    (send, sink, last)
}

#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn paced_ipv6_count_run_is_exact() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair6_counted(&[
        "--address",
        "::1",
        "--rate",
        "50kpps",
        "--count",
        "25000",
        "--size",
        "1200",
    ]);
    assert_exact(&send, &sink);
    assert_eq!(u(&send, "tx_packets"), 25_000);
    assert_eq!(u(&send, "tx_bytes"), 25_000 * 1200);
}

/// Runs an unpaced 2 s pair with `extra` alone in a namespace of its own and holds it to that
/// namespace's `Udp` counters, which count datagrams as the kernel handed them over: trains of
/// `train` datagrams (1 without GSO). Every train sent is one `OutDatagrams` (one per SQE), every
/// train the sink read one `InDatagrams`, and every train its full queue dropped one
/// `RcvbufErrors`, which must be its kernel drops; nothing may be lost beyond them. How many
/// packets an unpaced run reaches is a speed, measured by `benches/compare.sh`, not here.
fn unpaced_run_equals_the_kernels_count(tag: &str, extra: &[&str], train: u64) {
    let _guard = traffic_lock();
    let mut args = vec!["--duration", "2s"];
    args.extend_from_slice(extra);
    // `pair_counted` holds tx, rx and kernel drops to train × the namespace's Udp counters.
    let (send, sink, _) = pair_counted(tag, &args);
    assert_accounted(&send, &sink);
    // One OutDatagrams per SQE: every SQE carried a whole train.
    assert_eq!(
        train * send_sqes(&send),
        u(&send, "tx_packets"),
        "send {send}"
    );
    assert_eq!(u(&sink, "rx_lost"), 0, "sink {sink}");
}

#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn unpaced_run_equals_the_kernels_count_of_datagrams() {
    unpaced_run_equals_the_kernels_count("unp", &[], 1);
}

/// With `--gso 64` and GRO at the sink, loopback hands the socket each 64-segment train whole,
/// so the kernel counts trains (see `tests/ops.rs`).
#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn unpaced_gso_run_equals_the_kernels_count_of_trains() {
    unpaced_run_equals_the_kernels_count("ungso", &["--gso", "64"], 64);
}

#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn two_queues_with_eight_flows_are_exact() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair_counted(
        "q2f8",
        &[
            "--queues",
            "2",
            "--flows",
            "8",
            "--rate",
            "40kpps",
            "--duration",
            "2s",
        ],
    );
    assert_exact(&send, &sink);
    assert_eq!(u(&send, "queues"), 2);
    assert_eq!(u(&send, "flows"), 8);
    assert_eq!(u(&sink, "queues"), 2);
}

#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn gso_segments_are_counted_one_by_one_with_gro() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair_counted(
        "gso16",
        &[
            "--gso",
            "16",
            "--size",
            "200",
            "--rate",
            "100kpps",
            "--duration",
            "2s",
        ],
    );
    assert_exact(&send, &sink);
    // Every send carries exactly 16 segments (2 s at 100 kpps is a whole number of sends), and
    // the sink's GRO read each as one whole train (`pair_counted`: 16 × InDatagrams).
    let sqes = send_sqes(&send);
    assert_eq!(
        sqes * 16,
        u(&send, "tx_packets"),
        "16 packets per send: {send}"
    );
}

#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn sigint_stops_cleanly_with_summaries() {
    let _guard = traffic_lock();
    let ns = Netns::create("sigint");
    let before = UdpSnmp::read(&ns.0);
    let mut cmd = std::process::Command::new("ip");
    cmd.args(["netns", "exec", &ns.0, bin()]);
    cmd.args([
        "pair",
        "--duration",
        "60s",
        "--rate",
        "50kpps",
        "--json",
        "--no-metrics",
    ]);
    let mut run = proc::Proc::spawn(cmd);
    // The event: the sink's first interval line, so traffic has flowed for a whole interval
    // (about 50 000 packets at 50 kpps) before the interrupt.
    let line = run.wait_line("sink q0", std::time::Duration::from_secs(10));
    // The rate is auto-scaled: `49.9 kpps`.
    let words: Vec<&str> = line.split_whitespace().collect();
    let first_kpps: f64 = words
        .windows(2)
        .find_map(|w| (w[1] == "kpps").then(|| w[0].parse().ok()).flatten())
        .unwrap_or_else(|| panic!("no kpps in the sink's interval line {line:?}"));
    assert!(first_kpps > 10.0, "the sink's first interval: {line}");
    run.interrupt();
    let (status, stdout, stderr) = run.finish();
    assert!(status.success(), "{status}: {stderr}");
    let (send, sink) = (last_summary(&stdout, "send"), last_summary(&stdout, "sink"));
    assert_accounted(&send, &sink);
    // The kernel's count of the interrupted run: every datagram sent left, every one counted
    // arrived, and nothing arrived that the sink did not count.
    let kernel = UdpSnmp::read(&ns.0).since(before);
    assert_eq!(u(&send, "tx_packets"), kernel.out_datagrams, "{kernel:?}");
    assert_eq!(u(&sink, "rx_packets"), kernel.in_datagrams, "{kernel:?}");
    assert!(u(&send, "tx_packets") > 10_000);
    assert!(send["duration_s"].as_f64().unwrap() < 10.0);
}

#[test]
#[ignore = "needs root: a private network namespace (the test command runs as root)"]
fn pair_delivery_equals_the_kernels_independent_count() {
    let _guard = traffic_lock();
    // A namespace of its own, so nothing else delivers datagrams there.
    let ns = format!("rbpk{}", std::process::id() % 100_000);
    let made = std::process::Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success()
        && std::process::Command::new("ip")
            .args(["-n", &ns, "link", "set", "lo", "up"])
            .status()
            .unwrap()
            .success();
    struct Gone(String);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .status();
        }
    }
    let _gone = Gone(ns.clone());
    assert!(made, "create a network namespace (iproute2, root)");
    let before = snmp(&ns, "Udp", "InDatagrams");
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            bin(),
            "pair",
            "--rate",
            "20kpps",
            "--count",
            "20000",
        ])
        .args(["--no-gro", "--json", "--no-metrics"])
        .output()
        .unwrap();
    assert_ok(&out);
    let delivered = snmp(&ns, "Udp", "InDatagrams") - before;
    let s = summaries(&out);
    let (send, sink) = (s.send.unwrap(), s.sink.unwrap());
    assert_eq!(
        delivered,
        u(&send, "tx_packets"),
        "the kernel delivered every datagram sent"
    );
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
    assert_exact(&send, &sink);
}
