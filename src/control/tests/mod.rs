//! Shared fixtures for the control-channel tests: a fake sink's books, a fake sender view,
//! one sample of every message, and waits on channels and counters (never fixed sleeps).
//! All sockets are on 127.0.0.1.

mod e2e;
mod fuzz;
mod handshake;
mod msgs;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::auth::Secret;
use super::client::{ClientConfig, ClientEvent, ControlClient, NoVerdict, SenderView};
use super::frame::{self, decode, encode};
use super::msg::*;
use super::server::{
    ControlServer, HelloFrom, RunningServer, ServerConfig, ServerStats, SinkBooks,
};
use crate::error::Error;

const WAIT: Duration = Duration::from_secs(10);

struct Books {
    session: String,
    hellos: Mutex<Sender<Hello>>,
    progress: Mutex<Sender<Progress>>,
    clocks: Mutex<Sender<ClockEstimate>>,
}

impl SinkBooks for Books {
    fn hello(&self, hello: &Hello, _: HelloFrom) -> u64 {
        let _ = self.hellos.lock().unwrap().send(hello.clone());
        42
    }
    fn clock(&self, _: SocketAddr, _: &str, _: u32, e: &ClockEstimate) {
        let _ = self.clocks.lock().unwrap().send(*e);
    }
    fn progress(&self, _: SocketAddr, _: &str, _: u32, p: &Progress) {
        let _ = self.progress.lock().unwrap().send(p.clone());
    }
    fn goodbye(&self, _: SocketAddr, name: &str, epoch: u32, g: &Goodbye) -> Verdict {
        let totals = FlowVerdict {
            rx_packets: g.flows.iter().map(|f| f.next_seq).sum(),
            rx_late: 1,
            ..Default::default()
        };
        Verdict {
            sink_session: self.session.clone(),
            name: name.into(),
            epoch,
            sizes: vec![SizeCount {
                payload: 64,
                packets: totals.rx_packets,
                bytes: 64 * totals.rx_packets,
            }],
            totals,
            clock: Some(VerdictClock {
                kind: crate::latency_clock::ClockKind::SameClock,
                offset_ns: Some(0),
                error_bound_ns: Some(0),
                control_rtt_ns: None,
                latency_unknown_packets: 0,
                latency_clamped_packets: 0,
                reason: None,
            }),
            latency_p999_ns: 7,
            jitter: Some(Box::new(crate::control::msg::VerdictJitter {
                samples: 9,
                mean_ns: 400,
                p50_ns: 1_000,
                p99_ns: 1_000,
                p999_ns: 1_000,
                max_ns: 1_000,
            })),
            // Its counts are never all in: the verdict says so to a sender that can hear it.
            incomplete: true,
            cells: Some(Box::new(crate::control::msg::VerdictCells {
                latency: [3; crate::stats::LATENCY_CELLS],
                ..Default::default()
            })),
            ..Default::default()
        }
    }
    fn disconnected(&self, _: SocketAddr, _: &str, _: u32, _: bool) {}
}

struct Sink {
    server: RunningServer,
    hellos: Receiver<Hello>,
    progress: Receiver<Progress>,
    clocks: Receiver<ClockEstimate>,
    log: Receiver<String>,
}

fn sink_at(
    listen: SocketAddr,
    session: &str,
    secret: Option<&str>,
    tweak: impl FnOnce(&mut ServerConfig),
) -> Sink {
    let mut cfg = ServerConfig::new(listen, session);
    cfg.secret = secret.and_then(Secret::new).map(Arc::new);
    cfg.heartbeat = Duration::from_millis(100);
    tweak(&mut cfg);
    let (htx, hellos) = mpsc::channel();
    let (ptx, progress) = mpsc::channel();
    let (ctx, clocks) = mpsc::channel();
    let (ltx, log) = mpsc::channel();
    let books = Books {
        session: session.into(),
        hellos: Mutex::new(htx),
        progress: Mutex::new(ptx),
        clocks: Mutex::new(ctx),
    };
    let ltx = Mutex::new(ltx);
    let server = ControlServer::bind(cfg).unwrap().start(
        Arc::new(books),
        Box::new(move |l| {
            let _ = ltx.lock().unwrap().send(l);
        }),
    );
    Sink {
        server,
        hellos,
        progress,
        clocks,
        log,
    }
}

