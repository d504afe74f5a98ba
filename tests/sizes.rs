//! Size mixes end to end: `--size imix` and a custom `FRAME:WEIGHT` list over real rings. The
//! sender's per-class counts equal the sink's exactly, their ratio equals the weights over whole
//! cycles, and the total equals the kernel's own `Udp InDatagrams` in a namespace this test
//! creates. Bad mixes exit 2 with one line naming the fix.

mod common;

use common::*;
use serde_json::Value;

/// (payload, packets, bytes) per class of a summary's `sizes`.
fn classes(summary: &Value) -> Vec<(u64, u64, u64)> {
    summary["sizes"]
        .as_array()
        .unwrap_or_else(|| panic!("no sizes in {summary}"))
        .iter()
        .map(|c| (u(c, "payload"), u(c, "packets"), u(c, "bytes")))
        .collect()
}

#[test]
fn imix_counts_match_per_class_and_follow_the_weights() {
    let _guard = traffic_lock();
    // 2 queues × 1000 whole cycles of 12 packets.
    let (send, sink, _) = pair(&[
        "--size", "imix", "--queues", "2", "--count", "24000", "--rate", "100kpps",
    ]);
    assert_exact(&send, &sink);
    let sent = classes(&send);
    assert_eq!(
        sent,
        [
            (18, 14_000, 14_000 * 18),
            (524, 8_000, 8_000 * 524),
            (1472, 2_000, 2_000 * 1472)
        ],
        "7:4:1 over whole cycles: {send}"
    );
    assert_eq!(sent, classes(&sink), "sink per class: {sink}");
    let frames: Vec<u64> = send["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| u(c, "frame"))
        .collect();
    assert_eq!(frames, [64, 570, 1518]);
    // Only full-header packets carry a timestamp: the latency histogram holds exactly them.
    assert_eq!(u(&sink["latency"], "count"), 10_000, "{sink}");
}

#[test]
#[ignore = "needs root: it creates network namespaces"]
fn a_custom_mix_matches_the_kernels_own_datagram_count() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    let _guard = traffic_lock();
    let lab = Lab::create("sz", 207);
    let to = "10.207.0.2:7300";
    let before = snmp(&lab.rx, "Udp", "InDatagrams");
    let (send, sink) = lab.run(
        7300,
        &["--listen", to, "--duration", "4s"],
        &[
            "--to",
            to,
            "--size",
            "64:28,570:16,1518:4",
            "--count",
            "6000",
            "--rate",
            "20kpps",
        ],
    );
    let received = snmp(&lab.rx, "Udp", "InDatagrams") - before;
    assert_exact(&send, &sink);
    let sent = classes(&send);
    assert_eq!(
        sent,
        [
            (18, 3_500, 3_500 * 18),
            (524, 2_000, 2_000 * 524),
            (1472, 500, 500 * 1472)
        ],
        "{send}"
    );
    assert_eq!(sent, classes(&sink), "{sink}");
    assert_eq!(u(&sink, "rx_packets"), received, "the kernel's InDatagrams");
    assert_eq!(
        sent.iter().map(|c| c.1).sum::<u64>(),
        received,
        "classes add up to what the kernel delivered"
    );
}

#[test]
fn bad_mixes_exit_2_with_one_line_naming_the_fix() {
    let to = "127.0.0.1:9";
    for (args, needle) in [
        (vec!["--size", "64:0"], "not a whole number from 1"),
        (vec!["--size", "64:1,64:3"], "appears twice"),
        (vec!["--size", "64:7,570"], "FRAME:WEIGHT"),
        (
            vec!["--size", "63:1,570:1"],
            "the smallest frame ringblast sends is 64 bytes",
        ),
        (vec!["--size", "imix", "--gso", "4"], "use --gso 1"),
        (vec!["--size", "10"], "18-byte compact ringblast header"),
    ] {
        let mut all = vec!["send", "--to", to, "--count", "1", "--control", "off"];
        all.extend(args.iter().copied());
        let out = ringblast(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(first.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = ringblast(&["send", "--to", "[::1]:9", "--size", "imix", "--count", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("84 bytes over IPv6"), "{err}");
}
