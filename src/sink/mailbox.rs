//! What crosses between a sink worker and the threads beside it, without a lock on the
//! worker's side: an inbox of what senders said (start, progress, clock, goodbye) that the worker
//! drains at its publish cadence, an outbox of sessions it closed, and one shared slot per
//! session of its table that it publishes its books into.
//!
//! Both queues are fixed-capacity lock-free queues allocated at set-up, so neither side
//! allocates per message. The in-process `pair` sender and the network control channel are two
//! producers of the same inbox messages.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed},
};

use crossbeam_queue::ArrayQueue;

use crate::stats::{SessionCounters, SharedSessionCounters};

/// A session of the sink's books: one flow of one sender run (epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    /// The sender run's random epoch.
    pub epoch: u32,
    /// The flow id.
    pub flow: u32,
}

/// What a sender said about one of its flows, for the worker that holds the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToWorker {
    /// The flow's sequence numbers start at `start` (the sink was there before it began).
    Start { key: SessionKey, start: u64 },
    /// The sender has sent below `next_seq`, and `failed` of its sends failed so far.
    Progress {
        key: SessionKey,
        next_seq: u64,
        failed: u64,
    },
    /// The flow ended below `end` with `failed` failed sends in all: close its books.
    Close {
        key: SessionKey,
        end: u64,
        failed: u64,
    },
    /// The sessions of sender run `epoch` correct their latency by `correction` ns (the sink's
    /// clock minus the sender's: 0 on the same kernel, else the control channel's estimate).
    Clock { epoch: u32, correction: i64 },
    /// Sender run `epoch` said hello (authenticated, where the sink has a secret): its sessions
    /// take the slots reserved for announced senders. `since_ns`: the monotonic time of its
    /// first send, as its hello tells, so datagrams refused before then are not its head.
    Announce {
        epoch: u32,
        since_ns: u64,
        /// With a secret, the proof its datagrams must carry.
        proof: Option<crate::proto::proof::RunProof>,
        /// How far its paced flows can reach: a datagram numbered beyond it is implausible.
        reach: Option<crate::proto::reach::RunReach>,
    },
}

/// Why a worker closed a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseCause {
    /// The sender said goodbye (its tail is known).
    Goodbye,
    /// No packet for `--session-idle`.
    Idle,
    /// The sink stopped.
    End,
}

/// A worker's answer about a session.
#[derive(Clone, Copy, Debug)]
// Closed is large (final books with latency cells), but the outbox is allocated at set-up:
// boxing it would allocate on the worker.
#[allow(clippy::large_enum_variant)]
pub(crate) enum FromWorker {
    /// The worker closed the session in `slot` with these final books.
    Closed {
        slot: u32,
        generation: u64,
        key: SessionKey,
        source: Option<SocketAddr>,
        counters: SessionCounters,
        active_ns: (u64, u64),
        cause: CloseCause,
        /// What the worker refused of the session's sender run.
        refusals: EpochRefusals,
    },
    /// The worker was asked to close `key` and never saw it.
    NotMine {
        key: SessionKey,
        /// What the worker refused of the key's sender run.
        refusals: EpochRefusals,
    },
}

/// What a worker could not book of one announced sender run (epoch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EpochRefusals {
    /// Its datagrams that arrived after its hello and found no free slot (`table_full`).
    pub(crate) packets: u64,
    /// Datagrams were refused while its run was on (before its hello, or for want of a slot):
    /// any of its sequence numbers the books never saw may have arrived, so they are not lost.
    pub(crate) uncertain: bool,
}

/// A worker's inbox, outbox and session slots.
#[derive(Debug)]
pub struct Mailbox {
    /// Messages for the worker.
    pub(crate) inbox: ArrayQueue<ToWorker>,
    /// Messages from the worker.
    pub(crate) outbox: ArrayQueue<FromWorker>,
    /// One slot per session the worker's table can hold.
    pub(crate) sessions: Vec<SharedSession>,
}

impl Mailbox {
    /// A mailbox for a table of `sessions` sessions.
    pub fn new(sessions: usize) -> Mailbox {
        Mailbox {
            inbox: ArrayQueue::new(4096),
            outbox: ArrayQueue::new(sessions + 4096),
            sessions: (0..sessions).map(|_| SharedSession::default()).collect(),
        }
    }
}

