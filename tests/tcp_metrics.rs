//! TCP runs seen from outside: the scraped `ringblast_tcp_*` series equal the summaries, and
//! both receive modes (plain multishot RECV and recv bundles) count streams exactly and name
//! their mode. Every run is counted by nft too, in a loopback namespace of its own
//! (`tcp::count_streams`): the data connections' payload on the output and input hooks
//! equals the bytes written and read, and the records payload ÷ the fixed record size.

mod common;

use std::process::Command;

use common::{
    last_summary,
    proc::Proc,
    scrape_local, snmp,
    tcp::{
        WAIT, assert_payload, count_streams, count_streams_any_port, no_tail_loss_probes, send,
        sink_args, stop_sink, streams, streams_any_port,
    },
    u,
};

fn series(text: &str, name_and_labels: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name_and_labels} in:\n{text}")) as u64
}

#[test]
#[ignore = "needs root: a network namespace and nftables"]
fn scraped_tcp_series_equal_the_summaries() {
    let _lock = common::traffic_lock();
    let ns = common::Netns::create("tcpscr");
    no_tail_loss_probes(&ns.0);
    count_streams_any_port(&ns.0, "input");
    let retrans_before = snmp(&ns.0, "Tcp", "RetransSegs");
    let port = common::free_port();
    let mut pair = Proc::ringblast(
        Some(&ns.0),
        &[
            "pair",
            "--proto",
            "tcp",
            "--conns",
            "2",
            "--size",
            "4000",
            "--duration",
            "1s",
            "--json",
            "--metrics",
            &format!("127.0.0.1:{port}"),
            "--metrics-linger",
            "30s",
        ],
    );
    pair.wait_line("sink summary:", WAIT);
    let text = common::in_netns(&ns.0, move || scrape_local(port));
    // The process series come with TCP runs too: the open-file limit they state is the one the
    // kernel holds for the process (read while it lingers).
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", pair.pid())).unwrap();
    let max_open_files: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok())
        .unwrap_or_else(|| panic!("no open-file limit in\n{limits}"));
    assert_eq!(series(&text, "process_max_fds"), max_open_files, "{text}");
    pair.interrupt();
    let (status, out, err) = pair.finish();
    assert!(status.success(), "{err}");
    let (tx, rx) = (last_summary(&out, "send"), last_summary(&out, "sink"));
    // The kernel's count of the same streams: what arrived on the data connections is what the
    // series say was written and read, and a whole number of 4000-byte records.
    let arrived = streams_any_port(&ns.0, "input");
    let retransmitted = snmp(&ns.0, "Tcp", "RetransSegs") - retrans_before;
    let ctx = format!("in {arrived:?}, {retransmitted} resent");
    assert_payload(&arrived, u(&tx, "tx_bytes"), retransmitted, &ctx);
    assert_payload(&arrived, u(&rx, "rx_bytes"), retransmitted, &ctx);
    if retransmitted == 0 {
        assert_eq!(arrived.payload / 4000, u(&rx, "rx_records"), "{ctx}");
    }
    let q = r#"{node="0",queue="0",protocol="tcp"}"#;
    for (name, value) in [
        ("ringblast_tcp_tx_bytes_total", u(&tx, "tx_bytes")),
        ("ringblast_tcp_tx_records_total", u(&tx, "tx_records")),
        (
            "ringblast_tcp_delivered_records_total",
            u(&tx, "delivered_records"),
        ),
        ("ringblast_tcp_connects_total", u(&tx, "connects")),
        ("ringblast_tcp_rx_bytes_total", u(&rx, "rx_bytes")),
        ("ringblast_tcp_rx_records_total", u(&rx, "rx_records")),
        ("ringblast_tcp_accepts_total", u(&rx, "accepts")),
    ] {
        assert_eq!(
            series(&text, &format!("{name}{q}")),
            value,
            "{name}\n{text}"
        );
    }
    assert!(u(&tx, "tx_bytes") > 0);
    assert!(
        text.contains(r#"ringblast_run_info{role="send",protocol="tcp"} 1"#),
        "{text}"
    );
    // The sink's books per sender, its control server's counters, and TCP_INFO.
    let pair = r#"{sender="pair",protocol="tcp"}"#;
    for (name, value) in [
        (
            "ringblast_tcp_rx_sender_records_total",
            u(&rx, "rx_records"),
        ),
        ("ringblast_tcp_rx_sender_bytes_total", u(&rx, "rx_bytes")),
    ] {
        assert_eq!(
            series(&text, &format!("{name}{pair}")),
            value,
            "{name}\n{text}"
        );
    }
    // Its records' latency, the same histogram as a UDP sender's: one clock, so every record
    // with a sample is an observation.
    assert_eq!(
        series(
            &text,
            r#"ringblast_rx_sender_latency_seconds_count{sender="pair"}"#
        ),
        u(&rx, "rx_records") - u(&rx, "latency_unknown"),
        "{text}"
    );
    assert!(u(&rx, "rx_records") > u(&rx, "latency_unknown"), "{rx}");
    assert_eq!(
        series(
            &text,
            r#"ringblast_rx_control_connections_total{result="authenticated"}"#
        ),
        1,
        "{text}"
    );
    for name in ["ringblast_tcp_srtt_seconds", "ringblast_tcp_cwnd_segments"] {
        assert!(text.contains(&format!("{name}{q}")), "{name}\n{text}");
    }
    assert_eq!(
        series(&text, &format!("ringblast_tcp_retransmits_total{q}")),
        u(&tx, "retransmits"),
        "{text}"
    );
}

