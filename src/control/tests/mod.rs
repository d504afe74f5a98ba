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

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::auth::Secret;
use super::client::{ClientConfig, ClientEvent, ControlClient, NoVerdict, SenderView};
use super::frame::{self, decode, encode};
use super::msg::*;
use super::server::{ControlServer, RunningServer, ServerConfig, ServerStats, SinkBooks};
use crate::error::Error;

const WAIT: Duration = Duration::from_secs(10);

struct Books {
    session: String,
    hellos: Mutex<Sender<Hello>>,
    progress: Mutex<Sender<Progress>>,
}

impl SinkBooks for Books {
    fn hello(&self, _: SocketAddr, hello: &Hello) -> u64 {
        let _ = self.hellos.lock().unwrap().send(hello.clone());
        42
    }
    fn progress(&self, _: SocketAddr, _: &str, _: u32, p: &Progress) {
        let _ = self.progress.lock().unwrap().send(p.clone());
    }
    fn goodbye(&self, _: SocketAddr, name: &str, epoch: u32, g: &Goodbye) -> Verdict {
        let totals = FlowVerdict {
            rx_packets: g.flows.iter().map(|f| f.next_seq).sum(),
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
            ..Default::default()
        }
    }
    fn disconnected(&self, _: SocketAddr, _: &str, _: u32, _: bool) {}
}

struct Sink {
    server: RunningServer,
    hellos: Receiver<Hello>,
    progress: Receiver<Progress>,
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
    let (ltx, log) = mpsc::channel();
    let books = Books {
        session: session.into(),
        hellos: Mutex::new(htx),
        progress: Mutex::new(ptx),
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
    let mut cfg = ClientConfig::new(addr);
    cfg.secret = secret.and_then(Secret::new).map(Arc::new);
    cfg.heartbeat = Duration::from_millis(100);
    cfg.progress_every = Duration::from_millis(100);
    cfg.backoff_max = Duration::from_millis(400);
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
        Message::Verdict(Verdict {
            sink_session: "s".into(),
            name: "n".into(),
            epoch: 1,
            totals: fv,
            flows: vec![(0, fv)],
            latency_p50_ns: 1,
            latency_p99_ns: 2,
            latency_max_ns: 3,
            sizes: vec![SizeCount {
                payload: 64,
                packets: 2,
                bytes: 128,
            }],
        }),
    ]
}
