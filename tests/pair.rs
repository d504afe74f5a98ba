//! `ringblast pair` end to end over loopback: real packets through real rings, counted exactly.

mod common;

use common::*;

#[test]
fn paced_run_delivers_every_packet() {
    let _guard = traffic_lock();
    let (send, sink, last) = pair(&["--rate", "20kpps", "--duration", "2s"]);
    assert_exact(&send, &sink);
    let n = u(&send, "tx_packets");
    assert!((39_000..=41_000).contains(&n), "2 s at 20 kpps sent {n}");
    assert_eq!(last["role"], "sink", "the last line is a summary");
}

#[test]
fn paced_ipv6_count_run_is_exact() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair(&[
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

#[test]
fn unpaced_run_accounts_for_every_packet() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair(&["--duration", "2s"]);
    assert_accounted(&send, &sink);
    assert!(u(&sink, "rx_packets") > 10_000, "{sink}");
}

#[test]
fn two_queues_with_eight_flows_are_exact() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair(&[
        "--queues",
        "2",
        "--flows",
        "8",
        "--rate",
        "40kpps",
        "--duration",
        "2s",
    ]);
    assert_exact(&send, &sink);
    assert_eq!(u(&send, "queues"), 2);
    assert_eq!(u(&send, "flows"), 8);
    assert_eq!(u(&sink, "queues"), 2);
}

#[test]
fn gso_segments_are_counted_one_by_one_with_gro() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair(&[
        "--gso",
        "16",
        "--size",
        "200",
        "--rate",
        "100kpps",
        "--duration",
        "2s",
    ]);
    assert_exact(&send, &sink);
    let sqes = u(&send, "ring_sqes_submitted");
    assert!(
        sqes * 15 <= u(&send, "tx_packets"),
        "16 packets per send: {send}"
    );
}

#[test]
fn unpaced_gso_run_accounts_for_every_segment() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair(&["--gso", "64", "--duration", "2s"]);
    assert_accounted(&send, &sink);
    assert!(u(&sink, "rx_packets") > 1_000_000, "{sink}");
}

#[test]
fn sigint_stops_cleanly_with_summaries() {
    let _guard = traffic_lock();
    let child = std::process::Command::new(bin())
        .args([
            "pair",
            "--duration",
            "60s",
            "--rate",
            "50kpps",
            "--json",
            "--no-metrics",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ok(&out);
    let s = summaries(&out);
    let (send, sink) = (s.send.unwrap(), s.sink.unwrap());
    assert_accounted(&send, &sink);
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
