//! TCP's side of a run's reporting session: pktgen-style live lines (Gbit/s, records/s,
//! connections up, reconnects), `--json` interval lines (the sink's with each sender's
//! records and latency within the interval, `senders`), the TCP_INFO of the senders'
//! connections, the sink's books of closed connections, and one summary line per role with
//! `"protocol":"tcp"`.
//!
//! It only reads what the workers publish (and books the TCP sink's closed connections each
//! tick, see `sink::tcp::books`). A pair run drains: once the senders are done, the
//! sinks stop as soon as every connection has ended (at most 3 s later).

use std::{sync::Arc, time::Duration};

use serde_json::{Map, Value, json};

mod summary;

use super::session::{Outcomes, Proto, Span};
use super::tcp_control::AskTcpSink;
use super::tcp_groups::{TcpSenders, TcpSinks};
use crate::metrics::ctx::CtxSample;
use crate::metrics::tcp::TcpHandles;
use crate::report;
use crate::sender::tcp::info::{QueueInfo, Sampler};
use crate::sender::tcp::{TcpSendOutcome, TxCounters};
use crate::sink::tcp::{RxCounters, TcpSinkOutcome, books::TcpBooks};
use crate::worker::{self, Control, Group};
use crate::{clock, error::Error};

/// A started TCP run as its session reports it.
pub(crate) struct TcpReport {
    json: bool,
    senders: Option<TcpSenders>,
    sinks: Option<TcpSinks>,
    /// A sink-only run's `--duration`, and the sinks' control to stop them when it is up.
    sink_duration: Option<(Arc<Control>, Duration)>,
    target_rps: Option<f64>,
    /// `--min-rate-ratio`: the run fails below this share of `target_rps`.
    min_rate_ratio: Option<f64>,
    rr: bool,
    /// The sink's per-sender books.
    books: Option<Arc<TcpBooks>>,
    /// Asks the sink for this sender run's verdict at the end.
    ask: Option<AskTcpSink>,
    /// TCP_INFO of the senders' connections, and the last sample per queue.
    info: Option<Sampler>,
    last_info: Vec<QueueInfo>,
    /// The summaries' `placement` arrays (queue, node, CPU, packet memory), taken at set-up.
    placement: (Option<Value>, Option<Value>),
    /// What the sender's control channel found out (its round trip, for the summary).
    link: Option<Arc<super::link_state::LinkState>>,
    /// What the report learns as the run goes.
    state: TcpState,
}

/// What the TCP report keeps between ticks: the run's start, the context switches since, the
/// sink's active span, the last TCP_INFO sample's time and each sender's books at the last
/// interval; at the end, the sink's verdict.
#[derive(Default)]
struct TcpState {
    start: u64,
    ctx_start: CtxSample,
    ctx_last: CtxSample,
    /// The sink's active span: first and last tick at which its byte count moved.
    rx_first: Option<u64>,
    rx_last: u64,
    rx_seen: u64,
    prev_tick: u64,
    last_info_at: u64,
    /// The interval lines' header was printed.
    header_printed: bool,
    /// The TCP_INFO samples of the last interval line, per queue.
    info_before: Vec<QueueInfo>,
    /// When every worker had ended, and the verdict then asked for.
    end: u64,
    verdict: Option<super::link_ends::SinkVerdict>,
    /// Each sender's books at the last interval (for its part of the next, with `--json`).
    sender_intervals: report::SenderIntervals,
}

/// How often the reporter samples TCP_INFO of the senders' connections.
const INFO_EVERY_NS: u64 = 250_000_000;

/// Takes a new TCP_INFO sample per queue. A queue whose connections have all closed (the run's
/// end, a reconnect) keeps its last open sample's connections, srtt and cwnd, so the summary
/// holds what was seen while they were open; its retransmits always move on.
fn keep_open_samples(last: &mut Vec<QueueInfo>, fresh: Vec<QueueInfo>) {
    if last.len() != fresh.len() {
        *last = fresh;
        return;
    }
    for (old, new) in last.iter_mut().zip(fresh) {
        if new.conns > 0 || old.conns == 0 {
            *old = new;
        } else {
            old.retransmits = old.retransmits.max(new.retransmits);
        }
    }
}

