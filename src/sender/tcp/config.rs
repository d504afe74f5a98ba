//! What a TCP sender worker is given and what it publishes: its resolved configuration (sizes
//! of its send slots and receive buffers follow from it), the request/response shape, and the
//! counters the reporter reads.

use std::time::Duration;

use super::{SendOp, buffers::SendBuffers, rr};
use crate::ring::{BufRingLayout, RingSize};
use crate::sender::pattern::RrShape;

/// The most bytes one write carries: a little under two full 64 KiB GSO segments, so a write
/// of many records never ends in a runt just past a full segment. Over loopback (MSS 65483)
/// 131072-byte writes, which leave a 106-byte runt each, ran at about 60 % of 128000-byte ones
/// (benches/README.md).
const MAX_WRITE: usize = 128_000;
/// Send-slot memory per queue at most, counting one of each connection's two buffers (slots
/// shrink with many connections).
const MAX_SLOT_MEMORY: usize = 16 << 20;

crate::stats::counter_set! {
    json;
    /// Counters of one TCP sender queue.
    TxCounters / TcpTxShared {
        /// Application bytes the kernel accepted.
        tx_bytes:,
        /// Records written completely.
        tx_records:,
        /// Connections established.
        connects:,
        /// Connections established again after one had failed.
        reconnects:,
        /// Connects that failed (refused, reset, unreachable, socket creation).
        connect_failures:,
        /// Established connections reset or broken by the peer (ECONNRESET, EPIPE).
        resets:,
        /// Writes that failed otherwise.
        send_errors:,
        /// Writes the kernel took only in part (continued).
        short_writes:,
        /// Nanoseconds records were due that no connection could take, each up connection's
        /// last write still unfinished: the time the peer's or the path's flow control held
        /// the sender back.
        backpressure_ns:,
        /// Connections up now (a gauge).
        conns_up:,
        /// rr: responses received in order (round trips completed).
        transactions:,
        /// rr: bytes of those responses.
        rx_response_bytes:,
        /// rr: responses out of order, not marked as responses, or with lost framing; streams:
        /// acknowledgements that went backwards or beyond what was sent.
        bad_responses:,
        /// Stream records the sink acknowledged having counted (delivered to the application).
        delivered_records:,
        /// Bytes of those records.
        delivered_bytes:,
        /// rr: round trips per cell of `sender::rtt` (`RTT_CELLS`).
        rtt_cells: 496,
    }
}

/// What one TCP sender queue shares with the reporter.
#[derive(Debug, Default)]
pub(crate) struct TcpSendShared {
    /// Counters.
    pub(crate) counters: TcpTxShared,
    /// The connections' descriptors, for the reporter's TCP_INFO samples (see `info`).
    pub(crate) fds: super::info::ConnFds,
}

impl TcpSendShared {
    /// Shared state of a queue with `conns` connections.
    pub(crate) fn new(conns: u32) -> TcpSendShared {
        TcpSendShared {
            fds: super::info::ConnFds::new(conns),
            ..TcpSendShared::default()
        }
    }
}

/// Everything one TCP sender worker needs, resolved before start.
#[derive(Clone, Debug)]
pub(crate) struct TcpSendConfig {
    /// Destination.
    pub(crate) to: std::net::SocketAddr,
    /// Record bytes, header included.
    pub(crate) size: usize,
    /// Connections of this queue.
    pub(crate) conns: u32,
    /// Flow id of this queue's first connection (ids are queue-major).
    pub(crate) first_flow: u16,
    /// Records per second for this worker, `None` = as fast as possible.
    pub(crate) rate_rps: Option<f64>,
    /// Records this worker writes before it stops.
    pub(crate) count: Option<u64>,
    /// How long this worker sends.
    pub(crate) duration: Option<Duration>,
    /// The write operation.
    pub(crate) op: SendOp,
    /// Epoch written into every record.
    pub(crate) epoch: u32,
    /// The run's token, which each connection's first record carries (with a secret).
    pub(crate) proof_token: Option<u64>,
    /// Try 2 MiB pages for the arena.
    pub(crate) hugepages: bool,
    /// The request/response pattern, `None` for streams.
    pub(crate) rr: Option<RrShape>,
}

impl TcpSendConfig {
    pub(super) fn slot_bytes(&self) -> usize {
        if let Some(rr) = self.rr {
            return rr.request * rr.depth as usize;
        }
        let per_conn = (MAX_SLOT_MEMORY / self.conns.max(1) as usize).min(MAX_WRITE);
        (per_conn / self.size).max(1) * self.size
    }

    pub(super) fn records_per_write(&self) -> u64 {
        (self.slot_bytes() / self.size) as u64
    }

    /// The receive buffers for responses and acknowledgements (at the start of the arena).
    pub(super) fn recv_layout(&self) -> Option<BufRingLayout> {
        Some(rr::RECV_LAYOUT)
    }

    /// Where the send buffers start in the arena.
    fn slot_base(&self) -> usize {
        self.recv_layout().map_or(0, |l| l.arena_bytes())
    }

    /// Where each connection's two send buffers lie (after the receive buffers).
    pub(super) fn send_buffers(&self) -> SendBuffers {
        SendBuffers::new(self.slot_base(), self.slot_bytes())
    }

    /// Arena bytes of one worker.
    pub(crate) fn arena_bytes(&self) -> usize {
        self.send_buffers().end(self.conns as usize).div_ceil(4096) * 4096
    }

    pub(super) fn ring_size(&self) -> RingSize {
        let sq = (self.conns * 2).next_power_of_two().clamp(64, 4096);
        RingSize {
            sq_entries: sq,
            cq_entries: sq * 4,
        }
    }
}

/// What a TCP sender worker reports when it ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TcpSendOutcome {
    /// Monotonic ns when sending began.
    pub(crate) started_ns: u64,
    /// Monotonic ns when the worker ended.
    pub(crate) ended_ns: u64,
    /// A fatal ring error ended the run early.
    pub(crate) ring_failed: bool,
}

impl crate::worker::Outcome for TcpSendOutcome {
    fn ring_failed(&self) -> bool {
        self.ring_failed
    }

    fn span(&self) -> Option<(u64, u64)> {
        Some((self.started_ns, self.ended_ns))
    }
}
