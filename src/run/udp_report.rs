//! UDP's side of a run's reporting session: the start-up lines (path MTU, fragments, size
//! classes), each tick's work (the sink's session events, a full flow table, the achieved
//! rate's warnings), pktgen-style interval lines per queue, the sender's verdict from its
//! control channel or the in-process sink, and the summaries of both roles.

use crate::say;
use std::{sync::Arc, time::Duration};

use super::{
    control_link::VerdictSource,
    judge::Judge,
    link_ends::SinkVerdict,
    link_state::LinkState,
    roles::{SenderSet, SinkSet},
    session::{Outcomes, Proto, Span},
    udp_verdict::verdict_of,
    verdict::GOODBYE_WAIT,
};
use crate::{
    clock,
    control::msg::Verdict,
    error::Error,
    metrics::handles::Handles,
    net::wire,
    report::{self, RxSample, TxSample},
    sender::SenderOutcome,
    sink::SinkOutcome,
    worker::Group,
};

mod exchange;
mod interval;
mod summary;

/// How often the sink's session starts and ends are looked for.
const EVENTS_EVERY_NS: u64 = 500_000_000;

/// A started UDP run as its session reports it: senders, sinks or both.
pub(crate) struct UdpReport {
    /// Senders, if this run sends.
    pub(crate) senders: Option<SenderSet>,
    /// Sinks, if this run receives.
    pub(crate) sinks: Option<SinkSet>,
    /// JSON Lines on stdout.
    pub(crate) json: bool,
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
    /// What the report keeps between ticks.
    pub(crate) state: UdpState,
}

/// What the UDP report learns as the run goes: the verdicts taken when the senders ended, the
/// path's fragments and L1 bytes, the judge of the achieved rate, and when to look for events.
#[derive(Default)]
pub(crate) struct UdpState {
    in_process_verdict: Option<Verdict>,
    part_verdicts: Option<Vec<SinkVerdict>>,
    /// The run's verdict, taken once every worker has ended.
    verdict: Option<SinkVerdict>,
    table_full_said: bool,
    header_due: bool,
    /// Path MTU, IP fragments per datagram and L1 bytes per datagram of each size class.
    wire: Option<(usize, usize, Vec<u64>)>,
    last_events: u64,
    judge: Option<Judge>,
    /// Context switches when the run started (for rr's per-transaction figure).
    ctx_start: crate::metrics::ctx::CtxSample,
    /// Each sender's books at the last interval (for its part of the next, with `--json`).
    pub(super) sender_intervals: crate::report::SenderIntervals,
}

impl UdpState {
    /// The state of a run starting now.
    pub(crate) fn started() -> UdpState {
        UdpState {
            ctx_start: crate::metrics::ctx::sample(),
            ..UdpState::default()
        }
    }
}

impl UdpReport {
    /// The in-process sender says goodbye to the in-process sink: its flows close with their
    /// true ends, so a tail the sink never saw is counted (as kernel drops or loss).
    fn in_process_goodbye(&self) -> Option<Verdict> {
        let (Some(senders), Some(sinks)) = (&self.senders, &self.sinks) else {
            return None;
        };
        Some(verdict_of(&sinks.registry.goodbye(
            senders.epoch,
            &senders.flow_reports(),
            GOODBYE_WAIT,
        )))
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

    /// The start-up lines of a sender: the path's fragments, the size classes, the header
    /// fields; and the judge of its achieved rate from `start`.
    fn start_lines(&mut self, start: u64) {
        let Some(s) = &self.senders else {
            return;
        };
        // Path MTU, IP fragments per datagram and L1 bytes per datagram, for what is sent.
        let (mtu, n) = wire::check_path(s.to, s.size, true).unwrap_or((usize::MAX, 1));
        let per_class: Vec<u64> = s
            .sizes
            .classes
            .iter()
            .map(|c| wire::l1_bytes(c.payload, mtu, s.to))
            .collect();
        if n > 1 {
            say!(
                "send: --allow-fragments: each {}-byte datagram leaves as {n} IP fragments (path MTU {mtu}); pps counts datagrams",
                s.size
            );
        }
        if s.sizes.is_mix() || s.sizes.has_compact() {
            say!("send: {}", s.sizes.describe());
        }
        if let Some(line) = &s.fields_plan {
            say!("{line}");
        }
        self.state.wire = Some((mtu, n, per_class));
        self.state.judge = Some(Judge::new(s.to, s.target_pps, self.min_rate_ratio, start));
    }
}

impl Proto for UdpReport {
    type Senders = Group<SenderOutcome>;
    type Sinks = Group<SinkOutcome>;
    type Snapshot = (Vec<TxSample>, Vec<RxSample>);
    type Series = Handles;

