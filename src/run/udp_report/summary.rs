//! The end-of-run summaries of a UDP run: the sender's (its rate against the target, the
//! verdict, fragments, the steps of a schedule) and the sink's (loss, reordering, latency, the
//! queues' shares, one line per sender), each a line and, with `--json`, a JSON record.

use serde_json::{Value, json};

use super::UdpReport;
use crate::{
    clock,
    host_time::HostTime,
    report::{self, RxSample, TxSample},
    say,
    sender::SenderOutcome,
    sink::SinkOutcome,
    worker,
};

impl UdpReport {
    /// The sender's summary from its last samples and its workers' outcomes, judged by
    /// `judge`; returns why the run failed, if it did.
    pub(super) fn send_summary(
        &self,
        tx: &[TxSample],
        outcomes: &[Option<SenderOutcome>],
        judge: Option<crate::run::judge::Judge>,
    ) -> Option<String> {
        let s = self.senders.as_ref()?;
        let fragments = self.state.wire.as_ref().map_or(1, |w| w.1);
        let verdict = &self.state.verdict;
        let books = crate::run::control_link::part_books(s);
        let placement = report::placement_json(&s.queues, s.group.memory());
        let total = report::total_tx(tx);
        let (started, ended) = worker::span(outcomes).unwrap_or((0, 0));
        let duration = ended.saturating_sub(started) as f64 / 1e9;
        // The first send is queued right as a sender's loop starts.
        let extra = json!({"epoch": s.epoch, "queues": s.queues.len(),
            "startup_ms": clock::ms_since_launch(started),
            "flows": s.flows.iter().map(Vec::len).sum::<usize>(),
            "target_pps": s.target_pps.map(|r| r.round() as u64),
            "placement": placement});
        let mut summary = report::tx_summary_json(&total, duration, extra);
        let workers: Vec<HostTime> = s
            .queues
            .iter()
            .zip(outcomes)
            .filter_map(|(q, o)| {
                o.as_ref().map(|o| HostTime {
                    queue: q.queue,
                    wall_ns: o.ended_ns.saturating_sub(o.started_ns),
                    time: o.time,
                })
            })
            .collect();
        let mut judgement = judge
            .map(|j| j.finish(&total, duration))
            .unwrap_or_default();
        judgement.name_the_limit(&workers);
        if let (Value::Object(into), Value::Object(more)) = (&mut summary, &judgement.json) {
            into.extend(more.clone());
        }
        // The smallest round trip of the sender's clock exchanges; null without them.
        summary["control_rtt_ns"] = json!(self.link.control_rtt_ns());
        summary["control_integrity_failures"] = self.link.integrity_json();
        summary["size"] = json!(s.size);
        summary["sizes"] = report::tx_sizes_json(&s.sizes, &total.traffic);
        summary["burst"] = json!(s.burst);
        let (transmit_lag, transmit_line) = transmit_lag(&s.queues, outcomes);
        summary["stamps"] = crate::timestamps::stamps_json(
            false,
            None,
            outcomes.iter().flatten().any(|o| o.transmit_lag.is_some()),
        );
        summary["transmit_lag"] = transmit_lag;
        summary["worker_time"] = workers.iter().map(HostTime::json).collect();
        if fragments > 1 {
            summary["ip_fragments_per_datagram"] = json!(fragments);
            summary["ip_fragments"] = json!(total.traffic.packets * fragments as u64);
        }
        let failed_sends = total.traffic.errors.iter().sum();
        let (verdict_line, impossible) = verdict
            .as_ref()
            .map(|v| report::attach_verdict(&mut summary, v, total.traffic.packets, failed_sends))
            .unzip();
        say!(
            "send summary: {} packets, {} bytes, {} errors in {:.3}s: {} {}{}; first send {} ms after launch",
            summary["tx_packets"],
            summary["tx_bytes"],
            report::errors_text(&total.traffic.errors),
            duration,
            report::per_second(summary["pps"].as_f64().unwrap_or(0.0), "pps"),
            report::bit_rate(summary["bps"].as_f64().unwrap_or(0.0)),
            judgement.rate_words,
            summary["startup_ms"]
        );
        if let Some(line) = verdict_line {
            say!("{line}");
        }
        let run_verdict = verdict.as_ref().and_then(|v| v.as_ref().ok()).map(|v| &v.1);
        if let Some((line, json)) = super::exchange::exchange_summary(
            &s.shared,
            outcomes,
            duration,
            total.traffic.packets,
            run_verdict,
            super::exchange::ctx_since(&self.state.ctx_start),
        ) {
            say!("{line}");
            summary["rr"] = json;
        }
        if total.traffic.packets > 0 {
            say!("{transmit_line}");
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

        if let Some(schedule) = &s.schedule {
            let parts = self.state.part_verdicts.as_deref().unwrap_or_default();
            for (line, json) in crate::run::steps::step_reports(schedule, &books, parts) {
                say!("{line}");
                if self.json {
                    crate::output::json_line(&json);
                }
            }
        }
        if self.json {
            crate::output::json_line(&summary);
        }
        judgement.failure.or(impossible.flatten())
    }

    /// The sink's summary from its last samples and its workers' outcomes.
    pub(super) fn sink_summary(&self, rx: &[RxSample], outcomes: Vec<Option<SinkOutcome>>) {
        let Some(s) = self.sinks.as_ref() else {
            return;
        };
        let placement = report::placement_json(&s.queues, s.group.memory());
        let mut total = report::total_rx(rx);
        total.traffic.lost += s.registry.unseen_lost();
        let active_span = worker::span(&outcomes);
        let first = active_span.map(|s| s.0);
        let duration = active_span.map_or(0.0, |(a, b)| b.saturating_sub(a) as f64 / 1e9);
        let workers: Vec<HostTime> = s
            .queues
            .iter()
            .zip(&outcomes)
            .filter_map(|(q, o)| {
                o.as_ref().map(|o| HostTime {
                    queue: q.queue,
                    wall_ns: o.loop_ns,
                    time: o.time,
                })
            })
            .collect();
        // Each queue's wait from the kernel's receive stamp to its worker's read (null: no
        // stamps, so unknown).
        let queueing: Vec<Value> = s
            .queues
            .iter()
            .zip(&outcomes)
            .map(|(q, o)| {
                let h = o.as_ref().map(|o| &o.queueing).filter(|h| !h.is_empty());
                json!({"queue": q.queue, "delay": h.map(report::latency_hdr_json)})
            })
            .collect();
        let worst_wait = worst_queue(outcomes.iter().flatten().map(|o| &o.queueing))
            .map(|h| (h.value_at_quantile(0.5), h.value_at_quantile(0.99)));
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
        let firsts: Vec<(u64, &str)> = senders
            .iter()
            .filter_map(|r| {
                let t = r.first_rx_ns.map(clock::unix_of_monotonic)?;
                Some((t, r.name.as_str()))
            })
            .collect();
        let spread = report::start_spread(&firsts, "datagrams");
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
            "start_spread": spread.as_ref().map(|(_, json)| json),
            "sizes": report::rx_sizes_json(&s.sizes, &senders),
            "placement": placement});
        let mut summary = report::rx_summary_json(&total, active, extra);
        // Datagrams the sink's own kernel dropped: this host, not the network, lost them.
        let sink_limited = total.worker.kernel_drops > 0;
        summary["sink_limited"] = json!(sink_limited);
        summary["worker_time"] = workers.iter().map(HostTime::json).collect();
        summary["queueing_delay"] = json!(queueing);
        summary["stamps"] = crate::timestamps::stamps_json(false, Some(s.arrival), false);
        let (shares, shares_line) = report::queue_shares(rx, &s.queues);
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
        if let Some((line, _)) = &spread {
            say!("{line}");
        }
        match worst_wait {
            Some((p50, p99)) => say!(
                "sink: queueing delay (kernel receive stamp to the sink's read, not counted as latency): worst queue p50 {:.1}us p99 {:.1}us",
                p50 as f64 / 1e3,
                p99 as f64 / 1e3
            ),
            None if total.traffic.packets > 0 => say!(
                "sink: queueing delay unknown: no kernel receive stamps ({}), so latency includes the sink's own wait",
                match s.arrival {
                    crate::timestamps::Arrival::Read => "--arrival read",
                    crate::timestamps::Arrival::Kernel => "none came with the datagrams",
                }
            ),
            None => {}
        }
        // The queue whose socket dropped most.
        let dropping = rx
            .iter()
            .zip(&s.queues)
            .max_by_key(|(r, _)| r.worker.kernel_drops)
            .and_then(|(_, q)| workers.iter().find(|w| w.queue == q.queue));
        if let (true, Some(w)) = (sink_limited, dropping) {
            say!(
                "sink: sink-limited: its kernel dropped {} datagrams on its sockets, so that part of the loss is this host's, not the network's; {} (more --queues, or a CPU of its own with --cpus)",
                total.worker.kernel_drops,
                w.words()
            );
        }
        if self.json {
            crate::output::json_line(&summary);
        }
    }
}

