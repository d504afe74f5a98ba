//! Forged datagrams against a live, authenticated run. An injector of the test's own sniffs
//! one real datagram of the victim's run (`AF_PACKET` on the namespace's loopback, as an
//! on-path attacker would) and sends forgeries built from it: from another address, and with
//! the victim's own source address and port (a raw socket). None may change a number:
//! - a jump of 10^12 and a jump to 2^64−2 are `implausible`, not loss;
//! - a failed-send count moved back by one (2^32−1 more failures) is `implausible`, not a
//!   real loss hidden as failed sends;
//! - copies back-dated by 100 s, or stamped 1 ns after the Unix epoch, are duplicates that
//!   give no latency or jitter sample;
//! - the same jump from another address is refused for its `source`;
//! - the right epoch, source and port with a wrong proof (an off-path guess) is `auth`;
//! - with `--auth-data`, every changed datagram, even one just ahead of the run that only
//!   the tag can tell, is `auth`, and an unchanged copy is a duplicate;
//! - without a secret, a jump of a million numbers, well within the line's bound, is
//!   `implausible` by a paced run's own reach.
//!
//! The observers are the kernel's `Udp` counters of the test's own namespace (every datagram
//! the sink read is booked once, and every one the sender sent was counted) and the
//! injector's own count of what it sent, which must show up exactly as invalid or duplicate.

mod common;

use std::{
    collections::HashSet,
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    time::{Duration, Instant},
};

use common::{inject, proc::Proc, *};
use socket2::Socket;

const DATA_PORT: u16 = 7000;
const SEQ_AT: usize = 16;
const TIMESTAMP_AT: usize = 24;
const FAILED_AT: usize = 6;
/// The first byte of the per-run proof, right after the 32-byte header.
const PROOF_AT: usize = 32;

/// One real datagram of the victim's run, as sniffed.
struct Sniffed {
    source: SocketAddrV4,
    payload: Vec<u8>,
}

impl Sniffed {
    fn seq(&self) -> u64 {
        u64::from_be_bytes(self.payload[SEQ_AT..SEQ_AT + 8].try_into().unwrap())
    }

    /// The datagram with its sequence number, send time and failed count changed.
    fn forged(&self, seq: u64, sent_ns: Option<u64>, failed: Option<u32>) -> Vec<u8> {
        let mut p = self.payload.clone();
        p[SEQ_AT..SEQ_AT + 8].copy_from_slice(&seq.to_be_bytes());
        if let Some(ns) = sent_ns {
            p[TIMESTAMP_AT..TIMESTAMP_AT + 8].copy_from_slice(&ns.to_be_bytes());
        }
        if let Some(f) = failed {
            p[FAILED_AT..FAILED_AT + 4].copy_from_slice(&f.to_be_bytes());
        }
        p
    }

    fn sent_ns(&self) -> u64 {
        u64::from_be_bytes(
            self.payload[TIMESTAMP_AT..TIMESTAMP_AT + 8]
                .try_into()
                .unwrap(),
        )
    }

    fn failed(&self) -> u32 {
        u32::from_be_bytes(self.payload[FAILED_AT..FAILED_AT + 4].try_into().unwrap())
    }
}

/// Waits (at most 10 s) for one full-header ringblast datagram to `DATA_PORT` on the
/// namespace's loopback and returns it (run inside the namespace).
fn sniff() -> Sniffed {
    let (source, payload) = inject::sniff(DATA_PORT, |_| true);
    Sniffed { source, payload }
}

/// Sends `payload` to 127.0.0.1:`DATA_PORT` as if from `source`.
fn spoof(raw: &Socket, source: SocketAddrV4, payload: &[u8]) {
    inject::spoof(
        raw,
        source,
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, DATA_PORT),
        payload,
    );
}

/// What the injector sent: from another address, as the victim, with a wrong proof, numbers
/// the victim has not sent yet (with `--auth-data` only: its token would prove them), and
/// unchanged copies.
struct Injected {
    from_other: u64,
    as_victim: u64,
    wrong_proof: u64,
    unsent: u64,
    copies: u64,
}

