//! The TCP sink worker: one `SO_REUSEPORT` listener per queue, a multishot `ACCEPT` on it, and a
//! multishot `RECV` per connection into the queue's provided-buffer ring: recv bundles where the
//! kernel has them (a completion's bytes span consecutive buffers from the one it names, fed to
//! the parser in order and each recycled once), one buffer per completion otherwise (see
//! `recv_mode`).
//!
//! Every connection's bytes go through its [`StreamParser`]: complete in-sequence records count
//! as received (records, bytes, one-way latency corrected by its sender run's clock offset,
//! which the books set in the connection's slot; none yet: no sample, `latency_unknown`); a
//! record out of sequence counts as invalid
//! `sequence`; lost framing (bad magic, version or length) counts as invalid with its reason
//! and closes that connection; a stream that ends inside a record counts as `truncated`.
//! Connection slots are preallocated (`--max-conns` per queue); a connection beyond them is
//! closed at once and counted as refused. A request (request/response pattern) is answered
//! with the response it asks for, and a stream is acknowledged with the count of its records
//! this sink has counted (see `respond`), also once more when the stream ends or the sink
//! stops, so a sender knows what reached these books. A stopping sink counts nothing more,
//! sends its last acknowledgements (waiting at most 500 ms) and then closes. A connection's
//! first receive is a plain one: when its first bytes are a control frame rather than a record,
//! the connection goes to the control server (see `peers`), so the control channel shares the
//! data port. With a secret (`--secret-file`), a connection counts only from a first record
//! that proves its sender run (its token, `proto::record::FLAG_PROOF`) and only records of that
//! run; one that does not is closed uncounted, as invalid `auth`. Each connection's tally (its
//! sender run, records, bytes, invalid events, latency cells and their sums, records without a
//! sample, when its first record came) is published to its slot for the per-sender books (see
//! `books`). The loop never allocates, locks, logs or formats.

pub(crate) mod books;
mod config;
pub(crate) mod peers;
mod recv_mode;
mod respond;
mod wait;

pub(crate) use self::config::{
    RxCounters, TCP_BUFFER_BYTES, TCP_RX_BUFFERS, TcpSinkConfig, TcpSinkShared, listener,
};
pub(crate) use self::recv_mode::RecvMode;
pub(crate) use self::wait::TcpWait;

use std::{
    os::fd::{AsRawFd, OwnedFd},
    sync::Arc,
};

use socket2::Socket;

use crate::{
    clock,
    error::Error,
    mem::{Arena, PAGE_SIZE, Populate, limits},
    proto::{
        proof::DataKey,
        record::{Broken, Record, StreamParser},
    },
    ring::{
        Completion, Engine, Wait, probe,
        token::{OpKind, Token},
    },
    stats::latency_cell,
    worker::{Control, Job},
};

const PUBLISH_EVERY_NS: u64 = 10_000_000;
/// How long a stopping sink waits for its last acknowledgements to go out.
const STOP_GRACE_NS: u64 = 500_000_000;
/// Index of the listener in accept tokens.
const LISTENER: u32 = u32::MAX;

#[derive(Debug, Default)]
struct Conn {
    fd: Option<OwnedFd>,
    generation: u32,
    parser: StreamParser,
    /// Requests read and not yet answered.
    owed: respond::Owed,
    /// The response write in flight: bytes, bytes done, responses it carries (0 = none).
    reply_len: u32,
    reply_written: u32,
    reply_count: u32,
    /// Stream records counted on this connection, and the count last acknowledged (or being).
    counted: u64,
    acked: u64,
    /// The stream ended (or the sink stops): close once the last acknowledgement is out.
    close_after_reply: bool,
    /// No byte read yet: the first ones tell a record stream from a control connection.
    first: bool,
    /// The sender run on this connection and what it brought, for the per-sender books.
    tally: peers::ConnTally,
    /// With a secret: the run the connection's first record proved (none yet).
    proven: Option<u32>,
}

