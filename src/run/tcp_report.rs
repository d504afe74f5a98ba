//! The reporter of TCP runs: releases the workers, prints pktgen-style live lines (Gbit/s,
//! records/s, connections up, reconnects) and `--json` interval lines, decides when the run
//! ends, and prints one summary line per role with `"protocol":"tcp"`.
//!
//! It only reads what the workers publish (and books the TCP sink's closed connections each
//! tick, see `sink::tcp::books`). A pair run drains: once the senders are done, the
//! sinks stop as soon as every connection has ended (at most 3 s later).

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use serde_json::{Map, Value, json};

mod summary;

use super::tcp_control::AskTcpSink;
use super::tcp_groups::{TcpSenders, TcpSinks};
use super::ticker::{self, Ended, Ticked};
use crate::metrics::{Exporter, tcp::TcpHandles};
use crate::sender::tcp::info::{QueueInfo, Sampler};
use crate::{
    clock, error::Error, say, sender::tcp::TxCounters, sink::tcp::RxCounters, worker::Control,
};

const DRAIN_BOUND_NS: u64 = 3_000_000_000;

/// Reports one TCP run to its end.
pub(crate) struct Reporter {
    json: bool,
    interval: Duration,
    senders: Option<TcpSenders>,
    sinks: Option<TcpSinks>,
    send_control: Arc<Control>,
    sink_control: Option<Arc<Control>>,
    sink_duration: Option<Duration>,
    sinks_released: bool,
    target_rps: Option<f64>,
    rr: bool,
    /// The run's series, when metrics are on.
    exporter: Option<Exporter<TcpHandles>>,
    /// The sink's per-sender books.
    books: Option<Arc<crate::sink::tcp::books::TcpBooks>>,
    /// Asks the sink for this sender run's verdict at the end.
    ask: Option<AskTcpSink>,
    /// TCP_INFO of the senders' connections, and the last sample per queue.
    info: Option<Sampler>,
    last_info: Vec<QueueInfo>,
    /// The TCP sink's control server counters, exported with the metrics.
    control_stats: Option<Arc<crate::control::server::ServerStats>>,
    /// The summaries' `placement` arrays (queue, node, CPU, packet memory), taken at set-up.
    placement: (Option<Value>, Option<Value>),
    /// What the sender's control channel found out (its round trip, for the summary).
    link: Option<Arc<super::link_state::LinkState>>,
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
struct Snapshot {
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

fn snapshot<'a>(
    tx: impl Iterator<Item = &'a Arc<crate::sender::tcp::TcpSendShared>>,
    rx: impl Iterator<Item = &'a Arc<crate::sink::tcp::TcpSinkShared>>,
) -> Snapshot {
    let mut s = Snapshot::default();
    for q in tx {
        s.tx.add(&q.counters.load());
    }
    for q in rx {
        s.rx.add(&q.counters.load());
    }
    s
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

impl Reporter {
    /// A reporter for these groups; `sink` is the sinks' control and a sink-only duration.
    pub(crate) fn new(
        json: bool,
        interval: Duration,
        senders: Option<TcpSenders>,
        sinks: Option<TcpSinks>,
        send_control: Arc<Control>,
        sink: Option<(Arc<Control>, Option<Duration>)>,
    ) -> Reporter {
        let (sink_control, sink_duration) = sink.map_or((None, None), |(c, d)| (Some(c), d));
        Reporter {
            target_rps: senders.as_ref().and_then(|s| s.target_rps),
            rr: senders.as_ref().is_some_and(|s| s.rr),
            exporter: None,
            books: None,
            ask: None,
            info: senders.as_ref().map(|s| Sampler::new(s.shared.clone())),
            last_info: Vec::new(),
            control_stats: None,
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
            interval,
            senders,
            sinks,
            send_control,
            sink_control,
            sink_duration,
            sinks_released: false,
        }
    }

    /// Registers the TCP series (at 0) when `addr` is given; the exporter must be installed.
    pub(crate) fn with_metrics(mut self, on: bool) -> Reporter {
        if on {
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
            self.exporter = Some(Exporter::new(TcpHandles::register(
                &tx,
                &rx,
                crate::metrics::ctx::sample(),
            )));
            if let Some(s) = &self.senders {
                crate::metrics::set_memory("send", &s.queues, s.group.memory());
            }
            if let Some(s) = &self.sinks {
                crate::metrics::set_memory("sink", &s.queues, s.group.memory());
            }
        }
        self
    }

    /// The sink's per-sender books (a sink run) and how to ask for the verdict (a sender run).
    pub(crate) fn with_control(
        mut self,
        books: Option<Arc<crate::sink::tcp::books::TcpBooks>>,
        ask: Option<AskTcpSink>,
    ) -> Reporter {
        if let Some(e) = self.exporter.as_mut() {
            e.series_mut().senders = books
                .clone()
                .map(crate::metrics::tcp_senders::TcpSenderSeries::new);
        }
        self.books = books;
        self.ask = ask;
        self
    }

    /// The TCP sink's control server counters (`ringblast_rx_control_connections_total`).
    pub(crate) fn with_control_stats(
        mut self,
        stats: Option<Arc<crate::control::server::ServerStats>>,
    ) -> Reporter {
        self.control_stats = stats;
        self
    }

    /// What the sender's control channel finds out (none with `--control off`).
    pub(crate) fn with_link(mut self, link: Option<Arc<super::link_state::LinkState>>) -> Reporter {
        self.link = link;
        self
    }

    /// The sinks were released already (a pair starts them before the senders).
    pub(crate) fn pair_released(mut self) -> Reporter {
        self.sinks_released = true;
        self
    }

    fn snapshot(&self) -> Snapshot {
        snapshot(
            self.senders.iter().flat_map(|g| &g.shared),
            self.sinks.iter().flat_map(|g| &g.shared),
        )
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

    /// Runs until the run ends, then prints the summaries.
    pub(crate) fn run(mut self, signal: &AtomicBool) -> Ended {
        if let Some(s) = &self.sinks
            && !self.sinks_released
        {
            s.group.release();
        }
        if let Some(s) = &self.senders {
            s.group.release();
        }
        let start = clock::monotonic_ns();
        let ctx_start = crate::metrics::ctx::sample();
        let interval = self.interval;
        let mut ticks = TcpTicks {
            reporter: &mut self,
            start,
            ctx_last: ctx_start,
            last: Snapshot::default(),
            snap: Snapshot::default(),
            senders_done_at: None,
            rx_first: None,
            rx_last: start,
            rx_seen: 0,
            prev_tick: start,
            last_info_at: 0,
        };
        let interrupted = ticker::drive(&mut ticks, &ticker::Monotonic, signal, start, interval);
        let (rx_first, rx_last) = (ticks.rx_first, ticks.rx_last);
        let secs = |ns: u64| (ns - start) as f64 / 1e9;
        let end = clock::monotonic_ns();
        let ctx = crate::metrics::ctx::delta(&ctx_start, &crate::metrics::ctx::sample());
        let tx_shared: Vec<_> = self.senders.iter().flat_map(|g| g.shared.clone()).collect();
        let rx_shared: Vec<_> = self.sinks.iter().flat_map(|g| g.shared.clone()).collect();
        let mut ring_failed = false;
        let mut tx_span = None;
        if let Some(s) = self.senders.take() {
            let outcomes = s.group.join();
            ring_failed |= outcomes.iter().any(|o| o.is_none_or(|o| o.ring_failed));
            let first = outcomes.iter().flatten().map(|o| o.started_ns).min();
            let last = outcomes.iter().flatten().map(|o| o.ended_ns).max();
            tx_span = first.zip(last).map(|(a, b)| (b - a) as f64 / 1e9);
        }
        if let Some(s) = self.sinks.take() {
            s.group.join();
        }
        // The workers have closed every connection and booked each one's final retransmits.
        if let Some(sampler) = self.info.as_mut() {
            let fresh = sampler.sample();
            keep_open_samples(&mut self.last_info, fresh);
        }
        let snap = snapshot(tx_shared.iter(), rx_shared.iter());
        if let Some(e) = self.exporter.as_mut() {
            e.series_mut().info.clone_from(&self.last_info);
            e.tick(true);
        }
        let verdict = self.ask.take().map(|ask| ask(&tx_shared));
        let mut result = Ok(());
        if let Some(span) = tx_span {
            self.send_summary(&snap, span, ctx, verdict.as_ref());
            if snap.tx.connects == 0 {
                result = Err(Error::io(
                    "tcp send",
                    std::io::Error::other(
                        "no connection succeeded: is a `ringblast sink --proto tcp` listening there?",
                    ),
                ));
            }
        }
        if self.sink_control.is_some() {
            let span = rx_first.map_or(0.0, |f| (rx_last - f) as f64 / 1e9);
            self.sink_summary(&snap, span, secs(end));
        }
        if ring_failed {
            result = Err(Error::io(
                "io_uring_enter",
                std::io::Error::other("a worker's ring failed"),
            ));
        }
        Ended {
            result,
            interrupted,
        }
    }
}

/// One TCP run as the reporting loop drives it: the reporter and what the loop keeps between
/// ticks (the snapshots of this tick and of the last interval, the drain's start, the sink's
/// active span).
struct TcpTicks<'a> {
    reporter: &'a mut Reporter,
    start: u64,
    ctx_last: crate::metrics::ctx::CtxSample,
    last: Snapshot,
    snap: Snapshot,
    senders_done_at: Option<u64>,
    /// The sink's active span: first and last tick at which its byte count moved.
    rx_first: Option<u64>,
    rx_last: u64,
    rx_seen: u64,
    prev_tick: u64,
    last_info_at: u64,
}

impl Ticked for TcpTicks<'_> {
    fn sends(&self) -> bool {
        self.reporter.senders.is_some()
    }

    fn senders_finished(&self) -> bool {
        self.reporter
            .senders
            .as_ref()
            .is_none_or(|s| s.group.finished())
    }

    fn sinks_finished(&self) -> bool {
        self.reporter
            .sinks
            .as_ref()
            .is_none_or(|s| s.group.finished())
    }

    fn interrupt(&mut self) {
        self.reporter.send_control.request_stop();
        if let Some(c) = &self.reporter.sink_control {
            c.request_stop();
        }
    }

    fn senders_ended(&mut self, now_ns: u64) {
        self.senders_done_at = Some(now_ns);
        if let Some(c) = &self.reporter.sink_control {
            c.request_drain();
        }
    }

    fn tick(&mut self, now: u64) {
        let r = &mut *self.reporter;
        if let (Some(at), Some(c)) = (self.senders_done_at, &r.sink_control)
            && now - at > DRAIN_BOUND_NS
        {
            c.request_stop();
        }
        if let (Some(d), Some(c)) = (r.sink_duration, &r.sink_control)
            && now - self.start >= d.as_nanos() as u64
        {
            c.request_stop();
        }
        if let Some(b) = &r.books {
            b.tick();
        }
        if let Some(sampler) = r.info.as_mut()
            && now - self.last_info_at >= INFO_EVERY_NS
        {
            let fresh = sampler.sample();
            keep_open_samples(&mut r.last_info, fresh);
            self.last_info_at = now;
            if let Some(e) = r.exporter.as_mut() {
                e.series_mut().info.clone_from(&r.last_info);
            }
        }
        self.snap = r.snapshot();
        if let Some(e) = r.exporter.as_mut() {
            if let Some(stats) = &r.control_stats {
                super::control_link::export_server_stats(stats);
            }
            e.tick(false);
        }
        let rx_bytes = self.snap.rx.rx_bytes;
        if rx_bytes != self.rx_seen {
            self.rx_first.get_or_insert(self.prev_tick);
            self.rx_last = now;
            self.rx_seen = rx_bytes;
        }
        self.prev_tick = now;
    }

    fn interval(&mut self, from_ns: u64, now_ns: u64) {
        let secs = |ns: u64| (ns - self.start) as f64 / 1e9;
        let ctx_now = crate::metrics::ctx::sample();
        self.reporter
            .interval_lines(&self.snap, &self.last, secs(from_ns), secs(now_ns));
        if self.reporter.rr {
            self.reporter.rr_line(
                &self.snap,
                &self.last,
                secs(now_ns) - secs(from_ns),
                crate::metrics::ctx::delta(&self.ctx_last, &ctx_now),
            );
        }
        self.ctx_last = ctx_now;
        // The next tick takes `snap` afresh before any interval reads it.
        self.last = std::mem::take(&mut self.snap);
    }
}
