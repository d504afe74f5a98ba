//! What a TCP sink queue is given and what it shares: its configuration (the sizes of its
//! receive buffers, response slots and ring follow from it), its counters, its latency cells,
//! its connection slots' tallies, and its listening socket.

use std::{net::SocketAddr, sync::Arc};

use socket2::{Domain, Protocol, Socket, Type};

use super::{peers, recv_mode::RecvMode, respond};
use crate::{
    error::Error,
    proto::proof::DataKey,
    ring::{BufOrder, BufRingLayout, RingSize},
};

/// Bytes of each provided receive buffer.
pub(crate) const TCP_BUFFER_BYTES: u32 = 32 * 1024;
/// Provided buffers per TCP sink queue when `--rx-buffers` is not given: 2 MiB in all. The
/// sink copies every byte it reads into this ring, and the kernel fills it in ring order, so
/// the whole ring is the copy's working set; at 2 MiB it stays in cache, where 512 buffers
/// (16 MiB) cost the sink twice the CPU per byte and throttled a loopback stream.
pub(crate) const TCP_RX_BUFFERS: u16 = 64;

crate::stats::counter_set! {
    json;
    /// Counters of one TCP sink queue.
    RxCounters / TcpRxShared {
        /// Bytes of complete, in-sequence records.
        rx_bytes:,
        /// Complete, in-sequence records.
        rx_records:,
        /// Invalid events, every reason together.
        rx_invalid:,
        /// Records out of sequence on their connection.
        invalid_sequence:,
        /// Connections whose stream did not start a record with the magic.
        invalid_magic:,
        /// Connections with a wrong version or record flag.
        invalid_version:,
        /// Connections with a record length out of bounds.
        invalid_length:,
        /// Connections that ended inside a record.
        invalid_truncated:,
        /// Data connections accepted (counted at their first bytes or end, so a control
        /// connection on the same port is not one; also those refused for want of a slot).
        accepts:,
        /// Connections closed at once because every slot was taken.
        refused:,
        /// Connections that ended (EOF, reset, or closed for lost framing).
        conns_closed:,
        /// Connections that ended with an error (reset by the peer).
        resets:,
        /// Connections open now (a gauge).
        conns_open:,
        /// Receive re-arms after the buffer ring ran dry (ENOBUFS).
        buffer_stalls:,
        /// Connections closed for keeping more than 64 requests outstanding.
        invalid_depth:,
        /// Connections closed because their first record did not prove a sender run of this
        /// sink's secret (a sink with `--secret-file` only).
        invalid_auth:,
        /// Responses written completely (request/response pattern).
        responses:,
        /// Bytes of those responses.
        tx_response_bytes:,
        /// Acknowledgements written on streams.
        acks:,
        /// Connections that opened with a control frame, handed to the control server.
        control_conns:,
        /// Records that gave no latency sample: no clock correction for their sender run.
        latency_unknown:,
        /// Latency samples whose negative corrected transit was taken as 0.
        latency_clamped:,
        /// One-way latency of records per cell of `stats::LATENCY_BOUNDS_NS` (corrected by
        /// the sender run's clock offset).
        latency_cells: 20,
    }
}

/// What one TCP sink queue shares with the reporter.
#[derive(Debug, Default)]
pub(crate) struct TcpSinkShared {
    /// Counters.
    pub(crate) counters: TcpRxShared,
    /// Per connection slot, the tally of the sender run on it (see [`peers`]).
    pub(crate) slots: Box<[peers::SlotBooks]>,
    /// The known sender runs' clock corrections, for connections whose slot has none yet.
    pub(crate) clocks: peers::RunClocks,
}

impl TcpSinkShared {
    /// Shared state of a queue with `max_conns` connection slots.
    pub(crate) fn new(max_conns: u32) -> TcpSinkShared {
        TcpSinkShared {
            slots: (0..max_conns)
                .map(|_| peers::SlotBooks::default())
                .collect(),
            ..TcpSinkShared::default()
        }
    }
}

/// Everything one TCP sink worker needs.
#[derive(Clone, Debug)]
pub(crate) struct TcpSinkConfig {
    /// Listen address (TCP).
    pub(crate) listen: SocketAddr,
    /// Connection slots per queue.
    pub(crate) max_conns: u32,
    /// Provided receive buffers (a power of two).
    pub(crate) rx_buffers: u16,
    /// Try 2 MiB pages for the arena.
    pub(crate) hugepages: bool,
    /// Where connections that open with a control frame go (none: they count as invalid).
    pub(crate) control: Option<Arc<peers::ControlHandoff>>,
    /// Multishot receive with or without bundles.
    pub(crate) recv: RecvMode,
    /// How the worker waits for completions.
    pub(crate) wait: super::TcpWait,
    /// With a secret: the key every connection's first record must prove its run with.
    pub(crate) data_key: Option<Arc<DataKey>>,
}

impl TcpSinkConfig {
    pub(super) fn layout(&self) -> BufRingLayout {
        BufRingLayout {
            entries: self.rx_buffers,
            buf_size: TCP_BUFFER_BYTES,
            order: BufOrder::ById,
        }
    }

    /// Where the response slots start in the arena (after the receive buffers).
    pub(super) fn response_base(&self) -> usize {
        self.layout().arena_bytes()
    }

    pub(super) fn arena_bytes(&self) -> usize {
        self.response_base() + self.max_conns as usize * respond::SLOT_BYTES
    }

    pub(super) fn ring_size(&self) -> RingSize {
        let sq = (self.max_conns + 8).next_power_of_two().clamp(64, 4096);
        RingSize {
            sq_entries: sq,
            cq_entries: (sq * 4).max(u32::from(self.rx_buffers) * 2),
        }
    }
}

/// A listening TCP socket for one queue (`SO_REUSEPORT`, so every queue binds the same port).
pub(crate) fn listener(listen: SocketAddr) -> Result<Socket, Error> {
    let socket = Socket::new(
        Domain::for_address(listen),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(|e| Error::io("socket(TCP)", e))?;
    socket
        .set_reuse_address(true)
        .and_then(|()| socket.set_reuse_port(true))
        .map_err(|e| Error::io("setsockopt SO_REUSEPORT", e))?;
    if listen.is_ipv6() {
        let _ = socket.set_only_v6(false);
    }
    socket.bind(&listen.into()).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => Error::Unsupported(format!(
            "cannot listen on TCP {listen}: address already in use by another program; pick another --listen port"
        )),
        std::io::ErrorKind::AddrNotAvailable => Error::Usage(format!(
            "cannot listen on {listen}: no local interface has that address"
        )),
        _ => Error::io(format!("bind {listen}"), e),
    })?;
    socket
        .listen(1024)
        .map_err(|e| Error::io(format!("listen {listen}"), e))?;
    Ok(socket)
}