/// A TCP sink worker, set up and ready to run.
pub(crate) struct TcpSinkWorker {
    engine: Engine,
    listener: Socket,
    conns: Vec<Conn>,
    free: Vec<u32>,
    /// Closed slots whose final tally the books have not taken yet.
    unbooked: Vec<u32>,
    control: Option<Arc<peers::ControlHandoff>>,
    response_base: usize,
    /// Multishot receives take recv bundles.
    bundles: bool,
    stopping: bool,
    shared: Arc<TcpSinkShared>,
    counters: RxCounters,
    completions: Vec<Completion>,
    /// How the loop waits for completions (`--rx-wait`).
    wait: TcpWait,
    /// With a secret: the key a connection's first record must prove its run with.
    data_key: Option<Arc<DataKey>>,
}

impl TcpSinkWorker {
    /// Builds the worker on the calling (already pinned) thread.
    pub(crate) fn new(
        config: TcpSinkConfig,
        node: u32,
        shared: Arc<TcpSinkShared>,
    ) -> Result<Self, Error> {
        let layout = config.layout();
        let size = config.ring_size();
        limits::check_memlock(layout.ring_bytes() as u64 + size.locked_bytes())?;
        // Fault in the entry ring and the first page of each buffer now, the rest on first use.
        let populate = Populate::Strided {
            head: layout.ring_bytes(),
            stride: TCP_BUFFER_BYTES as usize,
            touch: PAGE_SIZE,
        };
        let arena =
            Arena::allocate_on_node_with(config.arena_bytes(), node, config.hugepages, populate)
                .map_err(|e| Error::Unsupported(e.to_string()))?;
        let mut engine = Engine::new(size, arena, probe::TCP_SINK_OPS, false, Some(layout))?;
        let bundles = config.recv == RecvMode::Bundle;
        if bundles && !engine.has_recv_bundles() {
            return Err(Error::Unsupported(
                "this ring has no recv bundles (Linux 6.10)".into(),
            ));
        }
        let listener = listener(config.listen)?;
        let accept = Token::new(OpKind::Accept, 0, LISTENER).user_data();
        if !engine.push_accept_multi(listener.as_raw_fd(), accept) {
            return Err(Error::Unsupported(
                "cannot queue the multishot accept".into(),
            ));
        }
        engine
            .submit(Wait::Nothing)
            .map_err(|e| Error::io("io_uring_enter (arm multishot accept)", e))?;
        Ok(TcpSinkWorker {
            engine,
            listener,
            conns: (0..config.max_conns).map(|_| Conn::default()).collect(),
            free: (0..config.max_conns).rev().collect(),
            unbooked: Vec::with_capacity(config.max_conns as usize),
            control: config.control.clone(),
            data_key: config.data_key.clone(),
            response_base: config.response_base(),
            wait: config.wait,
            bundles,
            stopping: false,
            shared,
            counters: RxCounters::default(),
            completions: vec![Completion::default(); size.cq_entries as usize],
        })
    }

    fn on_accept(&mut self, accepted: Option<OwnedFd>, more: bool) {
        if let Some(fd) = accepted {
            match self.free.pop() {
                None => {
                    self.counters.accepts += 1;
                    self.counters.refused += 1;
                    drop(fd);
                }
                Some(i) => {
                    let c = &mut self.conns[i as usize];
                    c.generation = c.generation.wrapping_add(1);
                    c.parser = StreamParser::new();
                    c.owed = respond::Owed::default();
                    (c.reply_len, c.reply_written, c.reply_count) = (0, 0, 0);
                    (c.counted, c.acked, c.close_after_reply) = (0, 0, false);
                    (c.first, c.tally, c.proven) = (true, peers::ConnTally::default(), None);
                    self.shared.slots[i as usize].open();
                    c.fd = Some(fd);
                    self.counters.conns_open += 1;
                    self.rearm(i as usize);
                }
            }
        }
        if !more {
            let accept = Token::new(OpKind::Accept, 0, LISTENER).user_data();
            self.engine
                .push_accept_multi(self.listener.as_raw_fd(), accept);
        }
    }

