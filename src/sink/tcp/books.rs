//! The TCP sink's per-sender books, kept beside the workers (never on them): every tick the
//! reporter books the final tallies of the connections the workers closed (see
//! [`peers::SlotBooks`]), and a sender's Hello and Goodbye on the control channel name its run
//! (epoch) and ask for its verdict. A connection is attributed by the epoch in its records'
//! headers, so the books are exact however many senders share the sink. A sender run that
//! never said Hello is booked as `epoch-XXXXXXXX`; invalid events on connections that never
//! carried a record (garbage peers) belong to no sender and are kept apart. Each run's clock
//! (the same as the sink's, an estimated offset, or unknown) is kept here too and written into
//! the slots of its live connections at every tick and whenever it changes, so the workers
//! correct the run's latency without a lock. The lock here is taken by the reporter and the
//! control threads alone.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{
    TcpSinkShared,
    peers::{ConnTally, SlotRead},
};
use crate::{clock, latency_clock::LatencyClock};

/// Name booked for sender runs beyond `--max-senders` names.
const OTHER: &str = "other";

/// What the sink counted for one sender run, at its Goodbye.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpVerdict {
    /// Records, bytes and invalid events of all its connections.
    pub(crate) tally: ConnTally,
    /// Its connections that ended.
    pub(crate) conns: u64,
    /// Every connection of the run had ended before the answer (else the tally is so far).
    pub(crate) complete: bool,
    /// How its latency relates to its clock.
    pub(crate) clock: LatencyClock,
}

/// One sender's books, as the reporter shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpSenderRow {
    /// Name from its Hello, or `epoch-XXXXXXXX`.
    pub(crate) name: String,
    /// Its records, bytes and invalid events, over all its runs.
    pub(crate) tally: ConnTally,
    /// Runs (epochs) seen.
    pub(crate) sessions: u64,
    /// Connections open now.
    pub(crate) conns_open: u64,
    /// Connections that ended.
    pub(crate) conns_closed: u64,
    /// How its latency relates to its clock (its latest run's).
    pub(crate) clock: LatencyClock,
}

#[derive(Debug, Default, Clone, Copy)]
struct EpochBook {
    tally: ConnTally,
    conns: u64,
}

#[derive(Debug, Default)]
struct Inner {
    names: HashMap<u32, String>,
    closed: HashMap<u32, EpochBook>,
    /// Invalid events on connections that never carried a record.
    unattributed: ConnTally,
    /// Each run's clock.
    clocks: HashMap<u32, LatencyClock>,
}

/// The per-sender books over these queues' connection slots.
#[derive(Debug)]
pub(crate) struct TcpBooks {
    queues: Vec<Arc<TcpSinkShared>>,
    max_senders: usize,
    started_ns: u64,
    inner: Mutex<Inner>,
}

