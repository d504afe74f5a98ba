//! The reporting loop of a run: watches the worker groups, prints interval lines, turns
//! SIGINT/SIGTERM into a clean stop, and prints the final summaries after every worker has
//! ended and published its last counters (so nothing counted is lost).

use crate::say;
use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use serde_json::{Value, json};

use super::{
    control_link::VerdictSource,
    judge::Judge,
    link_state::LinkState,
    roles::{SenderSet, SinkSet},
    ticker::{self, Ended, Ticked},
    verdict::{GOODBYE_WAIT, VerdictResult},
};
use crate::{
    clock,
    error::Error,
    net::wire,
    report::{self, RxSample, TxSample},
    sink::registry::RunVerdict,
    worker::Control,
};

mod interval;

/// How often the sink's session starts and ends are looked for.
const EVENTS_EVERY_NS: u64 = 500_000_000;
/// How long a sender waits for its control channel's first answer before its first send:
/// the connect timeout, so a sink that is simply down costs nothing (refused at once).
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// A started run: senders, sinks or both.
pub(crate) struct Session {
    /// Stop flag of the senders.
    pub(crate) send_control: Arc<Control>,
    /// Stop and drain flags of the sinks.
    pub(crate) sink_control: Arc<Control>,
    /// Senders, if this run sends.
    pub(crate) senders: Option<SenderSet>,
    /// Sinks, if this run receives.
    pub(crate) sinks: Option<SinkSet>,
    /// JSON Lines on stdout.
    pub(crate) json: bool,
    /// Time between interval reports (zero = none).
    pub(crate) interval: Duration,
    /// Role names get a prefix in human lines (pair mode).
    pub(crate) prefix_roles: bool,
    /// Where the sender's verdict comes from.
    pub(crate) verdict: VerdictSource,
    /// A sender run below this share of its target fails (`--min-rate-ratio`).
    pub(crate) min_rate_ratio: Option<f64>,
    /// Live lines show the L1 wire rate (`--wire-rate`).
    pub(crate) wire_rate: bool,
    /// What the sender's control channel found out (its round trip, for the summary).
    pub(crate) link: Arc<LinkState>,
}

/// Installs SIGINT/SIGTERM handlers: the first asks for a clean stop, a second exits at once.
pub(crate) fn install_signals() -> Result<Arc<AtomicBool>, Error> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&flag)))
            .map_err(|e| Error::io("install signal handler", e))?;
    }
    Ok(flag)
}

impl Session {
    /// The in-process sender says goodbye to the in-process sink: its flows close with their
    /// true ends, so a tail the sink never saw is counted (as kernel drops or loss).
    fn in_process_goodbye(&self) -> Option<RunVerdict> {
        let (Some(senders), Some(sinks)) = (&self.senders, &self.sinks) else {
            return None;
        };
        Some(
            sinks
                .registry
                .goodbye(senders.epoch, &senders.flow_reports(), GOODBYE_WAIT),
        )
    }

    /// Sessions the sink saw start (without a hello) or end since the last call: a line each,
    /// and a `"type":"session"` record each with `--json`.
    fn say_session_events(&self) {
        for event in self.sinks.iter().flat_map(|s| s.registry.take_events()) {
            say!("{}", event.line());
            if self.json {
                crate::output::json_line(&event.json());
            }
        }
    }

    fn samples(&self) -> (Vec<TxSample>, Vec<RxSample>) {
        (
            self.senders
                .as_ref()
                .map(|s| s.samples())
                .unwrap_or_default(),
            self.sinks.as_ref().map(|s| s.samples()).unwrap_or_default(),
        )
    }

