//! The control channel on TCP runs. A TCP sink serves it on its data port: its workers hand a
//! connection that opens with a control frame to the control server ([`serve`]), which answers
//! from the sink's per-sender TCP books. A TCP sender (and the sender of `pair --proto tcp`)
//! talks to it as a UDP sender does ([`connect`]): Hello, Progress and Heartbeats while it runs,
//! and at the end a Goodbye (per queue: records written, failed writes) answered by the sink's
//! verdict on this sender run (its records, bytes, invalid events and latency as cell bounds),
//! which its summary carries ([`attach_verdict`]). Nothing here
//! runs on a worker thread.

use std::{net::SocketAddr, sync::Arc};

use serde_json::{Map, Value, json};

use super::{
    link::{self, SenderLink},
    link_ends::{
        self, Announce, SenderEnd, SenderLedger, SinkEnd, SinkLedger, SinkVerdict, progress_of,
    },
    link_state::{self, LinkState},
    verdict::GOODBYE_WAIT,
};
use crate::{
    clock,
    control::{
        auth::Secret,
        client::{ClientConfig, ControlClient},
        msg::{
            ClockEstimate, DataProto, FlowProgress, FlowStart, FlowVerdict, Goodbye, Hello,
            Verdict, VerdictCells, VerdictClock,
        },
        server::{ControlServer, HelloFrom, RunningServer, ServerConfig},
    },
    latency_clock::LatencyClock,
    report::{latency_clock_json, latency_only_text, sender_latency_json},
    say,
    sender::tcp::TcpSendShared,
    sink::tcp::{
        books::{TcpBooks, TcpSenderRow},
        peers::ControlHandoff,
    },
    stats::Latency,
};

/// Control connections that may wait at once between the sink's workers and its server.
pub(crate) const HANDOFF_SLOTS: usize = 16;

/// Says Goodbye with the queues' final counts and waits for the verdict.
pub(crate) type AskTcpSink = Box<dyn FnOnce(&[Arc<TcpSendShared>]) -> SinkVerdict>;

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
    let books = Arc::new(SinkEnd::new(TcpLedger(books), session));
    ControlServer::handed(config, handoff).start(books, Box::new(|line| say!("{line}")))
}

/// The TCP sink's per-sender books as the control channel feeds them.
struct TcpLedger(Arc<TcpBooks>);

impl SinkLedger for TcpLedger {
    const GONE_WITHOUT_GOODBYE: &'static str = "";

    fn hello(&self, hello: &Hello, from: &HelloFrom, clock: LatencyClock) -> (u64, String) {
        let line = format!(
            "sink: sender {} from {}: said hello (epoch {:08x})",
            hello.name, from.peer, hello.epoch
        );
        (self.0.hello(&hello.name, hello.epoch, clock), line)
    }

    // A record stream has no sequence numbers: its progress bounds nothing at the sink.
    fn progress(&self, _: u32, _: &[FlowProgress]) {}

    fn clock(&self, epoch: u32, e: &ClockEstimate) {
        self.0.clock(epoch, e.offset_ns, e.error_bound_ns, e.rtt_ns);
    }

    fn goodbye(&self, epoch: u32, goodbye: &Goodbye) -> Verdict {
        let v = self.0.goodbye(epoch, GOODBYE_WAIT);
        let totals = FlowVerdict {
            rx_packets: v.tally.records,
            rx_bytes: v.tally.bytes,
            rx_invalid: v.tally.invalid,
            tx_failed: goodbye.flows.iter().map(|f| f.failed).sum(),
            ..FlowVerdict::default()
        };
        let clock = VerdictClock::of(&v.clock, v.tally.latency_unknown, v.tally.latency_clamped);
        // Cell bounds of the run's corrected samples, 0 without any (as the wire defines).
        let latency = Latency::from_cells(&v.tally.latency_cells);
        Verdict {
            totals,
            latency_p50_ns: latency.p50_ns,
            latency_p99_ns: latency.p99_ns,
            latency_p999_ns: latency.p999_ns,
            latency_max_ns: latency.max_ns,
            clock: Some(clock),
            incomplete: !v.complete,
            // Version 10: the cells, so a sender adds runs up from them.
            cells: Some(Box::new(VerdictCells {
                latency: v.tally.latency_cells,
                ..VerdictCells::default()
            })),
            ..Verdict::default()
        }
    }
}

/// Per queue of a TCP sender: records written so far, and writes that failed (resets and
/// other send errors), as the control channel's flows (one "flow" per queue).
struct TcpQueues(Vec<Arc<TcpSendShared>>);

impl SenderLedger for TcpQueues {
    const PROTO: DataProto = DataProto::Tcp;

    fn flows(&self, _part: usize) -> Vec<FlowStart> {
        queue_flows(&self.0)
    }
}

fn queue_flows(shared: &[Arc<TcpSendShared>]) -> Vec<FlowStart> {
    shared
        .iter()
        .enumerate()
        .map(|(q, s)| {
            let c = s.counters.load();
            FlowStart {
                flow: q as u32,
                first_seq: 0,
                next_seq: c.tx_records,
                failed: c.resets + c.send_errors,
            }
        })
        .collect()
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
    let started_ns = clock::monotonic_ns();
    let announce = Announce {
        name: link.name,
        size: u32::try_from(size).unwrap_or(u32::MAX),
        epochs: Arc::from([epoch]),
        part: 0,
        rate: rate_rps,
        // A record stream has no sequence numbers to bound.
        flow_pps: None,
        started_ns,
        paced_since_ns: started_ns,
    };
    let view = Arc::new(SenderEnd::new(announce, TcpQueues(shared)));
    let mut config = ClientConfig::new(link.addr);
    config.secret = link.secret;
    let events = Arc::clone(&state);
    let client = ControlClient::start(
        config,
        view,
        Box::new(move |e| link_state::event(e, &events)),
    );
    let ask: AskTcpSink = Box::new(move |shared: &[Arc<TcpSendShared>]| {
        link_ends::finish(
            client,
            queue_flows(shared).iter().map(progress_of).collect(),
        )
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
    verdict: &SinkVerdict,
    tx_records: u64,
) -> String {
    match verdict {
        Ok((session, verdict)) => {
            let v = &verdict.totals;
            let told = verdict.clock.as_ref();
            let clock = verdict.latency_clock();
            let latency = verdict.latency();
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
                    "latency": sender_latency_json(&latency, &clock),
                    "latency_clock": latency_clock_json(&clock, unknown, clamped),
                    "complete": !verdict.incomplete,
                }),
            );
            let counted = if verdict.incomplete {
                format!(
                    "incomplete: connections were still open at the sink, so {} of the {tx_records} records written are not yet counted",
                    tx_records.saturating_sub(v.rx_packets)
                )
            } else if v.rx_packets == tx_records {
                "every record written was counted".to_string()
            } else {
                format!(
                    "{} of the {tx_records} records written were not counted",
                    tx_records.abs_diff(v.rx_packets)
                )
            };
            format!(
                "send verdict from sink {session}: {} records, {} bytes counted, invalid {}, failed writes {}; {counted}; {}",
                v.rx_packets,
                v.rx_bytes,
                v.rx_invalid,
                v.tx_failed,
                latency_only_text(&latency, &clock)
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
                    "latency": sender_latency_json(&r.latency(), &r.clock),
                    "first_record_at": r.first_ns.map(crate::clock::rfc3339_micros),
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