    fn close(&mut self, i: usize) {
        if let Some(fd) = self.conns[i].fd.take() {
            // Shut down first: the armed receive holds the socket open until it completes.
            let _ = nix::sys::socket::shutdown(fd.as_raw_fd(), nix::sys::socket::Shutdown::Both);
            drop(fd);
            self.counters.conns_closed += 1;
            self.release(i);
        }
    }

    /// Ends slot `i`'s connection in the books; the slot is reused once they took its tally.
    fn release(&mut self, i: usize) {
        let c = &mut self.conns[i];
        c.generation = c.generation.wrapping_add(1);
        self.shared.slots[i].close(&c.tally);
        self.unbooked.push(i as u32);
        self.counters.conns_open = self.counters.conns_open.saturating_sub(1);
    }

    /// Gives slot `i`'s connection, which opened with a control frame, to the control server.
    fn hand_off(&mut self, i: usize, bid: u16, len: usize) {
        if let (Some(fd), Some(control)) = (self.conns[i].fd.take(), &self.control) {
            let first = &self.engine.received_buffer(bid)[..len];
            let handed = control.hand(fd, first);
            if handed {
                self.counters.control_conns += 1;
            } else {
                self.counters.refused += 1;
            }
            self.release(i);
        }
        self.engine.recycle_received(bid, len as i32);
    }

    fn broken(&mut self, i: usize, why: Broken) {
        self.counters.rx_invalid += 1;
        self.conns[i].tally.invalid += 1;
        let reason = match why {
            Broken::Magic => &mut self.counters.invalid_magic,
            Broken::Version => &mut self.counters.invalid_version,
            Broken::Length => &mut self.counters.invalid_length,
            Broken::Truncated => &mut self.counters.invalid_truncated,
        };
        *reason += 1;
        self.close(i);
    }

