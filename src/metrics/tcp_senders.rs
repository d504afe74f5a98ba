//! The TCP sink's per-sender series (`protocol="tcp"`): registered by the reporter thread the
//! first time a sender appears in the TCP books (never by a worker), and set from those books
//! on every flush. The books cap the names at `--max-senders` and book the rest as
//! `sender="other"`. Each sender's clock offset and its bound are the UDP sink's families
//! (`sender` alone; NaN while unknown), and so are its records without a latency sample.

use std::{collections::BTreeMap, sync::Arc};

use metrics::{Counter, Gauge, counter, gauge};

use super::names::*;
use crate::sink::tcp::books::TcpBooks;

struct Handles {
    records: Counter,
    bytes: Counter,
    invalid: Counter,
    conns_open: Gauge,
    latency_unknown: Counter,
    clock_offset: Gauge,
    clock_offset_error: Gauge,
}

/// Per-sender series of one TCP sink process.
pub(crate) struct TcpSenderSeries {
    books: Arc<TcpBooks>,
    handles: BTreeMap<String, Handles>,
}

impl TcpSenderSeries {
    /// Series over `books`.
    pub(crate) fn new(books: Arc<TcpBooks>) -> TcpSenderSeries {
        TcpSenderSeries {
            books,
            handles: BTreeMap::new(),
        }
    }

    /// Sets every sender's series from the books, registering new senders' series first.
    pub(crate) fn flush(&mut self) {
        for row in self.books.rows() {
            let h = self.handles.entry(row.name.clone()).or_insert_with(|| {
                let l = [
                    ("sender", row.name.clone()),
                    ("protocol", "tcp".to_string()),
                ];
                let s = [("sender", row.name.clone())];
                Handles {
                    records: counter!(TCP_RX_SENDER_RECORDS, &l),
                    bytes: counter!(TCP_RX_SENDER_BYTES, &l),
                    invalid: counter!(TCP_RX_SENDER_INVALID, &l),
                    conns_open: gauge!(TCP_RX_SENDER_CONNS_OPEN, &l),
                    latency_unknown: counter!(RX_SENDER_LATENCY_UNKNOWN, &s),
                    clock_offset: gauge!(RX_SENDER_CLOCK_OFFSET, &s),
                    clock_offset_error: gauge!(RX_SENDER_CLOCK_OFFSET_ERROR, &s),
                }
            });
            h.records.absolute(row.tally.records);
            h.bytes.absolute(row.tally.bytes);
            h.invalid.absolute(row.tally.invalid);
            h.conns_open.set(row.conns_open as f64);
            h.latency_unknown.absolute(row.tally.latency_unknown);
            let (offset, error) = super::senders::clock_seconds(&row.clock);
            h.clock_offset.set(offset);
            h.clock_offset_error.set(error);
        }
    }
}
