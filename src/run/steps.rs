//! One report per part of a rate schedule (each `--rate-steps` step, each second of a
//! `--ramp`): its target, the packets the kernel accepted in it and the sink's exact verdict for
//! it. Every part is its own session epoch (`sender::parts`, `part_link`), so its received,
//! lost, kernel-dropped, duplicate and reordered counts are the sink's books of that epoch alone,
//! and failed sends stay apart from loss. A part without a verdict states its loss unknown,
//! never 0.

use serde_json::{Value, json};

use super::{link_ends::SinkVerdict, part_link::PartBooks};
use crate::{
    pacing::{OFFERED_TOLERANCE, sender_limited},
    report::{counters_json, loss_words},
    schedule::RateSchedule,
    sink::sizes::ClassCount,
};

/// A human line and a `"type":"step"` JSON line per part of the senders' `books`; `verdicts`
/// holds the sink's verdict of each part (empty when the run has no sink to ask).
pub(crate) fn step_reports(
    schedule: &RateSchedule,
    books: &PartBooks,
    verdicts: &[SinkVerdict],
) -> Vec<(String, Value)> {
    let parts = schedule.parts();
    parts
        .iter()
        .enumerate()
        .map(|(i, &(start, end))| {
            let flows = books.reports(i);
            let failed: u64 = flows.iter().map(|f| f.failed).sum();
            let stamped: u64 = flows.iter().map(|f| f.next_seq - f.first_seq).sum();
            let packets = stamped.saturating_sub(failed);
            let seconds = (end - start) as f64 / 1e9;
            let target = schedule.mean_rate(start, end);
            let achieved = packets as f64 / seconds;
            let limited = sender_limited(packets, target * seconds, OFFERED_TOLERANCE);
            let mut v = json!({"type": "step", "role": "send", "step": i + 1, "steps": parts.len(),
                "epoch": books.epochs.get(i), "start_s": start as f64 / 1e9,
                "end_s": end as f64 / 1e9, "target_pps": target.round() as u64,
                "tx_packets": packets, "tx_failed": failed, "pps": achieved.round() as u64,
                "sender_limited": limited});
            let sink_text = match verdicts.get(i) {
                Some(Ok((_, verdict))) if verdict.complete() => {
                    let t = &verdict.counters();
                    let loss = t.lost + t.kernel_drops;
                    v["loss"] = json!(loss);
                    v["loss_ratio"] = json!(loss as f64 / stamped.saturating_sub(failed).max(1) as f64);
                    let mut sink = counters_json(t);
                    sink["complete"] = json!(true);
                    sink["sizes"] = Value::Array(
                        verdict.sizes.iter().map(|c| ClassCount::from(c).json()).collect(),
                    );
                    v["sink"] = sink;
                    format!(
                        "received {}, {}, dup {}, reordered {}, send failed {}",
                        t.packets,
                        loss_words(t.packets.saturating_sub(t.late), t.lost, t.kernel_drops),
                        t.duplicates,
                        t.reordered,
                        t.send_failed
                    )
                }
                other => {
                    let why = match other {
                        Some(Ok(_)) => "not every sink queue answered in time".to_string(),
                        Some(Err(e)) => e.clone(),
                        None => "no verdict from the sink".to_string(),
                    };
                    v["loss"] = Value::Null;
                    v["loss_unknown"] = json!(format!("unknown ({why})"));
                    format!("loss unknown ({why})")
                }
            };
            let line = format!(
                "send step {}/{}: {:.2}-{:.2} s target {:.0}pps achieved {:.0}pps ({:.2}%{}), {packets} packets, {sink_text}",
                i + 1,
                parts.len(),
                start as f64 / 1e9,
                end as f64 / 1e9,
                target,
                achieved,
                achieved * 100.0 / target.max(1e-9),
                if limited { ", sender-limited" } else { "" },
            );
            (line, v)
        })
        .collect()
}
