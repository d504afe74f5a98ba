//! A sender and a sink in two network namespaces joined by a veth pair that this test creates
//! (unique names, 10.x addresses) and deletes afterwards.

mod common;

use std::process::{Command, Stdio};

use common::*;

struct Namespaces {
    names: [String; 2],
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

impl Namespaces {
    fn create() -> Option<Namespaces> {
        let id = std::process::id() % 100_000;
        let ns = Namespaces {
            names: [format!("rbtx{id}"), format!("rbrx{id}")],
        };
        let [tx, rx] = &ns.names;
        let (vtx, vrx) = (format!("rbv{id}a"), format!("rbv{id}b"));
        let ok = ip(&["netns", "add", tx])
            && ip(&["netns", "add", rx])
            && ip(&[
                "link", "add", &vtx, "netns", tx, "type", "veth", "peer", "name", &vrx, "netns", rx,
            ])
            && ip(&["-n", tx, "addr", "add", "10.203.0.1/24", "dev", &vtx])
            && ip(&["-n", rx, "addr", "add", "10.203.0.2/24", "dev", &vrx])
            && ip(&["-n", tx, "link", "set", &vtx, "up"])
            && ip(&["-n", rx, "link", "set", &vrx, "up"])
            && ip(&["-n", tx, "link", "set", "lo", "up"])
            && ip(&["-n", rx, "link", "set", "lo", "up"]);
        ok.then_some(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

#[test]
fn paced_traffic_over_veth_between_namespaces_is_exact() {
    if !is_root() {
        eprintln!("skipped: creating network namespaces needs root");
        return;
    }
    let _guard = traffic_lock();
    let ns = Namespaces::create().expect("create namespaces and a veth pair (iproute2, root)");
    let sink = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.names[1],
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
    // Wait (bounded) until the sink's socket is bound, so no early datagram meets a closed port.
    let bound = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        Command::new("ip")
            .args(["netns", "exec", &ns.names[1], "ss", "-Huan"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(":7000 "))
    });
    assert!(bound, "sink did not bind 10.203.0.2:7000");
    let send = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.names[0],
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