    /// Releases the workers (sinks first) and reports until every worker has ended.
    pub(crate) fn run(mut self, signal: &AtomicBool, on_tick: &mut dyn FnMut(bool)) -> Ended {
        if let Some(s) = &self.sinks {
            s.group.release();
        }
        if let Some(s) = &self.senders {
            if !self.link.wait_first_answer(HELLO_WAIT) {
                say!(
                    "control: no answer from the sink within {HELLO_WAIT:?}; sending anyway (a sink with a secret counts datagrams only after this sender's hello)"
                );
            }
            s.group.release();
        }
        let start = clock::monotonic_ns();
        say!(
            "startup: workers released {:.1} ms after launch",
            clock::ms_since_launch(start)
        );
        // Path MTU, IP fragments per datagram and L1 bytes per datagram, for what is sent.
        let wire = self.senders.as_ref().map(|s| {
            let (mtu, n) = wire::check_path(s.to, s.size, true).unwrap_or((usize::MAX, 1));
            let per_class: Vec<u64> = s
                .sizes
                .classes
                .iter()
                .map(|c| wire::l1_bytes(c.payload, mtu, s.to))
                .collect();
            (mtu, n, per_class)
        });
        if let (Some((mtu, n, _)), Some(s)) = (&wire, &self.senders)
            && *n > 1
        {
            say!(
                "send: --allow-fragments: each {}-byte datagram leaves as {n} IP fragments (path MTU {mtu}); pps counts datagrams",
                s.size
            );
        }
        if let Some(s) = self
            .senders
            .as_ref()
            .filter(|s| s.sizes.is_mix() || s.sizes.has_compact())
        {
            say!("send: {}", s.sizes.describe());
        }
        if let Some(line) = self.senders.as_ref().and_then(|s| s.fields_plan.as_ref()) {
            say!("{line}");
        }
        let judge = self
            .senders
            .as_ref()
            .map(|s| Judge::new(s.to, s.target_pps, self.min_rate_ratio, start));
        let (tx0, rx0) = self.samples();
        let interval = self.interval;
        let mut ticks = UdpTicks {
            session: &mut self,
            on_tick: &mut *on_tick,
            start,
            in_process_verdict: None,
            part_verdicts: None,
            table_full_said: false,
            header_due: true,
            wire,
            last_events: start,
            judge,
            now: Default::default(),
            before: (tx0, rx0),
        };
        let interrupted = ticker::drive(&mut ticks, &ticker::Monotonic, signal, start, interval);
        let UdpTicks {
            in_process_verdict,
            mut part_verdicts,
            wire,
            judge,
            ..
        } = ticks;
        let verdict = match std::mem::replace(&mut self.verdict, VerdictSource::None) {
            VerdictSource::None => part_verdicts.as_deref().map(super::part_link::run_verdict),
            // Its parts are closed when the senders end; a run that ends before is stopped.
            VerdictSource::Parts(link) => {
                part_verdicts = Some(link.finish());
                part_verdicts.as_deref().map(super::part_link::run_verdict)
            }
            VerdictSource::InProcess => Some(
                in_process_verdict
                    .map(|v| ("this process".to_string(), v))
                    .ok_or_else(|| "the in-process sink gave no verdict".to_string()),
            ),
            VerdictSource::Remote(ask) => Some(
                self.senders
                    .as_ref()
                    .map(|s| s.flow_reports())
                    .ok_or_else(|| "no senders".to_string())
                    .and_then(|flows| ask(&flows)),
            ),
        };
        // A constant rate is a one-step schedule: its step is judged by the run's verdict.
        if let (None, Some(s), Some(v)) = (&part_verdicts, &self.senders, &verdict) {
            let sent = report::total_tx(&s.samples()).traffic.packets;
            s.tally.add(sent, v.as_ref().ok().map(|(_, v)| v));
        }
        Ended {
            result: self.finish(
                on_tick,
                (verdict, part_verdicts),
                judge,
                wire.map_or(1, |w| w.1),
            ),
            interrupted,
        }
    }

