//! Every step of a `--rate-steps` run is its own session epoch at the sink, so each
//! `"type":"step"` line carries the sink's exact verdict for that step: a remote run through a
//! namespace whose nftables rule drops what exceeds 20 kpps loses packets only in the step that
//! overruns it, and that step's loss equals the rule's own drop counter. The exporter's schedule
//! series carry the same step results, and a constant rate is a one-step schedule.

mod common;

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use common::{proc::Proc, *};
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
        .map(common::schema::record)
        .filter(|v| v["type"] == "step")
        .collect()
}

#[test]
#[ignore = "needs root: it creates network namespaces"]
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
        1,
        "a stepped run is one session of its sender, however many epochs: {sink}"
    );
}

/// Runs `pair ARGS --json --metrics` alone in a network namespace of its own and scrapes the
/// lingering endpoint after the summaries; returns the scrape, stdout, and the namespace's
/// `Udp` counters over the run (only the pair's datagrams).
fn pair_scraped(args: &[&str]) -> (String, String, UdpSnmp) {
    let ns = Netns::create("stepscr");
    let before = UdpSnmp::read(&ns.0);
    let port = free_port();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.0, bin()]);
    cmd.arg("pair")
        .args(args)
        .args(["--json", "--interval", "0"]);
    cmd.args(["--metrics", &format!("127.0.0.1:{port}")]);
    cmd.args(["--metrics-linger", "30s"]);
    let mut pair = Proc::spawn(cmd);
    pair.wait_line("metrics: serving final values", Duration::from_secs(30));
    let text = in_netns(&ns.0, move || scrape_local(port));
    pair.interrupt();
    let (status, out, err) = pair.finish();
    assert!(status.success(), "{err}");
    let kernel = UdpSnmp::read(&ns.0).since(before);
    (text, out, kernel)
}

