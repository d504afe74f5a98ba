//! Each sender's part of a sink's interval record: the packets its books gained within the
//! interval and the latency of those packets, as cell bounds (`latency_json`), so a run's
//! latency can be followed over time per sender. The books are cumulative (closed plus live
//! sessions), so an interval's part is the difference from the last interval's; a count that
//! dips for a moment (a session between a worker's close and the registry's drain) is not
//! counted twice when it comes back. Only senders that gained packets are listed.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::clock::latency_json;
use crate::{
    sink::registry::SenderRow,
    stats::{LATENCY_CELLS, Latency},
};

/// What each sender's books held at the last interval.
#[derive(Default)]
pub(crate) struct SenderIntervals {
    seen: BTreeMap<String, Seen>,
}

struct Seen {
    packets: u64,
    cells: [u64; LATENCY_CELLS],
}

impl SenderIntervals {
    /// The `senders` array of this interval's sink record, from every sender's books now.
    pub(crate) fn json(&mut self, rows: &[SenderRow]) -> Value {
        let mut out = Vec::new();
        for row in rows {
            let c = &row.counters;
            let seen = self.seen.entry(row.name.clone()).or_insert(Seen {
                packets: 0,
                cells: [0; LATENCY_CELLS],
            });
            let packets = c.packets.saturating_sub(seen.packets);
            let cells: [u64; LATENCY_CELLS] =
                std::array::from_fn(|i| c.latency_cells[i].saturating_sub(seen.cells[i]));
            seen.packets = seen.packets.max(c.packets);
            seen.cells = std::array::from_fn(|i| seen.cells[i].max(c.latency_cells[i]));
            if packets == 0 {
                continue;
            }
            out.push(json!({
                "name": row.name,
                "rx_packets": packets,
                "latency_samples": cells.iter().sum::<u64>(),
                "latency": latency_json(&Latency::from_cells(&cells)),
            }));
        }
        Value::Array(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{LATENCY_BOUNDS_NS, SessionCounters};

    fn row(name: &str, packets: u64, cell: usize, samples: u64) -> SenderRow {
        let mut counters = SessionCounters {
            packets,
            ..SessionCounters::default()
        };
        counters.latency_cells[cell] = samples;
        SenderRow {
            name: name.into(),
            counters,
            ..SenderRow::default()
        }
    }

    #[test]
    fn an_interval_holds_what_each_sender_gained_and_a_dip_is_not_counted_twice() {
        let mut intervals = SenderIntervals::default();
        let first = intervals.json(&[row("a", 10, 3, 10), row("b", 0, 0, 0)]);
        assert_eq!(
            first.as_array().unwrap().len(),
            1,
            "b gained nothing: {first}"
        );
        assert_eq!(first[0]["rx_packets"], 10);
        assert_eq!(first[0]["latency"]["p50_ns_at_most"], LATENCY_BOUNDS_NS[3]);
        // The later packets sit in a higher cell: the interval's latency is theirs alone.
        let second = intervals.json(&[row("a", 30, 7, 20)]);
        assert_eq!(second[0]["rx_packets"], 20);
        assert_eq!(second[0]["latency_samples"], 20);
        assert_eq!(second[0]["latency"]["p50_ns_at_most"], LATENCY_BOUNDS_NS[7]);
        // A dip and its return add nothing.
        assert_eq!(intervals.json(&[row("a", 25, 7, 15)]), json!([]));
        assert_eq!(intervals.json(&[row("a", 30, 7, 20)]), json!([]));
        // Packets without a latency sample (an unknown clock): latency null, never 0.
        let unknown = intervals.json(&[row("c", 5, 0, 0)]);
        assert_eq!(unknown[0]["latency"], Value::Null);
    }
}
