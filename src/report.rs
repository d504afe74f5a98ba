//! What a run prints: pktgen-style lines per queue and a total on stderr every interval, and,
//! with `--json`, JSON Lines on stdout (`"type":"interval"` lines and one final
//! `"type":"summary"` per role). Everything here is a pure function of counter snapshots.

use serde_json::{Value, json};

use crate::{
    control::msg::Verdict,
    mem::MemoryPlacement,
    sink::{registry::SenderRow, sizes::ClassCount},
    stats::{
        ERRNO_CLASSES, ERRNO_LABELS, INVALID_LABELS, Jitter, Latency, RxFlow, SessionCounters,
        TxFlow, WorkerCounters,
    },
};

mod clock;
mod sender_intervals;
mod sizes;
mod text;
mod units;
pub(crate) use clock::{bound_text, latency_clock_json, latency_only_text, sender_latency_json};
use clock::{latency_text, sender_jitter_json};
pub(crate) use sender_intervals::SenderIntervals;
pub(crate) use sizes::{rx_sizes_json, tx_sizes_json};
pub(crate) use text::{latency_hdr_json, ns_text, queue_shares, sink_summary_line};
pub(crate) use units::{bit_rate, per_second};

/// Where a queue runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueView {
    /// Queue index.
    pub(crate) queue: usize,
    /// NUMA node.
    pub(crate) node: u32,
    /// CPU.
    pub(crate) cpu: u32,
}

/// One sender queue's counters at an instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TxSample {
    /// Summed over the queue's flows.
    pub(crate) traffic: TxFlow,
    /// Engine counters.
    pub(crate) worker: WorkerCounters,
    /// When the worker published these counters (its monotonic clock; 0: not known).
    pub(crate) published_ns: u64,
    /// Request/response counters (`--pattern rr`; zero for a stream).
    pub(crate) exchange: crate::sender::exchange::ExchangeCounters,
}

/// One sink queue's counters at an instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxSample {
    /// Summed over the queue's flows.
    pub(crate) traffic: RxFlow,
    /// Engine and sink counters.
    pub(crate) worker: WorkerCounters,
}

impl TxSample {
    /// Failed packets of every errno class.
    pub(crate) fn errors(&self) -> u64 {
        self.traffic.errors.iter().sum()
    }

    /// Seconds between the worker's publishes of `before` and `self`, or `fallback` (the
    /// reporter's own interval) when either time is unknown.
    pub(crate) fn window_s(&self, before: &TxSample, fallback: f64) -> f64 {
        match self.published_ns.checked_sub(before.published_ns) {
            Some(ns) if ns > 0 && before.published_ns > 0 => ns as f64 / 1e9,
            _ => fallback,
        }
    }
}

/// The interval over which the queues' total packets ran at the sum of their own rates (each
/// over its worker's publish window), so a total line is as exact as the queue lines.
pub(crate) fn total_window_s(now: &[TxSample], before: &[TxSample], fallback: f64) -> f64 {
    let mut packets = 0;
    let mut pps = 0.0;
    for (n, b) in now.iter().zip(before) {
        let p = n.traffic.packets - b.traffic.packets;
        packets += p;
        pps += p as f64 / n.window_s(b, fallback);
    }
    if pps > 0.0 {
        packets as f64 / pps
    } else {
        fallback
    }
}

impl RxSample {
    /// Invalid datagrams of every reason.
    pub(crate) fn invalid(&self) -> u64 {
        self.worker.invalid.iter().sum()
    }
    /// Failed receive completions.
    pub(crate) fn errors(&self) -> u64 {
        self.worker.rx_errors.iter().sum()
    }
}

fn rate(delta: u64, seconds: f64) -> u64 {
    if seconds > 0.0 {
        (delta as f64 / seconds).round() as u64
    } else {
        0
    }
}

/// `1.19 Mpps     571 Mbit/s`: the packet rate and the payload bit rate.
fn rate_text(packets: u64, bytes: u64, seconds: f64) -> String {
    rates_text(packets, "pps", bytes, seconds)
}