/// Each queue's sampled lag from send stamp to the kernel's transmit stamp (`lag` null:
/// unknown, no stamp came back or the kernel reports none), and the line that says the worst.
fn transmit_lag(
    queues: &[report::QueueView],
    outcomes: &[Option<SenderOutcome>],
) -> (Value, String) {
    let rows: Vec<Value> = queues
        .iter()
        .zip(outcomes)
        .map(|(q, o)| {
            let lag = o.as_ref().and_then(|o| o.transmit_lag.as_ref());
            let figure = lag.filter(|h| !h.is_empty()).map(report::latency_hdr_json);
            json!({"queue": q.queue, "lag": figure, "measured": lag.is_some(),
                "missing": o.as_ref().map_or(0, |o| o.transmit_lag_missing),
                "reads": o.as_ref().map_or(0, |o| o.transmit_lag_reads)})
        })
        .collect();
    let sampled = outcomes
        .iter()
        .flatten()
        .filter_map(|o| o.transmit_lag.as_ref());
    let worst = worst_queue(sampled.clone());
    let missing: u64 = outcomes
        .iter()
        .flatten()
        .map(|o| o.transmit_lag_missing)
        .sum();
    let line = match worst {
        Some(h) => format!(
            "send: transmit lag of sampled datagrams (the sender's stamp to the kernel's software transmit stamp; one SENDMSG with a stamp request per queue every 1 ms): worst queue p50 {:.1}us p99 {:.1}us ({} samples, {missing} without a stamp)",
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
            h.len()
        ),
        None if sampled.count() > 0 => format!(
            "send: transmit lag unknown: no sampled datagram's transmit stamp came back ({missing} without one)"
        ),
        None => "send: transmit lag unknown: this kernel reports no software transmit stamps (SO_TIMESTAMPING)".to_string(),
    };
    (json!(rows), line)
}

/// The queue whose figure has the highest p99, of those with samples.
fn worst_queue<'a>(
    queues: impl Iterator<Item = &'a hdrhistogram::Histogram<u64>>,
) -> Option<&'a hdrhistogram::Histogram<u64>> {
    queues
        .filter(|h| !h.is_empty())
        .max_by_key(|h| h.value_at_quantile(0.99))
}