#[test]
#[ignore = "needs root: a network namespace of its own"]
fn the_schedule_series_carry_each_judged_step() {
    let _guard = traffic_lock();
    let (text, out, kernel) = pair_scraped(&["--rate-steps", "20kpps:1s,40kpps:1s"]);
    let steps = steps_of(&out);
    assert_eq!(steps.len(), 2, "{out}");
    let sum = |f: &dyn Fn(&Value) -> u64| steps.iter().map(f).sum::<u64>();
    assert_eq!(series_value(&text, "ringblast_tx_schedule_steps"), 2);
    assert_eq!(series_value(&text, "ringblast_tx_schedule_step"), 2);
    assert_eq!(
        series_value(&text, r#"ringblast_tx_steps_total{verdict="judged"}"#),
        2
    );
    assert_eq!(
        series_value(&text, r#"ringblast_tx_steps_total{verdict="unknown"}"#),
        0
    );
    for (result, want) in [
        ("sent", sum(&|s| u(s, "tx_packets"))),
        ("received", sum(&|s| u(&s["sink"], "rx_packets"))),
        ("lost", sum(&|s| u(&s["sink"], "rx_lost"))),
        ("kernel_drops", sum(&|s| u(&s["sink"], "rx_kernel_drops"))),
        ("duplicates", sum(&|s| u(&s["sink"], "rx_duplicates"))),
        ("send_failed", sum(&|s| u(&s["sink"], "send_failed"))),
    ] {
        let name = format!(r#"ringblast_tx_step_packets_total{{result="{result}"}}"#);
        assert_eq!(series_value(&text, &name), want, "{name}\n{out}");
    }
    // The kernel's count of the same datagrams: what left the sender, and what the sink read.
    assert_eq!(
        kernel.out_datagrams,
        sum(&|s| u(s, "tx_packets")),
        "Udp OutDatagrams: {kernel:?}"
    );
    assert_eq!(
        kernel.in_datagrams,
        sum(&|s| u(&s["sink"], "rx_packets")),
        "Udp InDatagrams: {kernel:?}"
    );
    // 20 kpps for 1 s, then 40 kpps for 1 s: 20 000 and 40 000. Each step ends on its deadline,
    // so the window is 1 % each way, for a pacer that fell behind on this shared 2-CPU host.
    for (step, want) in steps.iter().zip([20_000u64, 40_000]) {
        let sent = u(step, "tx_packets");
        assert!(
            want * 99 / 100 <= sent && sent <= want * 101 / 100,
            "a step of {want} sent {sent}: {out}"
        );
    }
}

#[test]
#[ignore = "needs root: a network namespace of its own"]
fn a_constant_rate_is_a_one_step_schedule_judged_by_the_run_verdict() {
    let _guard = traffic_lock();
    let (text, out, kernel) = pair_scraped(&["--rate", "20kpps", "--duration", "1s"]);
    let send = out
        .lines()
        .map(common::schema::record)
        .find(|v| v["type"] == "summary" && v["role"] == "send")
        .unwrap();
    assert!(
        steps_of(&out).is_empty(),
        "no step lines without a schedule"
    );
    assert_eq!(series_value(&text, "ringblast_tx_schedule_steps"), 1);
    assert_eq!(series_value(&text, "ringblast_tx_schedule_step"), 1);
    assert_eq!(
        series_value(&text, r#"ringblast_tx_steps_total{verdict="judged"}"#),
        1
    );
    assert_eq!(
        series_value(&text, r#"ringblast_tx_step_packets_total{result="sent"}"#),
        u(&send, "tx_packets")
    );
    assert_eq!(
        series_value(
            &text,
            r#"ringblast_tx_step_packets_total{result="received"}"#
        ),
        u(&send["sink"], "rx_packets")
    );
    assert_eq!(u(&send, "tx_packets"), 20_000, "{send}");
    assert_eq!(kernel.out_datagrams, 20_000, "Udp OutDatagrams: {kernel:?}");
    assert_eq!(kernel.in_datagrams, 20_000, "Udp InDatagrams: {kernel:?}");
}

#[test]
fn two_stepping_senders_keep_their_own_epochs_at_one_sink() {
    let _guard = traffic_lock();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut sink = Command::new(bin());
    sink.args(["sink", "--json", "--listen", &listen, "--interval", "0"]);
    sink.args(["--duration", "8s"]);
    let sink = Proc::spawn(sink);
    wait_bound(None, port);
    let senders: Vec<_> = ["step-a", "step-b"]
        .iter()
        .map(|name| {
            Command::new(bin())
                .args(["send", "--json", "--to", &listen, "--name", name])
                .args(["--rate-steps", "10kpps:1s,20kpps:1s", "--flows", "2"])
                .args(["--interval", "0"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = senders
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let (status, sink_out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let sink_summary = sink_out
        .lines()
        .map(common::schema::record)
        .find(|v| v["type"] == "summary" && v["role"] == "sink")
        .unwrap();
    let mut epochs = std::collections::HashSet::new();
    for (out, name) in outs.iter().zip(["step-a", "step-b"]) {
        assert_ok(out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let steps = steps_of(&stdout);
        assert_eq!(steps.len(), 2, "{stdout}");
        for step in &steps {
            assert!(epochs.insert(u(step, "epoch")), "epochs are unique: {step}");
            assert_eq!(step["sink"]["complete"], true, "{step}");
            assert_eq!(
                u(&step["sink"], "rx_packets"),
                u(step, "tx_packets"),
                "{step}"
            );
        }
        let row = sink_summary["senders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no sender {name}: {sink_summary}"));
        assert_eq!(u(row, "sessions"), 1, "one run, one session: {row}");
        let received: u64 = steps.iter().map(|s| u(&s["sink"], "rx_packets")).sum();
        assert_eq!(u(row, "rx_packets"), received, "{row}");
    }
}

#[test]
fn a_stepped_run_stopped_early_keeps_its_verdict_and_its_unsent_steps_are_empty() {
    let _guard = traffic_lock();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut sink = Command::new(bin());
    sink.args(["sink", "--json", "--listen", &listen, "--interval", "0"]);
    sink.args(["--duration", "120s"]);
    let sink = Proc::spawn(sink);
    wait_bound(None, port);
    let mut send = Command::new(bin());
    send.args(["send", "--json", "--to", &listen, "--interval", "1s"]);
    // The second step lasts 60 s, so an interrupt sent during it cannot land in a later step
    // however busy the host is.
    send.args([
        "--rate-steps",
        "10kpps:1s,10kpps:60s,10kpps:1s,10kpps:1s,10kpps:1s",
    ]);
    let mut send = Proc::spawn(send);
    // The first interval line comes after 1 s: the run is in its second step.
    send.wait_line("q0 n0", Duration::from_secs(10));
    send.interrupt();
    let (status, out, err) = send.finish();
    assert!(status.success(), "{err}");
    sink.interrupt();
    let (sink_status, _, sink_err) = sink.finish();
    assert!(sink_status.success(), "{sink_err}");
    let run = out
        .lines()
        .map(common::schema::record)
        .find(|v| v["type"] == "summary" && v["role"] == "send")
        .unwrap();
    let steps = steps_of(&out);
    assert_eq!(steps.len(), 5, "{out}");
    assert_eq!(
        run["sink"]["complete"], true,
        "the run keeps its verdict: {run}"
    );
    let received: u64 = steps.iter().map(|s| u(&s["sink"], "rx_packets")).sum();
    assert_eq!(received, u(&run["sink"], "rx_packets"), "{run}");
    assert_eq!(received, u(&run, "tx_packets"), "{run}");
    for step in &steps[2..] {
        assert_eq!(u(step, "tx_packets"), 0, "never reached: {step}");
        assert_eq!(step["loss"], 0, "{step}");
    }
}