/// The rate of `count` in `unit` (`pps`, `rec/s`) and the payload bit rate of `bytes` over
/// `seconds`, auto-scaled and aligned under [`interval_header`] as every protocol's interval
/// lines show them.
pub(crate) fn rates_text(count: u64, unit: &str, bytes: u64, seconds: f64) -> String {
    format!(
        "{:>10}  {:>11}",
        per_second(rate(count, seconds) as f64, unit),
        bit_rate(rate(bytes.saturating_mul(8), seconds) as f64)
    )
}

/// L1 bytes sent between two samples: each size class's packets times its L1 bytes per datagram.
pub(crate) fn l1_bytes_sent(l1_per_class: &[u64], now: &TxSample, before: &TxSample) -> u64 {
    l1_per_class
        .iter()
        .zip(
            now.traffic
                .size_packets
                .iter()
                .zip(before.traffic.size_packets),
        )
        .map(|(l1, (n, b))| l1 * (n - b))
        .sum()
}

/// The L1 wire rate of `l1_bytes` in `seconds` (`--wire-rate`): `  wire: 1.23 Gbit/s L1`.
pub(crate) fn wire_text(l1_bytes: u64, seconds: f64) -> String {
    format!(
        "  wire: {} L1",
        bit_rate(rate(l1_bytes * 8, seconds) as f64)
    )
}

/// One sender line: `q0 n0    1.19 Mpps   571 Mbit/s  errors: 0`.
pub(crate) fn tx_line(label: &str, now: &TxSample, before: &TxSample, seconds: f64) -> String {
    let errors: [u64; ERRNO_CLASSES] =
        std::array::from_fn(|i| now.traffic.errors[i] - before.traffic.errors[i]);
    format!(
        "{label} {}  errors: {}",
        rate_text(
            now.traffic.packets - before.traffic.packets,
            now.traffic.bytes - before.traffic.bytes,
            seconds
        ),
        errors_text(&errors)
    )
}

/// Failed sends with their errno breakdown: `5030 (ECONNREFUSED 5000, ENOBUFS 30)`.
pub(crate) fn errors_text(errors: &[u64; ERRNO_CLASSES]) -> String {
    let total: u64 = errors.iter().sum();
    let named: Vec<String> = ERRNO_LABELS
        .iter()
        .zip(errors)
        .filter(|(_, n)| **n > 0)
        .map(|(label, n)| format!("{label} {n}"))
        .collect();
    if named.is_empty() {
        total.to_string()
    } else {
        format!("{total} ({})", named.join(", "))
    }
}

/// One sink line: the sender's fields plus lost, reordered, dup, invalid and kernel drops.
pub(crate) fn rx_line(label: &str, now: &RxSample, before: &RxSample, seconds: f64) -> String {
    let (n, b) = (&now.traffic, &before.traffic);
    format!(
        "{label} {}  errors: {} lost: {} reordered: {} dup: {} invalid: {} kdrops: {}",
        rate_text(n.packets - b.packets, n.bytes - b.bytes, seconds),
        now.errors() - before.errors(),
        n.lost - b.lost,
        n.reordered - b.reordered,
        n.duplicates - b.duplicates,
        now.invalid() - before.invalid(),
        now.worker.kernel_drops - before.worker.kernel_drops,
    )
}

/// The header line above the interval lines, naming their columns (as iperf3 does).
pub(crate) fn interval_header() -> String {
    format!(
        "{:<15} {:<11} {:>10}  {:>11}  counts within the interval",
        "interval", "queue", "rate", "bit rate"
    )
}

/// The label of an interval line: its time span since the start, then the queue.
pub(crate) fn interval_label(start_s: f64, end_s: f64, queue: &str) -> String {
    format!("{:<15} {queue:<11}", format!("{start_s:.2}-{end_s:.2} s"))
}

/// The label of a queue line: `q0 n0`.
pub(crate) fn queue_label(q: &QueueView) -> String {
    format!("q{} n{}", q.queue, q.node)
}

/// The start-up lines saying where each queue's packet memory is (one per queue, and a
/// warning after a queue with pages off its node), printed with the placement plan.
pub(crate) fn memory_text(role: &str, queues: &[QueueView], memory: &[MemoryPlacement]) -> String {
    queues
        .iter()
        .zip(memory)
        .map(|(q, m)| m.lines(role, q.queue))
        .collect()
}

