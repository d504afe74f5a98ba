//! The control channel under a partition. Between two network namespaces this test creates, nft
//! drops every packet of the control connection (both directions, counted) in the middle of a
//! paced run, for longer than the heartbeat timeout, and lets them through again once the sender
//! has said it lost the sink. The sender notices, reconnects and gets its verdict; the data
//! path never stopped, so the sink's count equals the kernel's `Udp InDatagrams` in the sink's
//! namespace and what the sender sent, and the gap shows as a reconnect, not as loss.

mod common;

use std::time::Duration;

use common::{proc::Proc, *};

const PORT: u16 = 7000;

/// The packets the partition's two drop rules counted.
fn partition_drops(ns: &str) -> u64 {
    let counts = nft_rule_packets(ns, &["table", "inet", "rbpart"]);
    assert_eq!(counts.len(), 2, "two drop counters: {counts:?}");
    counts.iter().sum()
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn a_partitioned_control_channel_reconnects_and_the_counts_stay_exact() {
    let _guard = traffic_lock();
    let lab = Lab::create("cp", 226);
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let to = format!("10.226.0.2:{PORT}");
    let mut sink = Proc::ringblast(
        Some(&lab.rx),
        &["sink", "--listen", &to, "--secret-file", secret, "--json"],
    );
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    let before = snmp(&lab.rx, "Udp", "InDatagrams");
    let mut send = Proc::ringblast(
        Some(&lab.tx),
        &[
            "send",
            "--to",
            &to,
            "--secret-file",
            secret,
            "--json",
            "--name",
            "cut-off",
            "--rate",
            "4kpps",
            "--count",
            "48000",
        ],
    );
    send.wait_line("(connection 1)", Duration::from_secs(10));

    // The partition: the control connection's packets are dropped both ways on the sender's
    // side (UDP to the same port number passes), until the sender has noticed the silence.
    nft(
        &lab.tx,
        &format!(
            "table inet rbpart {{\n chain out {{\n type filter hook output priority 0; policy accept;\n tcp dport {PORT} counter drop\n }}\n chain in {{\n type filter hook input priority 0; policy accept;\n tcp sport {PORT} counter drop\n }}\n}}\n"
        ),
    );
    send.wait_line("control: lost the sink", Duration::from_secs(10));
    let dropped = partition_drops(&lab.tx);
    nft(&lab.tx, "delete table inet rbpart\n");
    assert!(
        dropped > 0,
        "the partition dropped the control connection's packets"
    );
    send.wait_line("(connection 2)", Duration::from_secs(15));

    let (status, out, err) = send.finish();
    assert!(status.success(), "{status}\n{err}");
    sink.interrupt();
    let (sink_status, sink_out, sink_err) = sink.finish();
    assert!(sink_status.success(), "{sink_err}");
    let arrived = snmp(&lab.rx, "Udp", "InDatagrams") - before;

    let s = last_summary(&out, "send");
    let verdict = &s["sink"];
    assert_eq!(u(&s, "tx_packets"), 48_000, "{s}");
    // The kernel delivered every datagram, the sink counted each, and nothing is called lost:
    // the control channel's gap is not the data path's.
    assert_eq!(arrived, 48_000, "the kernel delivered {arrived}");
    assert_eq!(u(verdict, "rx_packets"), arrived, "{s}");
    assert_eq!(u(verdict, "rx_lost"), 0, "{s}");
    let sink_summary = last_summary(&sink_out, "sink");
    assert_eq!(u(&sink_summary, "rx_packets"), arrived, "{sink_summary}");
    assert_eq!(u(&sink_summary, "rx_lost"), 0, "{sink_summary}");
    // Each side saw the gap as a lost connection and the sender came back under its name.
    assert!(
        sink_err.contains("sender cut-off silent for") || sink_err.contains("sender cut-off lost"),
        "{sink_err}"
    );
    assert!(
        sink_err.contains("sender cut-off from") && sink_err.contains("reconnected"),
        "{sink_err}"
    );
}
