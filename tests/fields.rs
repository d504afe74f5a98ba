//! Header fields seen by a neutral observer: nftables counters in the sink's namespace (which
//! this test creates) match the DSCP, TTL, destination port and payload pattern the sender set,
//! and count exactly the packets the sender sent to each port tuple. A nat rule redirects the
//! `--dst-ports` range to the one port the sink listens on.

mod common;

use common::*;

fn counter(ns: &str, name: &str) -> u64 {
    nft_named(ns, "ip", "rbfields", name).0
}

#[test]
#[ignore = "needs root: it creates network namespaces"]
fn dscp_ttl_port_tuples_and_payload_pattern_are_on_the_wire() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    let _guard = traffic_lock();
    let lab = Lab::create("hf", 209);
    let ports = [7400, 7401, 7402, 7403];
    let mut rules = String::from("table ip rbfields {\n counter pattern { }\n");
    for p in ports {
        rules += &format!(" counter p{p} {{ }}\n");
    }
    rules += " chain pre {\n type filter hook prerouting priority -300; policy accept;\n";
    for p in ports {
        rules += &format!(
            " udp dport {p} ip dscp 46 ip ttl 17 udp sport 5000-5001 counter name \"p{p}\"\n"
        );
    }
    // The payload after the UDP header (8) and the 32-byte ringblast header starts with it.
    rules += " udp dport 7400-7403 @th,384,32 0xdeadbeef counter name \"pattern\"\n }\n";
    rules += " chain nat {\n type nat hook prerouting priority -100; policy accept;\n udp dport 7401-7403 redirect to :7400\n }\n}\n";
    nft(&lab.rx, &rules);
    let to = "10.209.0.2:7400";
    let (send, sink) = lab.run(
        7400,
        &["--listen", to, "--duration", "4s"],
        &[
            "--to",
            to,
            "--flows",
            "8",
            "--src-ports",
            "5000-5001",
            "--dst-ports",
            "7400-7403",
            "--dscp",
            "46",
            "--ttl",
            "17",
            "--payload",
            "pattern:deadbeef",
            "--count",
            "8000",
            "--rate",
            "20kpps",
        ],
    );
    assert_exact(&send, &sink);
    assert_eq!(u(&send, "tx_packets"), 8000, "{send}");
    // 8 flows over 2 source × 4 destination ports: two flows, 2000 packets, per port.
    for p in ports {
        assert_eq!(counter(&lab.rx, &format!("p{p}")), 2000, "port {p}");
    }
    assert_eq!(counter(&lab.rx, "pattern"), 8000, "payload pattern");
}

#[test]
fn bad_fields_exit_2_with_one_line() {
    let to = "127.0.0.1:9";
    for (args, needle) in [
        (vec!["--src-ports", "5000-4000"], "not a port range"),
        (vec!["--dst-ports", "x"], "not a port range"),
        (
            vec!["--src-ports", "5000-5001", "--flows", "3"],
            "--src-ports × --dst-ports give 2",
        ),
        (
            vec!["--payload", "pattern:abc"],
            "even number of hex digits",
        ),
        (vec!["--dscp", "64"], "64 is not in 0..64"),
    ] {
        let mut all = vec!["send", "--to", to, "--count", "1", "--control", "off"];
        all.extend(args.iter().copied());
        let out = ringblast(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.lines().next().unwrap_or_default().contains(needle),
            "{args:?}: {err}"
        );
    }
}
