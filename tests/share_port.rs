//! `--share-port` really splits the traffic. Two ringblast sinks share one UDP port in a
//! network namespace of their own (the second with `--share-port`); three sender processes of
//! eight flows each send to it from another namespace. The kernel's reuseport hash gives each
//! flow (source port) wholly to one sink's socket. Both sinks must count a nonzero share, and
//! the two shares must add up to what the kernel delivered in the sinks' namespace
//! (`Udp InDatagrams`) and to what an nft counter on its input hook saw, with no receive
//! buffer overflow (`Udp RcvbufErrors`).
//!
//! Each share is also a whole number of flows: 2 500 datagrams each (20 000 over 8 flows,
//! sent round robin). No kernel counter sees the split itself (per-socket delivery is not
//! counted anywhere), so the share sizes are the sinks' own; their sum is the kernel's.

mod common;

use std::{process::Command, time::Duration};

use common::{proc::Proc, *};

const PORT: u16 = 7500;
const SENDERS: u64 = 3;
const FLOWS: u64 = 8;
const PER_SENDER: u64 = 20_000;

fn start_sink(ns: &str, listen: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["sink", "--json", "--listen", listen];
    args.extend_from_slice(extra);
    let mut p = Proc::ringblast(Some(ns), &args);
    p.wait_line("startup: workers released", Duration::from_secs(10));
    p
}

fn stop(p: Proc) -> serde_json::Value {
    p.interrupt();
    let (status, stdout, stderr) = p.finish();
    assert!(status.success(), "{status:?}\n{stderr}");
    last_summary(&stdout, "sink")
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn two_sinks_sharing_a_port_both_count_and_add_up_to_the_kernels_count() {
    let _guard = traffic_lock();
    let net = 242;
    let lab = Lab::create("sp", net);
    let listen = format!("10.{net}.0.2:{PORT}");
    nft(
        &lab.rx,
        &format!(
            "table ip rbshare {{\n counter arrived {{ }}\n chain in {{\n type filter hook input priority 0; policy accept;\n udp dport {PORT} counter name arrived\n }}\n}}\n"
        ),
    );
    // A sink off loopback needs a secret; both book the control-less senders' datagrams.
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let common = ["--secret-file", secret, "--accept-unannounced"];
    let first = start_sink(&lab.rx, &listen, &common);
    let second = start_sink(&lab.rx, &listen, &[&common[..], &["--share-port"]].concat());
    let (in_before, drops_before) = (
        snmp(&lab.rx, "Udp", "InDatagrams"),
        snmp(&lab.rx, "Udp", "RcvbufErrors"),
    );

    // The senders have no control channel: neither sink can know the other's share, so
    // neither calls it lost.
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            Command::new("ip")
                .args(["netns", "exec", &lab.tx, bin(), "send", "--json"])
                .args(["--control", "off", "--to", &listen, "--size", "100"])
                .args(["--flows", &FLOWS.to_string()])
                .args(["--count", &PER_SENDER.to_string(), "--rate", "20kpps"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut sent = 0;
    for s in senders {
        let out = s.wait_with_output().unwrap();
        assert_ok(&out);
        let send = summaries(&out).send.unwrap();
        assert_eq!(u(&send, "tx_errors"), 0, "{send}");
        assert_eq!(u(&send, "flows"), FLOWS, "{send}");
        sent += u(&send, "tx_packets");
    }
    assert_eq!(sent, SENDERS * PER_SENDER);
    // Every datagram the kernel delivered has been read off both sinks' sockets.
    wait_udp_drained(&lab.rx, PORT);
    let (a, b) = (stop(first), stop(second));
    let delivered = snmp(&lab.rx, "Udp", "InDatagrams") - in_before;
    let dropped = snmp(&lab.rx, "Udp", "RcvbufErrors") - drops_before;
    let (arrived, _) = nft_named(&lab.rx, "ip", "rbshare", "arrived");

    let (ra, rb) = (u(&a, "rx_packets"), u(&b, "rx_packets"));
    eprintln!("shares: first sink {ra}, second sink {rb}, of {sent} sent, {delivered} delivered");
    assert_eq!(arrived, sent, "the nft counter on the sinks' input hook");
    assert_eq!(delivered, sent, "Udp InDatagrams of the sinks' namespace");
    assert_eq!(dropped, 0, "Udp RcvbufErrors of the sinks' namespace");
    assert!(ra > 0 && rb > 0, "both sinks got a share: {ra} and {rb}");
    assert_eq!(ra + rb, delivered, "first {a}\nsecond {b}");
    let per_flow = PER_SENDER / FLOWS;
    for v in [&a, &b] {
        assert_eq!(u(v, "rx_packets") % per_flow, 0, "whole flows: {v}");
        for key in [
            "rx_lost",
            "rx_duplicates",
            "rx_invalid",
            "rx_kernel_drops",
            "rx_reordered",
        ] {
            assert_eq!(u(v, key), 0, "{key} in {v}");
        }
    }
}
