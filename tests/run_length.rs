//! How long a sender runs when nothing says: `send` stops after 10 s, as iperf3 does, and
//! `--duration 0` runs until stopped. A plain socket on loopback counts what arrived.

mod common;

use std::{
    net::UdpSocket,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use common::{proc::Proc, *};

/// A plain UDP socket on loopback counting the datagrams that reach it until stopped.
struct Counter {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<u64>,
}

impl Counter {
    fn start() -> Counter {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let addr = socket.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = thread::spawn(move || {
            let (mut n, mut buf) = (0, [0u8; 2048]);
            loop {
                match socket.recv(&mut buf) {
                    Ok(_) => n += 1,
                    Err(_) if stopped.load(Ordering::Relaxed) => return n,
                    Err(_) => {}
                }
            }
        });
        Counter { addr, stop, thread }
    }

    /// The datagrams counted, once none came for 100 ms after the stop.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn sender(to: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "send",
        "--to",
        to,
        "--rate",
        "1kpps",
        "--control",
        "off",
        "--json",
    ];
    args.extend_from_slice(extra);
    Proc::ringblast(None, &args)
}

#[test]
fn a_sender_stops_after_10_s_by_default_and_duration_0_runs_until_stopped() {
    let _lock = traffic_lock();
    let (bounded_rx, open_rx) = (Counter::start(), Counter::start());
    let started = Instant::now();
    let bounded = sender(&bounded_rx.addr, &["--interval", "0"]);
    let mut open = sender(&open_rx.addr, &["--duration", "0", "--interval", "1s"]);

    let (status, out, err) = bounded.finish();
    let took = started.elapsed();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("length: 10 s, the default"),
        "the plan says how long: {err}"
    );
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(25),
        "the default run took {took:?}"
    );
    let sent = u(&last_summary(&out, "send"), "tx_packets");
    let arrived = bounded_rx.finish();
    assert_eq!(
        arrived, sent,
        "the plain socket counted every datagram sent"
    );
    assert!(
        (9_900..=10_100).contains(&arrived),
        "10 s at 1 kpps: {arrived} datagrams"
    );

    // The unbounded sender goes on: its interval ending past 12 s comes.
    open.wait_line("-12.", Duration::from_secs(30));
    open.interrupt();
    let (status, out, err) = open.finish();
    assert!(status.success(), "{err}");
    assert!(!err.contains("length:"), "an explicit --duration 0: {err}");
    let sent = u(&last_summary(&out, "send"), "tx_packets");
    let arrived = open_rx.finish();
    assert_eq!(
        arrived, sent,
        "the plain socket counted every datagram sent"
    );
    assert!(arrived > 11_000, "ran past 12 s: {arrived} datagrams");
}