    fn finish(
        self,
        on_tick: &mut dyn FnMut(bool),
        (verdict, part_verdicts): (Option<VerdictResult>, Option<Vec<VerdictResult>>),
        judge: Option<Judge>,
        fragments: usize,
    ) -> Result<(), Error> {
        let mut failed = false;
        let mut judged = None;
        // Every worker has ended and published its last counters: flush them to the exporter
        // before printing, so scraped values equal the summary.
        on_tick(true);
        self.say_session_events();
        let (tx, rx) = self.samples();
        if let Some(s) = self.senders {
            let books = super::control_link::part_books(&s);
            let placement = report::placement_json(&s.queues, s.group.memory());
            let outcomes = s.group.join();
            let total = report::total_tx(&tx);
            let started = outcomes
                .iter()
                .flatten()
                .map(|o| o.started_ns)
                .min()
                .unwrap_or(0);
            let ended = outcomes
                .iter()
                .flatten()
                .map(|o| o.ended_ns)
                .max()
                .unwrap_or(0);
            failed |= outcomes
                .iter()
                .any(|o| o.as_ref().is_none_or(|o| o.ring_failed));
            let duration = ended.saturating_sub(started) as f64 / 1e9;
            // The first send is queued right as a sender's loop starts.
            let extra = json!({"epoch": s.epoch, "queues": s.queues.len(),
                "startup_ms": clock::ms_since_launch(started),
                "flows": s.flows.iter().map(Vec::len).sum::<usize>(),
                "target_pps": s.target_pps.map(|r| r.round() as u64),
                "placement": placement});
            let mut summary = report::tx_summary_json(&total, duration, extra);
            let judgement = judge
                .map(|j| j.finish(&total, duration))
                .unwrap_or_default();
            if let (Value::Object(into), Value::Object(more)) = (&mut summary, &judgement.json) {
                into.extend(more.clone());
            }
            // The smallest round trip of the sender's clock exchanges; null without them.
            summary["control_rtt_ns"] = json!(self.link.control_rtt_ns());
            summary["control_integrity_failures"] = self.link.integrity_json();
            summary["size"] = json!(s.size);
            summary["sizes"] = report::tx_sizes_json(&s.sizes, &total.traffic);
            summary["burst"] = json!(s.burst);
            if fragments > 1 {
                summary["ip_fragments_per_datagram"] = json!(fragments);
                summary["ip_fragments"] = json!(total.traffic.packets * fragments as u64);
            }
            let verdict_line = verdict
                .as_ref()
                .map(|v| report::attach_verdict(&mut summary, v));
            say!(
                "send summary: {} packets, {} bytes, {} errors in {:.3}s: {}pps {}bps{}; first send {} ms after launch",
                summary["tx_packets"],
                summary["tx_bytes"],
                report::errors_text(&total.traffic.errors),
                duration,
                summary["pps"],
                summary["bps"],
                judgement.rate_words,
                summary["startup_ms"]
            );
            if let Some(line) = verdict_line {
                say!("{line}");
            }
            if fragments > 1 {
                say!(
                    "send: IP fragments sent: {} ({fragments} per datagram)",
                    total.traffic.packets * fragments as u64
                );
            }
            for line in &judgement.warnings {
                say!("{line}");
            }
            judged = judgement.failure;
            if let Some(schedule) = &s.schedule {
                let parts = part_verdicts.as_deref().unwrap_or_default();
                for (line, json) in super::steps::step_reports(schedule, &books, parts) {
                    say!("{line}");
                    if self.json {
                        crate::output::json_line(&json);
                    }
                }
            }
            if self.json {
                crate::output::json_line(&summary);
            }
        }
        if let Some(s) = self.sinks {
            let placement = report::placement_json(&s.queues, s.group.memory());
            let outcomes = s.group.join();
            failed |= outcomes
                .iter()
                .any(|o| o.as_ref().is_none_or(|o| o.ring_failed));
            let mut total = report::total_rx(&rx);
            total.traffic.lost += s.registry.unseen_lost();
            let first = outcomes
                .iter()
                .flatten()
                .filter_map(|o| o.active)
                .map(|a| a.0)
                .min();
            let last = outcomes
                .iter()
                .flatten()
                .filter_map(|o| o.active)
                .map(|a| a.1)
                .max();
            let duration = match (first, last) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e9,
                _ => 0.0,
            };
            let mut latency: Option<hdrhistogram::Histogram<u64>> = None;
            for o in outcomes.into_iter().flatten() {
                match latency.as_mut() {
                    Some(h) => {
                        let _ = h.add(&o.latency);
                    }
                    None => latency = Some(o.latency),
                }
            }
            let latency = latency.filter(|h| !h.is_empty());
            let senders = s.registry.rows(true);
            // Rates over the time some session received packets: never across idle gaps.
            let active = match s.registry.active_ns() {
                0 => duration,
                ns => ns as f64 / 1e9,
            };
            let extra = json!({"queues": s.queues.len(), "latency": latency.as_ref().map(report::latency_hdr_json),
                "span_s": (duration * 1000.0).round() / 1000.0,
                "startup_ms": clock::ms_since_launch(s.ready_ns),
                "first_packet_ms": first.map(clock::ms_since_launch),
                "senders": report::senders_json(&senders),
                "sizes": report::rx_sizes_json(&s.sizes, &senders),
                "placement": placement});
            let mut summary = report::rx_summary_json(&total, active, extra);
            let (shares, shares_line) = report::queue_shares(&rx, &s.queues);
            if let (Value::Object(into), Value::Object(more)) = (&mut summary, shares) {
                into.extend(more);
            }
            say!(
                "{}",
                report::sink_summary_line(&summary, &total, active, duration, latency.as_ref())
            );
            if let Some(line) = shares_line {
                say!("{line}");
            }
            for line in report::sender_lines(&senders) {
                say!("{line}");
            }
            if self.json {
                crate::output::json_line(&summary);
            }
        }
        if let Some(why) = judged {
            return Err(Error::io("the run failed", std::io::Error::other(why)));
        }
        if failed {
            return Err(Error::io(
                "a worker's io_uring failed during the run",
                std::io::Error::other("see the counts above"),
            ));
        }
        Ok(())
    }
}