impl TcpBooks {
    /// Books over `queues`; at most `max_senders` names get books of their own.
    pub(crate) fn new(queues: Vec<Arc<TcpSinkShared>>, max_senders: usize) -> TcpBooks {
        TcpBooks {
            queues,
            max_senders: max_senders.max(1),
            started_ns: clock::monotonic_ns(),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Books every closed connection's final tally and gives every live one its run's clock
    /// correction; returns the live tallies by epoch.
    fn collect(&self, inner: &mut Inner) -> HashMap<u32, EpochBook> {
        let mut live: HashMap<u32, EpochBook> = HashMap::new();
        for slot in self.queues.iter().flat_map(|q| q.slots.iter()) {
            match slot.read() {
                SlotRead::Free => {}
                SlotRead::Live(t) => {
                    if let Some(c) = inner.clocks.get(&t.epoch).and_then(|c| c.correction_ns()) {
                        slot.set_clock(t.epoch, c);
                    }
                    let b = live.entry(t.epoch).or_default();
                    b.tally.add(&t);
                    b.conns += 1;
                }
                SlotRead::Closed(t) if t.epoch == 0 => inner.unattributed.add(&t),
                SlotRead::Closed(t) => {
                    let b = inner.closed.entry(t.epoch).or_default();
                    b.tally.add(&t);
                    b.conns += 1;
                }
            }
        }
        live
    }

    /// Books the connections the workers closed, so their slots can be reused.
    pub(crate) fn tick(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            self.collect(&mut inner);
        }
    }

    /// A sender run said Hello, its clock as the hello tells (a reconnect keeps a known one);
    /// returns the sink's uptime.
    pub(crate) fn hello(&self, name: &str, epoch: u32, clock: LatencyClock) -> u64 {
        if let Ok(mut inner) = self.inner.lock() {
            let clock = LatencyClock::at_hello(inner.clocks.get(&epoch), clock);
            inner.clocks.insert(epoch, clock);
            self.collect(&mut inner);
            let known = inner.names.values().any(|n| n == name);
            let names = inner.names.values().filter(|n| *n != OTHER).count();
            let name = if known || names < self.max_senders {
                name
            } else {
                OTHER
            };
            inner.names.insert(epoch, name.to_string());
        }
        clock::monotonic_ns().saturating_sub(self.started_ns)
    }

    /// A sender run told its estimate of this sink's clock: its live connections correct their
    /// latency by it from now on.
    pub(crate) fn clock(&self, epoch: u32, offset_ns: i64, error_bound_ns: u64, rtt_ns: u64) {
        if let Ok(mut inner) = self.inner.lock() {
            let changed =
                inner
                    .clocks
                    .entry(epoch)
                    .or_default()
                    .estimated(offset_ns, error_bound_ns, rtt_ns);
            if changed {
                self.collect(&mut inner);
            }
        }
    }

    /// A sender run said Goodbye: waits (at most `wait`) until every connection of it ended,
    /// then returns what the sink counted for it.
    pub(crate) fn goodbye(&self, epoch: u32, wait: Duration) -> TcpVerdict {
        let until = Instant::now() + wait;
        loop {
            let Ok(mut inner) = self.inner.lock() else {
                return TcpVerdict::default();
            };
            let live = self.collect(&mut inner);
            let open = live.get(&epoch).copied();
            if open.is_none() || Instant::now() >= until {
                let mut b = inner.closed.get(&epoch).copied().unwrap_or_default();
                if let Some(o) = open {
                    b.tally.add(&o.tally);
                }
                return TcpVerdict {
                    tally: ConnTally { epoch, ..b.tally },
                    conns: b.conns,
                    complete: open.is_none(),
                    clock: inner.clocks.get(&epoch).cloned().unwrap_or_default(),
                };
            }
            drop(inner);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every sender's books (closed plus live connections), by name.
    pub(crate) fn rows(&self) -> Vec<TcpSenderRow> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        let live = self.collect(&mut inner);
        let mut rows: BTreeMap<String, TcpSenderRow> = BTreeMap::new();
        let mut epochs: Vec<u32> = inner.closed.keys().chain(live.keys()).copied().collect();
        epochs.sort_unstable();
        epochs.dedup();
        let mut clocks: BTreeMap<String, Vec<&LatencyClock>> = BTreeMap::new();
        for epoch in epochs.into_iter().filter(|&e| e != 0) {
            let name = inner
                .names
                .get(&epoch)
                .cloned()
                .unwrap_or_else(|| format!("epoch-{epoch:08x}"));
            let row = rows.entry(name.clone()).or_insert_with(|| TcpSenderRow {
                name,
                ..TcpSenderRow::default()
            });
            row.sessions += 1;
            if let Some(c) = inner.clocks.get(&epoch) {
                clocks.entry(row.name.clone()).or_default().push(c);
            }
            if let Some(b) = inner.closed.get(&epoch) {
                row.tally.add(&b.tally);
                row.conns_closed += b.conns;
            }
            if let Some(b) = live.get(&epoch) {
                row.tally.add(&b.tally);
                row.conns_open += b.conns;
            }
        }
        rows.into_values()
            .map(|mut row| {
                let runs = clocks.get(&row.name).map(Vec::as_slice).unwrap_or_default();
                row.clock = LatencyClock::latest(runs.iter().copied());
                row
            })
            .collect()
    }

    /// Invalid events on connections that never carried a record (no sender to charge).
    pub(crate) fn unattributed_invalid(&self) -> u64 {
        self.inner.lock().map_or(0, |i| i.unattributed.invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(epoch: u32, records: u64) -> ConnTally {
        ConnTally {
            epoch,
            records,
            bytes: records * 100,
            ..ConnTally::default()
        }
    }

    #[test]
    fn two_senders_keep_separate_books_and_a_goodbye_waits_for_the_last_connection() {
        let q = Arc::new(TcpSinkShared::new(4));
        let books = TcpBooks::new(vec![q.clone()], 8);
        books.hello("a", 1, LatencyClock::same_clock());
        books.hello("b", 2, LatencyClock::default());
        for (slot, t) in q.slots.iter().zip([tally(1, 5), tally(2, 7), tally(1, 3)]) {
            slot.open();
            slot.publish(&t);
        }
        q.slots[0].close(&tally(1, 6));
        let v = books.goodbye(1, Duration::from_millis(20));
        assert!(!v.complete, "slot 2 of epoch 1 is still live");
        assert_eq!(v.tally.records, 9);
        q.slots[2].close(&tally(1, 4));
        let v = books.goodbye(1, Duration::from_secs(1));
        assert!(v.complete);
        assert_eq!((v.tally.records, v.tally.bytes, v.conns), (10, 1000, 2));
        let rows = books.rows();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].name.as_str(), rows[0].tally.records), ("a", 10));
        assert_eq!((rows[1].name.as_str(), rows[1].tally.records), ("b", 7));
        assert_eq!(rows[1].conns_open, 1);
        assert!(q.slots[0].is_free() && q.slots[2].is_free() && !q.slots[1].is_free());
        assert_eq!(rows[0].clock, LatencyClock::same_clock());
        assert_eq!(rows[1].clock, LatencyClock::default());
    }

    #[test]
    fn a_runs_clock_estimate_reaches_its_live_connections_only() {
        let q = Arc::new(TcpSinkShared::new(2));
        let books = TcpBooks::new(vec![q.clone()], 8);
        books.hello("a", 1, LatencyClock::default());
        for (slot, t) in q.slots.iter().zip([tally(1, 5), tally(2, 7)]) {
            slot.open();
            slot.publish(&t);
        }
        books.tick();
        assert_eq!(q.slots[0].correction(1), None, "no estimate yet");
        books.clock(1, -5_000_000_000, 40_000, 80_000);
        assert_eq!(q.slots[0].correction(1), Some(-5_000_000_000));
        assert_eq!(q.slots[1].correction(2), None, "another run");
        let v = books.goodbye(1, Duration::from_millis(1));
        assert_eq!(
            v.clock,
            LatencyClock::corrected(-5_000_000_000, 40_000, 80_000)
        );
        // A reconnect's hello keeps the estimate.
        books.hello("a", 1, LatencyClock::default());
        assert_eq!(q.slots[0].correction(1), Some(-5_000_000_000));
    }

    #[test]
    fn garbage_connections_belong_to_no_sender_and_unnamed_runs_are_named_by_epoch() {
        let q = Arc::new(TcpSinkShared::new(2));
        let books = TcpBooks::new(vec![q.clone()], 8);
        q.slots[0].open();
        q.slots[0].close(&ConnTally {
            invalid: 1,
            ..ConnTally::default()
        });
        q.slots[1].open();
        q.slots[1].close(&tally(0xab, 2));
        let rows = books.rows();
        assert_eq!(books.unattributed_invalid(), 1);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].name, "epoch-000000ab");
    }
}
