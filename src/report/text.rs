//! Latency and the sink's summary line as people read them: exact quantiles from the sink's
//! HDR histogram (corrected samples only), and durations in sensible units.

use serde_json::{Value, json};

use super::{RxSample, loss_words};

/// The sink's exact latency quantiles (from its HDR histogram) as JSON.
pub(crate) fn latency_hdr_json(h: &hdrhistogram::Histogram<u64>) -> Value {
    json!({"count": h.len(), "min_ns": h.min(), "p50_ns": h.value_at_quantile(0.5), "p99_ns": h.value_at_quantile(0.99),
        "p999_ns": h.value_at_quantile(0.999), "max_ns": h.max(), "mean_ns": h.mean().round() as u64})
}

/// A duration for people: `850ns`, `12.3us`, `1.20ms`, `2.50s`.
pub(crate) fn ns_text(ns: u64) -> String {
    match ns {
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{:.1}us", n as f64 / 1e3),
        n if n < 1_000_000_000 => format!("{:.2}ms", n as f64 / 1e6),
        n => format!("{:.2}s", n as f64 / 1e9),
    }
}

/// The sink's summary line: counts, rates over the active time, loss %, latency, start-up.
pub(crate) fn sink_summary_line(
    summary: &Value,
    total: &RxSample,
    active_s: f64,
    span_s: f64,
    latency: Option<&hdrhistogram::Histogram<u64>>,
) -> String {
    let t = &total.traffic;
    let latency = latency.map_or_else(
        || "latency unknown (no corrected samples)".to_string(),
        |h| {
            format!(
                "latency p50 {} p99 {} max {}",
                ns_text(h.value_at_quantile(0.5)),
                ns_text(h.value_at_quantile(0.99)),
                ns_text(h.max())
            )
        },
    );
    format!(
        "sink summary: {} packets, {} bytes in {active_s:.3}s active ({span_s:.3}s from first to last): {} {}; {}, reordered {}, dup {}, invalid {}; {latency}; ready {} ms and first packet {} ms after launch",
        t.packets,
        t.bytes,
        super::per_second(summary["pps"].as_f64().unwrap_or(0.0), "pps"),
        super::bit_rate(summary["bps"].as_f64().unwrap_or(0.0)),
        loss_words(
            t.packets.saturating_sub(t.late),
            t.lost,
            summary["rx_kernel_drops"].as_u64().unwrap_or(0)
        ),
        t.reordered,
        t.duplicates,
        summary["rx_invalid"],
        summary["startup_ms"],
        summary["first_packet_ms"]
    )
}

/// How the sink's queues shared the packets: one JSON entry per queue and, with more than one
/// queue, a line naming the busiest queue's share against the mean (`--steer` decides it).
pub(crate) fn queue_shares(
    rx: &[RxSample],
    queues: &[super::QueueView],
) -> (Value, Option<String>) {
    let total: u64 = rx.iter().map(|s| s.traffic.packets).sum();
    let per_queue: Vec<Value> = rx
        .iter()
        .zip(queues)
        .map(|(s, q)| json!({"queue": q.queue, "rx_packets": s.traffic.packets, "rx_bytes": s.traffic.bytes}))
        .collect();
    let busiest = rx.iter().map(|s| s.traffic.packets).max().unwrap_or(0);
    let mean = total as f64 / rx.len().max(1) as f64;
    let over_mean = (mean > 0.0).then(|| (busiest as f64 / mean * 1000.0).round() / 1000.0);
    let json = json!({"per_queue": per_queue, "busiest_queue_over_mean": over_mean});
    let line = (rx.len() > 1 && total > 0).then(|| {
        let shares: Vec<String> = rx
            .iter()
            .zip(queues)
            .map(|(s, q)| {
                format!(
                    "q{} {} ({:.1}%)",
                    q.queue,
                    s.traffic.packets,
                    s.traffic.packets as f64 * 100.0 / total as f64
                )
            })
            .collect();
        format!(
            "sink: queue shares: {}; busiest {:.2}x the mean",
            shares.join(", "),
            over_mean.unwrap_or(0.0)
        )
    });
    (json, line)
}
