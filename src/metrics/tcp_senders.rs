//! The TCP sink's per-sender series (`protocol="tcp"`): registered by the reporter thread the
//! first time a sender appears in the TCP books (never by a worker), and set from those books
//! on every flush. The books cap the names at `--max-senders` and book the rest as
//! `sender="other"`.

use std::{collections::BTreeMap, sync::Arc};

use metrics::{Counter, Gauge, counter, gauge};

use super::names::*;
use crate::sink::tcp::books::TcpBooks;

struct Handles {
    records: Counter,
    bytes: Counter,
    invalid: Counter,
    conns_open: Gauge,
}

/// Per-sender series of one TCP sink process.
pub struct TcpSenderSeries {
    books: Arc<TcpBooks>,
    handles: BTreeMap<String, Handles>,
}

impl TcpSenderSeries {
    /// Series over `books`.
    pub fn new(books: Arc<TcpBooks>) -> TcpSenderSeries {
        TcpSenderSeries {
            books,
            handles: BTreeMap::new(),
        }
    }

    /// Sets every sender's series from the books, registering new senders' series first.
    pub fn flush(&mut self) {
        for row in self.books.rows() {
            let h = self.handles.entry(row.name.clone()).or_insert_with(|| {
                let l = [
                    ("sender", row.name.clone()),
                    ("protocol", "tcp".to_string()),
                ];
                Handles {
                    records: counter!(TCP_RX_SENDER_RECORDS, &l),
                    bytes: counter!(TCP_RX_SENDER_BYTES, &l),
                    invalid: counter!(TCP_RX_SENDER_INVALID, &l),
                    conns_open: gauge!(TCP_RX_SENDER_CONNS_OPEN, &l),
                }
            });
            h.records.absolute(row.tally.records);
            h.bytes.absolute(row.tally.bytes);
            h.invalid.absolute(row.tally.invalid);
            h.conns_open.set(row.conns_open as f64);
        }
    }
}