/// The TCP_INFO keys of a sender's JSON lines.
fn info_json(line: &mut Map<String, Value>, infos: &[QueueInfo]) {
    let t = crate::sender::tcp::info::total(infos);
    line.insert("tcp_info_conns".into(), json!(t.conns));
    line.insert("srtt_us_max".into(), json!(t.srtt_us_max));
    line.insert("cwnd_segments".into(), json!(t.cwnd_segments));
    line.insert("retransmits".into(), json!(t.retransmits));
}

/// Every queue's counters summed, per role (the latency and RTT cells inside), and each
/// queue's own for the interval lines.
#[derive(Clone, Default)]
pub(crate) struct Snapshot {
    tx: TxCounters,
    rx: RxCounters,
    tx_queues: Vec<TxCounters>,
    rx_queues: Vec<RxCounters>,
}

fn rate(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

/// One sender queue's (or the total's) interval line: records/s and bit rate, its
/// connections up now, what happened to them within the interval, and their last TCP_INFO
/// sample's largest smoothed RTT and congestion windows.
fn tx_line(
    label: &str,
    (n, b): (&TxCounters, &TxCounters),
    (info, info_before): (&QueueInfo, &QueueInfo),
    seconds: f64,
) -> String {
    format!(
        "{label} {}  conns up: {} reconnects: {} resets: {} connect failures: {} retrans: {} srtt max: {} cwnd: {}",
        report::rates_text(
            n.tx_records - b.tx_records,
            "rec/s",
            n.tx_bytes - b.tx_bytes,
            seconds
        ),
        n.conns_up,
        n.reconnects - b.reconnects,
        n.resets - b.resets,
        n.connect_failures - b.connect_failures,
        info.retransmits.saturating_sub(info_before.retransmits),
        report::ns_text(info.srtt_us_max.saturating_mul(1000)),
        info.cwnd_segments,
    )
}

/// A request/response sender's part of an interval line: transactions per second and the
/// round trips' p50 and p99 within the interval (cell bounds), and on the last line the
/// context switches per transaction, the process's and the machine's.
fn rr_text(
    (n, b): (&TxCounters, &TxCounters),
    seconds: f64,
    ctx: Option<(Option<u64>, Option<u64>)>,
) -> String {
    let count = n.transactions - b.transactions;
    let mut cells = n.rtt_cells;
    for (c, b) in cells.iter_mut().zip(b.rtt_cells) {
        *c -= b;
    }
    let rtt = |q| match crate::sender::rtt::quantile(&cells, q) {
        0 => "unknown".to_string(),
        ns => format!("<={}", report::ns_text(ns)),
    };
    let mut text = format!(
        "  {} rtt p50: {} p99: {}",
        report::per_second(rate(count, seconds), "trans/s"),
        rtt(0.5),
        rtt(0.99),
    );
    if let Some((process, machine)) = ctx {
        let per = |c: Option<u64>| {
            c.filter(|_| count > 0).map_or("unknown".to_string(), |c| {
                format!("{:.2}", c as f64 / count as f64)
            })
        };
        text += &format!(" ctx/trans: {} (machine {})", per(process), per(machine));
    }
    text
}

/// Prints one TCP JSON interval line: `counters` plus the line's type, role, span and bit rate.
fn interval_json(
    mut counters: Map<String, Value>,
    role: &str,
    (start_s, end_s): (f64, f64),
    bps: f64,
) {
    counters.insert("type".into(), json!("interval"));
    counters.insert("role".into(), json!(role));
    counters.insert("protocol".into(), json!("tcp"));
    counters.insert("start_s".into(), json!(start_s));
    counters.insert("end_s".into(), json!(end_s));
    counters.insert("bps".into(), json!(bps as u64));
    crate::output::json_line(&Value::Object(counters));
}

impl TcpReport {
    /// A report of these groups; `sink_duration` is a sink-only run's `--duration` and the
    /// sinks' control.
    pub(crate) fn new(
        json: bool,
        senders: Option<TcpSenders>,
        sinks: Option<TcpSinks>,
        sink_duration: Option<(Arc<Control>, Duration)>,
    ) -> TcpReport {
        TcpReport {
            target_rps: senders.as_ref().and_then(|s| s.target_rps),
            min_rate_ratio: None,
            rr: senders.as_ref().is_some_and(|s| s.rr),
            books: None,
            ask: None,
            info: senders.as_ref().map(|s| Sampler::new(s.shared.clone())),
            last_info: Vec::new(),
            placement: (
                senders
                    .as_ref()
                    .map(|s| crate::report::placement_json(&s.queues, s.group.memory())),
                sinks
                    .as_ref()
                    .map(|s| crate::report::placement_json(&s.queues, s.group.memory())),
            ),
            link: None,
            json,
            senders,
            sinks,
            sink_duration,
            state: TcpState::default(),
        }
    }

    /// Registers the TCP series (at 0), with the sink's per-sender books; the exporter must be
    /// installed.
    pub(crate) fn series(&self) -> TcpHandles {
        let tx: Vec<_> = self
            .senders
            .iter()
            .flat_map(|s| s.queues.iter().copied().zip(s.shared.iter().cloned()))
            .collect();
        let rx: Vec<_> = self
            .sinks
            .iter()
            .flat_map(|s| s.queues.iter().copied().zip(s.shared.iter().cloned()))
            .collect();
        let mut series = TcpHandles::register(&tx, &rx, crate::metrics::ctx::sample());
        series.senders = self
            .books
            .clone()
            .map(crate::metrics::senders::SenderSeries::new);
        if let Some(s) = &self.senders {
            crate::metrics::set_memory("send", &s.queues, s.group.memory());
        }
        if let Some(s) = &self.sinks {
            crate::metrics::set_memory("sink", &s.queues, s.group.memory());
        }
        series
    }

    /// The sink's per-sender books (a sink run) and how to ask for the verdict (a sender run).
    pub(crate) fn with_control(
        mut self,
        books: Option<Arc<TcpBooks>>,
        ask: Option<AskTcpSink>,
    ) -> TcpReport {
        self.books = books;
        self.ask = ask;
        self
    }

    /// What the sender's control channel finds out (none with `--control off`): a sender the
    /// sink refused stops at the next tick (see [`Proto::senders_refused`]), since a sink with
    /// a secret counts none of its connections, and one of the other protocol counts nothing.
    pub(crate) fn with_link(
        mut self,
        link: Option<Arc<super::link_state::LinkState>>,
    ) -> TcpReport {
        self.link = link;
        self
    }

    /// Fails the run below `min` of its target records/s (`--min-rate-ratio`).
    pub(crate) fn with_min_rate_ratio(mut self, min: Option<f64>) -> TcpReport {
        self.min_rate_ratio = min;
        self
    }

    /// One interval in the lines every protocol prints (see `report::interval_header`): a
    /// line per queue and role, a total over several queues, and with `--json` one line per
    /// role. A request/response sender's lines add its transactions and round trips, and its
    /// last line the context switches per transaction.
    fn interval_lines(
        &mut self,
        (now, before): (&Snapshot, &Snapshot),
        (start_s, end_s): (f64, f64),
        ctx: (Option<u64>, Option<u64>),
    ) {
        let seconds = end_s - start_s;
        let mut lines = String::new();
        if !self.state.header_printed {
            self.state.header_printed = true;
            lines += &report::interval_header();
            lines.push('\n');
        }
        let pair = self.senders.is_some() && self.sinks.is_some();
        let label = |role: &str, queue: &str| {
            let queue = if pair {
                format!("{role} {queue}")
            } else {
                queue.to_string()
            };
            report::interval_label(start_s, end_s, &queue)
        };
        if let Some(s) = &self.senders {
            let info_before =
                std::mem::replace(&mut self.state.info_before, self.last_info.clone());
            let mut rows: Vec<(String, TxCounters, TxCounters, QueueInfo, QueueInfo)> = s
                .queues
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let n = now.tx_queues.get(i).copied().unwrap_or_default();
                    let b = before.tx_queues.get(i).copied().unwrap_or_default();
                    let info = self.last_info.get(i).copied().unwrap_or_default();
                    let info_b = info_before.get(i).copied().unwrap_or_default();
                    (label("send", &report::queue_label(q)), n, b, info, info_b)
                })
                .collect();
            if s.queues.len() > 1 {
                let info = crate::sender::tcp::info::total(&self.last_info);
                let info_b = crate::sender::tcp::info::total(&info_before);
                rows.push((label("send", "total"), now.tx, before.tx, info, info_b));
            }
            let last = rows.len().saturating_sub(1);
            for (i, (label, n, b, info, info_b)) in rows.iter().enumerate() {
                lines += &tx_line(label, (n, b), (info, info_b), seconds);
                if self.rr {
                    lines += &rr_text((n, b), seconds, (i == last).then_some(ctx));
                }
                lines.push('\n');
            }
            if self.json {
                let mut line = now.tx.json();
                info_json(&mut line, &self.last_info);
                let bytes = now.tx.tx_bytes - before.tx.tx_bytes;
                interval_json(line, "send", (start_s, end_s), rate(bytes * 8, seconds));
            }
        }
        if let Some(s) = &self.sinks {
            let mut rows: Vec<(String, RxCounters, RxCounters)> = s
                .queues
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let n = now.rx_queues.get(i).copied().unwrap_or_default();
                    let b = before.rx_queues.get(i).copied().unwrap_or_default();
                    (label("sink", &report::queue_label(q)), n, b)
                })
                .collect();
            if s.queues.len() > 1 {
                rows.push((label("sink", "total"), now.rx, before.rx));
            }
            for (label, n, b) in &rows {
                lines += &format!(
                    "{label} {}  conns open: {} accepted: {} invalid: {}\n",
                    report::rates_text(
                        n.rx_records - b.rx_records,
                        "rec/s",
                        n.rx_bytes - b.rx_bytes,
                        seconds
                    ),
                    n.conns_open,
                    n.accepts - b.accepts,
                    n.rx_invalid - b.rx_invalid,
                );
            }
            if self.json {
                let mut line = now.rx.json();
                if let Some(books) = &self.books {
                    let rows = books.rows();
                    line.insert(
                        "senders".into(),
                        self.state.sender_intervals.tcp_json(&rows),
                    );
                }
                let bytes = now.rx.rx_bytes - before.rx.rx_bytes;
                interval_json(line, "sink", (start_s, end_s), rate(bytes * 8, seconds));
            }
        }
        crate::output::human_text(&lines);
    }
}

