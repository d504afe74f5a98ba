//! A sink and a sender on hosts whose hostname is the kernel's default `(none)` (initramfs, VMs,
//! containers that never set one) still pair: each runs in its own UTS namespace with that
//! hostname, both in a network namespace this test creates, and the counts are checked against
//! that namespace's `Udp InDatagrams`.

mod common;

use std::{process::Command, time::Duration};

use common::{proc::Proc, *};

/// `ringblast ARGS` inside `ns`, in a UTS namespace of its own whose hostname is `(none)`.
fn on_unnamed_host(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "unshare", "--uts", "sh", "-c"])
        .arg(r#"printf '(none)' > /proc/sys/kernel/hostname && exec "$@""#)
        .args(["sh", bin()])
        .args(args);
    c
}

fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._:/@-".contains(&c))
}

#[test]
#[ignore = "needs root: a network namespace and UTS namespaces"]
fn hosts_named_none_pair_over_the_control_channel() {
    assert!(
        is_root(),
        "needs root (network and UTS namespaces); run as root"
    );
    let _guard = traffic_lock();
    let ns = Netns::create("hn");
    let listen = "127.0.0.1:7310";
    let mut sink = Proc::spawn(on_unnamed_host(
        &ns.0,
        &[
            "sink",
            "--listen",
            listen,
            "--no-gro",
            "--json",
            "--interval",
            "0",
        ],
    ));
    let line = sink.wait_line("control: listening", Duration::from_secs(10));
    assert!(
        line.contains("(sink session -none-/"),
        "the sink's session id is built on the mapped hostname: {line}"
    );
    let before = snmp(&ns.0, "Udp", "InDatagrams");
    let out = on_unnamed_host(
        &ns.0,
        &[
            "send",
            "--to",
            listen,
            "--rate",
            "20kpps",
            "--count",
            "5000",
            "--json",
            "--interval",
            "0",
        ],
    )
    .output()
    .unwrap();
    assert_ok(&out);
    let delivered = snmp(&ns.0, "Udp", "InDatagrams") - before;
    let send = summaries(&out).send.expect("a send summary");
    assert_eq!(u(&send, "tx_packets"), 5000, "{send}");
    assert_eq!(
        delivered,
        u(&send, "tx_packets"),
        "the kernel's InDatagrams"
    );
    assert_eq!(
        u(&send["sink"], "rx_packets"),
        delivered,
        "the sender got the sink's verdict: {send}"
    );
    sink.interrupt();
    let (status, stdout, err) = sink.finish();
    assert!(status.success(), "{err}");
    let sink = last_summary(&stdout, "sink");
    let senders = sink["senders"].as_array().expect("senders");
    assert_eq!(senders.len(), 1, "{sink}");
    let name = senders[0]["name"].as_str().expect("a sender name");
    assert_eq!(
        name,
        format!("-none-/{}q{}f", u(&send, "queues"), u(&send, "flows")),
        "the default sender name is the mapped hostname and the queue plan"
    );
    assert!(valid_name(name), "{name}");
    assert_eq!(u(&senders[0], "rx_packets"), delivered, "{sink}");
    assert_eq!(u(&senders[0], "rx_lost"), 0, "{sink}");
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
}
