//! What a TCP sink worker shares about its connections beyond the queue counters.
//!
//! [`SlotBooks`]: per connection slot, the tally of the sender run (epoch) on that connection,
//! so the sink's per-sender books, kept beside the workers, attribute records, bytes, invalid
//! events and latency samples (per cell of `stats::LATENCY_BOUNDS_NS`, with their sums)
//! exactly. A slot moves `FREE → LIVE` (the worker accepted a connection into
//! it), `LIVE → CLOSED` (the worker stored the final tally and will not touch the slot again)
//! and `CLOSED → FREE` (the books took the final tally). The worker reuses a slot only once it
//! is `FREE` again, so no tally is ever overwritten before it was booked, and a live tally is
//! never counted twice. The books also write into a live slot its sender run's clock
//! correction (see `books`), which the worker reads with the epoch it belongs to, so a
//! correction is never applied to another run's records.
//!
//! [`ControlHandoff`]: a connection whose first bytes are a control frame (its first byte is
//! the high byte of a frame length, always 0, while a record starts with the magic `R`) is
//! handed with those bytes to the control server through a lock-free queue of slots allocated
//! at set-up, so one port serves data and control and the worker never allocates for it.

use std::{
    net::TcpStream,
    os::fd::OwnedFd,
    sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
};

use crossbeam_queue::ArrayQueue;

use super::TCP_BUFFER_BYTES;
use crate::stats::LATENCY_CELLS;

const FREE: u32 = 0;
const LIVE: u32 = 1;
const CLOSED: u32 = 2;

/// One connection's tally: its sender run and what it brought.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConnTally {
    /// The sender run's epoch, from its records' headers (0 until the first record).
    pub(crate) epoch: u32,
    /// Complete, in-sequence records.
    pub(crate) records: u64,
    /// Bytes of those records.
    pub(crate) bytes: u64,
    /// Invalid events on this connection (sequence, lost framing, depth).
    pub(crate) invalid: u64,
    /// Records that gave no latency sample: no clock correction for their sender run yet.
    pub(crate) latency_unknown: u64,
    /// Latency samples whose negative corrected transit was taken as 0.
    pub(crate) latency_clamped: u64,
    /// Latency samples per cell of `stats::LATENCY_BOUNDS_NS` (corrected by the sender run's
    /// clock offset).
    pub(crate) latency_cells: [u64; LATENCY_CELLS],
    /// The samples' sum (ns) per cell, for the per-sender histograms' sums.
    pub(crate) latency_sum_ns: [u64; LATENCY_CELLS],
    /// When its first in-sequence record was read, on the sink's wall clock in ns since the
    /// Unix epoch (0: none yet).
    pub(crate) first_ns: u64,
}

impl ConnTally {
    /// Adds `other`'s counts (not its epoch), saturating.
    pub(crate) fn add(&mut self, other: &ConnTally) {
        self.records = self.records.saturating_add(other.records);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.invalid = self.invalid.saturating_add(other.invalid);
        self.latency_unknown = self.latency_unknown.saturating_add(other.latency_unknown);
        self.latency_clamped = self.latency_clamped.saturating_add(other.latency_clamped);
        for (a, b) in self.latency_cells.iter_mut().zip(&other.latency_cells) {
            *a = a.saturating_add(*b);
        }
        for (a, b) in self.latency_sum_ns.iter_mut().zip(&other.latency_sum_ns) {
            *a = a.saturating_add(*b);
        }
        // The earlier first record of the two (0 is none).
        self.first_ns = match (self.first_ns, other.first_ns) {
            (0, b) => b,
            (a, 0) => a,
            (a, b) => a.min(b),
        };
    }
}

/// One connection slot's tally, shared by its worker (writer) and the books (reader).
#[derive(Debug, Default)]
pub(crate) struct SlotBooks {
    state: AtomicU32,
    epoch: AtomicU32,
    records: AtomicU64,
    bytes: AtomicU64,
    invalid: AtomicU64,
    latency_unknown: AtomicU64,
    latency_clamped: AtomicU64,
    latency_cells: [AtomicU64; LATENCY_CELLS],
    latency_sum_ns: [AtomicU64; LATENCY_CELLS],
    first_ns: AtomicU64,
    /// The epoch whose correction `clock_correction` holds (0: none).
    clock_epoch: AtomicU32,
    clock_correction: AtomicI64,
}

