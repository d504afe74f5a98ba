//! A man in the middle of the control channel. Real senders reach a real sink's control port
//! through a relay that reads the frames and, on each sender's first connection, changes one
//! byte of a Verdict, a Goodbye or a Progress, replays an old Progress, swaps two frames, drops
//! one, or cuts the stream in the middle of a frame. Each is caught: the connection is dropped
//! and counted under its reason (`ringblast_rx_control_connections_total{result}` at the sink,
//! `control_integrity_failures` in the sender's summary), the sender reconnects, and every
//! verdict it ends with is the sink's true count. A paced run counted directly all the while
//! stays exact, and the kernel (`Udp InDatagrams` in the test's own network namespace) is the
//! observer that every datagram arrived and was booked.

mod common;

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    os::fd::AsFd,
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use common::{proc::Proc, *};

const DATA_PORT: u16 = 7000;
const METRICS_PORT: u16 = 9101;
const PROGRESS: u8 = 8;
const GOODBYE: u8 = 10;
const VERDICT: u8 = 11;

/// What the relay does to the frames of one kind in one direction of the first connection.
#[derive(Clone, Copy, Debug)]
enum Tamper {
    /// Flips one payload byte of the first such frame.
    Flip,
    /// Sends the first such frame again right after the second.
    Replay,
    /// Holds the first such frame back until the next frame has gone.
    Swap,
    /// Drops the first such frame.
    Drop,
    /// Forwards half of the second such frame, then closes both sides.
    Cut,
}

#[derive(Clone, Copy, Debug)]
struct Plan {
    to_sink: bool,
    kind: u8,
    tamper: Tamper,
}

/// Moves the calling thread into network namespace `ns` (sockets it opens live there).
fn enter(ns: &str) {
    let f = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("open the namespace");
    nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
}

/// Takes the first whole frame (`[u32 length][length bytes]`) off the front of `buf`.
fn take_frame(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let len = u32::from_be_bytes(buf.get(..4)?.try_into().unwrap()) as usize;
    (buf.len() >= 4 + len).then(|| buf.drain(..4 + len).collect())
}

