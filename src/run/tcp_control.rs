//! The control channel on TCP runs. A TCP sink serves it on its data port: its workers hand a
//! connection that opens with a control frame to the control server ([`serve`]), which answers
//! from the sink's per-sender TCP books. A TCP sender (and the sender of `pair --proto tcp`)
//! talks to it as a UDP sender does ([`connect`]): Hello, Progress and Heartbeats while it runs,
//! and at the end a Goodbye (per queue: records written, failed writes) answered by the sink's
//! verdict on this sender run, which its summary carries ([`attach_verdict`]). Nothing here
//! runs on a worker thread.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use serde_json::{Map, Value, json};

use super::{
    link::{self, SenderLink},
    link_state::{self, LinkState},
    verdict::{self, GOODBYE_WAIT},
};
use crate::{
    clock,
    control::{
        auth::Secret,
        client::{ClientConfig, ControlClient, SenderView},
        msg::{
            ClockEstimate, DataProto, FlowProgress, FlowStart, FlowVerdict, Goodbye, Hello,
            Progress, Verdict,
        },
        server::{ControlServer, HelloFrom, RunningServer, ServerConfig, SinkBooks},
    },
    report::latency_clock_json,
    say,
    sender::tcp::TcpSendShared,
    sink::tcp::{
        books::{TcpBooks, TcpSenderRow},
        peers::ControlHandoff,
    },
};

/// Control connections that may wait at once between the sink's workers and its server.
pub(crate) const HANDOFF_SLOTS: usize = 16;

/// The sink's verdict on this sender run (its session and the verdict), or why none came.
pub(crate) type TcpVerdictResult = Result<(String, Verdict), String>;
/// Says Goodbye with the queues' final counts and waits for the verdict.
pub(crate) type AskTcpSink = Box<dyn FnOnce(&[Arc<TcpSendShared>]) -> TcpVerdictResult>;

/// Starts the control server of a TCP sink on `listen`, fed by its workers through `handoff`.
pub(crate) fn serve(
    listen: SocketAddr,
    secret: Option<Arc<Secret>>,
    books: Arc<TcpBooks>,
    handoff: Arc<ControlHandoff>,
) -> RunningServer {
    let session = link::sink_session_id();
    let mut config = ServerConfig::new(listen, session.clone());
    config.secret = secret;
    config.proto = DataProto::Tcp;
    say!("control: served on the data port tcp {listen} (sink session {session})");
    let books = Arc::new(Books {
        books,
        sink_session: session,
    });
    ControlServer::handed(config, handoff).start(books, Box::new(|line| say!("{line}")))
}

/// The TCP books as the control server sees them.
struct Books {
    books: Arc<TcpBooks>,
    sink_session: String,
}

impl SinkBooks for Books {
    fn hello(&self, hello: &Hello, from: HelloFrom) -> u64 {
        say!(
            "sink: sender {} from {}: said hello (epoch {:08x})",
            hello.name,
            from.peer,
            hello.epoch
        );
        let clock = verdict::hello_clock(hello, from.version);
        self.books.hello(&hello.name, hello.epoch, clock)
    }

    fn progress(&self, _: SocketAddr, _: &str, _: u32, _: &Progress) {}

    fn clock(&self, _: SocketAddr, _: &str, epoch: u32, e: &ClockEstimate) {
        self.books
            .clock(epoch, e.offset_ns, e.error_bound_ns, e.rtt_ns);
    }

    fn goodbye(&self, _: SocketAddr, name: &str, epoch: u32, goodbye: &Goodbye) -> Verdict {
        let v = self.books.goodbye(epoch, GOODBYE_WAIT);
        if !v.complete {
            say!(
                "sink: sender {name} said goodbye with connections still open after {GOODBYE_WAIT:?}; its verdict counts what arrived so far"
            );
        }
        let totals = FlowVerdict {
            rx_packets: v.tally.records,
            rx_bytes: v.tally.bytes,
            rx_invalid: v.tally.invalid,
            tx_failed: goodbye.flows.iter().map(|f| f.failed).sum(),
            ..FlowVerdict::default()
        };
        let clock =
            verdict::verdict_clock(&v.clock, v.tally.latency_unknown, v.tally.latency_clamped);
        Verdict {
            sink_session: self.sink_session.clone(),
            name: name.into(),
            epoch,
            totals,
            clock: Some(clock),
            ..Verdict::default()
        }
    }

    fn disconnected(&self, peer: SocketAddr, name: &str, _: u32, clean: bool) {
        if !clean {
            say!("sink: sender {name} ({peer}) went away without a goodbye");
        }
    }
}

/// Per queue of a TCP sender: records written so far, and writes that failed (resets and
/// other send errors), as the control channel's flow progress (one "flow" per queue).
fn queue_progress(shared: &[Arc<TcpSendShared>]) -> Vec<FlowProgress> {
    shared
        .iter()
        .enumerate()
        .map(|(q, s)| {
            let c = s.counters.load();
            FlowProgress {
                flow: q as u32,
                next_seq: c.tx_records,
                failed: c.resets + c.send_errors,
            }
        })
        .collect()
}

