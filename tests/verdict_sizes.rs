//! The sink's size classes travel in its verdict (control protocol 2): a remote sender's
//! summary carries them, class by class equal to its own per-class counts and to the sink's own
//! summary; a stepped run's verdict sums its steps' classes. The exported size-class series
//! are pinned to nft's count of the same datagrams by UDP length, in a namespace of their own.

mod common;

use std::process::Command;

use common::{proc::Proc, *};
use serde_json::Value;

/// (payload, packets, bytes) per class, sorted.
fn classes(sizes: &Value) -> Vec<(u64, u64, u64)> {
    let mut out: Vec<_> = sizes
        .as_array()
        .unwrap_or_else(|| panic!("no size classes: {sizes}"))
        .iter()
        .map(|c| (u(c, "payload"), u(c, "packets"), u(c, "bytes")))
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn a_remote_senders_summary_carries_the_sinks_size_classes() {
    let _guard = traffic_lock();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut sink = Command::new(bin());
    sink.args(["sink", "--json", "--listen", &listen, "--interval", "0"]);
    sink.args(["--duration", "5s"]);
    let sink = Proc::spawn(sink);
    wait_bound(None, port);
    let send = ringblast(&[
        "send",
        "--json",
        "--to",
        &listen,
        "--size",
        "imix",
        "--rate",
        "24kpps",
        "--count",
        "24000",
        "--interval",
        "0",
    ]);
    assert_ok(&send);
    let (status, sink_out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let tx = summaries(&send).send.unwrap();
    let rx = sink_out
        .lines()
        .map(common::schema::record)
        .find(|v| v["type"] == "summary" && v["role"] == "sink")
        .unwrap();
    let sent = classes(&tx["sizes"]);
    assert_eq!(
        sent.iter().map(|c| c.1).collect::<Vec<_>>(),
        [14_000, 8_000, 2_000],
        "7:4:1 over whole cycles: {tx}"
    );
    assert_eq!(
        classes(&tx["sink"]["sizes"]),
        sent,
        "the verdict's classes: {tx}"
    );
    assert_eq!(classes(&rx["sizes"]), sent, "the sink's own summary: {rx}");
}

#[test]
fn a_stepped_runs_verdict_sums_its_steps_size_classes() {
    let _guard = traffic_lock();
    let mut all = vec!["pair", "--json", "--no-metrics", "--size", "imix"];
    all.extend(["--rate-steps", "12kpps:1s,24kpps:1s"]);
    let out = ringblast(&all);
    assert_ok(&out);
    let s = summaries(&out);
    let (send, sink) = (s.send.unwrap(), s.sink.unwrap());
    let sent = classes(&send["sizes"]);
    // Each step's verdict has its own classes; together they are the run's.
    let mut by_step: Vec<(u64, u64, u64)> = Vec::new();
    for step in String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(common::schema::record)
        .filter(|v| v["type"] == "step")
    {
        for (payload, packets, bytes) in classes(&step["sink"]["sizes"]) {
            match by_step.iter_mut().find(|c| c.0 == payload) {
                Some(c) => (c.1, c.2) = (c.1 + packets, c.2 + bytes),
                None => by_step.push((payload, packets, bytes)),
            }
        }
    }
    by_step.sort_unstable();
    assert_eq!(by_step, sent, "the steps' classes add up to the run's");
    assert_eq!(classes(&send["sink"]["sizes"]), sent, "{send}");
    assert_eq!(classes(&sink["sizes"]), sent, "{sink}");
    assert_eq!(
        sent.iter().map(|c| c.1).sum::<u64>(),
        u(&send, "tx_packets")
    );
}

#[test]
#[ignore = "needs root: a network namespace and nftables"]
fn the_size_class_series_equal_both_summaries() {
    let _guard = traffic_lock();
    let ns = Netns::create("sizes");
    // IMIX's frames of 64, 570 and 1518 bytes are UDP payloads of 18, 524 and 1472 over IPv4:
    // one nft counter per UDP length (payload + 8) on loopback's input hook.
    let payloads = [18u64, 524, 1472];
    let counters: String = payloads
        .iter()
        .map(|p| format!(" counter p{p} {{ }}\n"))
        .collect();
    let rules: String = payloads
        .iter()
        .map(|p| format!("  udp length {} counter name p{p}\n", p + 8))
        .collect();
    nft(
        &ns.0,
        &format!(
            "table ip rbsizes {{\n{counters} chain in {{\n  type filter hook input priority 0; policy accept;\n{rules} }}\n}}\n"
        ),
    );
    let port = free_port();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.0, bin()]);
    cmd.args([
        "pair", "--size", "imix", "--rate", "24kpps", "--count", "24000",
    ]);
    cmd.args(["--json", "--interval", "0", "--metrics"]);
    cmd.args([&format!("127.0.0.1:{port}"), "--metrics-linger", "30s"]);
    let mut pair = Proc::spawn(cmd);
    pair.wait_line(
        "metrics: serving final values",
        std::time::Duration::from_secs(30),
    );
    let text = in_netns(&ns.0, move || scrape_local(port));
    pair.interrupt();
    let (status, out, err) = pair.finish();
    assert!(status.success(), "{err}");
    let summary = |role: &str| {
        out.lines()
            .map(common::schema::record)
            .find(|v| v["type"] == "summary" && v["role"] == role)
            .unwrap()
    };
    let (tx, rx) = (summary("send"), summary("sink"));
    let sent = classes(&tx["sizes"]);
    assert_eq!(sent.len(), 3, "{tx}");
    assert_eq!(classes(&rx["sizes"]), sent, "{rx}");
    // The kernel's count of each class: datagrams of that length that reached loopback's input.
    let kernel: Vec<(u64, u64, u64)> = payloads
        .iter()
        .map(|&p| {
            let (packets, _) = nft_named(&ns.0, "ip", "rbsizes", &format!("p{p}"));
            (p, packets, packets * p)
        })
        .collect();
    assert_eq!(
        sent, kernel,
        "the classes against nft's counts by UDP length"
    );
    for (payload, packets, bytes) in sent {
        let l = format!(r#"{{payload="{payload}"}}"#);
        assert_eq!(
            series_value(&text, &format!("ringblast_tx_size_packets_total{l}")),
            packets
        );
        assert_eq!(
            series_value(&text, &format!("ringblast_tx_size_bytes_total{l}")),
            bytes
        );
        assert_eq!(
            series_value(&text, &format!("ringblast_rx_size_packets_total{l}")),
            packets
        );
        assert_eq!(
            series_value(&text, &format!("ringblast_rx_size_bytes_total{l}")),
            bytes
        );
    }
}