/// What the books read from a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotRead {
    /// No connection, or one whose final tally was booked already.
    Free,
    /// A connection still counting: its tally so far.
    Live(ConnTally),
    /// A connection that ended: its final tally, now booked (the slot is free again).
    Closed(ConnTally),
}

impl SlotBooks {
    fn store(&self, t: &ConnTally) {
        self.epoch.store(t.epoch, Ordering::Relaxed);
        self.records.store(t.records, Ordering::Relaxed);
        self.bytes.store(t.bytes, Ordering::Relaxed);
        self.invalid.store(t.invalid, Ordering::Relaxed);
        self.latency_unknown
            .store(t.latency_unknown, Ordering::Relaxed);
        self.latency_clamped
            .store(t.latency_clamped, Ordering::Relaxed);
        for (a, v) in self.latency_cells.iter().zip(t.latency_cells) {
            a.store(v, Ordering::Relaxed);
        }
        for (a, v) in self.latency_sum_ns.iter().zip(t.latency_sum_ns) {
            a.store(v, Ordering::Relaxed);
        }
        self.first_ns.store(t.first_ns, Ordering::Relaxed);
    }

    fn load(&self) -> ConnTally {
        ConnTally {
            epoch: self.epoch.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            latency_unknown: self.latency_unknown.load(Ordering::Relaxed),
            latency_clamped: self.latency_clamped.load(Ordering::Relaxed),
            latency_cells: std::array::from_fn(|i| self.latency_cells[i].load(Ordering::Relaxed)),
            latency_sum_ns: std::array::from_fn(|i| self.latency_sum_ns[i].load(Ordering::Relaxed)),
            first_ns: self.first_ns.load(Ordering::Relaxed),
        }
    }

    /// Books: the records of sender run `epoch` on this slot's connection correct their
    /// latency by `correction` ns. The correction is stored before the epoch it belongs to.
    pub(crate) fn set_clock(&self, epoch: u32, correction: i64) {
        self.clock_correction.store(correction, Ordering::Relaxed);
        self.clock_epoch.store(epoch, Ordering::Release);
    }

    /// Worker: the correction of sender run `epoch`, if the books set one for it.
    pub(super) fn correction(&self, epoch: u32) -> Option<i64> {
        let set_for = self.clock_epoch.load(Ordering::Acquire);
        (set_for == epoch && epoch != 0).then(|| self.clock_correction.load(Ordering::Relaxed))
    }

    /// Worker: a connection starts in this (free) slot.
    pub(super) fn open(&self) {
        self.clock_epoch.store(0, Ordering::Release);
        self.store(&ConnTally::default());
        self.state.store(LIVE, Ordering::Release);
    }

    /// Worker: the tally so far of the live connection.
    pub(super) fn publish(&self, t: &ConnTally) {
        self.store(t);
    }

    /// Worker: the connection ended with this tally; the slot waits for the books.
    pub(super) fn close(&self, t: &ConnTally) {
        self.store(t);
        self.state.store(CLOSED, Ordering::Release);
    }

    /// Worker: the books took the final tally, so the slot may take a new connection.
    pub(super) fn is_free(&self) -> bool {
        self.state.load(Ordering::Acquire) == FREE
    }

    /// Books: reads the slot, freeing it when it held a final tally.
    pub(crate) fn read(&self) -> SlotRead {
        match self.state.load(Ordering::Acquire) {
            LIVE => SlotRead::Live(self.load()),
            CLOSED => {
                let t = self.load();
                self.state.store(FREE, Ordering::Release);
                SlotRead::Closed(t)
            }
            _ => SlotRead::Free,
        }
    }
}

/// Sender runs whose clock corrections [`RunClocks`] holds at once; a run beyond them waits for
/// the books' next tick, as before.
const RUN_CLOCKS: usize = 64;

