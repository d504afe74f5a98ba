//! Paired sender/sink runs across network namespaces standing in for hosts (unique names, 10.x
//! addresses, deleted afterwards): many senders into one sink, restarts on either side, failed
//! sends, a dropped tail, and abuse of the control port. Every count is checked against the
//! namespaces' own `Udp` counters (each sender has a namespace of its own), the injector's
//! counter, or the senders' JSON where the kernel has no view. These need root; under root a missing tool
//! fails the test.

mod common;

use std::{process::Command, time::Duration};

use common::{proc::Proc, *};
use serde_json::Value;

fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, bin()]).args(args);
    c
}

fn last_json(stdout: &str, role: &str) -> Value {
    stdout
        .lines()
        .filter_map(common::schema::parsed)
        .rfind(|v| v["type"] == "summary" && v["role"] == role)
        .unwrap_or_else(|| panic!("no {role} summary in:\n{stdout}"))
}

fn sender<'a>(sink: &'a Value, name: &str) -> &'a Value {
    sink["senders"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no sender {name} in {sink}"))
}

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One sink namespace and `n` sender namespaces, each on its own veth and 10.<net>.<k>.0/24.
struct Star {
    sink: String,
    senders: Vec<String>,
}

impl Star {
    fn create(net: u8, n: usize) -> Star {
        let id = std::process::id() % 100_000;
        let star = Star {
            sink: format!("rbst{id}"),
            senders: (0..n).map(|k| format!("rbs{k}x{id}")).collect(),
        };
        sh(&["ip", "netns", "add", &star.sink]);
        for (k, ns) in star.senders.iter().enumerate() {
            let (a, b) = (format!("rbs{k}{id}a"), format!("rbs{k}{id}b"));
            sh(&["ip", "netns", "add", ns]);
            sh(&[
                "ip", "link", "add", &a, "netns", ns, "type", "veth", "peer", "name", &b, "netns",
                &star.sink,
            ]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("10.{net}.{k}.1/24"),
                "dev",
                &a,
            ]);
            sh(&[
                "ip",
                "-n",
                &star.sink,
                "addr",
                "add",
                &format!("10.{net}.{k}.2/24"),
                "dev",
                &b,
            ]);
            sh(&["ip", "-n", ns, "link", "set", &a, "up"]);
            sh(&["ip", "-n", &star.sink, "link", "set", &b, "up"]);
        }
        star
    }
}

