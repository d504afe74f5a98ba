//! Every step of a `--rate-steps` run is its own session epoch at the sink, so each
//! `"type":"step"` line carries the sink's exact verdict for that step: a remote run through a
//! namespace whose nftables rule drops what exceeds 20 kpps loses packets only in the step that
//! overruns it, and that step's loss equals the rule's own drop counter.

mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

fn nft(ns: &str, rule: &str) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(rule.split_whitespace())
        .output()
        .unwrap()
}

/// The packets the drop rule counted.
fn dropped_by_rule(ns: &str) -> u64 {
    let out = nft(ns, "list chain inet rbsteps input");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("drop"))
        .unwrap_or_else(|| panic!("no drop rule in:\n{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    // `... counter packets N bytes M drop`
    let at = words.iter().position(|w| *w == "counter").unwrap();
    words[at + 2].parse().unwrap()
}

fn steps_of(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "step")
        .collect()
}

#[test]
fn a_step_that_overruns_a_drop_rule_loses_exactly_what_the_rule_dropped() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    let _guard = traffic_lock();
    let lab = Lab::create("st", 218);
    for rule in [
        "add table inet rbsteps",
        "add chain inet rbsteps input { type filter hook input priority 0 ; }",
        "add rule inet rbsteps input udp dport 7601 limit rate over 20000/second burst 1000 packets counter drop",
    ] {
        let out = nft(&lab.rx, rule);
        assert!(
            out.status.success(),
            "nft {rule}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap().to_string();
    let sink = Command::new("ip")
        .args(["netns", "exec", &lab.rx, bin(), "sink", "--json"])
        .args(["--listen", "10.218.0.2:7601", "--secret-file", &secret])
        .args(["--duration", "6s", "--interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bound(Some(&lab.rx), 7601);
    let send = Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "send", "--json"])
        .args(["--to", "10.218.0.2:7601", "--secret-file", &secret])
        .args(["--rate-steps", "10kpps:1s,40kpps:1s", "--size", "64"])
        .args(["--interval", "0"])
        .output()
        .unwrap();
    let sunk = sink.wait_with_output().unwrap();
    assert_ok(&send);
    assert_ok(&sunk);
    let stdout = String::from_utf8_lossy(&send.stdout);
    let run = summaries(&send).send.unwrap();
    let sink = summaries(&sunk).sink.unwrap();
    let steps = steps_of(&stdout);
    assert_eq!(steps.len(), 2, "{stdout}");
    assert_ne!(steps[0]["epoch"], steps[1]["epoch"], "one epoch per step");
    let dropped = dropped_by_rule(&lab.rx);
    for (step, want) in steps.iter().zip([10_000.0, 40_000.0]) {
        let tx = u(step, "tx_packets");
        assert!((tx as f64 / want - 1.0).abs() <= 0.01, "{step}");
        let verdict = &step["sink"];
        assert_eq!(verdict["complete"], true, "{step}");
        assert_eq!(u(verdict, "rx_duplicates"), 0, "{step}");
        assert_eq!(u(step, "tx_failed"), u(verdict, "send_failed"), "{step}");
        // Every packet the kernel accepted in the step either arrived or is counted lost.
        assert_eq!(
            u(verdict, "rx_packets") + u(step, "loss"),
            tx,
            "the step's books close: {step}"
        );
        assert_eq!(
            u(step, "loss"),
            u(verdict, "rx_lost") + u(verdict, "rx_kernel_drops")
        );
    }
    assert_eq!(
        u(&steps[0], "loss"),
        0,
        "10 kpps is under the rule: {stdout}"
    );
    assert!(dropped > 10_000, "the rule dropped {dropped}");
    assert_eq!(
        u(&steps[1], "loss"),
        dropped,
        "the overrunning step lost exactly what the rule dropped"
    );
    // The steps add up to the run, on the sender's and on the sink's own books.
    let sum = |key: &str| steps.iter().map(|s| u(&s["sink"], key)).sum::<u64>();
    assert_eq!(sum("rx_packets"), u(&sink, "rx_packets"), "{sink}");
    assert_eq!(sum("rx_lost"), u(&sink, "rx_lost"), "{sink}");
    assert_eq!(sum("rx_packets"), u(&run["sink"], "rx_packets"), "{run}");
    assert_eq!(sum("rx_lost"), u(&run["sink"], "rx_lost"), "{run}");
    let tx: u64 = steps.iter().map(|s| u(s, "tx_packets")).sum();
    assert_eq!(tx, u(&run, "tx_packets"), "{run}");
    let senders = sink["senders"].as_array().unwrap();
    assert_eq!(senders.len(), 1, "{sink}");
    assert_eq!(
        u(&senders[0], "sessions"),
        2,
        "one sink session per step: {sink}"
    );
}
