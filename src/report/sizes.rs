//! The per-size-class counts in the summaries: the sender's by the classes of its mix, the
//! sink's by the exact payload lengths it received (`sink::sizes`).

use serde_json::{Value, json};

use crate::{
    sender::mix::SizePlan,
    sink::{registry::SenderRow, sizes::SizeTable},
    stats::TxFlow,
};

/// `[{"frame": F, "payload": P, "weight": W, "packets": N, "bytes": B}, …]` in the mix's order.
pub(crate) fn tx_sizes_json(plan: &SizePlan, total: &TxFlow) -> Value {
    Value::Array(
        plan.classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"frame": c.frame, "payload": c.payload, "weight": c.weight,
                    "packets": total.size_packets[i], "bytes": total.size_bytes[i]})
            })
            .collect(),
    )
}

/// The sink's classes summed over every sender's books (closed and live sessions).
pub(crate) fn rx_sizes_json(table: &SizeTable, rows: &[SenderRow]) -> Value {
    let mut packets = [0u64; crate::sink::sizes::CLASSES + 1];
    let mut bytes = 0;
    for r in rows {
        for (sum, n) in packets.iter_mut().zip(r.counters.size_packets) {
            *sum += n;
        }
        bytes += r.counters.bytes;
    }
    table.json(&packets, bytes)
}