/// The summary's `placement` array: each queue's node, CPU and packet memory.
pub(crate) fn placement_json(queues: &[QueueView], memory: &[MemoryPlacement]) -> Value {
    queues
        .iter()
        .enumerate()
        .map(|(i, q)| {
            json!({"queue": q.queue, "node": q.node, "cpu": q.cpu,
                "memory": memory.get(i).map(MemoryPlacement::json)})
        })
        .collect()
}

/// Sums samples.
pub(crate) fn total_tx(samples: &[TxSample]) -> TxSample {
    samples.iter().fold(TxSample::default(), |mut acc, s| {
        acc.traffic.add(&s.traffic);
        acc.worker.add(&s.worker);
        acc.exchange.add(&s.exchange);
        acc
    })
}

/// An rr interval's part of a sender line: transactions per second, timeouts and unmatched
/// responses within it.
pub(crate) fn exchange_text(now: &TxSample, before: &TxSample, seconds: f64) -> String {
    let (n, b) = (&now.exchange, &before.exchange);
    let rate = if seconds > 0.0 {
        (n.transactions - b.transactions) as f64 / seconds
    } else {
        0.0
    };
    format!(
        "  {} timeouts: {} unmatched: {}",
        per_second(rate, "trans/s"),
        n.timeouts - b.timeouts,
        n.unmatched - b.unmatched
    )
}

/// Sums samples.
pub(crate) fn total_rx(samples: &[RxSample]) -> RxSample {
    samples.iter().fold(RxSample::default(), |mut acc, s| {
        acc.traffic.add(&s.traffic);
        acc.worker.add(&s.worker);
        acc
    })
}

/// A JSON interval line for the sender.
pub(crate) fn tx_interval_json(
    elapsed_s: f64,
    queues: &[QueueView],
    now: &[TxSample],
    before: &[TxSample],
    seconds: f64,
) -> Value {
    let per_queue: Vec<Value> = queues
        .iter()
        .zip(now.iter().zip(before))
        .map(|(q, (n, b))| {
            let window = n.window_s(b, seconds);
            json!({"queue": q.queue, "node": q.node, "cpu": q.cpu,
                "tx_packets": n.traffic.packets - b.traffic.packets,
                "tx_bytes": n.traffic.bytes - b.traffic.bytes,
                "tx_errors": n.errors() - b.errors(),
                "window_s": round6(window),
                "pps": rate(n.traffic.packets - b.traffic.packets, window),
                "bps": rate((n.traffic.bytes - b.traffic.bytes) * 8, window)})
        })
        .collect();
    let window = total_window_s(now, before, seconds);
    let (n, b) = (total_tx(now), total_tx(before));
    json!({"type": "interval", "role": "send", "elapsed_s": round3(elapsed_s), "interval_s": round3(seconds),
        "tx_packets": n.traffic.packets - b.traffic.packets, "tx_bytes": n.traffic.bytes - b.traffic.bytes,
        "tx_errors": n.errors() - b.errors(), "window_s": round6(window),
        "pps": rate(n.traffic.packets - b.traffic.packets, window),
        "bps": rate((n.traffic.bytes - b.traffic.bytes) * 8, window), "queues": per_queue})
}

