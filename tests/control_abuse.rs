//! Abuse of a sink's control port while a paced, authenticated sender is being counted: a
//! wrong secret, no secret, a recorded handshake replayed, an oversized frame, garbage bytes,
//! a client that connects and says nothing, 300 clients that say nothing at once, and 1000
//! connection attempts. Then floods of silent connections, from one address and from many,
//! during which a sender with the secret starts, gets its verdict and exits 0. Each gets its own clear line at the sink (and exit 7 where a `ringblast
//! send` is refused); all the while the paced run is counted exactly, and its control connection
//! is never dropped. A sink on a non-loopback address with no secret refuses to start. The abuse
//! runs on the loopback of a network namespace of its own, so that the kernel's `Udp` counters
//! there see only this test's datagrams and judge both sides' counts.

mod common;

use std::{
    io::{Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use common::{proc::Proc, *};
use serde_json::Value;

/// A TCP relay in front of the sink's control port that records what the client sent on its
/// first connection: a real handshake, to replay later.
fn recording_relay(to: u16) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let rec = Arc::clone(&recorded);
    thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                return;
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let rec = (n == 0).then(|| Arc::clone(&rec));
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(k) = c_in.read(&mut buf) {
                    if k == 0 || s_out.write_all(&buf[..k]).is_err() {
                        break;
                    }
                    if let Some(r) = &rec {
                        r.lock().unwrap().extend_from_slice(&buf[..k]);
                    }
                }
                let _ = s_out.shutdown(Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            thread::spawn(move || {
                let _ = std::io::copy(&mut s_in, &mut c_out);
                let _ = c_out.shutdown(Shutdown::Write);
            });
        }
    });
    (port, recorded)
}

/// Writes `bytes` to a fresh control connection and waits (at most 6 s) for the sink to close
/// it; returns the local address the sink logs the connection under.
fn send_and_wait_close(port: u16, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let local = s.local_addr().unwrap().to_string();
    s.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    if !bytes.is_empty() {
        s.write_all(bytes).unwrap();
    }
    let started = Instant::now();
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the sink kept {local} open ({e}) after {:?}",
                started.elapsed()
            ),
        }
    }
    local
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn last_json(stdout: &str, role: &str) -> Value {
    stdout
        .lines()
        .filter_map(common::schema::parsed)
        .rfind(|v| v["type"] == "summary" && v["role"] == role)
        .unwrap_or_else(|| panic!("no {role} summary in:\n{stdout}"))
}

fn send_cmd(port: u16, extra: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(bin());
    c.args(["send", "--to", &format!("127.0.0.1:{port}"), "--json"])
        .args(extra);
    c
}

/// How long after its own connect each of `clients` saw the sink close it (reads to EOF, each
/// on its own thread, so that one waiting for its timeout does not delay another's close).
fn closed_after(clients: Vec<(TcpStream, Instant)>) -> Vec<Duration> {
    let readers: Vec<_> = clients
        .into_iter()
        .map(|(mut s, started)| {
            thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut buf = [0u8; 512];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(_) => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                        Err(e) => panic!("the sink kept a silent client open: {e}"),
                    }
                }
                started.elapsed()
            })
        })
        .collect();
    readers.into_iter().map(|r| r.join().unwrap()).collect()
}

/// Connections waiting in the accept queue of the TCP listener on `port` (`ss`'s Recv-Q of a
/// listening socket), in the calling thread's network namespace.
fn accept_queue(port: u16) -> u64 {
    let out = std::process::Command::new("ss")
        .args(["-Hlnt", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|q| q.parse::<u64>().ok())
                .unwrap()
        })
        .sum()
}

#[test]
#[ignore = "needs root: runs in a network namespace of its own, whose Udp counters see only this test's datagrams"]
fn control_port_abuse_never_disturbs_a_counted_run() {
    let _guard = traffic_lock();
    let ns = Netns::create("abuse");
    let (in_before, out_before) = (
        snmp(&ns.0, "Udp", "InDatagrams"),
        snmp(&ns.0, "Udp", "OutDatagrams"),
    );
    let (paced_tx, others_tx, sink_rx) = in_netns(&ns.0, abuse_while_counting);
    let (received, sent) = (
        snmp(&ns.0, "Udp", "InDatagrams") - in_before,
        snmp(&ns.0, "Udp", "OutDatagrams") - out_before,
    );
    // The kernel's word on both sides: every datagram the three senders say they sent left a
    // socket, and every one the sink counted reached its socket (the sink is the only receiver).
    assert_eq!(sent, paced_tx + others_tx, "Udp OutDatagrams");
    assert_eq!(received, sink_rx, "Udp InDatagrams");
    assert_eq!(received, sent, "nothing is lost on loopback at 4 kpps");
}