/// The published books of one session slot. `generation` is 0 while the slot is free and new
/// for every session that takes it, so a reader can tell sessions apart.
#[derive(Debug, Default)]
pub(crate) struct SharedSession {
    generation: AtomicU64,
    epoch: AtomicU32,
    flow: AtomicU32,
    source: [AtomicU64; 3],
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    counters: SharedSessionCounters,
}

/// A reader's copy of a live session slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SessionView {
    /// The session in this slot (unique per slot).
    pub(crate) generation: u64,
    /// Which session.
    pub(crate) key: SessionKey,
    /// Where its first packet came from.
    pub(crate) source: Option<SocketAddr>,
    /// Monotonic ns of its first and last packet.
    pub(crate) active_ns: (u64, u64),
    /// Its books so far.
    pub(crate) counters: SessionCounters,
}

impl SharedSession {
    /// Publishes a session's books (single writer: the worker).
    pub(crate) fn publish(&self, generation: u64, view: &SessionView) {
        self.epoch.store(view.key.epoch, Relaxed);
        self.flow.store(view.key.flow, Relaxed);
        let source = encode_source(view.source);
        for (slot, word) in self.source.iter().zip(source) {
            slot.store(word, Relaxed);
        }
        self.first_ns.store(view.active_ns.0, Relaxed);
        self.last_ns.store(view.active_ns.1, Relaxed);
        self.counters.publish(&view.counters);
        self.generation.store(generation, Relaxed);
    }

    /// Marks the slot free.
    pub(crate) fn clear(&self) {
        self.generation.store(0, Relaxed);
    }

    /// The live session in this slot, if any.
    pub(crate) fn load(&self) -> Option<SessionView> {
        let generation = self.generation.load(Relaxed);
        if generation == 0 {
            return None;
        }
        Some(SessionView {
            generation,
            key: SessionKey {
                epoch: self.epoch.load(Relaxed),
                flow: self.flow.load(Relaxed),
            },
            source: decode_source([
                self.source[0].load(Relaxed),
                self.source[1].load(Relaxed),
                self.source[2].load(Relaxed),
            ]),
            active_ns: (self.first_ns.load(Relaxed), self.last_ns.load(Relaxed)),
            counters: self.counters.load(),
        })
    }
}

/// Packs an address into three words: the IP as 128 bits, then family and port.
pub(crate) fn encode_source(source: Option<SocketAddr>) -> [u64; 3] {
    match source {
        None => [0; 3],
        Some(addr) => {
            let (ip, family) = match addr.ip() {
                IpAddr::V4(v4) => (u128::from(u32::from(v4)), 4u64),
                IpAddr::V6(v6) => (u128::from(v6), 6u64),
            };
            [
                (ip >> 64) as u64,
                ip as u64,
                family << 16 | u64::from(addr.port()),
            ]
        }
    }
}

/// The inverse of [`encode_source`].
pub(crate) fn decode_source(words: [u64; 3]) -> Option<SocketAddr> {
    let ip = u128::from(words[0]) << 64 | u128::from(words[1]);
    let port = words[2] as u16;
    match words[2] >> 16 {
        4 => Some(SocketAddr::new(Ipv4Addr::from(ip as u32).into(), port)),
        6 => Some(SocketAddr::new(Ipv6Addr::from(ip).into(), port)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_round_trip_and_slots_tell_sessions_apart() {
        for addr in ["10.1.2.3:4000", "[fd00::1]:9", "127.0.0.1:0"] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(decode_source(encode_source(Some(addr))), Some(addr));
        }
        assert_eq!(decode_source(encode_source(None)), None);
        let slot = SharedSession::default();
        assert!(slot.load().is_none());
        let view = SessionView {
            generation: 9,
            key: SessionKey { epoch: 1, flow: 2 },
            source: None,
            active_ns: (3, 4),
            counters: SessionCounters {
                packets: 5,
                ..SessionCounters::default()
            },
        };
        slot.publish(9, &view);
        let got = slot.load().unwrap();
        assert_eq!(
            (got.generation, got.key, got.counters.packets),
            (9, view.key, 5)
        );
        slot.clear();
        assert!(slot.load().is_none());
    }
}