    const DRAIN_AFTER_INTERRUPT: bool = true;
    const DRAIN_BOUND: Option<Duration> = None;

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
        self.link.wait_start();
    }

    fn senders_refused(&self) -> bool {
        self.link.stops_run()
    }

    fn released(&mut self, start_ns: u64) {
        say!(
            "startup: workers released {:.1} ms after launch",
            clock::ms_since_launch(start_ns)
        );
        self.state.header_due = true;
        self.state.last_events = start_ns;
        self.start_lines(start_ns);
    }

    fn senders_ended(&mut self, _now_ns: u64) {
        match std::mem::replace(&mut self.verdict, VerdictSource::None) {
            VerdictSource::Parts(link) => self.state.part_verdicts = Some(link.finish()),
            other => {
                self.verdict = other;
                self.state.in_process_verdict = self.in_process_goodbye();
            }
        }
    }

    fn snapshot(&self) -> Self::Snapshot {
        self.samples()
    }

    fn tick(&mut self, now_ns: u64, (tx, rx): &Self::Snapshot) {
        if !self.state.table_full_said
            && let Some(line) = self.sinks.as_ref().and_then(|s| s.table_full_line(rx))
        {
            say!("{line}");
            self.state.table_full_said = true;
        }
        if now_ns - self.state.last_events >= EVENTS_EVERY_NS {
            self.say_session_events();
            self.state.last_events = now_ns;
        }
        if let Some(line) = self
            .state
            .judge
            .as_mut()
            .and_then(|j| j.tick(now_ns, &report::total_tx(tx)))
        {
            say!("{line}");
        }
    }

    fn interval(&mut self, span: Span, now: &Self::Snapshot, before: &Self::Snapshot) {
        let seconds = span.seconds();
        let elapsed = span.end_s();
        let wire_l1 = self
            .state
            .wire
            .as_ref()
            .filter(|_| self.wire_rate)
            .map(|w| w.2.clone());
        self.print_interval(
            elapsed,
            seconds,
            self.state.header_due,
            (&now.0, &now.1),
            (&before.0, &before.1),
            wire_l1.as_deref(),
        );
        self.state.header_due = false;
    }

    fn conclude(&mut self) {
        let state = &mut self.state;
        let verdict = match std::mem::replace(&mut self.verdict, VerdictSource::None) {
            VerdictSource::None => state
                .part_verdicts
                .as_deref()
                .map(super::part_link::run_verdict),
            // Its parts are closed when the senders end; a run that ends before is stopped.
            VerdictSource::Parts(link) => {
                state.part_verdicts = Some(link.finish());
                state
                    .part_verdicts
                    .as_deref()
                    .map(super::part_link::run_verdict)
            }
            VerdictSource::InProcess => Some(
                state
                    .in_process_verdict
                    .take()
                    .map(|v| ("this process".to_string(), v))
                    .ok_or_else(|| "the in-process sink gave no verdict".to_string()),
            ),
            VerdictSource::Remote(_) if self.link.gave_up_at_start().is_some() => {
                self.link.gave_up_at_start().map(Err)
            }
            VerdictSource::Remote(ask) => Some(
                self.senders
                    .as_ref()
                    .map(|s| s.flow_reports())
                    .ok_or_else(|| "no senders".to_string())
                    .and_then(|flows| ask(&flows)),
            ),
        };
        // A constant rate is a one-step schedule: its step is judged by the run's verdict.
        if let (None, Some(s), Some(v)) = (&state.part_verdicts, &self.senders, &verdict) {
            let sent = report::total_tx(&s.samples()).traffic.packets;
            s.tally.add(sent, v.as_ref().ok().map(|(_, v)| v));
        }
        state.verdict = verdict;
    }

    fn summaries(
        mut self,
        (tx, rx): Self::Snapshot,
        (send_outcomes, sink_outcomes): Outcomes<Self>,
    ) -> Result<(), Error> {
        self.say_session_events();
        let judge = self.state.judge.take();
        let judged = send_outcomes.and_then(|o| self.send_summary(&tx, &o, judge));
        if let Some(outcomes) = sink_outcomes {
            self.sink_summary(&rx, outcomes);
        }
        match judged {
            Some(why) => Err(Error::io("the run failed", std::io::Error::other(why))),
            None => Ok(()),
        }
    }
}
