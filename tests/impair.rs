//! Loss and duplication injected with nftables between two network namespaces this test
//! creates: every datagram is cloned on its way out (`dup to`) and 10 % of what arrives is
//! dropped at random. The sink must count loss and duplicates separately and exactly: every
//! sequence number is either received or lost, and every delivered datagram is either a first
//! copy or a duplicate. A duplicate is never netted against a loss.
//!
//! Both copies of the last packet are dropped in every run (by a rule on its sequence number),
//! the case a standalone sink cannot see from gaps alone: it is counted lost because the
//! sender's goodbye on the control channel gives the sink the flow's final sequence number.
//! It used to be left to chance (about 1 % of runs) and then broke `rx + lost == sent`.

mod common;

use common::*;

/// The packet counts of the drop rules in `ns`, in rule order.
fn dropped(ns: &str) -> Vec<u64> {
    let counts = nft_rule_packets(ns, &["ruleset"]);
    assert_eq!(counts.len(), 2, "two drop counters: {counts:?}");
    counts
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn duplicated_and_lossy_path_is_counted_exactly() {
    let _guard = traffic_lock();
    let lab = Lab::create("i", 204);
    nft(
        &lab.tx,
        "table ip rbimpair {\n chain out {\n type filter hook output priority 0; policy accept;\n udp dport 7000 dup to 10.204.0.2\n }\n}\n",
    );
    nft(
        &lab.rx,
        "table ip rbimpair {\n chain in {\n type filter hook input priority 0; policy accept;\n udp dport 7000 @th,224,32 == 19999 counter drop\n udp dport 7000 numgen random mod 10 == 0 counter drop\n }\n}\n",
    );
    let (send, sink) = lab.run(
        7000,
        &["--listen", "10.204.0.2:7000", "--duration", "4s"],
        &[
            "--to",
            "10.204.0.2:7000",
            "--rate",
            "20kpps",
            "--count",
            "20000",
        ],
    );
    let sent = u(&send, "tx_packets");
    assert_eq!(sent, 20_000, "{send}");
    let counts = dropped(&lab.rx);
    assert_eq!(counts[0], 2, "both copies of the last packet were dropped");
    let dropped = counts.iter().sum::<u64>();
    let (rx, lost, dup) = (
        u(&sink, "rx_packets"),
        u(&sink, "rx_lost"),
        u(&sink, "rx_duplicates"),
    );
    assert!(
        dropped > 2_000 && lost > 0 && dup > 10_000,
        "impairment took effect: {sink}"
    );
    assert_eq!(
        rx + lost,
        sent,
        "every sequence number is received or lost: {sink}"
    );
    assert_eq!(
        rx + dup,
        2 * sent - dropped,
        "every delivered copy is a first copy or a duplicate: {sink}"
    );
    assert_eq!(u(&sink, "rx_kernel_drops"), 0, "{sink}");
    assert_eq!(u(&sink, "rx_invalid"), 0, "{sink}");
    assert_eq!(
        u(&send["sink"], "rx_lost"),
        lost,
        "the sink closed the tail with the sender's goodbye: {send}"
    );
}