    fn on_recv(&mut self, i: usize, c: Completion, now_real: u64) {
        let bid = c.buffer_id();
        if -c.result != libc::ENOBUFS && std::mem::take(&mut self.conns[i].first) {
            if let Some(bid) = bid
                && c.result > 0
                && self.control.is_some()
                && peers::is_control(&self.engine.received_buffer(bid)[..c.result as usize])
            {
                return self.hand_off(i, bid, c.result as usize);
            }
            self.counters.accepts += 1;
        }
        if c.result > 0
            && let Some(bid) = bid
        {
            let len = c.result as usize;
            let conn = &mut self.conns[i];
            let counters = &mut self.counters;
            let slot = &self.shared.slots[i];
            let clocks = &self.shared.clocks;
            // The table is read at most once per run per completion, not per record: a run
            // whose clock stays unknown (no control channel) costs one scan per read.
            let mut from_table: Option<(u32, Option<i64>)> = None;
            let (parser, owed, counted) = (&mut conn.parser, &mut conn.owed, &mut conn.counted);
            let (tally, proven) = (&mut conn.tally, &mut conn.proven);
            let key = self.data_key.as_deref();
            let (mut overflow, mut unproven) = (false, false);
            let mut on_record = |r: Record| {
                // With a secret, a connection counts only from a first record that proves its
                // run, and only records of that run (`proto::record::FLAG_PROOF`); the first
                // that does not closes it, uncounted.
                if let Some(key) = key {
                    let epoch = r.header.epoch;
                    if unproven
                        || proven.map_or_else(
                            || r.proof.is_none_or(|t| t ^ key.token(epoch) != 0),
                            |e| e != epoch,
                        )
                    {
                        unproven = true;
                        return;
                    }
                    *proven = Some(epoch);
                }
                if r.response_len > 0 {
                    overflow |= !owed.push(&r);
                } else if r.in_sequence {
                    *counted += 1;
                }
                tally.epoch = r.header.epoch;
                if r.in_sequence {
                    if tally.first_ns == 0 {
                        tally.first_ns = now_real;
                    }
                    counters.rx_records += 1;
                    counters.rx_bytes += u64::from(r.header.len);
                    tally.records += 1;
                    tally.bytes += u64::from(r.header.len);
                    let epoch = r.header.epoch;
                    let correction = slot.correction(epoch).or_else(|| match from_table {
                        Some((e, c)) if e == epoch => c,
                        _ => {
                            let c = clocks.correction(epoch);
                            from_table = Some((epoch, c));
                            c
                        }
                    });
                    match correction {
                        Some(correction) => {
                            let transit = i128::from(now_real)
                                - i128::from(r.header.timestamp_ns)
                                - i128::from(correction);
                            let ns = transit.clamp(0, i128::from(u64::MAX)) as u64;
                            let cell = latency_cell(ns);
                            counters.latency_cells[cell] += 1;
                            tally.latency_cells[cell] += 1;
                            tally.latency_sum_ns[cell] =
                                tally.latency_sum_ns[cell].saturating_add(ns);
                            if transit < 0 {
                                counters.latency_clamped += 1;
                                tally.latency_clamped += 1;
                            }
                        }
                        None => {
                            counters.latency_unknown += 1;
                            tally.latency_unknown += 1;
                        }
                    }
                } else {
                    counters.rx_invalid += 1;
                    counters.invalid_sequence += 1;
                    tally.invalid += 1;
                }
            };
            let fed = self
                .engine
                .received_bytes(bid, len)
                .try_for_each(|data| parser.feed(data, &mut on_record));
            self.engine.recycle_received(bid, c.result);
            if unproven {
                self.counters.rx_invalid += 1;
                self.counters.invalid_auth += 1;
                self.conns[i].tally.invalid += 1;
                self.close(i);
                return;
            }
            if let Err(why) = fed {
                self.broken(i, why);
                return;
            }
            if overflow {
                self.counters.rx_invalid += 1;
                self.conns[i].tally.invalid += 1;
                self.counters.invalid_depth += 1;
                self.close(i);
                return;
            }
            self.reply(i, false);
        } else if let Some(bid) = bid {
            self.engine.recycle_received(bid, c.result);
        }
        match c.result {
            r if r > 0 && !c.more() => self.rearm(i),
            r if r > 0 => {}
            0 => {
                if self.conns[i].parser.at_boundary() {
                    self.conns[i].close_after_reply = true;
                    self.reply(i, false);
                } else {
                    self.broken(i, Broken::Truncated);
                }
            }
            r if -r == libc::ENOBUFS => {
                self.counters.buffer_stalls += 1;
                self.rearm(i);
            }
            _ => {
                self.counters.resets += 1;
                if self.conns[i].parser.at_boundary() {
                    self.close(i);
                } else {
                    self.broken(i, Broken::Truncated);
                }
            }
        }
    }

    /// Arms connection `i`'s receive: one plain receive until its first bytes were seen,
    /// then a multishot one.
    fn rearm(&mut self, i: usize) {
        let c = &self.conns[i];
        if let Some(fd) = c.fd.as_ref() {
            let token = Token::new(OpKind::Recv, c.generation, i as u32).user_data();
            let raw = fd.as_raw_fd();
            let armed = if c.first {
                self.engine.push_recv_once(raw, token)
            } else if self.bundles {
                self.engine.push_recv_multi_bundle(raw, token)
            } else {
                self.engine.push_recv_multi(raw, token)
            };
            if !armed {
                self.close(i);
            }
        }
    }