/// The clock corrections of the sender runs the books know, for a connection whose slot the
/// books have not yet given one (a connection opened since their last tick): the books publish
/// a run's correction here as soon as they know it (at its hello, at its estimate), and a worker
/// reads it without a lock, so a new connection's first records give latency samples too. One
/// writer (the books, under their lock); each entry is a seqlock on its epoch (0 while it
/// changes), so a reader never takes one run's correction for another's.
#[derive(Debug)]
pub(crate) struct RunClocks {
    entries: [RunClock; RUN_CLOCKS],
    /// The entry a new run takes next (the oldest).
    next: AtomicUsize,
}

impl Default for RunClocks {
    fn default() -> Self {
        RunClocks {
            entries: std::array::from_fn(|_| RunClock::default()),
            next: AtomicUsize::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct RunClock {
    epoch: AtomicU32,
    correction: AtomicI64,
}

impl RunClocks {
    /// Books: the records of sender run `epoch` correct their latency by `correction` ns. A run
    /// in the table is updated in place; a new one takes the oldest entry.
    pub(crate) fn publish(&self, epoch: u32, correction: i64) {
        if epoch == 0 {
            return;
        }
        let at = self
            .entries
            .iter()
            .position(|e| e.epoch.load(Ordering::Relaxed) == epoch)
            .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed) % RUN_CLOCKS);
        let e = &self.entries[at];
        e.epoch.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        e.correction.store(correction, Ordering::Relaxed);
        e.epoch.store(epoch, Ordering::Release);
    }

    /// Worker: run `epoch`'s correction, if the books published one.
    pub(super) fn correction(&self, epoch: u32) -> Option<i64> {
        if epoch == 0 {
            return None;
        }
        self.entries.iter().find_map(|e| {
            if e.epoch.load(Ordering::Acquire) != epoch {
                return None;
            }
            let correction = e.correction.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            // Unchanged while it was read: the correction is this run's.
            (e.epoch.load(Ordering::Relaxed) == epoch).then_some(correction)
        })
    }
}

/// A connection handed to the control server, with the bytes the worker read from it.
#[derive(Debug)]
struct Handed {
    fd: OwnedFd,
    bytes: Box<[u8]>,
    len: usize,
}

/// The queue between the TCP sink workers and the control server.
#[derive(Debug)]
pub(crate) struct ControlHandoff {
    ready: ArrayQueue<Handed>,
    free: ArrayQueue<Box<[u8]>>,
}

impl ControlHandoff {
    /// `slots` connections may wait at once, each with up to one receive buffer of bytes.
    pub(crate) fn new(slots: usize) -> ControlHandoff {
        let free = ArrayQueue::new(slots.max(1));
        for _ in 0..slots.max(1) {
            let _ = free.push(vec![0u8; TCP_BUFFER_BYTES as usize].into_boxed_slice());
        }
        ControlHandoff {
            ready: ArrayQueue::new(slots.max(1)),
            free,
        }
    }

