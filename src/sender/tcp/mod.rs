//! The TCP stream sender worker: `conns` connections per queue, each connected through its
//! ring, writing records of `size` bytes from its own slot of the registered arena.
//!
//! Each connection has at most one write in flight, so a short write is continued from where
//! the kernel stopped before anything else goes on that stream; its writes take its two send
//! buffers in turn (`buffers`: why two, and zero-copy notifications). A connection whose connect or
//! write fails is closed and reopened after a capped exponential backoff (10 ms doubling to
//! 1 s); connects, reconnects, connect failures and resets are counted. Sockets are created in
//! the loop only on reconnect (a `socket(2)` call; a failure is counted like a refused
//! connect). With the request/response pattern (`rr`) each record is a request and the
//! responses are read back through a multishot receive (see `rr`). The loop never allocates,
//! locks, logs or formats; counters are published to [`TcpSendShared`] every 10 ms and at the
//! end.

mod buffers;
mod config;
pub(crate) mod info;
mod rr;
mod run_loop;

pub(crate) use self::config::{TcpSendConfig, TcpSendOutcome, TcpSendShared, TxCounters};

use std::{os::fd::AsRawFd, sync::Arc};

use socket2::{Domain, Protocol, Socket, Type};

use self::buffers::{BufferTurn, SendBuffers, send_token, split_send_index};
use super::SendOp;
use crate::{
    clock,
    error::Error,
    mem::{Arena, limits},
    proto::record::{FLAG_PROOF, FLAG_REQUEST, RECORD_HEADER_LEN, RecordHeader, StreamParser},
    ring::{
        Completion, Engine, probe,
        token::{OpKind, Token},
    },
};

const PUBLISH_EVERY_NS: u64 = 10_000_000;
const MAX_SLEEP_NS: u64 = 5_000_000;
const BACKOFF_FIRST_NS: u64 = 10_000_000;
const BACKOFF_CAP_NS: u64 = 1_000_000_000;
/// How long a stopping sender waits for its writes in flight to finish.
const STOP_GRACE_NS: u64 = 2_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting to (re)connect at `retry_at`.
    Down,
    Connecting,
    Up,
}

#[derive(Debug)]
struct Conn {
    socket: Option<Socket>,
    state: State,
    generation: u32,
    flow: u16,
    next_seq: u64,
    ever_up: bool,
    backoff_ns: u64,
    retry_at: u64,
    /// Bytes of the current write, bytes of it done, and the records it carries.
    write_len: u32,
    written: u32,
    write_records: u64,
    /// rr: requests written or queued whose response has not arrived.
    outstanding: u32,
    /// Records of this connection the sink has acknowledged.
    acked: u64,
    /// Which send buffer the writes take, and the notifications each owes (kept across
    /// reconnects: a closed connection's zero-copy sends may still hold a buffer).
    turn: BufferTurn,
    /// rr: framing of the responses.
    parser: StreamParser,
}

/// A TCP sender worker, set up and ready to run on its thread.
pub(crate) struct TcpSendWorker {
    engine: Engine,
    conns: Vec<Conn>,
    config: TcpSendConfig,
    buffers: SendBuffers,
    shared: Arc<TcpSendShared>,
    counters: TxCounters,
    completions: Vec<Completion>,
    next_conn: usize,
    writing: usize,
    /// The run is over: writes are done and FINs sent; waiting for the last acknowledgements.
    draining: bool,
}

fn stream_socket(to: std::net::SocketAddr) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_tcp_nodelay(true)?;
    Ok(socket)
}

impl TcpSendWorker {
    /// Builds the worker on the calling (already pinned) thread.
    pub(crate) fn new(
        config: TcpSendConfig,
        node: u32,
        shared: Arc<TcpSendShared>,
    ) -> Result<Self, Error> {
        if config.size < RECORD_HEADER_LEN {
            return Err(Error::Usage(format!(
                "--size {} is smaller than the {RECORD_HEADER_LEN}-byte record header",
                config.size
            )));
        }
        let size = config.ring_size();
        limits::check_memlock(config.arena_bytes() as u64 + size.locked_bytes())?;
        let arena = Arena::allocate_on_node(config.arena_bytes(), node, config.hugepages)
            .map_err(|e| Error::Unsupported(e.to_string()))?;
        let send_ops = match config.op {
            SendOp::WriteFixed => probe::SEND_OPS,
            SendOp::SendZc => probe::SEND_ZC_OPS,
            SendOp::Send => probe::SEND_PLAIN_OPS,
        };
        let ops = [probe::TCP_CONNECT_OPS, send_ops].concat();
        let mut engine = Engine::new(size, arena, &ops, true, config.recv_layout())?;
        engine.set_connect_target(config.to);
        let conns = (0..config.conns)
            .map(|i| Conn {
                socket: None,
                state: State::Down,
                generation: 0,
                flow: config.first_flow.wrapping_add(i as u16),
                next_seq: 0,
                ever_up: false,
                backoff_ns: BACKOFF_FIRST_NS,
                retry_at: 0,
                write_len: 0,
                written: 0,
                write_records: 0,
                outstanding: 0,
                acked: 0,
                turn: BufferTurn::default(),
                parser: StreamParser::new(),
            })
            .collect();
        Ok(TcpSendWorker {
            engine,
            conns,
            buffers: config.send_buffers(),
            shared,
            counters: TxCounters::default(),
            completions: vec![Completion::default(); size.cq_entries as usize],
            next_conn: 0,
            writing: 0,
            draining: false,
            config,
        })
    }