/// One UDP run as the reporting loop drives it: the session and what the loop keeps between
/// ticks (the samples of the last interval, the verdicts taken when the senders ended, the
/// judge of the achieved rate).
struct UdpTicks<'a> {
    session: &'a mut Session,
    on_tick: &'a mut dyn FnMut(bool),
    start: u64,
    in_process_verdict: Option<RunVerdict>,
    part_verdicts: Option<Vec<VerdictResult>>,
    table_full_said: bool,
    header_due: bool,
    /// Path MTU, IP fragments per datagram and L1 bytes per datagram of each size class.
    wire: Option<(usize, usize, Vec<u64>)>,
    last_events: u64,
    judge: Option<Judge>,
    /// The samples of this tick, and of the last interval's end.
    now: (Vec<TxSample>, Vec<RxSample>),
    before: (Vec<TxSample>, Vec<RxSample>),
}

impl Ticked for UdpTicks<'_> {
    fn sends(&self) -> bool {
        self.session.senders.is_some()
    }

    fn senders_finished(&self) -> bool {
        self.session
            .senders
            .as_ref()
            .is_none_or(|s| s.group.finished())
    }

    fn sinks_finished(&self) -> bool {
        self.session
            .sinks
            .as_ref()
            .is_none_or(|s| s.group.finished())
    }

    fn interrupt(&mut self) {
        // Senders stop at once; sinks stop too, or, when this process also sends, drain what
        // is still on the way so the books close.
        self.session.send_control.request_stop();
        if self.session.senders.is_none() {
            self.session.sink_control.request_stop();
        }
    }

    fn senders_ended(&mut self, _now_ns: u64) {
        let s = &mut *self.session;
        match std::mem::replace(&mut s.verdict, VerdictSource::None) {
            VerdictSource::Parts(link) => self.part_verdicts = Some(link.finish()),
            other => {
                s.verdict = other;
                self.in_process_verdict = s.in_process_goodbye();
            }
        }
        s.sink_control.request_drain();
    }

    fn tick(&mut self, now_ns: u64) {
        (self.on_tick)(false);
        self.now = self.session.samples();
        let (tx, rx) = &self.now;
        if !self.table_full_said
            && let Some(line) = self
                .session
                .sinks
                .as_ref()
                .and_then(|s| s.table_full_line(rx))
        {
            say!("{line}");
            self.table_full_said = true;
        }
        if now_ns - self.last_events >= EVENTS_EVERY_NS {
            self.session.say_session_events();
            self.last_events = now_ns;
        }
        if let Some(line) = self
            .judge
            .as_mut()
            .and_then(|j| j.tick(now_ns, &report::total_tx(tx)))
        {
            say!("{line}");
        }
    }

    fn interval(&mut self, from_ns: u64, now_ns: u64) {
        let seconds = (now_ns - from_ns) as f64 / 1e9;
        let elapsed = (now_ns - self.start) as f64 / 1e9;
        let wire_l1 = self
            .wire
            .as_ref()
            .filter(|_| self.session.wire_rate)
            .map(|w| w.2.as_slice());
        self.session.print_interval(
            elapsed,
            seconds,
            self.header_due,
            (&self.now.0, &self.now.1),
            (&self.before.0, &self.before.1),
            wire_l1,
        );
        self.header_due = false;
        // The next tick samples `now` afresh before any interval reads it.
        self.before = std::mem::take(&mut self.now);
    }
}