fn sink(secret: Option<&str>) -> Sink {
    sink_at("127.0.0.1:0".parse().unwrap(), "sink-1", secret, |_| {})
}

struct View;

impl SenderView for View {
    fn hello(&self, reconnect: u32) -> Hello {
        Hello {
            name: "tx-1".into(),
            epoch: 7,
            flows: vec![FlowStart {
                flow: 0,
                first_seq: 0,
                next_seq: 10,
                failed: 0,
            }],
            size: 64,
            rate_pps: None,
            elapsed_ns: 0,
            reconnect,
            step: None,
            boot_id: None,
            reach: None,
            proto: None,
        }
    }
    fn progress(&self) -> Progress {
        Progress {
            flows: vec![FlowProgress {
                flow: 0,
                next_seq: 10,
                failed: 0,
            }],
        }
    }
}

fn client(addr: SocketAddr, secret: Option<&str>) -> (ControlClient, Receiver<ClientEvent>) {
    client_backing_off(addr, secret, Duration::from_millis(400))
}

/// A client whose retries wait at most `backoff_max`.
fn client_backing_off(
    addr: SocketAddr,
    secret: Option<&str>,
    backoff_max: Duration,
) -> (ControlClient, Receiver<ClientEvent>) {
    let mut cfg = ClientConfig::new(addr);
    cfg.secret = secret.and_then(Secret::new).map(Arc::new);
    cfg.heartbeat = Duration::from_millis(100);
    cfg.progress_every = Duration::from_millis(100);
    cfg.backoff_max = backoff_max;
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let c = ControlClient::start(
        cfg,
        Arc::new(View),
        Box::new(move |e| tx.lock().unwrap().send(e).unwrap_or(())),
    );
    (c, rx)
}

fn goodbye() -> Goodbye {
    Goodbye {
        flows: vec![FlowProgress {
            flow: 0,
            next_seq: 10,
            failed: 0,
        }],
    }
}

/// Next event matching `f`, skipping others.
fn wait_event(rx: &Receiver<ClientEvent>, f: impl Fn(&ClientEvent) -> bool) -> ClientEvent {
    loop {
        let e = rx.recv_timeout(WAIT).expect("event");
        if f(&e) {
            return e;
        }
    }
}

fn wait_log(rx: &Receiver<String>, needle: &str) -> String {
    loop {
        let l = rx.recv_timeout(WAIT).expect("log line");
        if l.contains(needle) {
            return l;
        }
    }
}

fn wait_count(stats: &ServerStats, f: impl Fn(&ServerStats) -> u64, want: u64) {
    let t = Instant::now();
    while f(stats) < want {
        assert!(t.elapsed() < WAIT, "counter stuck at {}", f(stats));
        std::thread::yield_now();
    }
}

