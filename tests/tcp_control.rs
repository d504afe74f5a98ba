//! The control channel on TCP runs: the sink serves it on its data port (told apart by the
//! connection's first frame), and the sender's summary carries the sink's verdict on its run.
//! Exact counts from the sink's own summary, per-sender books of two senders, a wrong secret
//! refused before any data, a sender of the other protocol refused at once, a sender with no
//! sink giving up in 2 s, and a stream between two namespaces over veth, whose bytes and
//! records are also counted by nft on the sender's output hook and the sink's input hook
//! (`tcp::count_streams`: the data connections' payload, 52 header bytes per segment off; the
//! control connection to the same port is told apart and left out), with one SYN per data
//! connection plus control.

mod common;

use common::{
    sink_interval_parts, snmp,
    tcp::{
        assert_payload, count_streams, no_tail_loss_probes, send_status, start_sink_with,
        stop_sink_with_err, streams,
    },
    u,
};
use serde_json::Value;

fn verdict(tx: &Value) -> &Value {
    let v = &tx["verdict"];
    assert!(v.is_object(), "no verdict in {tx}");
    v
}

#[test]
fn a_tcp_pair_carries_the_sinks_verdict_equal_to_the_sinks_own_summary() {
    let _lock = common::traffic_lock();
    let out = common::ringblast(&[
        "pair",
        "--proto",
        "tcp",
        "--conns",
        "4",
        "--duration",
        "1s",
        "--interval",
        "200ms",
        "--json",
        "--no-metrics",
    ]);
    common::assert_ok(&out);
    let records = common::schema::records(&String::from_utf8_lossy(&out.stdout));
    let s = common::summaries(&out);
    let (tx, rx) = (s.send.unwrap(), s.sink.unwrap());
    let v = verdict(&tx);
    assert!(u(&tx, "tx_records") > 0, "{tx}");
    assert_eq!(u(v, "rx_records"), u(&rx, "rx_records"), "{tx}\n{rx}");
    assert_eq!(u(v, "rx_bytes"), u(&rx, "rx_bytes"), "{tx}\n{rx}");
    assert_eq!(u(v, "rx_records"), u(&tx, "tx_records"), "{tx}");
    assert_eq!(u(v, "rx_bytes"), u(&tx, "tx_bytes"), "{tx}");
    assert_eq!(u(v, "rx_invalid"), 0, "{tx}");
    // The control connection went to the control server, not into the invalid counts.
    assert_eq!(u(&rx, "control_conns"), 1, "{rx}");
    assert_eq!(u(&rx, "rx_invalid"), 0, "{rx}");
    assert_eq!(u(&rx, "invalid_magic"), 0, "{rx}");
    assert_eq!(u(&rx, "accepts"), 4, "{rx}");
    let senders = rx["senders"].as_array().unwrap();
    assert_eq!(senders.len(), 1, "{rx}");
    assert_eq!(senders[0]["name"], "pair");
    assert_eq!(u(&senders[0], "rx_records"), u(&rx, "rx_records"), "{rx}");
    assert_eq!(u(&senders[0], "conns_closed"), 4, "{rx}");
    // Latency per sender, on one clock: every record gives a sample, a connection's first ones
    // too (the books published the run's clock at its hello, before its connections opened).
    // The verdict carries the run's cell bounds, the same the sink's books show for its one
    // sender.
    let latency = &senders[0]["latency"];
    assert!(latency["p50_ns_at_most"].is_u64(), "{rx}");
    assert!(
        u(latency, "p50_ns_at_most") <= u(latency, "p99_ns_at_most"),
        "{latency}"
    );
    assert_eq!(&v["latency"], latency, "{tx}\n{rx}");
    let unknown = u(&senders[0]["latency_clock"], "latency_unknown_packets");
    assert_eq!(unknown, 0, "{rx}");
    // Over time: the sink's intervals' parts of the sender add up to every record it wrote,
    // and their samples to those records but the ones without a sample.
    let parts = sink_interval_parts(&records);
    assert!(parts.len() >= 3, "{parts:?}");
    assert!(parts.iter().all(|p| p["name"] == "pair"), "{parts:?}");
    let counted: u64 = parts.iter().map(|p| u(p, "rx_records")).sum();
    let samples: u64 = parts.iter().map(|p| u(p, "latency_samples")).sum();
    assert_eq!(counted, u(&tx, "tx_records"), "{parts:?}\n{tx}");
    assert_eq!(samples + unknown, counted, "{parts:?}\n{rx}");
    for part in &parts {
        let cell = u(&part["latency"], "p50_ns_at_most");
        assert!(
            cell <= u(latency, "max_ns_at_most"),
            "an interval's p50 {cell} above the run's max: {part}"
        );
    }
}

