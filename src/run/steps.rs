//! One report per part of a rate schedule (each `--rate-steps` step, each second of a
//! `--ramp`): its target, the packets the kernel accepted in it (marked by every sender worker
//! at the part's end on its own clock) and its loss. The sink's books are per sender run, not
//! per part, so a part's loss is known exactly only when the whole run lost nothing (then it is
//! 0 in every part); otherwise it is stated unknown, never 0.

use std::sync::{Arc, atomic::Ordering::Relaxed};

use serde_json::{Value, json};

use crate::{schedule::RateSchedule, sender::SenderShared, sink::registry::RunVerdict};

/// A human line and a `"type":"step"` JSON line per part.
pub fn step_reports(
    schedule: &RateSchedule,
    shared: &[Arc<SenderShared>],
    verdict: Option<&RunVerdict>,
) -> Vec<(String, Value)> {
    let parts = schedule.parts();
    let lossless = verdict.filter(|v| v.complete).map(|v| {
        let t = &v.totals;
        (t.lost + t.kernel_drops + t.unconfirmed, t.send_failed)
    });
    let mut before = 0u64;
    parts
        .iter()
        .enumerate()
        .map(|(i, &(start, end))| {
            let at_end: u64 = shared
                .iter()
                .filter_map(|s| s.step_packets.get(i))
                .map(|m| m.load(Relaxed))
                .sum();
            let packets = at_end.saturating_sub(before);
            before = at_end;
            let seconds = (end - start) as f64 / 1e9;
            let target = schedule.mean_rate(start, end);
            let achieved = packets as f64 / seconds;
            let (loss, why) = match lossless {
                Some((0, _)) => (json!(0), String::new()),
                Some((lost, _)) => (
                    Value::Null,
                    format!("unknown (the run lost {lost} in all; the sink's books are per run)"),
                ),
                None => (
                    Value::Null,
                    "unknown (no verdict from the sink)".to_string(),
                ),
            };
            let loss_text = if why.is_empty() { "0".to_string() } else { why.clone() };
            let line = format!(
                "send step {}/{}: {:.2}-{:.2} s target {:.0}pps achieved {:.0}pps ({:.2}%), {packets} packets, loss {loss_text}",
                i + 1,
                parts.len(),
                start as f64 / 1e9,
                end as f64 / 1e9,
                target,
                achieved,
                achieved * 100.0 / target.max(1e-9),
            );
            let mut v = json!({"type": "step", "role": "send", "step": i + 1, "steps": parts.len(),
                "start_s": start as f64 / 1e9, "end_s": end as f64 / 1e9,
                "target_pps": target.round() as u64, "tx_packets": packets,
                "pps": achieved.round() as u64, "loss": loss});
            if !why.is_empty() {
                v["loss_unknown"] = json!(why);
            }
            (line, v)
        })
        .collect()
}
