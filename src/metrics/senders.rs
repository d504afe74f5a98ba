//! A sink's per-sender series, for every protocol: registered by the reporter thread the first
//! time a sender appears in its books (never by a worker), and set from those books on every
//! flush. The books cap the names at `--max-senders` and book the rest as `sender="other"`.
//! Every protocol's senders have the same clock series (the offset and its error bound, NaN
//! while unknown, never 0) and the same count of samples without a latency; a protocol's
//! [`SenderSource`] adds its own counters (UDP: packets, loss and the latency and jitter
//! histograms; TCP: records, bytes, invalid events and open connections, `protocol="tcp"`,
//! and the latency histogram, the same series as a UDP sender's).
//!
//! The histograms take each flush's new observations per cell, recorded at their mean
//! (which lies inside the cell's bucket), so bucket counts are exact and the sums exact up to
//! float rounding; a sender whose clock is unknown has no samples, so no buckets move (never a
//! number for an unknown). A UDP run without a hello is labelled by its IP and a keyed digest
//! of its epoch, never the epoch.

use std::{collections::BTreeMap, sync::Arc};

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

use super::names::*;
use crate::{
    latency_clock::LatencyClock,
    sink::{
        registry::{Registry, SenderRow},
        tcp::books::{TcpBooks, TcpSenderRow},
    },
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

/// A protocol's per-sender books, as its series read them.
pub(crate) trait SenderSource {
    /// One sender's books.
    type Row;
    /// The protocol's own series of one sender.
    type Handles;
    /// Every sender's books now.
    fn rows(&self) -> Vec<Self::Row>;
    /// The `sender` label of `row`'s series.
    fn label(&self, row: &Self::Row) -> String;
    /// Its samples without a latency, and its clock.
    fn clock(row: &Self::Row) -> (u64, &LatencyClock);
    /// Registers the protocol's own series of sender `label`.
    fn register(label: &str) -> Self::Handles;
    /// Sets them from `row`.
    fn set(handles: &mut Self::Handles, row: &Self::Row);
}

/// The series every protocol's senders have.
struct ClockHandles {
    latency_unknown: Counter,
    clock_offset: Gauge,
    clock_offset_error: Gauge,
}

impl ClockHandles {
    fn register(label: &str) -> ClockHandles {
        let l = [("sender", label.to_string())];
        ClockHandles {
            latency_unknown: counter!(RX_SENDER_LATENCY_UNKNOWN, &l),
            clock_offset: gauge!(RX_SENDER_CLOCK_OFFSET, &l),
            clock_offset_error: gauge!(RX_SENDER_CLOCK_OFFSET_ERROR, &l),
        }
    }

    fn set(&self, latency_unknown: u64, clock: &LatencyClock) {
        self.latency_unknown.absolute(latency_unknown);
        let (offset, error) = clock_seconds(clock);
        self.clock_offset.set(offset);
        self.clock_offset_error.set(error);
    }
}

/// A UDP sender's own series.
pub(crate) struct UdpHandles {
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
    latency: CellHistogram,
    jitter: CellHistogram,
}

/// A sender's clock offset and its error bound in seconds, NaN while unknown (never 0).
fn clock_seconds(clock: &LatencyClock) -> (f64, f64) {
    match clock.correction_ns() {
        Some(offset) => (offset as f64 / 1e9, clock.error_bound_ns as f64 / 1e9),
        None => (f64::NAN, f64::NAN),
    }
}

/// Per-sender series of one sink process, over its protocol's books.
pub(crate) struct SenderSeries<S: SenderSource> {
    books: Arc<S>,
    handles: BTreeMap<String, (ClockHandles, S::Handles)>,
}

impl<S: SenderSource> SenderSeries<S> {
    /// Series over `books`.
    pub(crate) fn new(books: Arc<S>) -> SenderSeries<S> {
        SenderSeries {
            books,
            handles: BTreeMap::new(),
        }
    }

    /// Sets every sender's series from the books, registering new senders' series first.
    pub(crate) fn flush(&mut self) {
        for row in self.books.rows() {
            let label = self.books.label(&row);
            let (clock, own) = self
                .handles
                .entry(label)
                .or_insert_with_key(|label| (ClockHandles::register(label), S::register(label)));
            let (unknown, row_clock) = S::clock(&row);
            clock.set(unknown, row_clock);
            S::set(own, &row);
        }
    }
}

impl SenderSource for Registry {
    type Row = SenderRow;
    type Handles = UdpHandles;

    fn rows(&self) -> Vec<SenderRow> {
        Registry::rows(self, false)
    }

    fn label(&self, row: &SenderRow) -> String {
        self.series_label(row)
    }

    fn clock(row: &SenderRow) -> (u64, &LatencyClock) {
        (row.counters.latency_unknown, &row.clock)
    }

    fn register(label: &str) -> UdpHandles {
        let l = [("sender", label.to_string())];
        UdpHandles {
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
            latency: CellHistogram::new(histogram!(RX_SENDER_LATENCY, &l)),
            jitter: CellHistogram::new(histogram!(RX_SENDER_JITTER, &l)),
        }
    }

    fn set(h: &mut UdpHandles, row: &SenderRow) {
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
        set_histograms(h, c);
    }
}

fn set_histograms(h: &mut UdpHandles, c: &SessionCounters) {
    h.latency.update(&c.latency_cells, &c.latency_sum_ns);
    h.jitter.update(&c.jitter_cells, &c.jitter_sum_ns);
}

/// A TCP sender's own series.
pub(crate) struct TcpHandles {
    records: Counter,
    bytes: Counter,
    invalid: Counter,
    conns_open: Gauge,
    /// `ringblast_rx_sender_latency_seconds`, as a UDP sender's (its records' latency).
    latency: CellHistogram,
}

impl SenderSource for TcpBooks {
    type Row = TcpSenderRow;
    type Handles = TcpHandles;

    fn rows(&self) -> Vec<TcpSenderRow> {
        TcpBooks::rows(self)
    }

    fn label(&self, row: &TcpSenderRow) -> String {
        row.name.clone()
    }

    fn clock(row: &TcpSenderRow) -> (u64, &LatencyClock) {
        (row.tally.latency_unknown, &row.clock)
    }

    fn register(label: &str) -> TcpHandles {
        let l = [
            ("sender", label.to_string()),
            ("protocol", "tcp".to_string()),
        ];
        TcpHandles {
            records: counter!(TCP_RX_SENDER_RECORDS, &l),
            bytes: counter!(TCP_RX_SENDER_BYTES, &l),
            invalid: counter!(TCP_RX_SENDER_INVALID, &l),
            conns_open: gauge!(TCP_RX_SENDER_CONNS_OPEN, &l),
            latency: CellHistogram::new(histogram!(
                RX_SENDER_LATENCY,
                &[("sender", label.to_string())]
            )),
        }
    }

    fn set(h: &mut TcpHandles, row: &TcpSenderRow) {
        h.records.absolute(row.tally.records);
        h.bytes.absolute(row.tally.bytes);
        h.invalid.absolute(row.tally.invalid);
        h.conns_open.set(row.conns_open as f64);
        h.latency
            .update(&row.tally.latency_cells, &row.tally.latency_sum_ns);
    }
}
