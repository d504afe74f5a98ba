//! The TCP sink's per-sender books, kept beside the workers (never on them): every tick the
//! reporter books the final tallies of the connections the workers closed (see
//! [`peers::SlotBooks`]), and a sender's Hello and Goodbye on the control channel name its run
//! (epoch) and ask for its verdict. A connection is attributed by the epoch in its records'
//! headers, so the books are exact however many senders share the sink, latency cells
//! included (each sums its connections', saturating). A sender run that
//! never said Hello is booked as `epoch-XXXXXXXX`; invalid events on connections that never
//! carried a record (garbage peers) belong to no sender and are kept apart. Each run's clock
//! (the same as the sink's, an estimated offset, or unknown) is kept here too and written into
//! the slots of its live connections at every tick and whenever it changes, so the workers
//! correct the run's latency without a lock. The lock here is taken by the reporter and the
//! control threads alone.

use std::{collections::HashMap, sync::Arc, sync::Mutex, time::Duration};

use super::{
    TcpSinkShared,
    peers::{ConnTally, SlotRead},
};
use crate::{
    clock,
    latency_clock::LatencyClock,
    sink::senders::{self, SenderBooks, Tally},
    stats::Latency,
};

/// What the sink counted for one sender run, at its Goodbye.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpVerdict {
    /// Records, bytes, invalid events and latency cells of all its connections.
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
    /// Name from its Hello, `other`, or `epoch-XXXXXXXX`.
    pub(crate) name: String,
    /// Its records, bytes, invalid events and latency cells, over all its runs.
    pub(crate) tally: ConnTally,
    /// Runs (epochs) seen.
    pub(crate) sessions: u64,
    /// Connections open now.
    pub(crate) conns_open: u64,
    /// Connections that ended.
    pub(crate) conns_closed: u64,
    /// How its latency relates to its clock (its latest run's).
    pub(crate) clock: LatencyClock,
    /// When its latest run's first record was read, on the sink's wall clock in ns since the
    /// Unix epoch (`None`: no record yet).
    pub(crate) first_ns: Option<u64>,
}

impl TcpSenderRow {
    /// Its latency as cell bounds (0 without a corrected sample).
    pub(crate) fn latency(&self) -> Latency {
        Latency::from_cells(&self.tally.latency_cells)
    }
}

/// The tally of some connections: what they counted, and how many they were. A sender's
/// closed connections, a run's closed ones, and a run's live ones are each one.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ConnBook {
    tally: ConnTally,
    conns: u64,
}

impl ConnBook {
    fn of(tally: &ConnTally) -> ConnBook {
        ConnBook {
            tally: *tally,
            conns: 1,
        }
    }
}

impl Tally for ConnBook {
    fn add(&mut self, other: &ConnBook) {
        self.tally.add(&other.tally);
        self.conns = self.conns.saturating_add(other.conns);
    }
}

/// The name of a sender run that never said Hello.
fn unannounced_name(epoch: u32) -> String {
    format!("epoch-{epoch:08x}")
}

#[derive(Debug)]
struct Inner {
    /// Per sender its closed connections, and per run its own closed connections.
    books: SenderBooks<ConnBook, ConnBook>,
    /// Invalid events on connections that never carried a record.
    unattributed: ConnTally,
}

/// The per-sender books over these queues' connection slots.
#[derive(Debug)]
pub(crate) struct TcpBooks {
    queues: Vec<Arc<TcpSinkShared>>,
    started_ns: u64,
    inner: Mutex<Inner>,
}