#[test]
fn two_tcp_senders_into_one_sink_get_separate_books_and_verdicts() {
    let _lock = common::traffic_lock();
    let port = common::free_port();
    let to = format!("127.0.0.1:{port}");
    let sink = start_sink_with(None, &to, &[]);
    let a = std::thread::spawn({
        let to = to.clone();
        move || {
            send_status(
                None,
                &[
                    "--to", &to, "--name", "alpha", "--conns", "2", "--count", "30000", "--size",
                    "200",
                ],
            )
        }
    });
    let b = std::thread::spawn({
        let to = to.clone();
        move || {
            send_status(
                None,
                &[
                    "--to", &to, "--name", "beta", "--conns", "3", "--count", "50000", "--size",
                    "100",
                ],
            )
        }
    });
    let (code_a, tx_a, err_a) = a.join().unwrap();
    let (code_b, tx_b, err_b) = b.join().unwrap();
    assert_eq!(code_a, Some(0), "{err_a}");
    assert_eq!(code_b, Some(0), "{err_b}");
    let (rx, _) = stop_sink_with_err(sink, 5);
    assert_eq!(u(&tx_a, "tx_records"), 30_000, "{tx_a}");
    assert_eq!(u(&tx_b, "tx_records"), 50_000, "{tx_b}");
    let senders = rx["senders"].as_array().unwrap();
    assert_eq!(senders.len(), 2, "{rx}");
    for (tx, name) in [(&tx_a, "alpha"), (&tx_b, "beta")] {
        let row = senders.iter().find(|s| s["name"] == name).unwrap();
        let v = verdict(tx);
        assert_eq!(u(row, "rx_records"), u(tx, "tx_records"), "{name}: {rx}");
        assert_eq!(u(row, "rx_bytes"), u(tx, "tx_bytes"), "{name}: {rx}");
        assert_eq!(u(v, "rx_records"), u(row, "rx_records"), "{name}: {tx}");
        assert_eq!(u(v, "rx_bytes"), u(row, "rx_bytes"), "{name}: {tx}");
        assert_eq!(u(row, "sessions"), 1, "{rx}");
    }
    assert_eq!(u(&rx, "rx_records"), 80_000, "{rx}");
    assert_eq!(u(&rx, "control_conns"), 2, "{rx}");
    assert_eq!(u(&rx, "rx_invalid"), 0, "{rx}");
}