impl Drop for Star {
    fn drop(&mut self) {
        for ns in self.senders.iter().chain([&self.sink]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

#[test]
#[ignore = "needs root: network namespaces (the test command runs as root)"]
fn four_senders_into_one_sink_are_each_counted_exactly() {
    let _guard = traffic_lock();
    let star = Star::create(211, 4);
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let mut sink = Proc::spawn(in_ns(
        &star.sink,
        &[
            "sink",
            "--listen",
            "0.0.0.0:7100",
            "--secret-file",
            secret,
            "--json",
            "--interval",
            "0",
        ],
    ));
    sink.wait_line("control: listening", Duration::from_secs(5));
    // Each sender has a namespace of its own: its `OutDatagrams` is that sender's count alone.
    let out_before: Vec<UdpSnmp> = star.senders.iter().map(|ns| UdpSnmp::read(ns)).collect();
    let in_before = UdpSnmp::read(&star.sink);
    let senders: Vec<Proc> = star
        .senders
        .iter()
        .enumerate()
        .map(|(k, ns)| {
            let to = format!("10.211.{k}.2:7100");
            let name = format!("host{k}");
            Proc::spawn(in_ns(
                ns,
                &[
                    "send",
                    "--to",
                    &to,
                    "--name",
                    &name,
                    "--secret-file",
                    secret,
                    "--rate",
                    "5kpps",
                    "--count",
                    "10000",
                    "--flows",
                    "2",
                    "--json",
                    "--interval",
                    "0",
                ],
            ))
        })
        .collect();
    let mut sent = 0;
    for (k, s) in senders.into_iter().enumerate() {
        let (status, out, err) = s.finish();
        assert!(status.success(), "{err}");
        let send = last_json(&out, "send");
        let tx = u(&send, "tx_packets");
        assert_eq!(tx, 10_000, "{send}");
        let verdict = &send["sink"];
        // On a busy host the sink's kernel may drop some: counted as such, never as loss.
        assert_eq!(
            u(verdict, "rx_packets") + u(verdict, "rx_kernel_drops"),
            tx,
            "sender {k}: {send}"
        );
        for key in ["rx_lost", "rx_reordered", "rx_duplicates"] {
            assert_eq!(u(verdict, key), 0, "sender {k} {key}: {send}");
        }
        sent += tx;
    }
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let sink = last_json(&out, "sink");
    let arrived = UdpSnmp::read(&star.sink).since(in_before);
    assert_eq!(
        u(&sink, "rx_packets") + u(&sink, "rx_kernel_drops"),
        sent,
        "{sink}"
    );
    assert_eq!(
        u(&sink, "rx_packets"),
        arrived.in_datagrams,
        "the sink namespace's InDatagrams: {arrived:?}"
    );
    assert_eq!(
        u(&sink, "rx_kernel_drops"),
        arrived.rcvbuf_errors,
        "the sink namespace's RcvbufErrors: {arrived:?}"
    );
    assert_eq!(u(&sink, "rx_lost"), 0, "{sink}");
    for (k, (ns, before)) in star.senders.iter().zip(&out_before).enumerate() {
        let s = sender(&sink, &format!("host{k}"));
        let left = UdpSnmp::read(ns).since(*before);
        assert_eq!(
            u(s, "rx_packets") + u(s, "rx_kernel_drops"),
            left.out_datagrams,
            "host{k}'s row against its own namespace's OutDatagrams: {s}"
        );
        assert_eq!(left.out_datagrams, 10_000, "{s}");
        assert_eq!(
            u(s, "rx_lost") + u(s, "rx_reordered") + u(s, "rx_duplicates"),
            0,
            "{s}"
        );
        assert_eq!(u(s, "sessions"), 1, "{s}");
    }
}

#[test]
#[ignore = "needs root: network namespaces (the test command runs as root)"]
fn a_sender_restarted_under_one_name_continues_one_series() {
    let _guard = traffic_lock();
    let lab = Lab::create("r", 212);
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let mut sink = Proc::spawn(in_ns(
        &lab.rx,
        &[
            "sink",
            "--listen",
            "10.212.0.2:7200",
            "--secret-file",
            secret,
            "--json",
            "--interval",
            "0",
        ],
    ));
    sink.wait_line("control: listening", Duration::from_secs(5));
    let (out_before, in_before) = (UdpSnmp::read(&lab.tx), UdpSnmp::read(&lab.rx));
    let mut sent = 0;
    for run in 0..3 {
        let out = in_ns(
            &lab.tx,
            &[
                "send",
                "--to",
                "10.212.0.2:7200",
                "--name",
                "edge",
                "--secret-file",
                secret,
                "--rate",
                "10kpps",
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
        let send = summaries(&out).send.unwrap();
        assert_eq!(
            u(&send["sink"], "rx_packets"),
            u(&send, "tx_packets"),
            "run {run}: {send}"
        );
        assert_eq!(u(&send["sink"], "rx_lost"), 0, "run {run}: {send}");
        sent += u(&send, "tx_packets");
    }
    sink.wait_line("restarted, session 3", Duration::from_secs(5));
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let sink = last_json(&out, "sink");
    let s = sender(&sink, "edge");
    let (left, arrived) = (
        UdpSnmp::read(&lab.tx).since(out_before),
        UdpSnmp::read(&lab.rx).since(in_before),
    );
    assert_eq!(
        sent, left.out_datagrams,
        "the sender namespace's OutDatagrams"
    );
    assert_eq!(u(s, "rx_packets"), arrived.in_datagrams, "{arrived:?}: {s}");
    assert_eq!(u(s, "rx_packets"), sent, "{s}");
    assert_eq!(
        (u(s, "rx_lost"), u(s, "rx_reordered"), u(s, "sessions")),
        (0, 0, 3),
        "{s}"
    );
}

#[test]
#[ignore = "needs root: network namespaces (the test command runs as root)"]
fn a_restarted_sink_counts_no_false_loss_and_the_sender_reports_it() {
    let _guard = traffic_lock();
    let lab = Lab::create("k", 213);
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let sink_args = [
        "sink",
        "--listen",
        "10.213.0.2:7300",
        "--secret-file",
        secret,
        "--json",
        "--interval",
        "0",
    ];
    let mut first = Proc::spawn(in_ns(&lab.rx, &sink_args));
    first.wait_line("control: listening", Duration::from_secs(5));
    // Both sinks run in one namespace, the only UDP readers there: its InDatagrams is what the
    // two read together, and NoPorts what arrived while neither was bound.
    let (out_before, in_before) = (UdpSnmp::read(&lab.tx), UdpSnmp::read(&lab.rx));
    let mut send = Proc::spawn(in_ns(
        &lab.tx,
        &[
            "send",
            "--to",
            "10.213.0.2:7300",
            "--name",
            "steady",
            "--secret-file",
            secret,
            "--rate",
            "5kpps",
            "--duration",
            "5s",
            "--json",
            "--interval",
            "0",
        ],
    ));
    first.wait_line("sink: sender steady", Duration::from_secs(5));
    first.interrupt();
    let (status, first_out, err) = first.finish();
    assert!(status.success(), "{err}");
    let first_rx = u(&last_json(&first_out, "sink"), "rx_packets");
    send.wait_line("control: lost the sink", Duration::from_secs(10));
    let mut second = Proc::spawn(in_ns(&lab.rx, &sink_args));
    let listening = second.wait_line("control: listening", Duration::from_secs(5));
    let session = listening
        .split("sink session ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .to_string();
    send.wait_line("connection 2", Duration::from_secs(10));
    let (status, out, err) = send.finish();
    assert!(status.success(), "{err}");
    let sent = last_json(&out, "send");
    let verdict = &sent["sink"];
    assert_eq!(verdict["sink_session"], session.as_str(), "{sent}");
    second.interrupt();
    let (status, out, err) = second.finish();
    assert!(status.success(), "{err}");
    let sink = last_json(&out, "sink");
    assert_eq!(
        u(&sink, "rx_lost"),
        0,
        "the new sink counts nothing before it joined: {sink}"
    );
    assert_eq!(
        u(verdict, "rx_packets"),
        u(&sink, "rx_packets"),
        "{sent}\n{sink}"
    );
    assert_eq!(u(verdict, "rx_lost"), 0, "{sent}");
    // The kernel's books: the sender namespace sent what the sender says; the two sinks read
    // together exactly the sink namespace's InDatagrams; and what neither read is what arrived
    // while no socket was bound (NoPorts) plus what the first sink left unread in its queue
    // when it exited, which no counter sees: at most the 200 ms that took at 5 kpps.
    let (left, arrived) = (
        UdpSnmp::read(&lab.tx).since(out_before),
        UdpSnmp::read(&lab.rx).since(in_before),
    );
    let tx = u(&sent, "tx_packets");
    let second_rx = u(&sink, "rx_packets");
    let ctx = format!("first {first_rx}, second {second_rx}, sent {tx}, {arrived:?}");
    assert_eq!(tx, left.out_datagrams, "{ctx}");
    assert_eq!(first_rx + second_rx, arrived.in_datagrams, "{ctx}");
    assert_eq!(arrived.rcvbuf_errors, 0, "{ctx}");
    assert!(arrived.no_ports > 0, "the gap between the sinks: {ctx}");
    let unread = tx
        .checked_sub(arrived.in_datagrams + arrived.no_ports)
        .unwrap_or_else(|| panic!("more read and refused than sent: {ctx}"));
    assert!(
        unread <= 1000,
        "{unread} unread in the first sink's queue: {ctx}"
    );
}

#[test]
#[ignore = "needs root: network namespaces (the test command runs as root)"]
fn sends_refused_by_a_full_qdisc_are_failed_sends_not_loss() {
    let _guard = traffic_lock();
    let lab = Lab::create("q", 214);
    // The policer sits on the data path's veth; the control channel takes a second veth, so
    // the policer's drop counter counts ringblast's sends alone.
    let id = std::process::id() % 100_000;
    let (c, d) = (format!("rbq{id}c"), format!("rbq{id}d"));
    sh(&[
        "ip", "link", "add", &c, "netns", &lab.tx, "type", "veth", "peer", "name", &d, "netns",
        &lab.rx,
    ]);
    sh(&[
        "ip",
        "-n",
        &lab.tx,
        "addr",
        "add",
        "10.214.1.1/24",
        "dev",
        &c,
    ]);
    sh(&[
        "ip",
        "-n",
        &lab.rx,
        "addr",
        "add",
        "10.214.1.2/24",
        "dev",
        &d,
    ]);
    sh(&["ip", "-n", &lab.tx, "link", "set", &c, "up"]);
    sh(&["ip", "-n", &lab.rx, "link", "set", &d, "up"]);
    let dev = lab.tx_dev.as_str();
    let tc = |args: &[&str]| {
        let mut all = vec!["tc", "-n", &lab.tx];
        all.extend_from_slice(args);
        sh(&all)
    };
    tc(&[
        "qdisc", "add", "dev", dev, "root", "tbf", "rate", "60mbit", "burst", "8kb", "limit", "8kb",
    ]);
    let (send, sink) = lab.run(
        7400,
        &["--listen", "0.0.0.0:7400", "--duration", "5s"],
        &[
            "--to",
            "10.214.0.2:7400",
            "--control",
            "10.214.1.2:7400",
            "--rate",
            "20kpps",
            "--count",
            "20000",
            "--size",
            "512",
        ],
    );
    let qdisc = tc(&["-s", "qdisc", "show", "dev", dev]);
    let dropped: u64 = qdisc
        .split("dropped ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no drop count in {qdisc}"));
    assert!(dropped > 1000, "the qdisc refused sends: {qdisc}");
    assert_eq!(u(&send, "tx_errors"), dropped, "{send}\n{qdisc}");
    assert_eq!(u(&sink, "rx_lost"), 0, "failed sends are not loss: {sink}");
    assert_eq!(u(&sink, "rx_packets"), u(&send, "tx_packets"), "{sink}");
    assert_eq!(u(&send["sink"], "send_failed"), dropped, "{send}");
    assert_eq!(u(&send["sink"], "rx_lost"), 0, "{send}");
}

#[test]
#[ignore = "needs root: network namespaces (the test command runs as root)"]
fn a_tail_dropped_on_the_way_is_lost_exactly_through_goodbye() {
    let _guard = traffic_lock();
    let lab = Lab::create("t", 215);
    // Drop sequence numbers 19 900 and up: the low 32 bits of the header's sequence number
    // sit 20 bytes into the UDP payload (28 bytes after the UDP header's start).
    let rules = "table ip rbtail {\n chain in {\n type filter hook input priority 0; policy accept;\n udp dport 7500 @th,224,32 >= 19900 counter drop\n }\n}\n";
    let mut nft = Command::new("ip")
        .args(["netns", "exec", &lab.rx, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nft (apt-get install nftables)");
    use std::io::Write;
    nft.stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    assert!(nft.wait().unwrap().success());
    let (send, sink) = lab.run(
        7500,
        &["--listen", "10.215.0.2:7500", "--duration", "4s"],
        &[
            "--to",
            "10.215.0.2:7500",
            "--rate",
            "20kpps",
            "--count",
            "20000",
        ],
    );
    let ruleset = sh(&["ip", "netns", "exec", &lab.rx, "nft", "list", "ruleset"]);
    let counted: u64 = ruleset
        .split("counter packets ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert_eq!(counted, 100, "{ruleset}");
    assert_eq!(u(&sink, "rx_lost"), counted, "{sink}");
    assert_eq!(u(&sink, "rx_packets"), 20_000 - counted, "{sink}");
    assert_eq!(
        u(&send["sink"], "rx_lost"),
        counted,
        "the sender prints the same: {send}"
    );
}