impl TcpBooks {
    /// Books over `queues`; at most `max_senders` names get books of their own.
    pub(crate) fn new(queues: Vec<Arc<TcpSinkShared>>, max_senders: usize) -> TcpBooks {
        TcpBooks {
            queues,
            started_ns: clock::monotonic_ns(),
            inner: Mutex::new(Inner {
                books: SenderBooks::new(max_senders),
                unattributed: ConnTally::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Books every closed connection's final tally and gives every live one its run's clock
    /// correction; returns the live tallies by epoch (a run first seen here is booked under
    /// its unannounced name).
    fn collect(&self, inner: &mut Inner) -> HashMap<u32, ConnBook> {
        let mut live: HashMap<u32, ConnBook> = HashMap::new();
        for slot in self.queues.iter().flat_map(|q| q.slots.iter()) {
            match slot.read() {
                SlotRead::Free => {}
                SlotRead::Live(t) => {
                    if let Some(c) = inner.books.correction(t.epoch) {
                        slot.set_clock(t.epoch, c);
                    }
                    live.entry(t.epoch).or_default().add(&ConnBook::of(&t));
                }
                SlotRead::Closed(t) if t.epoch == 0 => inner.unattributed.add(&t),
                SlotRead::Closed(t) => {
                    let books = &mut inner.books;
                    let run = books.seen(t.epoch, unannounced_name(t.epoch), ConnBook::default);
                    run.own.add(&ConnBook::of(&t));
                    let name = books.sender_of(t.epoch, String::new);
                    books.book_closed(name, t.epoch, &ConnBook::of(&t));
                }
            }
        }
        for &epoch in live.keys().filter(|&&e| e != 0) {
            inner
                .books
                .seen(epoch, unannounced_name(epoch), ConnBook::default);
        }
        live
    }

    /// Books the connections the workers closed, so their slots can be reused.
    pub(crate) fn tick(&self) {
        self.collect(&mut self.lock());
    }

    /// A sender run said Hello, its clock as the hello tells (a reconnect keeps a known one);
    /// returns the sink's uptime.
    pub(crate) fn hello(&self, name: &str, epoch: u32, clock: LatencyClock) -> u64 {
        let mut inner = self.lock();
        inner.books.announce(name, epoch, clock, ConnBook::default);
        self.publish_clock(&inner, epoch);
        self.collect(&mut inner);
        clock::monotonic_ns().saturating_sub(self.started_ns)
    }

    /// A sender run told its estimate of this sink's clock: its live connections correct their
    /// latency by it from now on.
    pub(crate) fn clock(&self, epoch: u32, offset_ns: i64, error_bound_ns: u64, rtt_ns: u64) {
        let mut inner = self.lock();
        if inner
            .books
            .estimate(epoch, offset_ns, error_bound_ns, rtt_ns)
        {
            self.publish_clock(&inner, epoch);
            self.collect(&mut inner);
        }
    }

    /// Gives every queue run `epoch`'s correction, once known, for its connections whose slots
    /// have none yet.
    fn publish_clock(&self, inner: &Inner, epoch: u32) {
        if let Some(c) = inner.books.correction(epoch) {
            for q in &self.queues {
                q.clocks.publish(epoch, c);
            }
        }
    }

    /// A sender run said Goodbye: waits (at most `wait`) until every connection of it ended,
    /// then returns what the sink counted for it.
    pub(crate) fn goodbye(&self, epoch: u32, wait: Duration) -> TcpVerdict {
        senders::poll_until(wait, |last| {
            let mut inner = self.lock();
            let live = self.collect(&mut inner);
            let open = live.get(&epoch).copied();
            if open.is_some() && !last {
                return None;
            }
            let run = inner.books.runs.get(&epoch);
            let mut b = run.map(|r| r.own).unwrap_or_default();
            if let Some(o) = open {
                b.tally.add(&o.tally);
            }
            Some(TcpVerdict {
                tally: ConnTally { epoch, ..b.tally },
                conns: b.conns,
                complete: open.is_none(),
                clock: inner.books.clock_of(epoch),
            })
        })
    }

    /// Every sender's books (closed plus live connections), by name.
    pub(crate) fn rows(&self) -> Vec<TcpSenderRow> {
        let mut inner = self.lock();
        let live = self.collect(&mut inner);
        let books = &inner.books;
        books
            .senders
            .iter()
            .map(|(name, book)| {
                let mut row = TcpSenderRow {
                    name: name.clone(),
                    tally: book.closed.tally,
                    sessions: book.epochs.len() as u64,
                    conns_closed: book.closed.conns,
                    clock: books.sender_clock(name),
                    ..TcpSenderRow::default()
                };
                for b in book.epochs.iter().filter_map(|e| live.get(e)) {
                    row.tally.add(&b.tally);
                    row.conns_open += b.conns;
                }
                // Its latest run is the one whose first record came last.
                row.first_ns = book
                    .epochs
                    .iter()
                    .filter_map(|e| {
                        // The run's first record: its closed or its live connections' earliest.
                        let closed = books.runs.get(e).map(|r| r.own.tally.first_ns);
                        let live = live.get(e).map(|b| b.tally.first_ns);
                        [closed, live]
                            .into_iter()
                            .flatten()
                            .filter(|&t| t > 0)
                            .min()
                    })
                    .max();
                row
            })
            .collect()
    }

    /// Invalid events on connections that never carried a record (no sender to charge).
    pub(crate) fn unattributed_invalid(&self) -> u64 {
        self.lock().unattributed.invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `records`, each a latency sample in cell 3 (2 us) but one without a sample.
    fn tally(epoch: u32, records: u64) -> ConnTally {
        let mut t = ConnTally {
            epoch,
            records,
            bytes: records * 100,
            latency_unknown: 1,
            ..ConnTally::default()
        };
        t.latency_cells[3] = records - 1;
        t.latency_sum_ns[3] = (records - 1) * 1_500;
        t
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
        // The run's latency cells: each connection's once, closed or live.
        assert_eq!(v.tally.latency_cells[3], 8);
        assert_eq!(v.tally.latency_sum_ns[3], 8 * 1_500);
        assert_eq!(v.tally.latency_unknown, 2);
        let rows = books.rows();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].name.as_str(), rows[0].tally.records), ("a", 10));
        assert_eq!(rows[0].tally.latency_cells[3], 8, "not counted twice");
        assert_eq!(rows[0].latency().p50_ns, crate::stats::LATENCY_BOUNDS_NS[3]);
        assert_eq!(rows[1].tally.latency_cells[3], 6, "b's live connection");
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

    #[test]
    fn unannounced_runs_beyond_the_cap_share_the_other_book_and_a_hello_makes_room() {
        let q = Arc::new(TcpSinkShared::new(4));
        let books = TcpBooks::new(vec![q.clone()], 2);
        for (slot, epoch) in q.slots.iter().zip([0xa1, 0xa2, 0xa3]) {
            slot.open();
            slot.close(&tally(epoch, 1));
        }
        let rows = books.rows();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["epoch-000000a1", "epoch-000000a2", "other"]);
        assert_eq!(rows.iter().map(|r| r.tally.records).sum::<u64>(), 3);
        books.hello("edge", 7, LatencyClock::same_clock());
        let rows = books.rows();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["edge", "epoch-000000a2", "other"]);
        assert_eq!(rows[2].tally.records, 2, "a1 was folded into other");
    }
}