/// Starts a TCP sink with `RINGBLAST_TCP_RECV=mode`; returns it once it listens, with the
/// receive line of its start-up notes.
fn start_sink_receiving(ns: &str, mode: &str, listen: &str) -> (Proc, String) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, common::bin()])
        .env("RINGBLAST_TCP_RECV", mode)
        .args(sink_args(listen));
    let mut sink = Proc::spawn(cmd);
    let note = sink.wait_line("tcp sink: SO_REUSEPORT listener per queue", WAIT);
    sink.wait_line("tcp sink listening on", WAIT);
    (sink, note)
}

#[test]
#[ignore = "needs root: a network namespace and nftables"]
fn plain_and_bundle_receives_both_count_streams_exactly_and_name_their_mode() {
    let _lock = common::traffic_lock();
    assert!(
        common::is_root(),
        "this test needs root (a network namespace, nftables)"
    );
    let ns = common::Netns::create("tcprecv");
    no_tail_loss_probes(&ns.0);
    for (port, (mode, named)) in (24_200u16..).zip([
        ("plain", "plain multishot RECV (no bundle support)"),
        ("bundle", "multishot RECV bundles"),
    ]) {
        let topo = Command::new(common::bin())
            .env("RINGBLAST_TCP_RECV", mode)
            .args(["topo", "--queues", "1"])
            .output()
            .unwrap();
        let topo_out = String::from_utf8_lossy(&topo.stdout);
        assert!(topo.status.success(), "{topo:?}");
        assert!(topo_out.contains(named), "{mode}: {topo_out}");
        // 128 KiB records over 2 connections: bundles span several 32 KiB buffers, wrap
        // the buffer ring, and split records across buffers.
        let to = format!("127.0.0.1:{port}");
        count_streams(&ns.0, "output", port);
        count_streams(&ns.0, "input", port);
        let retrans_before = snmp(&ns.0, "Tcp", "RetransSegs");
        let (sink, note) = start_sink_receiving(&ns.0, mode, &to);
        assert!(note.contains(named), "{mode}: {note}");
        let tx = send(
            Some(&ns.0),
            &[
                "--to",
                &to,
                "--conns",
                "2",
                "--size",
                "131072",
                "--duration",
                "1s",
            ],
        );
        let rx = stop_sink(sink, 2);
        // An unpaced run's record count is not known in advance; more than 100 records of
        // 128 KiB means the 32 KiB buffer ring wrapped, which is what this run is for. The counts
        // themselves are held to nft below.
        assert!(u(&tx, "tx_records") > 100, "{mode}: {tx}");
        assert_eq!(u(&tx, "tx_bytes"), u(&rx, "rx_bytes"), "{mode}: {tx}\n{rx}");
        assert_eq!(
            u(&tx, "tx_records"),
            u(&rx, "rx_records"),
            "{mode}: {tx}\n{rx}"
        );
        assert_eq!(u(&rx, "rx_invalid"), 0, "{mode}: {rx}");
        assert_eq!(
            u(&tx, "delivered_bytes"),
            u(&rx, "rx_bytes"),
            "{mode}: {tx}"
        );

        // The kernel's count.
        let (out, arrived) = (
            streams(&ns.0, "output", port),
            streams(&ns.0, "input", port),
        );
        let retransmitted = snmp(&ns.0, "Tcp", "RetransSegs") - retrans_before;
        let ctx = format!("{mode}: out {out:?} in {arrived:?}, {retransmitted} resent");
        eprintln!("{ctx}");
        assert_eq!(
            out.syns,
            2 + 1,
            "one SYN per data connection + control, {ctx}"
        );
        assert_eq!(arrived.syns, 2 + 1, "{ctx}");
        assert_payload(&out, u(&tx, "tx_bytes"), retransmitted, &ctx);
        assert_payload(&arrived, u(&rx, "rx_bytes"), retransmitted, &ctx);
        if retransmitted == 0 {
            assert_eq!(arrived.payload % 131_072, 0, "{ctx}");
            assert_eq!(arrived.payload / 131_072, u(&rx, "rx_records"), "{ctx}");
        }
    }
    let bad = Command::new(common::bin())
        .env("RINGBLAST_TCP_RECV", "fast")
        .args(["sink", "--proto", "tcp", "--listen", "127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("use plain, bundle or auto"),
        "{bad:?}"
    );
}