    fn fd(&self, i: usize) -> i32 {
        self.conns[i].socket.as_ref().map_or(-1, |s| s.as_raw_fd())
    }

    /// Starts connects for every connection that is down and due.
    fn connect_due(&mut self, now: u64) {
        for i in 0..self.conns.len() {
            let c = &mut self.conns[i];
            if c.state != State::Down || c.retry_at > now {
                continue;
            }
            match stream_socket(self.config.to) {
                Ok(s) => c.socket = Some(s),
                Err(_) => {
                    self.counters.connect_failures += 1;
                    Self::back_off(c, now);
                    continue;
                }
            }
            c.generation = c.generation.wrapping_add(1);
            let token = Token::new(OpKind::Connect, c.generation, i as u32).user_data();
            let fd = self.fd(i);
            if !self.engine.push_connect(fd, token) {
                self.conns[i].socket = None;
                break;
            }
            self.conns[i].state = State::Connecting;
        }
    }

    fn back_off(c: &mut Conn, now: u64) {
        c.socket = None;
        c.state = State::Down;
        c.retry_at = now + c.backoff_ns;
        c.backoff_ns = (c.backoff_ns * 2).min(BACKOFF_CAP_NS);
    }

    /// Closes connection `i` after a failure and schedules its reconnect.
    fn fail(&mut self, i: usize, now: u64) {
        let fd = self.conns[i].socket.as_ref().map(|s| s.as_raw_fd());
        self.shared.fds.down(i, fd);
        let c = &mut self.conns[i];
        if c.state == State::Up {
            self.counters.conns_up = self.counters.conns_up.saturating_sub(1);
        }
        if c.write_len > 0 {
            self.writing -= 1;
        }
        c.write_len = 0;
        c.written = 0;
        c.write_records = 0;
        c.next_seq = 0;
        c.outstanding = 0;
        c.acked = 0;
        c.parser = StreamParser::new();
        c.generation = c.generation.wrapping_add(1);
        Self::back_off(c, now);
    }

    /// Stamps up to `budget` records into connection `i`'s slot and queues the write.
    fn start_write(&mut self, i: usize, budget: u64, now_real: u64) -> u64 {
        let room = match self.config.rr {
            Some(rr) => u64::from(rr.depth - self.conns[i].outstanding),
            None => self.config.records_per_write(),
        };
        let records = budget.min(room);
        let Some(buffer) = self.conns[i].turn.free().filter(|_| records > 0) else {
            return 0;
        };
        let len = records as usize * self.config.size;
        let offset = self.buffers.offset(i, buffer);
        let (size, epoch, proof) = (self.config.size, self.config.epoch, self.config.proof_token);
        let response = self.config.rr.map(|rr| rr.response as u32);
        let c = &mut self.conns[i];
        let fd = c.socket.as_ref().map_or(-1, |s| s.as_raw_fd());
        if let Some(bytes) = self.engine.arena_bytes_mut(offset, len) {
            for (k, record) in bytes.chunks_exact_mut(size).enumerate() {
                let seq = c.next_seq + k as u64;
                let flags = if response.is_some() { FLAG_REQUEST } else { 0 };
                // A connection's first record proves its run, with a secret (`proto::record`).
                let (flags, seq) = match proof {
                    Some(token) if seq == 0 => (flags | FLAG_PROOF, token),
                    _ => (flags, seq),
                };
                RecordHeader {
                    len: size as u32,
                    flags,
                    flow: c.flow,
                    epoch,
                    seq,
                    timestamp_ns: now_real,
                }
                .write(record);
                if let (Some(r), Some(word)) = (response, record.get_mut(32..36)) {
                    word.copy_from_slice(&r.to_be_bytes());
                }
            }
        }
        let token = send_token(c.generation, i, buffer);
        if !push_write(
            &mut self.engine,
            self.config.op,
            fd,
            offset,
            len as u32,
            token,
        ) {
            return 0;
        }
        let c = &mut self.conns[i];
        c.turn.begin(buffer);
        c.write_len = len as u32;
        c.written = 0;
        c.write_records = records;
        c.next_seq += records;
        if response.is_some() {
            c.outstanding += records as u32;
        }
        self.writing += 1;
        records
    }

