//! TCP's side of a run's reporting session: pktgen-style live lines (Gbit/s, records/s,
//! connections up, reconnects), `--json` interval lines, the TCP_INFO of the senders'
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
use crate::sender::tcp::info::{QueueInfo, Sampler};
use crate::sender::tcp::{TcpSendOutcome, TxCounters};
use crate::sink::tcp::{RxCounters, TcpSinkOutcome, books::TcpBooks};
use crate::worker::{self, Control, Group};
use crate::{clock, error::Error, say};

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
/// sink's active span and the last TCP_INFO sample's time; at the end, the sink's verdict.
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
    /// When every worker had ended, and the verdict then asked for.
    end: u64,
    verdict: Option<super::tcp_control::TcpVerdictResult>,
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

/// Every queue's counters summed, per role (the latency and RTT cells inside).
#[derive(Clone, Default)]
pub(crate) struct Snapshot {
    tx: TxCounters,
    rx: RxCounters,
}

fn rate(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

fn si(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.2}G", v / 1e9),
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e3 => format!("{:.2}k", v / 1e3),
        v => format!("{v:.0}"),
    }
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
            .map(crate::metrics::tcp_senders::TcpSenderSeries::new);
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

    fn interval_lines(&self, now: &Snapshot, before: &Snapshot, start_s: f64, end_s: f64) {
        let seconds = end_s - start_s;
        let label = format!("[{start_s:6.1}-{end_s:6.1}]");
        if self.senders.is_some() {
            let bytes = now.tx.tx_bytes - before.tx.tx_bytes;
            let records = now.tx.tx_records - before.tx.tx_records;
            if self.json {
                let mut line = now.tx.json();
                info_json(&mut line, &self.last_info);
                interval_json(line, "send", (start_s, end_s), rate(bytes * 8, seconds));
            }
            let info = crate::sender::tcp::info::total(&self.last_info);
            say!(
                "{label} send {:>8.3} Gbit/s {:>8} rec/s  conns {} up  reconnects {}  resets {}  connect failures {}  srtt max {} us  cwnd {}  retrans {}",
                rate(bytes * 8, seconds) / 1e9,
                si(rate(records, seconds)),
                now.tx.conns_up,
                now.tx.reconnects,
                now.tx.resets,
                now.tx.connect_failures,
                info.srtt_us_max,
                info.cwnd_segments,
                info.retransmits,
            );
        }
        if self.sinks.is_some() {
            let bytes = now.rx.rx_bytes - before.rx.rx_bytes;
            let records = now.rx.rx_records - before.rx.rx_records;
            if self.json {
                let line = now.rx.json();
                interval_json(line, "sink", (start_s, end_s), rate(bytes * 8, seconds));
            }
            say!(
                "{label} sink {:>8.3} Gbit/s {:>8} rec/s  conns {} open  accepted {}  invalid {}",
                rate(bytes * 8, seconds) / 1e9,
                si(rate(records, seconds)),
                now.rx.conns_open,
                now.rx.accepts,
                now.rx.rx_invalid,
            );
        }
    }

    fn rr_line(
        &self,
        now: &Snapshot,
        before: &Snapshot,
        seconds: f64,
        (process, machine): (Option<u64>, Option<u64>),
    ) {
        let n = now.tx.transactions - before.tx.transactions;
        let mut cells = now.tx.rtt_cells;
        for (c, b) in cells.iter_mut().zip(before.tx.rtt_cells) {
            *c -= b;
        }
        let per = |c: Option<u64>| {
            c.filter(|_| n > 0).map_or("unknown".to_string(), |c| {
                format!("{:.2}", c as f64 / n as f64)
            })
        };
        say!(
            "           rr {:>8} trans/s  rtt p50 {} ns  p99 {} ns  ctx/s {} (machine {})  ctx/trans {} (machine {})",
            si(rate(n, seconds)),
            crate::sender::rtt::quantile(&cells, 0.5),
            crate::sender::rtt::quantile(&cells, 0.99),
            process.map_or("unknown".into(), |p| si(rate(p, seconds))),
            machine.map_or("unknown".into(), |m| si(rate(m, seconds))),
            per(process),
            per(machine),
        );
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
            s.tx.add(&q.counters.load());
        }
        for q in self.sinks.iter().flat_map(|g| &g.shared) {
            s.rx.add(&q.counters.load());
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
        self.interval_lines(now, before, span.start_s(), span.end_s());
        if self.rr {
            let ctx = crate::metrics::ctx::delta(&self.state.ctx_last, &ctx_now);
            self.rr_line(now, before, span.seconds(), ctx);
        }
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