/// Sniffs one datagram and sends every forgery, paced so the sink's socket never overflows;
/// `tagged`: the victim tags its datagrams (`--auth-data`).
fn inject(tagged: bool) -> Injected {
    let real = sniff();
    let other = UdpSocket::bind("127.0.0.99:0").unwrap();
    let raw = inject::raw_socket();
    let pace = || std::thread::sleep(Duration::from_micros(200));
    let seq = real.seq();
    let mut injected = Injected {
        from_other: 0,
        as_victim: 0,
        wrong_proof: 0,
        unsent: 0,
        copies: 0,
    };
    for _ in 0..10 {
        other
            .send_to(
                &real.forged(seq + 1_000_000_000_000, None, None),
                ("127.0.0.1", DATA_PORT),
            )
            .unwrap();
        injected.from_other += 1;
        pace();
    }
    let victim = |payload: Vec<u8>, count: &mut u64| {
        spoof(&raw, real.source, &payload);
        *count += 1;
        pace();
    };
    let mut as_victim = 0;
    for i in 0..10 {
        victim(
            real.forged(seq + 1_000_000_000_000 + i, None, None),
            &mut as_victim,
        );
        victim(real.forged(u64::MAX - 1 - i, None, None), &mut as_victim);
        // Ahead of the run, with the failed count moved back by one: 2^32 - 1 more failures.
        let failed = Some(real.failed().wrapping_sub(1));
        victim(real.forged(seq + 5_000 + i, None, failed), &mut as_victim);
    }
    for _ in 0..500 {
        let back_dated = Some(real.sent_ns() - 100_000_000_000);
        victim(real.forged(seq, back_dated, None), &mut as_victim);
    }
    for _ in 0..20 {
        victim(real.forged(seq, Some(1), None), &mut as_victim);
    }
    injected.as_victim = as_victim;
    // An off-path guess: the right epoch, source and port, and a wrong proof.
    let mut wrong_proof = 0;
    for i in 0..10u64 {
        let mut p = real.forged(seq + 1 + i, None, None);
        p[PROOF_AT] ^= 0x5a;
        victim(p, &mut wrong_proof);
    }
    injected.wrong_proof = wrong_proof;
    if tagged {
        // Numbers just ahead of the run: plausible, so only the tag can refuse them.
        let mut unsent = 0;
        for i in 0..50 {
            victim(real.forged(seq + 2_000 + i, None, None), &mut unsent);
        }
        injected.unsent = unsent;
        let mut copies = 0;
        for _ in 0..10 {
            victim(real.payload.clone(), &mut copies);
        }
        injected.copies = copies;
    }
    injected
}

/// A sink on 127.0.0.1:`DATA_PORT` in namespace `ns` (JSON, metrics on `metrics_port`, then
/// `extra`), once its control port listens.
fn start_sink(ns: &str, metrics_port: u16, extra: &[&str]) -> Proc {
    let (listen, metrics) = (
        format!("127.0.0.1:{DATA_PORT}"),
        format!("127.0.0.1:{metrics_port}"),
    );
    let mut args = vec!["sink", "--listen", &listen, "--json", "--metrics", &metrics];
    args.extend_from_slice(extra);
    let mut sink = Proc::ringblast(Some(ns), &args);
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    sink
}

#[test]
#[ignore = "needs root: a network namespace of its own, an AF_PACKET sniffer and a raw socket"]
fn forged_datagrams_change_no_number() {
    forgeries_against(false);
}

#[test]
#[ignore = "needs root: a network namespace of its own, an AF_PACKET sniffer and a raw socket"]
fn with_auth_data_no_changed_datagram_is_counted_even_on_path() {
    forgeries_against(true);
}