/// A JSON interval line for the sink.
pub(crate) fn rx_interval_json(
    elapsed_s: f64,
    queues: &[QueueView],
    now: &[RxSample],
    before: &[RxSample],
    seconds: f64,
) -> Value {
    let fields = |n: &RxSample, b: &RxSample| {
        json!({"rx_packets": n.traffic.packets - b.traffic.packets, "rx_bytes": n.traffic.bytes - b.traffic.bytes,
            "rx_lost": n.traffic.lost - b.traffic.lost, "rx_reordered": n.traffic.reordered - b.traffic.reordered,
            "rx_duplicates": n.traffic.duplicates - b.traffic.duplicates, "rx_invalid": n.invalid() - b.invalid(),
            "rx_kernel_drops": n.worker.kernel_drops - b.worker.kernel_drops,
            "pps": rate(n.traffic.packets - b.traffic.packets, seconds),
            "bps": rate((n.traffic.bytes - b.traffic.bytes) * 8, seconds)})
    };
    let per_queue: Vec<Value> = queues
        .iter()
        .zip(now.iter().zip(before))
        .map(|(q, (n, b))| {
            let mut v = fields(n, b);
            v["queue"] = json!(q.queue);
            v["node"] = json!(q.node);
            v["cpu"] = json!(q.cpu);
            v
        })
        .collect();
    let mut v = fields(&total_rx(now), &total_rx(before));
    v["type"] = json!("interval");
    v["role"] = json!("sink");
    v["elapsed_s"] = json!(round3(elapsed_s));
    v["interval_s"] = json!(round3(seconds));
    v["queues"] = Value::Array(per_queue);
    v
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The sender's final summary.
pub(crate) fn tx_summary_json(total: &TxSample, duration_s: f64, extra: Value) -> Value {
    let errors: serde_json::Map<String, Value> = ERRNO_LABELS
        .iter()
        .zip(total.traffic.errors)
        .filter(|(_, n)| *n > 0)
        .map(|(l, n)| (l.to_string(), json!(n)))
        .collect();
    let mut v = json!({"type": "summary", "role": "send",
        "tx_packets": total.traffic.packets, "tx_bytes": total.traffic.bytes, "tx_errors": total.errors(),
        "duration_s": round3(duration_s), "pps": rate(total.traffic.packets, duration_s),
        "bps": rate(total.traffic.bytes * 8, duration_s), "tx_errors_by_errno": errors,
        "ring_enter_calls": total.worker.enter_calls, "ring_sqes_submitted": total.worker.sqes_submitted});
    merge(&mut v, extra);
    v
}

/// The sink's final summary.
pub(crate) fn rx_summary_json(total: &RxSample, duration_s: f64, extra: Value) -> Value {
    let invalid: serde_json::Map<String, Value> = INVALID_LABELS
        .iter()
        .zip(total.worker.invalid)
        .map(|(l, n)| (l.to_string(), json!(n)))
        .collect();
    let t = &total.traffic;
    let mut v = json!({"type": "summary", "role": "sink",
        "rx_packets": t.packets, "rx_bytes": t.bytes, "rx_lost": t.lost, "rx_reordered": t.reordered,
        "rx_duplicates": t.duplicates, "rx_invalid": total.invalid(), "rx_kernel_drops": total.worker.kernel_drops,
        "duration_s": round3(duration_s), "pps": rate(t.packets, duration_s), "bps": rate(t.bytes * 8, duration_s),
        "rx_late": t.late, "rx_errors": total.errors(), "rx_invalid_by_reason": invalid,
        "loss_ratio": loss_ratio(t.packets.saturating_sub(t.late), t.lost, total.worker.kernel_drops),
        "rx_rearms": total.worker.rearms, "rx_buffer_ring_empty": total.worker.buffer_ring_empty,
        "rx_answered": total.worker.answered, "rx_unanswered": total.worker.unanswered,
        "rx_buffers_circulating": total.worker.buffers_circulating,
        "latency_unknown_packets": total.worker.latency_unknown,
        "latency_clamped_packets": total.worker.latency_clamped});
    merge(&mut v, extra);
    v
}

/// The one loss figure: what the network lost and what the sink's kernel dropped, over what
/// should have arrived (received once, lost or dropped); failed sends never left the host and
/// stay apart. `None` when nothing should have arrived: unknown, not 0.
pub(crate) fn loss_ratio(received: u64, lost: u64, kernel_drops: u64) -> Option<f64> {
    let missing = u128::from(lost) + u128::from(kernel_drops);
    let expected = u128::from(received) + missing;
    (expected > 0).then(|| missing as f64 / expected as f64)
}

/// The headline loss of a human line with its breakdown beside it:
/// `loss 7.800% (lost 0, kernel drops 97791)`.
pub(crate) fn loss_words(received: u64, lost: u64, kernel_drops: u64) -> String {
    match loss_ratio(received, lost, kernel_drops) {
        Some(r) => format!(
            "loss {:.3}% (lost {lost}, kernel drops {kernel_drops})",
            r * 100.0
        ),
        None => format!("loss unknown (nothing counted; lost {lost}, kernel drops {kernel_drops})"),
    }
}

pub(crate) fn counters_json(c: &SessionCounters) -> Value {
    let received = c.packets.saturating_sub(c.late);
    json!({"loss_ratio": loss_ratio(received, c.lost, c.kernel_drops),
        "rx_packets": c.packets, "rx_bytes": c.bytes, "rx_lost": c.lost,
        "rx_reordered": c.reordered, "rx_duplicates": c.duplicates, "rx_late": c.late,
        "rx_kernel_drops": c.kernel_drops, "rx_unconfirmed": c.unconfirmed,
        "send_failed": c.send_failed})
}

/// Why a sink's books `t` cannot be true of a sender run whose kernel accepted `sent`
/// datagrams and whose `failed` sends failed, or `None` when they can be. Every number the
/// sink counts once (`rx_packets` less `rx_late`, which were counted lost before they came)
/// was sent, lost and kernel drops are numbers sent but never received, and a failed send is
/// one of this sender's: forged datagrams that reached the sink's books show here.
pub(crate) fn impossible_verdict(t: &SessionCounters, sent: u64, failed: u64) -> Option<String> {
    let received = t.packets.saturating_sub(t.late);
    let missing = t.lost.saturating_add(t.kernel_drops);
    if received > sent {
        Some(format!(
            "it counts {received} packets received of the {sent} this sender sent"
        ))
    } else if missing > sent - received {
        Some(format!(
            "it counts {missing} packets lost or dropped, but only {} of the {sent} sent were not received",
            sent - received
        ))
    } else if t.send_failed > failed {
        Some(format!(
            "it counts {} failed sends, but this sender had {failed}",
            t.send_failed
        ))
    } else {
        None
    }
}

/// Adds the sink's verdict (or why none came) to a sender summary, checked against the
/// sender's own `sent` and `failed` counts; returns the human line, and why the verdict
/// cannot be true when it cannot (the run then fails: its numbers are not the truth).
pub(crate) fn attach_verdict(
    summary: &mut Value,
    verdict: &Result<(String, Verdict), String>,
    sent: u64,
    failed: u64,
) -> (String, Option<String>) {
    match verdict {
        Ok((session, v)) => {
            let t = &v.counters();
            let (latency, jitter, clock) = (v.latency(), v.jitter(), v.latency_clock());
            let refused = v.totals.rx_invalid;
            let impossible = impossible_verdict(t, sent, failed);
            let mut sink = counters_json(t);
            sink["sink_session"] = json!(session);
            // Its datagrams that arrived but found no session slot: invalid table_full at the
            // sink, neither received nor lost.
            sink["rx_invalid"] = json!(refused);
            sink["complete"] = json!(v.complete());
            sink["flows"] = Value::Array(
                v.flows
                    .iter()
                    .map(|(flow, c)| {
                        let mut f = counters_json(&c.counters());
                        f["flow"] = json!(flow);
                        f
                    })
                    .collect(),
            );
            sink["latency"] = sender_latency_json(&latency, &clock);
            sink["jitter"] = sender_jitter_json(&jitter, &clock);
            sink["latency_clock"] =
                latency_clock_json(&clock, t.latency_unknown, t.latency_clamped);
            // The sink's size classes; null when it did not say (a sink before protocol 2).
            sink["sizes"] = if v.sizes.is_empty() && t.packets > 0 {
                Value::Null
            } else {
                Value::Array(v.sizes.iter().map(|c| ClassCount::from(c).json()).collect())
            };
            sink["impossible"] = json!(impossible);
            summary["sink"] = sink;
            if let Some(why) = impossible {
                let line = format!(
                    "send verdict from sink {session} cannot be true, so it is not this run's count: {why} (forged datagrams reached the sink's books: see docs/security.md)"
                );
                return (
                    line,
                    Some(format!("the sink's verdict cannot be true: {why}")),
                );
            }
            let line = format!(
                "send verdict from sink {session}: {} packets received, {}, reordered {}, dup {}, send failed {}, {}{}{}",
                t.packets,
                loss_words(t.packets.saturating_sub(t.late), t.lost, t.kernel_drops),
                t.reordered,
                t.duplicates,
                t.send_failed,
                latency_text(&latency, &jitter, &clock),
                if refused > 0 {
                    format!(
                        ", {} arrived but not counted (the sink's session table was full: invalid table_full)",
                        refused
                    )
                } else {
                    String::new()
                },
                if v.complete() {
                    ""
                } else {
                    " (incomplete: not every sink queue answered in time)"
                }
            );
            (line, None)
        }
        Err(why) => {
            summary["sink"] = Value::Null;
            summary["sink_error"] = json!(why);
            (format!("send verdict: none from the sink: {why}"), None)
        }
    }
}

/// The `senders` array of a sink summary.
pub(crate) fn senders_json(rows: &[SenderRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let mut v = counters_json(&r.counters);
                let active_s = r.active_ns as f64 / 1e9;
                v["name"] = json!(r.name);
                v["sessions"] = json!(r.sessions);
                v["active_s"] = json!(round3(active_s));
                v["pps"] = json!(rate(r.counters.packets, active_s));
                let latency =
                    Latency::from_cells(&r.counters.latency_cells).with_figures(r.figures.latency);
                let jitter = Jitter::of(&r.counters).with_figures(r.figures.jitter);
                v["latency"] = sender_latency_json(&latency, &r.clock);
                v["jitter"] = sender_jitter_json(&jitter, &r.clock);
                v["latency_clock"] = latency_clock_json(
                    &r.clock,
                    r.counters.latency_unknown,
                    r.counters.latency_clamped,
                );
                v["first_packet_at"] = json!(
                    r.first_rx_ns
                        .map(|t| crate::clock::rfc3339_micros(crate::clock::unix_of_monotonic(t)))
                );
                v
            })
            .collect(),
    )
}