impl Proto for TcpReport {
    type Senders = Group<TcpSendOutcome>;
    type Sinks = Group<TcpSinkOutcome>;
    type Snapshot = Snapshot;
    type Series = TcpHandles;

    const DRAIN_AFTER_INTERRUPT: bool = false;
    const DRAIN_BOUND: Option<Duration> = Some(Duration::from_secs(3));

    fn senders(&self) -> Option<&Self::Senders> {
        self.senders.as_ref().map(|s| &s.group)
    }

    fn senders_mut(&mut self) -> Option<&mut Self::Senders> {
        self.senders.as_mut().map(|s| &mut s.group)
    }

    fn sinks(&self) -> Option<&Self::Sinks> {
        self.sinks.as_ref().map(|s| &s.group)
    }

    fn sinks_mut(&mut self) -> Option<&mut Self::Sinks> {
        self.sinks.as_mut().map(|s| &mut s.group)
    }

    fn before_senders(&mut self) {
        if let Some(link) = &self.link {
            link.wait_start();
        }
    }

    fn senders_refused(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.stops_run())
    }

    fn released(&mut self, start_ns: u64) {
        let ctx = crate::metrics::ctx::sample();
        self.state = TcpState {
            start: start_ns,
            ctx_start: ctx,
            ctx_last: ctx,
            rx_last: start_ns,
            prev_tick: start_ns,
            ..TcpState::default()
        };
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        for q in self.senders.iter().flat_map(|g| &g.shared) {
            let c = q.counters.load();
            s.tx.add(&c);
            s.tx_queues.push(c);
        }
        for q in self.sinks.iter().flat_map(|g| &g.shared) {
            let c = q.counters.load();
            s.rx.add(&c);
            s.rx_queues.push(c);
        }
        s
    }

    fn baseline(&self) -> Snapshot {
        // Every interval's rates count from zero: the first one holds what was sent as the
        // workers started.
        Snapshot::default()
    }

    fn tick(&mut self, now: u64, snapshot: &Snapshot) {
        if let Some((control, d)) = &self.sink_duration
            && now - self.state.start >= d.as_nanos() as u64
        {
            control.request_stop();
        }
        if let Some(b) = &self.books {
            b.tick();
        }
        if let Some(sampler) = self.info.as_mut()
            && now - self.state.last_info_at >= INFO_EVERY_NS
        {
            let fresh = sampler.sample();
            keep_open_samples(&mut self.last_info, fresh);
            self.state.last_info_at = now;
        }
        let state = &mut self.state;
        let rx_bytes = snapshot.rx.rx_bytes;
        if rx_bytes != state.rx_seen {
            state.rx_first.get_or_insert(state.prev_tick);
            state.rx_last = now;
            state.rx_seen = rx_bytes;
        }
        state.prev_tick = now;
    }

    fn interval(&mut self, span: Span, now: &Snapshot, before: &Snapshot) {
        let ctx_now = crate::metrics::ctx::sample();
        let ctx = crate::metrics::ctx::delta(&self.state.ctx_last, &ctx_now);
        self.interval_lines((now, before), (span.start_s(), span.end_s()), ctx);
        self.state.ctx_last = ctx_now;
    }

    fn update_series(&self, series: &mut TcpHandles) {
        series.info.clone_from(&self.last_info);
    }

    fn conclude(&mut self) {
        self.state.end = clock::monotonic_ns();
        // The workers have closed every connection and booked each one's final retransmits.
        if let Some(sampler) = self.info.as_mut() {
            let fresh = sampler.sample();
            keep_open_samples(&mut self.last_info, fresh);
        }
        let tx_shared: Vec<_> = self.senders.iter().flat_map(|g| g.shared.clone()).collect();
        let gave_up = self.link.as_ref().and_then(|l| l.gave_up_at_start());
        self.state.verdict = match (self.ask.take(), gave_up) {
            // Nothing would answer the goodbye.
            (Some(_), Some(why)) => Some(Err(why)),
            (ask, _) => ask.map(|ask| ask(&tx_shared)),
        };
    }

    fn summaries(self, snap: Snapshot, (send, _): Outcomes<Self>) -> Result<(), Error> {
        let state = &self.state;
        let secs = |ns: u64| (ns - state.start) as f64 / 1e9;
        let ctx = crate::metrics::ctx::delta(&state.ctx_start, &crate::metrics::ctx::sample());
        let mut result = Ok(());
        if let Some(outcomes) = send {
            // A sender group whose every worker panicked has no span, and no summary; one the
            // sink refused, or that found no sink, at its start stopped before sending: 0 s.
            let span = worker::span(&outcomes)
                .map(|(a, b)| (b - a) as f64 / 1e9)
                .or_else(|| self.senders_refused().then_some(0.0));
            if let Some(span) = span {
                self.send_summary(&snap, span, ctx, state.verdict.as_ref());
                let short = self.target_rps.filter(|t| *t > 0.0).and_then(|target| {
                    let ratio = rate(snap.tx.tx_records, span) / target;
                    super::judge::below_min_rate_ratio(ratio, self.min_rate_ratio)
                });
                if let Some(why) = short {
                    result = Err(Error::io("the run failed", std::io::Error::other(why)));
                }
            }
            if snap.tx.connects == 0 {
                result = Err(Error::io(
                    "tcp send",
                    std::io::Error::other(
                        "no connection succeeded: is a `ringblast sink --proto tcp` listening there?",
                    ),
                ));
            }
        }
        if self.sinks.is_some() {
            let span = state
                .rx_first
                .map_or(0.0, |f| (state.rx_last - f) as f64 / 1e9);
            self.sink_summary(&snap, span, secs(state.end));
        }
        result
    }
}