/// A victim (tagging its datagrams when `tagged`) and a sink with a secret, and the
/// injector's forgeries: the victim's verdict and the sink's books are the truth.
fn forgeries_against(tagged: bool) {
    let _guard = traffic_lock();
    let ns = Netns::create("forge");
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let listen = format!("127.0.0.1:{DATA_PORT}");
    let sink = start_sink(&ns.0, 9102, &["--secret-file", secret]);
    let before = UdpSnmp::read(&ns.0);
    let injector = spawn_in_netns(&ns.0, move || inject(tagged));
    let mut args = vec![
        "send",
        "--to",
        &listen,
        "--secret-file",
        secret,
        "--json",
        "--name",
        "victim",
        "--rate",
        "5kpps",
        "--count",
        "20000",
        "--gso",
        "1",
    ];
    if tagged {
        args.push("--auth-data");
    }
    let send = Proc::ringblast(Some(&ns.0), &args);
    let injected = injector.join().expect("the injector");
    let (status, out, err) = send.finish();
    sink.interrupt();
    let (sink_status, sink_out, sink_err) = sink.finish();
    let kernel = UdpSnmp::read(&ns.0).since(before);
    assert!(status.success(), "the victim: {status}\n{err}");
    assert!(sink_status.success(), "the sink: {sink_status}\n{sink_err}");
    let send = last_summary(&out, "send");
    let sink = last_summary(&sink_out, "sink");
    let verdict = &send["sink"];
    let ctx = format!("{kernel:?}\nsend {send}\nsink {sink}");

    // The victim's verdict is the truth: every packet it sent was received or dropped by the
    // kernel (as RcvbufErrors says), none lost, and its latency is its own.
    let tx = u(&send, "tx_packets");
    assert_eq!(tx, 20_000, "{ctx}");
    assert_eq!(
        kernel.out_datagrams,
        tx + injected.from_other,
        "OutDatagrams: {ctx}"
    );
    assert_eq!(
        u(verdict, "rx_packets") + u(verdict, "rx_kernel_drops"),
        tx,
        "{ctx}"
    );
    assert_eq!(u(verdict, "rx_kernel_drops"), kernel.rcvbuf_errors, "{ctx}");
    assert_eq!(
        (u(verdict, "rx_lost"), u(verdict, "send_failed")),
        (0, 0),
        "{ctx}"
    );
    assert!(verdict["impossible"].is_null(), "{ctx}");
    let latency = &verdict["latency"];
    assert!(
        latency.get("max_ns_at_least").is_none()
            && latency["max_ns_at_most"].as_u64().unwrap() <= 500_000_000,
        "a forged send time reached the latency: {latency}"
    );
    let jitter_mean = verdict["jitter"]["mean_ns"].as_u64().unwrap();
    assert!(
        jitter_mean < 100_000_000,
        "jitter mean {jitter_mean} ns: {ctx}"
    );

    // Every datagram the kernel queued for the sink was booked once, and the injector's own
    // count shows up exactly as invalid (auth, source, implausible) or duplicate.
    let by_reason = &sink["rx_invalid_by_reason"];
    assert_eq!(
        kernel.in_datagrams,
        u(&sink, "rx_packets") + u(&sink, "rx_duplicates") + u(&sink, "rx_invalid"),
        "InDatagrams: {ctx}"
    );
    assert_eq!(u(&sink, "rx_packets"), u(verdict, "rx_packets"), "{ctx}");
    assert_eq!(u(&sink, "rx_lost"), 0, "{ctx}");
    if tagged {
        // Every changed datagram fails its tag, whoever sent it; an unchanged copy is a duplicate.
        assert_eq!(
            u(by_reason, "auth"),
            injected.from_other + injected.as_victim + injected.wrong_proof + injected.unsent,
            "{ctx}"
        );
        assert_eq!(u(&sink, "rx_duplicates"), injected.copies, "{ctx}");
    } else {
        assert_eq!(u(by_reason, "auth"), injected.wrong_proof, "{ctx}");
        assert_eq!(u(by_reason, "source"), injected.from_other, "{ctx}");
        assert_eq!(
            u(by_reason, "implausible") + u(&sink, "rx_duplicates"),
            injected.as_victim,
            "{ctx}"
        );
        assert!(u(by_reason, "implausible") >= 20, "{ctx}");
    }
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// A full ringblast header of run `epoch`, flow 0, sequence number `seq`.
fn header(epoch: u32, seq: u64) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[0..4].copy_from_slice(b"RBLS");
    h[4] = 2;
    h[12..16].copy_from_slice(&epoch.to_be_bytes());
    h[SEQ_AT..SEQ_AT + 8].copy_from_slice(&seq.to_be_bytes());
    h
}