/// One of every message (both MAC shapes).
pub(crate) fn samples() -> Vec<Message> {
    let fv = FlowVerdict {
        rx_packets: 10,
        rx_bytes: 640,
        rx_lost: 1,
        tx_failed: 2,
        rx_late: 1,
        ..Default::default()
    };
    vec![
        Message::ClientHello(ClientHello {
            nonce: [7; 32],
            auth: true,
        }),
        Message::ServerChallenge(ServerChallenge {
            nonce: [1; 32],
            auth: true,
            mac: Some([2; 32]),
        }),
        Message::ServerChallenge(ServerChallenge {
            nonce: [1; 32],
            auth: false,
            mac: None,
        }),
        Message::ClientAuth(ClientAuth {
            mac: Some([0xab; 32]),
        }),
        Message::ClientAuth(ClientAuth { mac: None }),
        Message::AuthOk(AuthOk {
            sink_session: "sink-1".into(),
        }),
        Message::Refused(Refused {
            reason: "wrong secret".into(),
        }),
        Message::Hello(Hello {
            name: "tx@host:1".into(),
            epoch: 3,
            flows: vec![FlowStart {
                flow: 1,
                first_seq: 0,
                next_seq: 5,
                failed: 1,
            }],
            size: 64,
            rate_pps: Some(1e6),
            elapsed_ns: 12,
            reconnect: 1,
            step: Some(2),
            boot_id: Some("dd8301e1-b789-428b-bc10-29b5abb6791d".into()),
            reach: Some(Reach {
                flow_pps: 5e5,
                run_elapsed_ns: 13,
            }),
            proto: Some(DataProto::Tcp),
        }),
        Message::Welcome(Welcome {
            sink_session: "s".into(),
            uptime_ns: 99,
        }),
        Message::Progress(Progress {
            flows: vec![FlowProgress {
                flow: 2,
                next_seq: 9,
                failed: 0,
            }],
        }),
        Message::Heartbeat(Heartbeat {}),
        Message::Goodbye(Goodbye { flows: vec![] }),
        Message::Verdict(Box::new(Verdict {
            sink_session: "s".into(),
            name: "n".into(),
            epoch: 1,
            totals: fv,
            flows: vec![(0, fv)],
            latency_p50_ns: 1,
            latency_p99_ns: 2,
            latency_max_ns: 3,
            latency_p999_ns: 3,
            jitter: Some(Box::new(crate::control::msg::VerdictJitter {
                samples: 9,
                mean_ns: 700,
                p50_ns: 1_000,
                p99_ns: 2_000,
                p999_ns: 2_000,
                max_ns: 2_000,
            })),
            latency_figures: Some(Box::new(crate::figures::Figures {
                samples: 10,
                min_ns: 1,
                mean_ns: 2,
                p50_ns: 2,
                p90_ns: 2,
                p99_ns: 3,
                p999_ns: 3,
                max_ns: 3,
            })),
            incomplete: true,
            cells: Some(Box::new(crate::control::msg::VerdictCells {
                latency: [1; crate::stats::LATENCY_CELLS],
                jitter: [2; crate::stats::LATENCY_CELLS],
                jitter_sum_ns: [u64::MAX; crate::stats::LATENCY_CELLS],
            })),
            jitter_figures: None,
            sizes: vec![SizeCount {
                payload: 64,
                packets: 2,
                bytes: 128,
            }],
            clock: Some(VerdictClock {
                kind: crate::latency_clock::ClockKind::OffsetCorrected,
                offset_ns: Some(-5_000_000_123),
                error_bound_ns: Some(60_000),
                control_rtt_ns: Some(120_000),
                latency_unknown_packets: 4,
                latency_clamped_packets: 1,
                reason: None,
            }),
        })),
        Message::Verdict(Box::new(Verdict {
            sink_session: "s".into(),
            name: "n".into(),
            epoch: 2,
            clock: Some(VerdictClock {
                kind: crate::latency_clock::ClockKind::Unknown,
                offset_ns: None,
                error_bound_ns: None,
                control_rtt_ns: None,
                latency_unknown_packets: 10,
                latency_clamped_packets: 0,
                reason: Some("no clock estimate yet".into()),
            }),
            ..Default::default()
        })),
        Message::ClockProbe(ClockProbe {
            t1_ns: 1_700_000_000_000_000_000,
        }),
        Message::ClockReply(ClockReply {
            t1_ns: 1_700_000_000_000_000_000,
            t2_ns: 1_700_000_005_000_040_000,
            t3_ns: 1_700_000_005_000_047_000,
        }),
        Message::ClockEstimate(ClockEstimate {
            offset_ns: 5_000_000_000,
            error_bound_ns: 40_000,
            rtt_ns: 80_000,
        }),
    ]
}