    fn reap(&mut self) -> usize {
        let n = self.engine.reap(&mut self.completions);
        let now_real = clock::sink_realtime_ns();
        for k in 0..n {
            let c = self.completions[k];
            let Some(token) = Token::decode(c.user_data) else {
                continue;
            };
            match token.kind {
                OpKind::Accept => self.on_accept(c.accepted_fd(), c.more()),
                OpKind::Recv => {
                    let i = token.index as usize;
                    let current = self
                        .conns
                        .get(i)
                        .is_some_and(|s| s.fd.is_some() && token.is_generation(s.generation));
                    if current && !self.stopping {
                        self.on_recv(i, c, now_real);
                    } else if let Some(bid) = c.buffer_id() {
                        // A late completion of a closed connection: only its buffers matter.
                        self.engine.recycle_received(bid, c.result);
                    }
                }
                OpKind::Send => {
                    let i = token.index as usize;
                    let current = self
                        .conns
                        .get(i)
                        .is_some_and(|s| s.fd.is_some() && token.is_generation(s.generation));
                    if current {
                        self.on_reply(i, c.result);
                    }
                }
                OpKind::Connect => {}
            }
        }
        if n > 0 {
            self.engine.publish_buffers();
        }
        n
    }

    /// Stops counting and sends every open stream its last acknowledgement.
    fn stop(&mut self) {
        self.stopping = true;
        for i in 0..self.conns.len() {
            if self.conns[i].fd.is_some() {
                self.conns[i].close_after_reply = true;
                self.reply(i, false);
            }
        }
    }

    fn publish(&mut self) {
        self.shared.counters.publish(&self.counters);
        for (c, slot) in self.conns.iter().zip(&self.shared.slots) {
            if c.fd.is_some() {
                slot.publish(&c.tally);
            }
        }
        let (slots, free) = (&self.shared.slots, &mut self.free);
        self.unbooked.retain(|&i| {
            let booked = slots[i as usize].is_free();
            if booked {
                free.push(i);
            }
            !booked
        });
    }
}

/// What a TCP sink worker reports when it ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TcpSinkOutcome {
    /// A fatal ring error ended the worker early.
    pub(crate) ring_failed: bool,
}

impl crate::worker::Outcome for TcpSinkOutcome {
    fn ring_failed(&self) -> bool {
        self.ring_failed
    }

    /// A TCP sink's active span is the reporter's (the ticks at which its byte count moved).
    fn span(&self) -> Option<(u64, u64)> {
        None
    }
}

impl Job for TcpSinkWorker {
    type Output = TcpSinkOutcome;

    fn arena(&self) -> &crate::mem::Arena {
        self.engine.arena()
    }

    fn run(mut self, control: &Control) -> TcpSinkOutcome {
        let mut last_publish = clock::monotonic_ns();
        let mut stop_at = None;
        let mut ring_failed = false;
        // When a reap last found completions (the default wait polls while they keep coming).
        let mut last_busy = 0;
        loop {
            let now = clock::monotonic_ns();
            let open = self.counters.conns_open;
            if control.drain_requested() && open == 0 {
                break;
            }
            if control.stop_requested() && stop_at.is_none() {
                stop_at = Some(now);
                self.stop();
            }
            if stop_at.is_some_and(|at| open == 0 || now - at > STOP_GRACE_NS) {
                break;
            }
            let wait = self.wait.wait(now.saturating_sub(last_busy));
            if self.engine.submit(wait).is_err() {
                ring_failed = true;
                break;
            }
            if self.reap() > 0 {
                last_busy = now;
            } else if wait == Wait::Poll {
                // An empty poll gives the core away to whatever else is runnable on it (a
                // sender or another queue pinned there); alone on its core it returns at once.
                std::thread::yield_now();
            }
            if now - last_publish >= PUBLISH_EVERY_NS {
                self.acknowledge_streams();
                self.publish();
                last_publish = now;
            }
        }
        self.publish();
        TcpSinkOutcome { ring_failed }
    }
}