/// The books' memory bound under a flood of runs that never said hello: a fixed session table,
/// at most `--max-senders` books and `other`, and the idle runs pruned into their totals. Before
/// pruning, each forged run kept about 430 B for good: this flood's 100 000 runs would have
/// grown the sink by about 40 MiB.
const FLOOD_GROWTH_BOUND_KIB: u64 = 8 * 1024;

#[test]
#[ignore = "needs root: a network namespace of its own, so the kernel's UDP counters see only this test's datagrams"]
fn a_random_epoch_flood_keeps_the_books_bounded() {
    let _guard = traffic_lock();
    let ns = Netns::create("flood");
    let sink = start_sink(
        &ns.0,
        9103,
        &["--session-idle", "1s", "--max-senders", "16"],
    );
    let before = UdpSnmp::read(&ns.0);
    let pid = sink.pid();
    // 2 000 runs a second, two datagrams each, for 60 s; the RSS is taken once the table has
    // filled and every run has gone through the registry (10 s), and at the end.
    let flood = spawn_in_netns(&ns.0, move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
        let started = Instant::now();
        let (mut sent, mut baseline) = (0u64, None);
        while started.elapsed() < Duration::from_secs(60) {
            let tick = Instant::now();
            for _ in 0..20 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let epoch = (state >> 16) as u32;
                for seq in 0..2 {
                    socket
                        .send_to(&header(epoch, seq), ("127.0.0.1", DATA_PORT))
                        .unwrap();
                    sent += 1;
                }
            }
            if baseline.is_none() && started.elapsed() >= Duration::from_secs(10) {
                baseline = Some(rss_kib(pid));
            }
            std::thread::sleep(Duration::from_millis(10).saturating_sub(tick.elapsed()));
        }
        (sent, baseline.unwrap())
    });
    let (sent, baseline) = flood.join().unwrap();
    wait_udp_drained(&ns.0, DATA_PORT);
    let end = rss_kib(pid);
    let metrics = in_netns(&ns.0, || scrape_local(9103));
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "{status}\n{err}");
    let kernel = UdpSnmp::read(&ns.0).since(before);
    let summary = last_summary(&out, "sink");
    let ctx = format!(
        "{kernel:?}\nRSS {baseline} -> {end} KiB\n{}",
        &err[..err.len().min(2000)]
    );

    assert_eq!(kernel.out_datagrams, sent, "{ctx}");
    assert_eq!(
        kernel.in_datagrams,
        u(&summary, "rx_packets") + u(&summary, "rx_duplicates") + u(&summary, "rx_invalid"),
        "every datagram booked once: {ctx}"
    );
    assert!(
        end <= baseline + FLOOD_GROWTH_BOUND_KIB,
        "the sink grew by {} KiB: {ctx}",
        end.saturating_sub(baseline)
    );
    let senders = summary["senders"].as_array().unwrap();
    assert!(
        senders.len() <= 17,
        "{} senders listed: {ctx}",
        senders.len()
    );
    let labels: HashSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split("sender=\"").nth(1)?.split('"').next())
        .collect();
    assert!(labels.len() <= 17, "{} sender labels: {ctx}", labels.len());
    // A run without a hello is labelled by a keyed digest, never its epoch (the summary's name).
    let epochs: HashSet<&str> = senders
        .iter()
        .filter_map(|s| s["name"].as_str()?.rsplit_once('/').map(|(_, e)| e))
        .collect();
    assert!(
        labels
            .iter()
            .all(|l| *l == "other" || l.contains("/run-") && !epochs.contains(&l[l.len() - 8..])),
        "{labels:?}"
    );
    // Most runs were booked (their two datagrams received), and all of them as runs.
    let runs: u64 = senders.iter().map(|s| u(s, "sessions")).sum();
    assert!(runs > 50_000, "{runs} runs booked: {ctx}");
    eprintln!(
        "{runs} runs, {} senders listed, {} sender labels, RSS {baseline} -> {end} KiB",
        senders.len(),
        labels.len()
    );
}