#[test]
fn a_wrong_secret_is_refused_with_one_line_and_exit_7() {
    let _lock = common::traffic_lock();
    let (right, wrong) = (common::secret_file(), common::secret_file());
    let port = common::free_port();
    let to = format!("127.0.0.1:{port}");
    let sink = start_sink_with(
        None,
        &to,
        &["--secret-file", right.path().to_str().unwrap()],
    );
    let (code, tx, err) = send_status(
        None,
        &[
            "--to",
            &to,
            "--count",
            "1000",
            "--secret-file",
            wrong.path().to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(7), "{err}");
    assert!(err.contains("wrong secret"), "{err}");
    assert!(
        err.contains(
            "the sink refused this sender's credentials: give both sides the same --secret-file"
        ),
        "{err}"
    );
    assert!(
        tx["verdict"].is_null() && tx["sink_error"].is_string(),
        "{tx}"
    );
    // Refused at its hello, before its workers started: it opened no data connection, and
    // the sink counted nothing.
    assert_eq!(u(&tx, "connects"), 0, "{tx}");
    let (rx, sink_err) = stop_sink_with_err(sink, 0);
    assert!(sink_err.contains("refused: wrong secret"), "{sink_err}");
    assert_eq!(u(&rx, "rx_records"), 0, "{rx}");
    assert_eq!((u(&rx, "accepts"), u(&rx, "rx_invalid")), (0, 0), "{rx}");
    // The refused handshake, and the one more try the Goodbye makes.
    assert!((1..=2).contains(&u(&rx, "control_conns")), "{rx}");
}

#[test]
fn a_sender_with_the_control_channel_off_has_no_verdict_and_says_why() {
    let _lock = common::traffic_lock();
    let port = common::free_port();
    let to = format!("127.0.0.1:{port}");
    let sink = start_sink_with(None, &to, &[]);
    let (code, tx, err) = send_status(None, &["--to", &to, "--count", "500", "--control", "off"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(tx["verdict"].is_null(), "{tx}");
    assert!(
        tx["sink_error"].as_str().unwrap().contains("--control off"),
        "{tx}"
    );
    let (rx, err) = stop_sink_with_err(sink, 1);
    assert_eq!(u(&rx, "control_conns"), 0, "{rx}");
    assert_eq!(u(&rx, "rx_records"), 500, "{rx}");
    // Without a hello its clock is unknown: its latency is unknown (null), never 0, and every
    // record is counted without a sample.
    let row = &rx["senders"][0];
    assert!(row["latency"].is_null(), "{rx}");
    assert_eq!(
        u(&row["latency_clock"], "latency_unknown_packets"),
        500,
        "{rx}"
    );
    assert!(
        err.lines()
            .any(|l| l.contains("sender epoch-") && l.contains("; latency unknown (")),
        "its line says latency unknown: {err}"
    );
}

#[test]
#[ignore = "needs root: network namespaces"]
fn a_stream_over_veth_between_namespaces_matches_the_verdict_exactly() {
    let _lock = common::traffic_lock();
    assert!(
        common::is_root(),
        "this test needs root (network namespaces)"
    );
    let lab = common::Lab::create("tc", 93);
    let secret = common::secret_file();
    let secret = secret.path().to_str().unwrap();
    let port = common::free_port();
    let listen = format!("10.93.0.2:{port}");
    count_streams(&lab.tx, "output", port);
    count_streams(&lab.rx, "input", port);
    no_tail_loss_probes(&lab.tx);
    let retrans_before = snmp(&lab.tx, "Tcp", "RetransSegs");
    let sink = start_sink_with(Some(&lab.rx), &listen, &["--secret-file", secret]);
    let (code, tx, err) = send_status(
        Some(&lab.tx),
        &[
            "--to",
            &listen,
            "--conns",
            "4",
            "--size",
            "1400",
            "--duration",
            "1s",
            "--secret-file",
            secret,
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let (rx, _) = stop_sink_with_err(sink, 4);
    let v = verdict(&tx);
    assert!(u(&tx, "tx_records") > 0, "{tx}");
    assert_eq!(u(&tx, "tx_records"), u(&rx, "rx_records"), "{tx}\n{rx}");
    assert_eq!(u(&tx, "tx_bytes"), u(&rx, "rx_bytes"), "{tx}\n{rx}");
    assert_eq!(u(v, "rx_records"), u(&rx, "rx_records"), "{tx}\n{rx}");
    assert_eq!(u(v, "rx_bytes"), u(&rx, "rx_bytes"), "{tx}\n{rx}");
    assert_eq!(u(&tx, "tx_bytes"), u(&tx, "tx_records") * 1400, "{tx}");
    assert_eq!(u(&rx, "rx_invalid"), 0, "{rx}");
    assert_eq!(u(&rx, "control_conns"), 1, "{rx}");

    // The kernel's count on each side of the veth.
    let (out, arrived) = (
        streams(&lab.tx, "output", port),
        streams(&lab.rx, "input", port),
    );
    let retransmitted = snmp(&lab.tx, "Tcp", "RetransSegs") - retrans_before;
    let ctx = format!("out {out:?} in {arrived:?}, {retransmitted} resent\n{tx}\n{rx}");
    eprintln!("veth: {ctx}");
    assert_eq!(
        out.syns,
        4 + 1,
        "one SYN per data connection + control, {ctx}"
    );
    assert_eq!(arrived.syns, 4 + 1, "{ctx}");
    assert_payload(&out, u(&tx, "tx_bytes"), retransmitted, &ctx);
    assert_payload(&arrived, u(&rx, "rx_bytes"), retransmitted, &ctx);
    if retransmitted == 0 {
        assert_eq!(arrived.payload / 1400, u(&rx, "rx_records"), "{ctx}");
        assert_eq!(arrived.payload % 1400, 0, "{ctx}");
    }
}

/// A sender and a sink of different `--proto` find out from the sink's refusal of the Hello:
/// the sender stops at once, long before its `--duration`, with one line naming both protocols
/// and exit 8, and the sink says in one line what connected to it. The kernel's counters of the
/// test's own namespace are the observer: a UDP sender refused by a TCP sink sent no datagram,
/// and a TCP sender's data stopped when it was refused.
#[test]
#[ignore = "needs root: a network namespace of its own, whose Udp and Tcp counters see only this test"]
fn a_sender_of_the_other_protocol_is_refused_at_once_with_exit_8() {
    let _lock = common::traffic_lock();
    assert!(common::is_root(), "this test needs root (a namespace)");
    let ns = common::Netns::create("mism");
    let to = "127.0.0.1:7720";
    let long = ["--to", to, "--duration", "20s", "--rate", "2kpps"];

    // A UDP sender against a TCP sink: refused before its first datagram.
    let sink = start_sink_with(Some(&ns.0), to, &[]);
    let out_before = snmp(&ns.0, "Udp", "OutDatagrams");
    let started = std::time::Instant::now();
    let mut args = vec!["send", "--json"];
    args.extend_from_slice(&long);
    let (status, out, err) = common::proc::Proc::ringblast(Some(&ns.0), &args).finish();
    let took = started.elapsed();
    let sent = snmp(&ns.0, "Udp", "OutDatagrams") - out_before;
    assert_eq!(status.code(), Some(8), "{err}");
    assert!(took < std::time::Duration::from_secs(4), "{took:?}: {err}");
    let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    assert_eq!(
        last,
        "ringblast: error: the sink refused this sender: the sink counts TCP and this sender sends UDP: give both the same --proto",
        "{err}"
    );
    assert_eq!(common::last_summary(&out, "send")["tx_packets"], 0, "{out}");
    assert_eq!(sent, 0, "Udp OutDatagrams: the refused sender sent nothing");
    let (_, sink_err) = stop_sink_with_err(sink, 0);
    assert!(
        sink_err.contains(
            "refused: a UDP sender said hello to this TCP sink: start the sink with --proto udp, or the sender with --proto tcp"
        ),
        "{sink_err}"
    );

    // A TCP sender against a UDP sink: refused at its hello, it stops at the next tick.
    let mut sink = common::proc::Proc::ringblast(Some(&ns.0), &["sink", "--listen", to, "--json"]);
    sink.wait_line("control: listening on tcp", common::tcp::WAIT);
    let started = std::time::Instant::now();
    let (code, tx, err) = send_status(Some(&ns.0), &long);
    let took = started.elapsed();
    assert_eq!(code, Some(8), "{err}");
    assert!(took < std::time::Duration::from_secs(4), "{took:?}: {err}");
    assert!(
        err.contains(
            "the sink refused this sender: the sink counts UDP and this sender sends TCP: give both the same --proto"
        ),
        "{err}"
    );
    assert!(tx["verdict"].is_null(), "{tx}");
    sink.wait_line(
        "refused: a TCP sender said hello to this UDP sink: start the sink with --proto tcp, or the sender with --proto udp",
        common::tcp::WAIT,
    );
    sink.interrupt();
    let (status, _, err) = sink.finish();
    assert!(status.success(), "{err}");
}

/// A sender whose control channel finds no sink at its start (nothing listens on the port)
/// retries for 2 s, then gives up with one line naming the fix and exit 9, long before its
/// `--duration`: a UDP sender sends no datagram (the namespace's `OutDatagrams`), and a TCP
/// sender stops. With `--control off` nothing changes: the sender cannot know.
#[test]
#[ignore = "needs root: a network namespace of its own, whose Udp counters see only this test"]
fn a_sender_with_no_sink_gives_up_in_2_s_with_exit_9() {
    let _lock = common::traffic_lock();
    assert!(common::is_root(), "this test needs root (a namespace)");
    let ns = common::Netns::create("nosink");
    let to = "127.0.0.1:7730";
    for proto in ["udp", "tcp"] {
        let out_before = snmp(&ns.0, "Udp", "OutDatagrams");
        let started = std::time::Instant::now();
        let args = [
            "send",
            "--json",
            "--proto",
            proto,
            "--to",
            to,
            "--duration",
            "20s",
            "--rate",
            "2kpps",
        ];
        let (status, out, err) = common::proc::Proc::ringblast(Some(&ns.0), &args).finish();
        let took = started.elapsed();
        assert_eq!(status.code(), Some(9), "{proto}: {err}");
        assert!(
            took < std::time::Duration::from_secs(5),
            "{proto}: {took:?}: {err}"
        );
        let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
        assert!(
            last.starts_with(&format!(
                "ringblast: error: nothing answered the control channel at {to} ("
            )) && last.ends_with(
                "for 2 s since the start: start the sink first, or check --to and --control"
            ),
            "{proto}: {err}"
        );
        assert!(
            out.lines().any(|l| l.contains("\"type\":\"summary\"")),
            "{proto}: its summary: {out}"
        );
        if proto == "udp" {
            assert_eq!(snmp(&ns.0, "Udp", "OutDatagrams") - out_before, 0);
        }
    }
    // Without a control channel the sender cannot know: it tries its whole count (each send
    // the kernel refuses, after the port's ICMP unreachable, is a failed send) and exits as
    // before.
    let out_before = snmp(&ns.0, "Udp", "OutDatagrams");
    let (status, out, err) = common::proc::Proc::ringblast(
        Some(&ns.0),
        &[
            "send",
            "--json",
            "--to",
            to,
            "--control",
            "off",
            "--count",
            "100",
            "--rate",
            "2kpps",
        ],
    )
    .finish();
    assert_ne!(status.code(), Some(9), "{err}");
    let tx = common::last_summary(&out, "send");
    assert_eq!(u(&tx, "tx_packets") + u(&tx, "tx_errors"), 100, "{tx}");
    assert_eq!(
        snmp(&ns.0, "Udp", "OutDatagrams") - out_before,
        u(&tx, "tx_packets")
    );
}
