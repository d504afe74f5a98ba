//! Per-size-class series, labelled by UDP payload length: the sender's classes of its mix
//! (registered at start, summed over flows and queues) and the sink's classes (a standalone
//! sink's series appear when it first sees a length, as its per-sender series do when a sender
//! first appears; lengths beyond its classes count as `payload="other"`).
//! Both are set by the reporter's flush from published counters, never by a worker.

use std::{collections::BTreeMap, sync::Arc};

use metrics::{Counter, counter};

use super::names::*;
use crate::{
    sender::{SenderShared, mix::SizePlan},
    sink::{registry::Registry, sizes::SizeTable},
};

struct ClassHandles {
    packets: Counter,
    bytes: Counter,
}

impl ClassHandles {
    fn register(tx: bool, payload: String) -> ClassHandles {
        let (p, b) = if tx {
            (TX_SIZE_PACKETS, TX_SIZE_BYTES)
        } else {
            (RX_SIZE_PACKETS, RX_SIZE_BYTES)
        };
        ClassHandles {
            packets: counter!(p, "payload" => payload.clone()),
            bytes: counter!(b, "payload" => payload),
        }
    }
}

/// The sender's classes.
pub(crate) struct TxSizeSeries {
    shared: Vec<Arc<SenderShared>>,
    /// Per mix class index, the series of its payload length (shared by equal lengths).
    class_series: Vec<usize>,
    handles: Vec<ClassHandles>,
}

impl TxSizeSeries {
    /// Registers one pair of series per distinct payload length of `plan`.
    pub(crate) fn register(shared: Vec<Arc<SenderShared>>, plan: &SizePlan) -> TxSizeSeries {
        let mut lengths: Vec<usize> = Vec::new();
        let class_series = plan
            .classes
            .iter()
            .map(|c| match lengths.iter().position(|&l| l == c.payload) {
                Some(i) => i,
                None => {
                    lengths.push(c.payload);
                    lengths.len() - 1
                }
            })
            .collect();
        let handles = lengths
            .iter()
            .map(|l| ClassHandles::register(true, l.to_string()))
            .collect();
        TxSizeSeries {
            shared,
            class_series,
            handles,
        }
    }

    /// Sets the series from the queues' published flow counters.
    pub(crate) fn flush(&self) {
        let mut packets = vec![0u64; self.handles.len()];
        let mut bytes = vec![0u64; self.handles.len()];
        for s in &self.shared {
            for f in &s.flows {
                let f = f.load();
                for (class, &series) in self.class_series.iter().enumerate() {
                    packets[series] += f.size_packets.get(class).copied().unwrap_or(0);
                    bytes[series] += f.size_bytes.get(class).copied().unwrap_or(0);
                }
            }
        }
        for ((h, p), b) in self.handles.iter().zip(packets).zip(bytes) {
            h.packets.absolute(p);
            h.bytes.absolute(b);
        }
    }
}

/// The sink's classes.
pub(crate) struct RxSizeSeries {
    registry: Arc<Registry>,
    table: Arc<SizeTable>,
    handles: BTreeMap<Option<u32>, ClassHandles>,
}

impl RxSizeSeries {
    /// Series over the sink's books and its size table; the classes already claimed (`pair`
    /// claims its mix's lengths in setup) are registered now, at 0.
    pub(crate) fn new(registry: Arc<Registry>, table: Arc<SizeTable>) -> RxSizeSeries {
        let handles = table
            .lengths()
            .into_iter()
            .map(|(_, l)| (Some(l), ClassHandles::register(false, l.to_string())))
            .collect();
        RxSizeSeries {
            registry,
            table,
            handles,
        }
    }

    /// Sets every class's series, registering those of lengths seen since the last flush.
    pub(crate) fn flush(&mut self) {
        let (packets, bytes) = self.registry.size_totals();
        for c in self.table.counts(&packets, bytes) {
            let h = self.handles.entry(c.payload).or_insert_with(|| {
                let label = c
                    .payload
                    .map_or_else(|| "other".to_string(), |l| l.to_string());
                ClassHandles::register(false, label)
            });
            h.packets.absolute(c.packets);
            h.bytes.absolute(c.bytes);
        }
    }
}