/// Jumps a million numbers ahead, from the victim's own address and port: within the line's
/// bound (250 M datagrams/s since the highest plus 100 ms is about 25 M), but far beyond what a
/// run paced at 5 kpps can have sent.
const REACH_JUMP: u64 = 1_000_000;

#[test]
#[ignore = "needs root: a network namespace of its own, an AF_PACKET sniffer and a raw socket"]
fn a_jump_within_the_lines_bound_but_beyond_a_paced_runs_reach_is_implausible() {
    let _guard = traffic_lock();
    let ns = Netns::create("reach");
    let listen = format!("127.0.0.1:{DATA_PORT}");
    // No secret: the reach bound holds with or without one.
    let mut sink = start_sink(&ns.0, 9104, &[]);
    let before = UdpSnmp::read(&ns.0);
    let (go, hello_seen) = std::sync::mpsc::channel::<()>();
    let injector = spawn_in_netns(&ns.0, move || {
        // Once the sink said the victim's hello, and its flow has gone 200 numbers further (the
        // sink's workers take a hello at their 10 ms publish cadence).
        hello_seen.recv().expect("the sink's hello line");
        let first = sniff();
        let real = loop {
            let next = sniff();
            if next.source == first.source && next.seq() >= first.seq() + 200 {
                break next;
            }
        };
        let raw = inject::raw_socket();
        let mut sent = 0u64;
        for i in 0..50 {
            spoof(
                &raw,
                real.source,
                &real.forged(real.seq() + REACH_JUMP + i, None, None),
            );
            sent += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        sent
    });
    let args = [
        "send", "--to", &listen, "--json", "--name", "victim", "--rate", "5kpps", "--count",
        "20000", "--gso", "1",
    ];
    let send = Proc::ringblast(Some(&ns.0), &args);
    sink.wait_line("sink: sender victim", Duration::from_secs(10));
    go.send(()).unwrap();
    let injected = injector.join().expect("the injector");
    let (status, out, err) = send.finish();
    sink.interrupt();
    let (sink_status, sink_out, sink_err) = sink.finish();
    let kernel = UdpSnmp::read(&ns.0).since(before);
    assert!(status.success(), "the victim: {status}\n{err}");
    assert!(sink_status.success(), "the sink: {sink_status}\n{sink_err}");
    let send = last_summary(&out, "send");
    let sink = last_summary(&sink_out, "sink");
    let verdict = &send["sink"];
    let ctx = format!("{kernel:?}\nsend {send}\nsink {sink}");

    // The victim's verdict is the truth by the kernel's counters: nothing lost.
    let tx = u(&send, "tx_packets");
    assert_eq!((tx, kernel.out_datagrams), (20_000, 20_000), "{ctx}");
    assert_eq!(
        u(verdict, "rx_packets") + u(verdict, "rx_kernel_drops"),
        tx,
        "{ctx}"
    );
    assert_eq!(u(verdict, "rx_kernel_drops"), kernel.rcvbuf_errors, "{ctx}");
    assert_eq!(u(verdict, "rx_lost"), 0, "{ctx}");
    // Every datagram the kernel queued was booked once, and every forgery as implausible.
    assert_eq!(
        kernel.in_datagrams,
        u(&sink, "rx_packets") + u(&sink, "rx_duplicates") + u(&sink, "rx_invalid"),
        "InDatagrams: {ctx}"
    );
    assert_eq!(injected, 50);
    assert_eq!(
        u(&sink["rx_invalid_by_reason"], "implausible"),
        injected,
        "{ctx}"
    );
    assert_eq!(
        (u(&sink, "rx_lost"), u(&sink, "rx_duplicates")),
        (0, 0),
        "{ctx}"
    );
}