    /// Worker: hands `fd` and its first bytes over; false (and `fd` closed) when every slot
    /// is waiting already. Never allocates.
    pub(super) fn hand(&self, fd: OwnedFd, first: &[u8]) -> bool {
        let Some(mut bytes) = self.free.pop() else {
            return false;
        };
        let len = first.len().min(bytes.len());
        bytes[..len].copy_from_slice(&first[..len]);
        match self.ready.push(Handed { fd, bytes, len }) {
            Ok(()) => true,
            Err(h) => {
                let _ = self.free.push(h.bytes);
                false
            }
        }
    }
}

impl crate::control::server::Arrivals for ControlHandoff {
    fn take(&self) -> Option<(TcpStream, Vec<u8>)> {
        let h = self.ready.pop()?;
        let first = h.bytes[..h.len].to_vec();
        let _ = self.free.push(h.bytes);
        Some((TcpStream::from(h.fd), first))
    }
}

/// Whether a connection's first bytes are a control frame rather than a record.
pub(super) fn is_control(first: &[u8]) -> bool {
    first.first() == Some(&0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::server::Arrivals;

    #[test]
    fn a_slot_is_reused_only_after_its_final_tally_was_booked() {
        let s = SlotBooks::default();
        assert_eq!(s.read(), SlotRead::Free);
        s.open();
        let t = ConnTally {
            epoch: 7,
            records: 3,
            bytes: 300,
            invalid: 1,
            latency_unknown: 2,
            latency_clamped: 0,
            latency_cells: std::array::from_fn(|i| i as u64),
            latency_sum_ns: std::array::from_fn(|i| i as u64 * 1_000),
            first_ns: 1_700_000_000_000_000_000,
        };
        s.publish(&t);
        assert_eq!(s.read(), SlotRead::Live(t));
        assert_eq!(s.correction(7), None);
        s.set_clock(7, -5_000_000_000);
        assert_eq!(s.correction(7), Some(-5_000_000_000));
        assert_eq!(
            s.correction(8),
            None,
            "another run's records are not corrected"
        );
        s.close(&t);
        assert!(!s.is_free());
        assert_eq!(s.read(), SlotRead::Closed(t));
        assert!(s.is_free());
        assert_eq!(s.read(), SlotRead::Free);
        s.open();
        assert_eq!(
            s.correction(7),
            None,
            "a new connection starts without a correction"
        );
    }

    #[test]
    fn tallies_add_their_latency_cells_saturating() {
        let mut a = ConnTally {
            records: 2,
            ..ConnTally::default()
        };
        a.latency_cells[4] = 2;
        a.latency_sum_ns[4] = u64::MAX - 1;
        let mut b = a;
        b.latency_cells[0] = 1;
        a.add(&b);
        assert_eq!(a.records, 4);
        assert_eq!((a.latency_cells[0], a.latency_cells[4]), (1, 4));
        assert_eq!(a.latency_sum_ns[4], u64::MAX, "saturates");
        // The earlier first record of the two, where either has one.
        let (mut early, late) = (
            ConnTally {
                first_ns: 5,
                ..ConnTally::default()
            },
            ConnTally {
                first_ns: 9,
                ..ConnTally::default()
            },
        );
        early.add(&late);
        assert_eq!(early.first_ns, 5);
        let mut none = ConnTally::default();
        none.add(&late);
        assert_eq!(none.first_ns, 9, "0 is none, not the earliest");
    }

    #[test]
    fn run_clocks_give_each_run_its_own_correction_and_reuse_the_oldest_entry() {
        let clocks = RunClocks::default();
        assert_eq!(clocks.correction(7), None);
        clocks.publish(7, -5_000);
        clocks.publish(8, 40);
        assert_eq!(
            (clocks.correction(7), clocks.correction(8)),
            (Some(-5_000), Some(40))
        );
        clocks.publish(7, -4_000);
        assert_eq!(clocks.correction(7), Some(-4_000), "updated in place");
        assert_eq!(clocks.correction(0), None, "no run has epoch 0");
        for epoch in 100..100 + RUN_CLOCKS as u32 {
            clocks.publish(epoch, 1);
        }
        assert_eq!(clocks.correction(7), None, "the oldest runs made room");
        assert_eq!(clocks.correction(100 + RUN_CLOCKS as u32 - 1), Some(1));
    }

    #[test]
    fn the_handoff_carries_fd_and_bytes_and_refuses_when_full() {
        let q = ControlHandoff::new(1);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (c, _d) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(q.hand(OwnedFd::from(a), &[0, 0, 0, 9, 1, 1]));
        assert!(!q.hand(OwnedFd::from(c), &[0]));
        let (_, first) = q.take().unwrap();
        assert_eq!(first, vec![0, 0, 0, 9, 1, 1]);
        assert!(q.take().is_none());
    }

    #[test]
    fn control_frames_and_records_are_told_apart_by_the_first_byte() {
        let mut record = [0u8; 32];
        crate::proto::record::RecordHeader {
            len: 32,
            ..Default::default()
        }
        .write(&mut record);
        assert!(!is_control(&record));
        let frame = crate::control::frame::encode(&crate::control::msg::Message::Heartbeat(
            crate::control::msg::Heartbeat {},
        ))
        .unwrap();
        assert!(is_control(&frame));
        assert!(!is_control(&[]));
    }
}