/// The abuse itself, on a thread inside the namespace (the processes it starts are born there).
/// Returns the paced sender's `tx_packets`, the refused senders' together, and the sink's total
/// `rx_packets`.
fn abuse_while_counting() -> (u64, u64, u64) {
    let secret = secret_file();
    let wrong = secret_file();
    let secret_path = secret.path().to_str().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let mut sink = Proc::spawn({
        let mut c = std::process::Command::new(bin());
        c.args(["sink", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--secret-file", secret_path, "--json"])
            .args(["--metrics", &format!("127.0.0.1:{metrics_port}")]);
        c
    });
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    let (relay, recorded) = recording_relay(port);

    let relay_addr = format!("127.0.0.1:{relay}");
    let mut paced = Proc::spawn(send_cmd(
        port,
        &[
            "--name",
            "paced",
            "--rate",
            "4kpps",
            "--duration",
            "16s",
            "--secret-file",
            secret_path,
            "--control",
            &relay_addr,
        ],
    ));
    paced.wait_line("control: connected to sink", Duration::from_secs(10));
    sink.wait_line("sink: sender paced", Duration::from_secs(10));

    // A wrong secret, and no secret at all: each sender is told in one line and exits 7.
    let mut others_tx = 0;
    for (name, extra) in [
        (
            "intruder",
            vec!["--secret-file", wrong.path().to_str().unwrap()],
        ),
        ("nosecret", vec![]),
    ] {
        let mut args = vec!["--name", name, "--count", "200", "--rate", "2kpps"];
        args.extend(extra);
        let (status, out, err) = Proc::spawn(send_cmd(port, &args)).finish();
        assert_eq!(status.code(), Some(7), "{name}: {err}");
        // A refused sender stops before its first datagram (the kernel's OutDatagrams holds
        // the paced sender's alone).
        let tx = last_json(&out, "send")["tx_packets"].as_u64().unwrap();
        assert_eq!(tx, 0, "{name}: {err}");
        others_tx += tx;
        assert!(
            err.contains(
                "the sink refused this sender's credentials: give both sides the same --secret-file"
            ),
            "{name}: {err}"
        );
    }
    sink.wait_line("refused: wrong secret", Duration::from_secs(5));
    sink.wait_line(
        "sent no credentials but this sink requires --secret-file",
        Duration::from_secs(5),
    );

    // The paced sender's own handshake, recorded on the way, replayed: the sink's fresh nonce
    // makes the recorded MAC worthless.
    let replay = recorded.lock().unwrap().clone();
    assert!(
        replay.len() > 64,
        "the relay recorded {} bytes",
        replay.len()
    );
    let peer = send_and_wait_close(port, &replay);
    sink.wait_line(
        &format!("control: {peer}: refused: wrong secret"),
        Duration::from_secs(5),
    );

    // A length of 4 GiB − 1: refused before anything is allocated.
    let peer = send_and_wait_close(port, &[0xFF, 0xFF, 0xFF, 0xFF, 1, 2]);
    sink.wait_line(
        &format!("control: {peer}: handshake failed: frame of"),
        Duration::from_secs(5),
    );

    // Garbage that parses as a small frame of an unknown version.
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut framed = vec![0, 0, 0, 64];
    framed.extend_from_slice(&garbage);
    let peer = send_and_wait_close(port, &framed);
    sink.wait_line(
        &format!("control: {peer}: handshake failed"),
        Duration::from_secs(5),
    );

    // Connects and says nothing: dropped at the handshake timeout.
    let peer = send_and_wait_close(port, &[]);
    sink.wait_line(
        &format!("control: {peer}: dropped: no handshake within"),
        Duration::from_secs(5),
    );

    // 300 clients connect at once from one address and say nothing. The sink holds at most 8
    // unauthenticated connections from one address, each newer one evicting the oldest: 292 are
    // closed at once and the last 8 at the 1 s handshake timeout; none is refused as busy (the
    // paced sender is the one authenticated connection). Told apart here by when each was
    // closed after its own connect. They connect in batches of 50, each once the listener's
    // accept queue (128 deep) has drained: 300 at once overflowed it on a loaded run, and the
    // SYNs the kernel dropped came back 1 and 2 s later.
    let mut silent = Vec::with_capacity(300);
    for _ in 0..6 {
        for _ in 0..50 {
            let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
            silent.push((client, Instant::now()));
        }
        let until = Instant::now() + Duration::from_secs(5);
        while accept_queue(port) > 0 {
            assert!(Instant::now() < until, "the sink stopped accepting");
            thread::sleep(Duration::from_millis(2));
        }
    }
    let closes = closed_after(silent);
    let at_once = closes
        .iter()
        .filter(|d| **d < Duration::from_millis(800))
        .count();
    let at_timeout = closes
        .iter()
        .filter(|d| (Duration::from_millis(950)..Duration::from_secs(3)).contains(*d))
        .count();
    assert_eq!((at_once, at_timeout), (292, 8), "closed after {closes:?}");
    sink.wait_line(
        "dropped: unauthenticated, evicted for a newer connection (at most 64 at once, 8 per address)",
        Duration::from_secs(5),
    );

    // 1000 connection attempts, each closed at once.
    for _ in 0..1000 {
        drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    let metrics = {
        // The counters reach the exporter on the reporter's tick: wait until every one of the
        // 1309 connections has an outcome (the assertions below say which, if it never comes).
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let m = scrape(metrics_port);
            let outcomes: u64 = [
                "authenticated",
                "auth_failed",
                "protocol_error",
                "timeout",
                "busy",
                "evicted",
            ]
            .iter()
            .filter_map(|r| {
                let series = format!("ringblast_rx_control_connections_total{{result=\"{r}\"}} ");
                m.lines()
                    .find_map(|l| l.strip_prefix(series.as_str()))
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .sum::<f64>() as u64;
            if outcomes >= 1309 || Instant::now() > until {
                break m;
            }
            thread::sleep(Duration::from_millis(100));
        }
    };
    let c = |result: &str| {
        // A missing series fails the test: it is never read as 0.
        series_value(
            &metrics,
            &format!("ringblast_rx_control_connections_total{{result=\"{result}\"}}"),
        )
    };
    // The exact mix this test made: paced; intruder and nosecret twice each (a refused sender
    // tries once more for its verdict at the end); replay, oversize, garbage, silent; the 300
    // silent at once; the 1000.
    assert_eq!(c("accepted"), 1309, "{metrics}");
    assert_eq!(
        c("authenticated"),
        1,
        "only the paced sender gets in: {metrics}"
    );
    assert_eq!(c("timeout"), 1 + 8, "{metrics}");
    assert_eq!(
        c("auth_failed"),
        5,
        "intruder 2, nosecret 2, replay 1: {metrics}"
    );
    // Nothing is busy: one connection is authenticated. Oversize, garbage and the 1000 that
    // closed at once are protocol errors, or evicted where 8 newer ones came before the sink
    // read the close.
    assert_eq!(c("busy"), 0, "{metrics}");
    assert!(c("evicted") >= 292, "{metrics}");
    assert_eq!(c("protocol_error") + c("evicted"), 1002 + 292, "{metrics}");
    assert_eq!(
        c("accepted"),
        c("authenticated")
            + c("auth_failed")
            + c("protocol_error")
            + c("timeout")
            + c("busy")
            + c("evicted"),
        "every connection is accounted for once: {metrics}"
    );

    let (status, out, err) = paced.finish();
    assert!(status.success(), "{err}");
    assert!(
        !err.contains("control: lost the sink") && !err.contains("connection 2"),
        "the paced sender's control connection was disturbed: {err}"
    );
    let send = last_json(&out, "send");
    let tx = send["tx_packets"].as_u64().unwrap();
    // 4 kpps for 16 s: 64 000, less at most the last 25 ms the run's end can cut off.
    assert!((63_900..=64_000).contains(&tx), "{send}");
    assert_eq!(send["tx_errors"], 0, "{send}");
    let verdict = &send["sink"];
    assert_eq!(verdict["rx_packets"].as_u64(), Some(tx), "{send}");
    for key in [
        "rx_lost",
        "rx_reordered",
        "rx_duplicates",
        "rx_kernel_drops",
        "rx_unconfirmed",
    ] {
        assert_eq!(verdict[key], 0, "{key}: {send}");
    }

    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let summary = last_json(&out, "sink");
    let row = summary["senders"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "paced"))
        .unwrap_or_else(|| panic!("no sender paced in {summary}"));
    assert_eq!(row["rx_packets"].as_u64(), Some(tx), "{summary}");
    assert_eq!(row["rx_lost"], 0, "{summary}");
    (tx, others_tx, summary["rx_packets"].as_u64().unwrap())
}

/// Opens silent connections to `port` from `from` (in turn), one every `every`, holding the
/// newest 700 open (over 3 s of them, so a sink that drops a silent one only at 3 s is never
/// freed early by a close), until `stop` is set or `most` were tried; returns how many
/// connected.
fn silent_flood(
    port: u16,
    from: Vec<[u8; 4]>,
    every: Duration,
    most: usize,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut held = std::collections::VecDeque::new();
        let mut made = 0;
        for i in 0..most {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            let sock =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            sock.bind(&std::net::SocketAddr::from((from[i % from.len()], 0)).into())
                .unwrap();
            if sock
                .connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
                .is_ok()
            {
                made += 1;
                held.push_back(sock);
                if held.len() > 700 {
                    held.pop_front();
                }
            }
            thread::sleep(every);
        }
        made
    })
}

#[test]
#[ignore = "needs root: runs in a network namespace of its own, so the floods stay off the host's loopback"]
fn a_sender_with_the_secret_gets_in_during_a_flood_of_silent_connections() {
    let _guard = traffic_lock();
    let ns = Netns::create("flood");
    in_netns(&ns.0, flood_then_send);
}

/// A sink with a secret, flooded with silent connections at up to 200 a second (more than twice
/// the 85 a second that kept a sink of the old 3 s timeout full): first from 127.0.0.1, the
/// address the sender uses too, then from 39 others. Each time a `ringblast send` with the
/// secret starts 2 s into the flood (past the 256 connections that filled the old sink) and
/// must get its verdict and exit 0.
fn flood_then_send() {
    let secret = secret_file();
    let secret_path = secret.path().to_str().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let mut sink = Proc::spawn({
        let mut c = std::process::Command::new(bin());
        c.args(["sink", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--secret-file", secret_path, "--json"])
            .args(["--metrics", &format!("127.0.0.1:{metrics_port}")]);
        c
    });
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    let floods: [(&str, Vec<[u8; 4]>); 2] = [
        ("one-address", vec![[127, 0, 0, 1]]),
        ("many-addresses", (2..=40).map(|n| [127, 0, 0, n]).collect()),
    ];
    let mut flooded = 0;
    for (name, from) in floods {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flood = silent_flood(
            port,
            from,
            Duration::from_millis(5),
            4000,
            Arc::clone(&stop),
        );
        thread::sleep(Duration::from_secs(2));
        let (status, out, err) = Proc::spawn(send_cmd(
            port,
            &[
                "--name",
                name,
                "--secret-file",
                secret_path,
                "--count",
                "2000",
                "--rate",
                "2kpps",
            ],
        ))
        .finish();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flooded += flood.join().unwrap();
        assert!(status.success(), "{name}: {err}");
        assert!(
            !err.contains("busy") && !err.contains("refused"),
            "{name}: {err}"
        );
        let send = last_json(&out, "send");
        let tx = send["tx_packets"].as_u64().unwrap();
        assert_eq!(tx, 2000, "{name}: {send}");
        assert_eq!(
            send["sink"]["rx_packets"].as_u64(),
            Some(tx),
            "{name}: {send}"
        );
        assert_eq!(send["sink"]["rx_lost"], 0, "{name}: {send}");
    }
    // Both floods together made more than 200 connections a second for over 2 s.
    assert!(flooded > 400, "{flooded}");
    let metrics = {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let m = scrape(metrics_port);
            let series = "ringblast_rx_control_connections_total{result=\"authenticated\"} ";
            let done = m
                .lines()
                .find_map(|l| l.strip_prefix(series))
                .is_some_and(|v| v.parse::<f64>().is_ok_and(|v| v >= 2.0));
            if done || Instant::now() > until {
                break m;
            }
            thread::sleep(Duration::from_millis(100));
        }
    };
    let c = |result: &str| {
        series_value(
            &metrics,
            &format!("ringblast_rx_control_connections_total{{result=\"{result}\"}}"),
        )
    };
    assert!(c("authenticated") >= 2, "{metrics}");
    assert!(c("evicted") > 0, "the floods filled the caps: {metrics}");
    assert_eq!(c("busy"), 0, "{metrics}");
    sink.interrupt();
    let (status, _, err) = sink.finish();
    assert!(status.success(), "{err}");
}

#[test]
#[ignore = "needs root: runs in a network namespace of its own, like the other paired runs here"]
fn a_sender_that_gives_up_on_a_busy_sink_says_so_and_exits_5() {
    let _guard = traffic_lock();
    let ns = Netns::create("busy");
    in_netns(&ns.0, busy_sink);
}

/// A sink with one place (the test hook), held by a paced sender with the secret: a second
/// sender with the secret is told the sink is busy, never that its credentials are wrong,
/// retries for 2 s, gives up before sending, and exits 5, and so does a search; the first is
/// served throughout.
fn busy_sink() {
    let secret = secret_file();
    let secret_path = secret.path().to_str().unwrap();
    let port = free_port();
    let mut sink = Proc::spawn({
        let mut c = std::process::Command::new(bin());
        c.args(["sink", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--secret-file", secret_path, "--json"])
            .env("RINGBLAST_TEST_CONTROL_PLACES", "1");
        c
    });
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    let mut holder = Proc::spawn(send_cmd(
        port,
        &[
            "--name",
            "holder",
            "--secret-file",
            secret_path,
            "--rate",
            "1kpps",
            "--duration",
            "20s",
        ],
    ));
    holder.wait_line("control: connected to sink", Duration::from_secs(10));
    let started = Instant::now();
    let (status, out, err) = Proc::spawn(send_cmd(
        port,
        &[
            "--name",
            "late",
            "--secret-file",
            secret_path,
            "--count",
            "200",
            "--rate",
            "2kpps",
        ],
    ))
    .finish();
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "the late sender gave up after the holder left: {:?}",
        started.elapsed()
    );
    assert_eq!(status.code(), Some(5), "{err}");
    assert!(
        err.contains("control: the sink is busy: this sink already serves 1 authenticated control connections"),
        "{err}"
    );
    let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    assert!(
        last.contains("the sink is busy") && last.contains("run again later"),
        "{err}"
    );
    assert!(
        !err.contains("credentials"),
        "busy named as a credentials problem: {err}"
    );
    // It gave up at its start (busy for 2 s), before its first datagram.
    assert_eq!(last_json(&out, "send")["tx_packets"], 0, "{out}");
    let search = std::process::Command::new(bin())
        .args(["search", "--to", &format!("127.0.0.1:{port}")])
        .args(["--secret-file", secret_path, "--max-rate", "2kpps"])
        .args([
            "--trial",
            "200ms",
            "--final-trial",
            "200ms",
            "--max-time",
            "30s",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&search.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(19),
        "the search gave up after the holder left: {:?}",
        started.elapsed()
    );
    assert_eq!(search.status.code(), Some(5), "{err}");
    let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    assert!(last.contains("the sink is busy"), "{err}");
    assert!(!err.contains("credentials"), "{err}");
    let (status, out, err) = holder.finish();
    assert!(status.success(), "{err}");
    let send = last_json(&out, "send");
    assert_eq!(send["sink"]["rx_packets"], send["tx_packets"], "{send}");
    sink.interrupt();
    let (status, _, err) = sink.finish();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("refused: busy: this sink already serves 1"),
        "{err}"
    );
}

#[test]
fn a_sink_off_loopback_without_a_secret_refuses_to_start() {
    let port = free_port();
    let started = Instant::now();
    let out = ringblast(&[
        "sink",
        "--listen",
        &format!("0.0.0.0:{port}"),
        "--duration",
        "5s",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("--secret-file") && lines[0].contains("--insecure-control"),
        "{err}"
    );
}