/// What the sender's control thread reads.
struct View {
    name: String,
    epoch: u32,
    size: u32,
    rate_rps: Option<f64>,
    shared: Vec<Arc<TcpSendShared>>,
    started_ns: u64,
}

impl SenderView for View {
    fn hello(&self, reconnect: u32) -> Hello {
        Hello {
            name: self.name.clone(),
            epoch: self.epoch,
            flows: queue_progress(&self.shared)
                .iter()
                .map(|f| FlowStart {
                    flow: f.flow,
                    first_seq: 0,
                    next_seq: f.next_seq,
                    failed: f.failed,
                })
                .collect(),
            size: self.size,
            rate_pps: self.rate_rps,
            elapsed_ns: clock::monotonic_ns().saturating_sub(self.started_ns),
            reconnect,
            // TCP runs have no rate schedule (refused at start).
            step: None,
            boot_id: None,
            // A record stream has no sequence numbers to bound.
            reach: None,
            proto: Some(DataProto::Tcp),
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            flows: queue_progress(&self.shared),
        }
    }
}

/// Starts the sender's control thread; returns how to ask for the verdict and what the channel
/// finds out (the sink refused this sender's credentials; the control round trip).
pub(crate) fn connect(
    link: SenderLink,
    epoch: u32,
    size: usize,
    rate_rps: Option<f64>,
    shared: Vec<Arc<TcpSendShared>>,
) -> (AskTcpSink, Arc<LinkState>) {
    let state = Arc::new(LinkState::default());
    state.expect_answer();
    let view = Arc::new(View {
        name: link.name,
        epoch,
        size: u32::try_from(size).unwrap_or(u32::MAX),
        rate_rps,
        shared,
        started_ns: clock::monotonic_ns(),
    });
    let mut config = ClientConfig::new(link.addr);
    config.secret = link.secret;
    let events = Arc::clone(&state);
    let client = ControlClient::start(
        config,
        view,
        Box::new(move |e| link_state::event(e, &events)),
    );
    let ask: AskTcpSink = Box::new(move |shared: &[Arc<TcpSendShared>]| {
        let goodbye = Goodbye {
            flows: queue_progress(shared),
        };
        client
            .finish(goodbye, GOODBYE_WAIT + Duration::from_secs(2))
            .map(|v| (v.sink_session.clone(), v))
            .map_err(|e| e.to_string())
    });
    (ask, state)
}

/// The verdict of a sender with `--control off`: none, and why.
pub(crate) fn off() -> AskTcpSink {
    Box::new(|_: &[Arc<TcpSendShared>]| {
        Err(
            "the control channel is off (--control off): the sink cannot report what it counted"
                .into(),
        )
    })
}

/// Puts the sink's verdict into a TCP send summary (`"verdict"`, or `"sink_error"`) and
/// returns the line for humans.
pub(crate) fn attach_verdict(
    line: &mut Map<String, Value>,
    verdict: &TcpVerdictResult,
    tx_records: u64,
) -> String {
    match verdict {
        Ok((session, verdict)) => {
            let v = &verdict.totals;
            let told = verdict.clock.as_ref();
            let clock = verdict::clock_of(told);
            let (unknown, clamped) = told.map_or((0, 0), |c| {
                (c.latency_unknown_packets, c.latency_clamped_packets)
            });
            line.insert(
                "verdict".into(),
                json!({
                    "sink_session": session,
                    "rx_records": v.rx_packets,
                    "rx_bytes": v.rx_bytes,
                    "rx_invalid": v.rx_invalid,
                    "tx_failed": v.tx_failed,
                    "latency_clock": latency_clock_json(&clock, unknown, clamped),
                }),
            );
            let counted = if v.rx_packets == tx_records {
                "every record written was counted".to_string()
            } else {
                format!(
                    "{} of the {tx_records} records written were not counted",
                    tx_records.abs_diff(v.rx_packets)
                )
            };
            format!(
                "send verdict from sink {session}: {} records, {} bytes counted, invalid {}, failed writes {}; {counted}; latency clock {}",
                v.rx_packets,
                v.rx_bytes,
                v.rx_invalid,
                v.tx_failed,
                clock.text()
            )
        }
        Err(why) => {
            line.insert("verdict".into(), Value::Null);
            line.insert("sink_error".into(), json!(why));
            format!("send verdict: none from the sink: {why}")
        }
    }
}

/// The `senders` array of a TCP sink summary.
pub(crate) fn senders_json(rows: &[TcpSenderRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "rx_records": r.tally.records,
                    "rx_bytes": r.tally.bytes,
                    "rx_invalid": r.tally.invalid,
                    "sessions": r.sessions,
                    "conns_open": r.conns_open,
                    "conns_closed": r.conns_closed,
                    "latency_clock": latency_clock_json(
                        &r.clock,
                        r.tally.latency_unknown,
                        r.tally.latency_clamped,
                    ),
                })
            })
            .collect(),
    )
}
