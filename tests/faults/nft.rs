//! nftables as the injector: every 10th datagram dropped, 5 % dropped at random, every 25th
//! duplicated on the way out, and a policer at 5000 pps. The rule's named counter is the truth.

use super::kit::*;

/// The sender's side (`tx`) or the sink's side (`rx`) of the lab.
#[derive(Clone, Copy)]
enum Side {
    Tx,
    Rx,
}

/// Loads `rule` (which uses `counter name "hits"`) into a fresh lab, runs 20 000 datagrams at
/// 20 kpps through it and returns the sender's summary, the sink's summary and the counter.
fn run_with_rule(
    tag: &str,
    net: u8,
    side: Side,
    rule: &str,
) -> (serde_json::Value, serde_json::Value, u64) {
    let _guard = traffic_lock();
    let mut rig = Rig::new(tag, net);
    let (hook, ns) = match side {
        Side::Tx => ("output", rig.lab.tx.clone()),
        Side::Rx => ("input", rig.lab.rx.clone()),
    };
    let rule = rule.replace("DST", &format!("10.{net}.0.2"));
    nft(
        &ns,
        &format!(
            "table ip rbfault {{\n counter hits {{ }}\n chain c {{\n type filter hook {hook} priority 0; policy accept;\n {rule}\n }}\n}}\n"
        ),
    );
    rig.start_sink(&[]);
    let send = rig.send(&["--rate", "20kpps", "--count", "20000"]);
    let hits = nft_counter(&ns, "rbfault", "hits");
    assert_eq!(u(&send, "tx_errors"), 0, "{send}");
    let sent = u(&send, "tx_packets");
    assert_eq!(sent, 20_000, "{send}");
    let received = match side {
        Side::Tx => sent,
        Side::Rx => sent - hits,
    };
    let sink = rig.stop_sink(&[("ringblast_rx_packets_total", received)]);
    (send, sink, hits)
}

fn assert_dropped_exactly(send: &serde_json::Value, sink: &serde_json::Value, hits: u64) {
    let sent = u(send, "tx_packets");
    assert!(hits > 0, "the rule dropped something");
    assert_eq!(u(sink, "rx_lost"), hits, "lost = the rule's drops: {sink}");
    assert_eq!(u(sink, "rx_packets"), sent - hits, "{sink}");
    for key in [
        "rx_duplicates",
        "rx_invalid",
        "rx_kernel_drops",
        "rx_reordered",
    ] {
        assert_eq!(u(sink, key), 0, "{key}: {sink}");
    }
    assert_eq!(
        u(verdict(send), "rx_lost"),
        hits,
        "the verdict agrees: {send}"
    );
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn nft_drop_of_every_10th_datagram_is_lost_exactly() {
    require_root();
    let rule = "udp dport 7000 numgen inc mod 10 == 0 counter name \"hits\" drop";
    let (send, sink, hits) = run_with_rule("fp", 221, Side::Rx, rule);
    row(
        "nft drop every 10th: rule counter / rx_lost",
        hits,
        u(&sink, "rx_lost"),
    );
    assert_eq!(
        hits,
        u(&send, "tx_packets") / 10,
        "numgen inc hit every 10th"
    );
    assert_dropped_exactly(&send, &sink, hits);
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn nft_random_drop_is_lost_exactly() {
    require_root();
    let rule = "udp dport 7000 numgen random mod 20 == 0 counter name \"hits\" drop";
    let (send, sink, hits) = run_with_rule("fr", 222, Side::Rx, rule);
    row(
        "nft random 5% drop: rule counter / rx_lost",
        hits,
        u(&sink, "rx_lost"),
    );
    assert_dropped_exactly(&send, &sink, hits);
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn nft_policer_drops_are_lost_exactly() {
    require_root();
    let rule =
        "udp dport 7000 limit rate over 5000/second burst 50 packets counter name \"hits\" drop";
    let (send, sink, hits) = run_with_rule("fl", 223, Side::Rx, rule);
    row(
        "nft policer 5000/s: rule counter / rx_lost",
        hits,
        u(&sink, "rx_lost"),
    );
    assert!(hits > 5_000, "the policer took most: {hits}");
    assert_dropped_exactly(&send, &sink, hits);
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn nft_dup_of_every_25th_datagram_is_counted_as_duplicates_exactly() {
    require_root();
    // The clone goes through the output hook again: the mark keeps it out of the count.
    let rule = "udp dport 7000 meta mark 0 numgen inc mod 25 == 0 counter name \"hits\" meta mark set 1 dup to DST";
    let (send, sink, hits) = run_with_rule("fd", 224, Side::Tx, rule);
    let sent = u(&send, "tx_packets");
    row(
        "nft dup every 25th: rule counter / rx_duplicates",
        hits,
        u(&sink, "rx_duplicates"),
    );
    assert_eq!(hits, sent / 25, "numgen inc hit every 25th");
    assert_eq!(u(&sink, "rx_duplicates"), hits, "{sink}");
    assert_eq!(u(&sink, "rx_packets"), sent, "{sink}");
    for key in ["rx_lost", "rx_invalid", "rx_kernel_drops", "rx_reordered"] {
        assert_eq!(u(&sink, key), 0, "{key}: {sink}");
    }
    assert_eq!(u(verdict(&send), "rx_duplicates"), hits, "{send}");
}
