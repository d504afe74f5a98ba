//! Each sender's part of a sink's interval record: the packets (UDP) or records (TCP) its
//! books gained within the interval and the latency of those, as cell bounds (`latency_json`),
//! so a run's latency can be followed over time per sender. The books are cumulative (closed
//! plus live sessions or connections), so an interval's part is the difference from the last
//! interval's; a count that dips for a moment (a session between a worker's close and the
//! registry's drain) is not counted twice when it comes back. Only senders that gained packets
//! or records are listed.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::clock::latency_json;
use crate::{
    sink::{registry::SenderRow, tcp::books::TcpSenderRow},
    stats::{LATENCY_CELLS, Latency},
};

/// What each sender's books held at the last interval.
#[derive(Default)]
pub(crate) struct SenderIntervals {
    seen: BTreeMap<String, Seen>,
}

struct Seen {
    /// Its packets (UDP) or records (TCP).
    packets: u64,
    cells: [u64; LATENCY_CELLS],
}

impl SenderIntervals {
    /// The `senders` array of this interval's UDP sink record, from every sender's books now.
    pub(crate) fn json(&mut self, rows: &[SenderRow]) -> Value {
        self.parts(
            "rx_packets",
            rows.iter().map(|r| {
                (
                    r.name.as_str(),
                    r.counters.packets,
                    &r.counters.latency_cells,
                )
            }),
        )
    }

    /// The `senders` array of this interval's TCP sink record, from every sender's books now.
    pub(crate) fn tcp_json(&mut self, rows: &[TcpSenderRow]) -> Value {
        self.parts(
            "rx_records",
            rows.iter()
                .map(|r| (r.name.as_str(), r.tally.records, &r.tally.latency_cells)),
        )
    }

    /// Each sender's part (its count under `count_key`), from its name, count and cells now.
    fn parts<'a>(
        &mut self,
        count_key: &str,
        rows: impl Iterator<Item = (&'a str, u64, &'a [u64; LATENCY_CELLS])>,
    ) -> Value {
        let mut out = Vec::new();
        for (name, count, now) in rows {
            let seen = self.seen.entry(name.to_string()).or_insert(Seen {
                packets: 0,
                cells: [0; LATENCY_CELLS],
            });
            let packets = count.saturating_sub(seen.packets);
            let cells: [u64; LATENCY_CELLS] =
                std::array::from_fn(|i| now[i].saturating_sub(seen.cells[i]));
            seen.packets = seen.packets.max(count);
            seen.cells = std::array::from_fn(|i| seen.cells[i].max(now[i]));
            if packets == 0 {
                continue;
            }
            let mut part = serde_json::Map::new();
            part.insert("name".into(), json!(name));
            part.insert(count_key.into(), json!(packets));
            part.insert(
                "latency_samples".into(),
                json!(cells.iter().fold(0u64, |a, c| a.saturating_add(*c))),
            );
            part.insert("latency".into(), latency_json(&Latency::from_cells(&cells)));
            out.push(Value::Object(part));
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

    #[test]
    fn a_tcp_senders_part_counts_its_records() {
        let mut intervals = SenderIntervals::default();
        let mut row = TcpSenderRow {
            name: "t".into(),
            ..TcpSenderRow::default()
        };
        row.tally.records = 12;
        row.tally.latency_cells[5] = 10;
        let part = intervals.tcp_json(std::slice::from_ref(&row));
        assert_eq!(part[0]["rx_records"], 12);
        assert!(part[0].get("rx_packets").is_none());
        assert_eq!(part[0]["latency_samples"], 10, "2 records without a sample");
        assert_eq!(part[0]["latency"]["p50_ns_at_most"], LATENCY_BOUNDS_NS[5]);
        assert_eq!(intervals.tcp_json(&[row]), json!([]));
    }
}