/// How far apart the senders' latest runs started at this sink (a fleet given one
/// `--start-at`): the spread of their first datagrams' (records') arrivals, each given as ns
/// since the Unix epoch with its sender's name, and who came first and last; `None` with fewer
/// than two senders.
pub(crate) fn start_spread(firsts: &[(u64, &str)], what: &str) -> Option<(String, Value)> {
    let (first, last) = (firsts.iter().min()?, firsts.iter().max()?);
    if firsts.len() < 2 {
        return None;
    }
    let spread_ms = (last.0 - first.0) as f64 / 1e6;
    let line = format!(
        "sink: the first {what} of {} senders arrived within {spread_ms:.3} ms (first {} at {}, last {})",
        firsts.len(),
        first.1,
        crate::clock::rfc3339_micros(first.0),
        last.1
    );
    let json = json!({"senders": firsts.len(), "spread_ms": (spread_ms * 1000.0).round() / 1000.0,
        "first": first.1, "last": last.1});
    Some((line, json))
}

/// One human line per sender for the sink summary; rates over the sender's active time.
pub(crate) fn sender_lines(rows: &[SenderRow]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            let c = &r.counters;
            let active_s = r.active_ns as f64 / 1e9;
            format!(
                "  sender {}: {} packets in {:.3}s active ({}), {}, reordered {}, dup {}, send failed {}, unconfirmed {}, sessions {}, {}",
                r.name,
                c.packets,
                active_s,
                per_second(rate(c.packets, active_s) as f64, "pps"),
                loss_words(c.packets.saturating_sub(c.late), c.lost, c.kernel_drops),
                c.reordered,
                c.duplicates,
                c.send_failed,
                c.unconfirmed,
                r.sessions,
                latency_text(
                    &Latency::from_cells(&c.latency_cells).with_figures(r.figures.latency),
                    &Jitter::of(c).with_figures(r.figures.jitter),
                    &r.clock
                )
            )
        })
        .collect()
}

fn merge(into: &mut Value, extra: Value) {
    if let (Value::Object(a), Value::Object(b)) = (into, extra) {
        for (k, v) in b {
            a.entry(k).or_insert(v);
        }
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