/// Copies frames from `src` to `dst`, applying `plan` (when given) to its frames.
fn pump(mut src: TcpStream, mut dst: TcpStream, plan: Option<Plan>) {
    let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
    let (mut seen, mut first, mut held) = (0, None::<Vec<u8>>, None::<Vec<u8>>);
    loop {
        let n = match src.read(&mut chunk) {
            Ok(0) | Err(_) => {
                let _ = dst.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(frame) = take_frame(&mut buf) {
            let mut out = Vec::new();
            match plan.filter(|p| frame.get(5) == Some(&p.kind)) {
                Some(p) => {
                    seen += 1;
                    match (p.tamper, seen) {
                        (Tamper::Flip, 1) => {
                            let mut f = frame;
                            f[7] ^= 0x01;
                            out.push(f);
                        }
                        (Tamper::Replay, 1) => {
                            first = Some(frame.clone());
                            out.push(frame);
                        }
                        (Tamper::Replay, 2) => {
                            out.push(frame);
                            out.extend(first.take());
                        }
                        (Tamper::Swap, 1) => {
                            held = Some(frame);
                            continue;
                        }
                        (Tamper::Drop, 1) => continue,
                        (Tamper::Cut, 2) => {
                            let _ = dst.write_all(&frame[..frame.len() / 2]);
                            let _ = dst.shutdown(Shutdown::Both);
                            let _ = src.shutdown(Shutdown::Both);
                            return;
                        }
                        _ => out.push(frame),
                    }
                }
                None => out.push(frame),
            }
            out.extend(held.take());
            for f in out {
                if dst.write_all(&f).is_err() {
                    let _ = src.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
    }
}

/// Starts a relay in `ns` in front of the sink's control port; returns its port. Only the
/// first connection through it is tampered with, so the sender's reconnection gets through.
fn relay(ns: &str, sink_port: u16, plan: Plan) -> u16 {
    let (tx, rx) = mpsc::channel();
    let ns = ns.to_string();
    thread::spawn(move || {
        enter(&ns);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        tx.send(listener.local_addr().unwrap().port()).unwrap();
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { return };
            let Ok(sink) = TcpStream::connect(("127.0.0.1", sink_port)) else {
                return;
            };
            let plan = (n == 0).then_some(plan);
            let (c2, s2) = (client.try_clone().unwrap(), sink.try_clone().unwrap());
            let up = plan.filter(|p| p.to_sink);
            let down = plan.filter(|p| !p.to_sink);
            thread::spawn(move || pump(client, sink, up));
            thread::spawn(move || pump(s2, c2, down));
        }
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap()
}

/// The sink's metrics, scraped from inside `ns`.
fn scrape_in(ns: &str) -> String {
    let ns = ns.to_string();
    thread::spawn(move || {
        enter(&ns);
        scrape_local(METRICS_PORT)
    })
    .join()
    .unwrap()
}

fn connections(metrics: &str, result: &str) -> u64 {
    series_value(
        metrics,
        &format!("ringblast_rx_control_connections_total{{result=\"{result}\"}}"),
    )
}

#[test]
#[ignore = "needs root: a network namespace of its own, so the kernel's UDP counters see only this test's datagrams"]
fn a_relay_that_tampers_is_caught_and_every_count_stays_true() {
    let _guard = traffic_lock();
    let ns = Netns::create("mitm");
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let listen = format!("127.0.0.1:{DATA_PORT}");
    let metrics = format!("127.0.0.1:{METRICS_PORT}");
    let mut sink = Proc::ringblast(
        Some(&ns.0),
        &[
            "sink",
            "--listen",
            &listen,
            "--secret-file",
            secret,
            "--json",
            "--metrics",
            &metrics,
        ],
    );
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    let before = snmp(&ns.0, "Udp", "InDatagrams");

    let cases = [
        (
            "verdict-flip",
            Plan {
                to_sink: false,
                kind: VERDICT,
                tamper: Tamper::Flip,
            },
        ),
        (
            "goodbye-flip",
            Plan {
                to_sink: true,
                kind: GOODBYE,
                tamper: Tamper::Flip,
            },
        ),
        (
            "progress-flip",
            Plan {
                to_sink: true,
                kind: PROGRESS,
                tamper: Tamper::Flip,
            },
        ),
        (
            "progress-replay",
            Plan {
                to_sink: true,
                kind: PROGRESS,
                tamper: Tamper::Replay,
            },
        ),
        (
            "progress-swap",
            Plan {
                to_sink: true,
                kind: PROGRESS,
                tamper: Tamper::Swap,
            },
        ),
        (
            "progress-drop",
            Plan {
                to_sink: true,
                kind: PROGRESS,
                tamper: Tamper::Drop,
            },
        ),
        (
            "progress-cut",
            Plan {
                to_sink: true,
                kind: PROGRESS,
                tamper: Tamper::Cut,
            },
        ),
    ];
    let paced = Proc::ringblast(
        Some(&ns.0),
        &[
            "send",
            "--to",
            &listen,
            "--secret-file",
            secret,
            "--json",
            "--name",
            "paced",
            "--rate",
            "3kpps",
            "--count",
            "15000",
        ],
    );
    let senders: Vec<(&str, Proc)> = cases
        .iter()
        .map(|(name, plan)| {
            let control = format!("127.0.0.1:{}", relay(&ns.0, DATA_PORT, *plan));
            let args = [
                "send",
                "--to",
                &listen,
                "--control",
                &control,
                "--secret-file",
                secret,
                "--json",
                "--name",
                name,
                "--rate",
                "1kpps",
                "--count",
                "4000",
            ];
            (*name, Proc::ringblast(Some(&ns.0), &args))
        })
        .collect();

    let mut sent = BTreeMap::new();
    for (name, p) in std::iter::once(("paced", paced)).chain(senders) {
        let (status, out, err) = p.finish();
        assert!(status.success(), "{name}: {status}\n{err}");
        let s = last_summary(&out, "send");
        let verdict = &s["sink"];
        // Every verdict a sender ends with is the sink's true count of what it sent.
        assert_eq!(
            u(verdict, "rx_packets"),
            u(&s, "tx_packets"),
            "{name}: {s}\n{err}"
        );
        assert_eq!(u(verdict, "rx_lost"), 0, "{name}: {s}");
        let caught = &s["control_integrity_failures"];
        let want_bad_mac = u64::from(name == "verdict-flip");
        assert_eq!(caught["bad_mac"], want_bad_mac, "{name}: {caught}\n{err}");
        for reason in ["replayed", "out_of_order", "truncated"] {
            assert_eq!(caught[reason], 0, "{name}: {caught}");
        }
        if name == "verdict-flip" {
            assert!(err.contains("a frame failed its authentication"), "{err}");
        }
        sent.insert(name, u(&s, "tx_packets"));
    }

    // The sink counted each tampered connection under its reason: two changed frames (the
    // Goodbye and the Progress), a replay, a swap and a drop (both a skipped sequence number),
    // and a cut frame. The verdict was changed on its way to the sender, which caught it.
    let until = Instant::now() + Duration::from_secs(5);
    let m = loop {
        let m = scrape_in(&ns.0);
        if connections(&m, "truncated") >= 1 || Instant::now() > until {
            break m;
        }
        thread::sleep(Duration::from_millis(100));
    };
    let counted: Vec<(&str, u64)> = ["bad_mac", "replayed", "out_of_order", "truncated"]
        .iter()
        .map(|r| (*r, connections(&m, r)))
        .collect();
    assert_eq!(
        counted,
        [
            ("bad_mac", 2),
            ("replayed", 1),
            ("out_of_order", 2),
            ("truncated", 1)
        ],
        "{m}"
    );
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "{err}");
    for reason in [
        "a frame failed its authentication",
        "a frame was replayed",
        "a frame is out of order",
        "truncated frame",
    ] {
        assert!(
            err.contains(reason),
            "no {reason:?} in the sink's log:\n{err}"
        );
    }

    // The kernel delivered exactly what the senders sent, and the sink booked every datagram,
    // each under the sender that sent it.
    let arrived = snmp(&ns.0, "Udp", "InDatagrams") - before;
    let total: u64 = sent.values().sum();
    assert_eq!(arrived, total, "the kernel delivered {arrived} of {total}");
    let summary = last_summary(&out, "sink");
    assert_eq!(u(&summary, "rx_packets"), arrived, "{summary}");
    let books: BTreeMap<&str, u64> = summary["senders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), u(s, "rx_packets")))
        .collect();
    for (name, n) in &sent {
        assert_eq!(books.get(name), Some(n), "{name}: {summary}");
    }
}