    /// Queues writes on idle connections, round robin, within `budget` records.
    fn push_writes(&mut self, mut budget: u64, now_real: u64) -> u64 {
        let n = self.conns.len();
        let mut queued = 0;
        for step in 0..n {
            if budget == 0 {
                break;
            }
            let i = (self.next_conn + step) % n;
            let c = &self.conns[i];
            if c.state != State::Up || c.write_len != 0 {
                continue;
            }
            let records = self.start_write(i, budget, now_real);
            if records == 0 {
                continue;
            }
            budget -= records;
            queued += records;
            self.next_conn = (i + 1) % n;
        }
        queued
    }

    fn on_connect(&mut self, i: usize, result: i32, now: u64) {
        if result < 0 {
            self.counters.connect_failures += 1;
            let c = &mut self.conns[i];
            c.generation = c.generation.wrapping_add(1);
            Self::back_off(c, now);
            return;
        }
        let c = &mut self.conns[i];
        c.state = State::Up;
        if let Some(s) = c.socket.as_ref() {
            self.shared.fds.up(i, s.as_raw_fd());
        }
        c.backoff_ns = BACKOFF_FIRST_NS;
        let again = c.ever_up;
        c.ever_up = true;
        self.counters.connects += 1;
        self.counters.conns_up += 1;
        if again {
            self.counters.reconnects += 1;
        }
        self.arm_responses(i, now);
    }

    fn on_write(&mut self, i: usize, result: i32, now: u64) {
        if result <= 0 {
            let reset = matches!(-result, libc::ECONNRESET | libc::EPIPE) || result == 0;
            if reset {
                self.counters.resets += 1;
            } else {
                self.counters.send_errors += 1;
            }
            self.fail(i, now);
            return;
        }
        self.counters.tx_bytes += result as u64;
        let c = &mut self.conns[i];
        c.written += result as u32;
        if c.written < c.write_len {
            self.counters.short_writes += 1;
            let buffer = c.turn.current();
            let (offset, rest) = (
                self.buffers.offset(i, buffer) + c.written as usize,
                c.write_len - c.written,
            );
            let token = send_token(c.generation, i, buffer);
            let fd = self.fd(i);
            if !push_write(&mut self.engine, self.config.op, fd, offset, rest, token) {
                // The SQ is full: the stream cannot be continued in order, so it is reset.
                self.counters.send_errors += 1;
                self.fail(i, now);
            }
            return;
        }
        self.counters.tx_records += c.write_records;
        c.write_len = 0;
        c.write_records = 0;
        self.writing -= 1;
    }

    fn reap(&mut self) {
        let n = self.engine.reap(&mut self.completions);
        let now = clock::monotonic_ns();
        for k in 0..n {
            let cqe = self.completions[k];
            let Some(token) = Token::decode(cqe.user_data) else {
                continue;
            };
            let mut i = token.index as usize;
            if token.kind == OpKind::Send {
                let buffer;
                (i, buffer) = split_send_index(token.index);
                let notification = cqe.is_notification();
                if let Some(c) = self.conns.get_mut(i) {
                    c.turn.completed(buffer, cqe.more(), notification);
                }
                if notification {
                    continue;
                }
            }
            if i >= self.conns.len() || !token.is_generation(self.conns[i].generation) {
                // A late completion of a closed connection: only a response buffer matters.
                if let (OpKind::Recv, Some(bid)) = (token.kind, cqe.buffer_id()) {
                    self.engine.recycle_buffer(bid);
                }
                continue;
            }
            match token.kind {
                OpKind::Connect => self.on_connect(i, cqe.result, now),
                OpKind::Send => self.on_write(i, cqe.result, now),
                OpKind::Recv => self.on_responses(i, cqe, now),
                OpKind::Accept => {}
            }
        }
        if n > 0 {
            self.engine.publish_buffers();
        }
    }

    fn publish(&self) {
        self.shared.counters.publish(&self.counters);
    }

    fn outstanding(&self) -> u32 {
        self.conns.iter().map(|c| c.outstanding).sum()
    }
}

fn push_write(
    engine: &mut Engine,
    op: SendOp,
    fd: i32,
    offset: usize,
    len: u32,
    token: u64,
) -> bool {
    match op {
        SendOp::WriteFixed => engine.push_write_fixed(fd, offset, len, token),
        SendOp::SendZc => engine.push_send_zc_fixed(fd, offset, len, token),
        SendOp::Send => engine.push_send(fd, offset, len, token),
    }
}
