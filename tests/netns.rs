//! A sender and a sink in two network namespaces joined by a veth pair that this test creates
//! (unique names, 10.x addresses) and deletes afterwards.

mod common;

use std::process::{Command, Stdio};

use common::*;

#[test]
fn paced_traffic_over_veth_between_namespaces_is_exact() {
    if !is_root() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let _guard = traffic_lock();
    let lab = Lab::create("n", 203);
    let sink = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.rx,
            bin(),
            "sink",
            "--listen",
            "10.203.0.2:7000",
            "--duration",
            "4s",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bound(Some(&lab.rx), 7000);
    let send = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.tx,
            bin(),
            "send",
            "--to",
            "10.203.0.2:7000",
        ])
        .args([
            "--rate",
            "20kpps",
            "--duration",
            "2s",
            "--size",
            "512",
            "--flows",
            "4",
            "--json",
        ])
        .output()
        .unwrap();
    assert_ok(&send);
    let out = sink.wait_with_output().unwrap();
    assert_ok(&out);
    let (send, sink) = (
        summaries(&send).send.unwrap(),
        summaries(&out).sink.unwrap(),
    );
    assert_exact(&send, &sink);
    assert!(u(&send, "tx_packets") >= 39_000, "{send}");
}
