//! The sink's per-sender series: registered by the reporter thread the first time a sender
//! appears (never by a worker), and set from the registry's books on every flush. The
//! registry caps the names at `--max-senders` and books the rest as `sender="other"`; a run
//! without a hello is labelled by its IP and a keyed digest of its epoch, never the epoch. A
//! sender's clock offset and its error bound are NaN while its clock is unknown (never 0).
//! Its latency and jitter histograms take each flush's new observations per cell, recorded at
//! their mean (which lies inside the cell's bucket), so bucket counts are exact and the sums
//! exact up to float rounding; a sender whose clock is unknown has no samples, so no buckets
//! move (never a number for an unknown).

use std::{collections::BTreeMap, sync::Arc};

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use super::names::*;
use crate::{
    latency_clock::LatencyClock,
    sink::registry::Registry,
    stats::{LATENCY_CELLS, SessionCounters},
};

/// A histogram fed from monotonic cell counts and per-cell sums (ns).
struct CellHistogram {
    histogram: Histogram,
    seen_cells: [u64; LATENCY_CELLS],
    seen_sums: [u64; LATENCY_CELLS],
}

impl CellHistogram {
    fn new(histogram: Histogram) -> CellHistogram {
        CellHistogram {
            histogram,
            seen_cells: [0; LATENCY_CELLS],
            seen_sums: [0; LATENCY_CELLS],
        }
    }

    /// Records what the cells gained since the last call, each cell's new observations at
    /// their mean. A cell below what was recorded records nothing.
    fn update(&mut self, cells: &[u64; LATENCY_CELLS], sums: &[u64; LATENCY_CELLS]) {
        for cell in 0..LATENCY_CELLS {
            let count = cells[cell].saturating_sub(self.seen_cells[cell]);
            let sum = sums[cell].saturating_sub(self.seen_sums[cell]);
            if count > 0 {
                self.histogram
                    .record_many(sum as f64 / count as f64 / 1e9, count as usize);
            }
        }
        // A dip (a session between a worker's close and the registry's drain) is not
        // recorded again when it comes back.
        self.seen_cells = std::array::from_fn(|i| self.seen_cells[i].max(cells[i]));
        self.seen_sums = std::array::from_fn(|i| self.seen_sums[i].max(sums[i]));
    }
}

struct SenderHandles {
    packets: Counter,
    bytes: Counter,
    lost: Counter,
    reordered: Counter,
    duplicates: Counter,
    kernel_drops: Counter,
    unconfirmed: Counter,
    send_failed: Counter,
    sessions: Counter,
    active: Gauge,
    latency_unknown: Counter,
    clock_offset: Gauge,
    clock_offset_error: Gauge,
    latency: CellHistogram,
    jitter: CellHistogram,
}

impl SenderHandles {
    fn register(name: &str) -> SenderHandles {
        let l = [("sender", name.to_string())];
        SenderHandles {
            packets: counter!(RX_SENDER_PACKETS, &l),
            bytes: counter!(RX_SENDER_BYTES, &l),
            lost: counter!(RX_SENDER_LOST, &l),
            reordered: counter!(RX_SENDER_REORDERED, &l),
            duplicates: counter!(RX_SENDER_DUPLICATES, &l),
            kernel_drops: counter!(RX_SENDER_KERNEL_DROPS, &l),
            unconfirmed: counter!(RX_SENDER_UNCONFIRMED, &l),
            send_failed: counter!(RX_SENDER_SEND_FAILED, &l),
            sessions: counter!(RX_SENDER_SESSIONS, &l),
            active: gauge!(RX_SENDER_ACTIVE, &l),
            latency_unknown: counter!(RX_SENDER_LATENCY_UNKNOWN, &l),
            clock_offset: gauge!(RX_SENDER_CLOCK_OFFSET, &l),
            clock_offset_error: gauge!(RX_SENDER_CLOCK_OFFSET_ERROR, &l),
            latency: CellHistogram::new(histogram!(RX_SENDER_LATENCY, &l)),
            jitter: CellHistogram::new(histogram!(RX_SENDER_JITTER, &l)),
        }
    }
}

/// A sender's clock offset and its error bound in seconds, NaN while unknown (never 0).
pub(super) fn clock_seconds(clock: &LatencyClock) -> (f64, f64) {
    match clock.correction_ns() {
        Some(offset) => (offset as f64 / 1e9, clock.error_bound_ns as f64 / 1e9),
        None => (f64::NAN, f64::NAN),
    }
}

/// Per-sender series of one sink process.
pub(crate) struct SenderSeries {
    registry: Arc<Registry>,
    handles: BTreeMap<String, SenderHandles>,
}

impl SenderSeries {
    /// Series over `registry`'s books.
    pub(crate) fn new(registry: Arc<Registry>) -> SenderSeries {
        SenderSeries {
            registry,
            handles: BTreeMap::new(),
        }
    }

    /// Sets every sender's series from the books, registering new senders' series first.
    pub(crate) fn flush(&mut self) {
        for row in self.registry.rows(false) {
            let label = self.registry.series_label(&row);
            let h = self
                .handles
                .entry(label)
                .or_insert_with_key(|label| SenderHandles::register(label));
            let c = &row.counters;
            h.packets.absolute(c.packets);
            h.bytes.absolute(c.bytes);
            h.lost.absolute(c.lost);
            h.reordered.absolute(c.reordered);
            h.duplicates.absolute(c.duplicates);
            h.kernel_drops.absolute(c.kernel_drops);
            h.unconfirmed.absolute(c.unconfirmed);
            h.send_failed.absolute(c.send_failed);
            h.sessions.absolute(row.sessions);
            h.active.set(row.active_sessions as f64);
            h.latency_unknown.absolute(c.latency_unknown);
            let (offset, error) = clock_seconds(&row.clock);
            h.clock_offset.set(offset);
            h.clock_offset_error.set(error);
            set_histograms(h, c);
        }
    }
}

fn set_histograms(h: &mut SenderHandles, c: &SessionCounters) {
    h.latency.update(&c.latency_cells, &c.latency_sum_ns);
    h.jitter.update(&c.jitter_cells, &c.jitter_sum_ns);
}
