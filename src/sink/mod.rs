//! The sink worker: one `SO_REUSEPORT` socket and one ring per queue, a single multishot
//! `RECVMSG` over a provided-buffer ring in the worker's node-local arena, re-armed whenever the
//! kernel ends it (buffer ring empty, CQ overflow, error). Everything the kernel reads or writes
//! for a receive lies in that arena: the buffer ring, then the receive `msghdr`s with their
//! address and control buffers (`recv_memory`, which owns that layout).
//!
//! Buffers go back to the ring as they are counted, and about 4 MiB of received data stays in
//! circulation (`circulation`), so full GRO buffers keep the kernel's copies in cache.
//!
//! Every packet's header is checked; GRO buffers are split at the `UDP_GRO` segment size and
//! each segment is counted on its own. While traffic flows the worker either waits for a batch
//! of completions (default) or spins on the completion queue, so the sending core (which runs
//! the loopback receive path) rarely pays for waking it; when traffic is slow it sleeps until
//! the next completion. `--rx-wait inline` (`inline`) receives without a multishot instead.
//! One-way latency is taken by the books, corrected by the clock offset of the packet's session
//! (`books`): a packet whose sender run has no clock estimate gives no sample and counts as
//! `latency_unknown`. The loop never allocates, locks, logs or calls metrics.

mod answer;
pub mod books;
mod circulation;
pub(crate) mod figure_pool;
mod inline;
pub mod mailbox;
mod recv_memory;
pub(crate) mod registry;
mod run_loop;
pub(crate) mod senders;
pub(crate) mod sizes;
pub(crate) mod tcp;

pub(crate) use run_loop::RxWait;

use std::{os::fd::AsRawFd, sync::Arc, time::Duration};

use hdrhistogram::Histogram;
use socket2::Socket;

use self::{
    answer::Answers,
    books::{Admission, Books, LatencySample, Packet, Refused},
    circulation::Circulation,
    figure_pool::FigurePool,
    mailbox::{Mailbox, SessionKey},
    recv_memory::{
        INLINE_BATCH, RECV_CONTROL_LEN, RECV_NAME_LEN, RECVMSG_OUT_LEN, RecvMemory, parse_multishot,
    },
};
use crate::{
    clock,
    error::Error,
    mem::{Arena, PAGE_SIZE, Populate, limits},
    net,
    proto::{exchange, header, proof::Proof},
    ring::{BufOrder, BufRingLayout, Completion, Engine, RingSize, Wait, probe},
    stats::{SharedRxFlow, SharedWorkerCounters, WorkerCounters, errno_class},
};

const USER_DATA_RECV: u64 = 1;
/// Index of the `short` reason in `WorkerCounters::invalid`.
const INVALID_SHORT: usize = 0;
/// Index of the `flow_id` reason in `WorkerCounters::invalid`.
const INVALID_FLOW_ID: usize = 3;
/// Index of the `table_full` reason in `WorkerCounters::invalid`.
pub(crate) const INVALID_TABLE_FULL: usize = 4;
/// Index of the `unannounced` reason in `WorkerCounters::invalid`.
pub(crate) const INVALID_UNANNOUNCED: usize = 5;
/// Index of the `source` reason in `WorkerCounters::invalid`.
const INVALID_SOURCE: usize = 6;
/// Index of the `implausible` reason in `WorkerCounters::invalid`.
const INVALID_IMPLAUSIBLE: usize = 7;
/// Index of the `auth` reason in `WorkerCounters::invalid`: a proven run's datagram without
/// its proof.
const INVALID_AUTH: usize = 8;
/// Everything one sink worker needs, resolved before start.
#[derive(Clone, Debug)]
pub(crate) struct SinkConfig {
    /// Address to listen on (shared by all queues).
    pub(crate) listen: std::net::SocketAddr,
    /// Ask the kernel for `UDP_GRO`.
    pub(crate) gro: bool,
    /// Where each datagram's arrival time comes from (already what the kernel grants).
    pub(crate) arrival: crate::timestamps::Arrival,
    /// How the worker waits for completions while traffic flows.
    pub(crate) wait: RxWait,
    /// Provided buffers per worker (a power of two).
    pub(crate) buffers: u16,
    /// Flow ids `0..max_flows` are tracked.
    pub(crate) max_flows: usize,
    /// Sessions (sender, epoch, flow) one worker's table holds.
    pub(crate) max_sessions: usize,
    /// Which of them sessions opened by data alone (no hello) may take.
    pub(crate) admission: Admission,
    /// A session without packets for this long is closed and its slot reused.
    pub(crate) session_idle: Duration,
    /// Stop after this long.
    pub(crate) duration: Option<Duration>,
    /// Try 2 MiB pages for the arena.
    pub(crate) hugepages: bool,
    /// `--steer flow` was asked for.
    pub(crate) steer_by_flow: bool,
    /// Steer datagrams over this many queues by flow (`net::steer`); `None`: the kernel's hash.
    /// Set by `run::roles::start_sinks`, which knows the queue count and whether the port is
    /// shared (another process's sockets in the group would get no traffic).
    pub(crate) steer_queues: Option<u32>,
    /// The size classes, shared by every queue of this sink.
    pub(crate) sizes: Arc<sizes::SizeTable>,
}

/// Catches `books` up with `socket`'s kernel drop counter, last seen as `last_drops`.
fn catch_up_drops(socket: &Socket, last_drops: &mut u32, books: &mut Books) {
    if let Some(total) = net::socket_drops(socket) {
        let new = (total as u32).wrapping_sub(*last_drops);
        if new != 0 && new < 1 << 31 {
            *last_drops = total as u32;
            books.add_kernel_drops(u64::from(new));
        }
    }
}

/// Bytes of one provided buffer: a full 64 KiB datagram plus the recvmsg header and control.
const BUFFER_BYTES: u32 = 65536 + (RECVMSG_OUT_LEN + RECV_NAME_LEN + RECV_CONTROL_LEN) as u32;

/// Requests one receive buffer held, copied out so the buffer can go back before the answers.
struct Requests {
    /// The source's socket address as the kernel wrote it.
    name: [u8; 64],
    name_len: usize,
    /// Each request's header and bytes 32..40 (echoed), and the response length it asks for
    /// (`None`: out of range).
    items: [([u8; exchange::ECHO_AT.end], Option<u16>); Requests::MAX],
    len: usize,
    /// Requests beyond [`Requests::MAX`] (a GRO buffer holds at most 64 datagrams).
    overflow: u64,
}

impl Requests {
    const MAX: usize = 64;

    fn new(name: &[u8]) -> Requests {
        let mut r = Requests {
            name: [0; 64],
            name_len: 0,
            items: [([0; exchange::ECHO_AT.end], None); Requests::MAX],
            len: 0,
            overflow: 0,
        };
        if let Some(to) = r.name.get_mut(..name.len()) {
            to.copy_from_slice(name);
            r.name_len = name.len();
        }
        r
    }

    /// Copies request `datagram` out; its answer is no longer than `cap` bytes when given.
    fn push(&mut self, datagram: &[u8], cap: Option<usize>) {
        let Some(item) = self.items.get_mut(self.len) else {
            self.overflow += 1;
            return;
        };
        // The bytes a response echoes, as far as the request has them (one too short to name
        // a response gets none: `response_len`).
        let n = datagram.len().min(exchange::ECHO_AT.end);
        item.0 = [0; exchange::ECHO_AT.end];
        item.0[..n].copy_from_slice(&datagram[..n]);
        item.1 = exchange::response_len(datagram).map(|l| l.min(cap.unwrap_or(l)) as u16);
        self.len += 1;
    }
}

/// Equal latency samples in a row, recorded into the histogram at once.
#[derive(Default)]
struct LatencyRun {
    delay: u64,
    count: u64,
}

impl LatencyRun {
    /// Adds one sample; a different delay first records the run so far.
    fn add(&mut self, delay: u64, histogram: &mut Histogram<u64>) {
        if delay != self.delay {
            self.flush(histogram);
            self.delay = delay;
        }
        self.count += 1;
    }

    /// Records the run so far.
    fn flush(&mut self, histogram: &mut Histogram<u64>) {
        if self.count > 0 {
            histogram.saturating_record_n(self.delay, self.count);
            self.count = 0;
        }
    }
}

/// Counters a sink shares with the reporter.
#[derive(Debug)]
pub(crate) struct SinkShared {
    /// Per flow id.
    pub(crate) flows: Vec<SharedRxFlow>,
    /// Engine and sink counters.
    pub(crate) worker: SharedWorkerCounters,
    /// What senders say to this worker, what it answers, and its published sessions.
    pub(crate) mailbox: Mailbox,
    /// Latency and jitter figures per sender run (none until `with_figure_slots`).
    pub(crate) figures: Arc<FigurePool>,
}

impl SinkShared {
    /// Shared counters for `max_flows` flows and `max_sessions` sessions.
    pub(crate) fn new(max_flows: usize, max_sessions: usize) -> SinkShared {
        SinkShared {
            flows: (0..max_flows).map(|_| SharedRxFlow::default()).collect(),
            worker: SharedWorkerCounters::default(),
            mailbox: Mailbox::new(max_sessions),
            figures: Arc::default(),
        }
    }

    /// The same counters with a figure pool of `slots` sender runs.
    pub(crate) fn with_figure_slots(mut self, slots: usize) -> SinkShared {
        self.figures = Arc::new(FigurePool::new(slots));
        self
    }
}

/// What a sink reports when it ends.
#[derive(Debug)]
pub(crate) struct SinkOutcome {
    /// Monotonic ns of the first and last valid packet, if any arrived.
    pub(crate) active: Option<(u64, u64)>,
    /// Corrected one-way latency of every valid packet with a sample, in ns.
    pub(crate) latency: Histogram<u64>,
    /// Per received buffer with a kernel receive stamp: from the stamp to the worker's read,
    /// in ns (empty without stamps: unknown).
    pub(crate) queueing: Histogram<u64>,
    /// A fatal ring error ended the run early.
    pub(crate) ring_failed: bool,
    /// How long the worker's loop ran, in ns.
    pub(crate) loop_ns: u64,
    /// What the host gave the worker over its loop; `None`: unknown.
    pub(crate) time: Option<crate::host_time::ThreadTime>,
}

impl crate::worker::Outcome for SinkOutcome {
    fn ring_failed(&self) -> bool {
        self.ring_failed
    }

    fn span(&self) -> Option<(u64, u64)> {
        self.active
    }
}

/// A sink worker, set up and ready to run on its thread.
pub(crate) struct SinkWorker {
    engine: Engine,
    socket: Socket,
    config: SinkConfig,
    shared: Arc<SinkShared>,
    books: Books,
    counters: WorkerCounters,
    completions: Vec<Completion>,
    latency: Histogram<u64>,
    /// Kernel receive stamp to read, per stamped buffer (ns).
    queueing: Histogram<u64>,
    last_drops: u32,
    first_packet_ns: u64,
    last_packet_ns: u64,
    inline: inline::InlineState,
    recv: RecvMemory,
    circulation: Circulation,
    /// Responses to UDP requests in flight.
    answers: Answers,
    /// Monotonic ns of the last answer queued (0: none yet).
    last_answer_ns: u64,
}

fn layout(config: &SinkConfig) -> BufRingLayout {
    BufRingLayout {
        entries: config.buffers,
        buf_size: BUFFER_BYTES,
        order: BufOrder::AsReturned,
    }
}

/// The receive `msghdr`s and their buffers, after the buffer ring.
fn recv_memory(config: &SinkConfig) -> RecvMemory {
    RecvMemory::plan(layout(config).arena_bytes(), config.wait.receives_inline())
}

fn ring_size(config: &SinkConfig) -> RingSize {
    RingSize {
        // Room for the receives and a GRO buffer's worth of answers.
        sq_entries: if config.wait.receives_inline() {
            2 * INLINE_BATCH as u32 + 64
        } else {
            64
        },
        cq_entries: u32::from(config.buffers) * 4 + 256,
    }
}

impl SinkWorker {
    /// Bytes of packet memory one worker gives the kernel: its buffer ring and receive memory.
    pub(crate) fn arena_bytes(config: &SinkConfig) -> u64 {
        (recv_memory(config).end() + Answers::ARENA_BYTES) as u64
    }

    /// Bytes of locked memory one worker pins (buffer-ring entries plus the ring).
    pub(crate) fn locked_bytes(config: &SinkConfig) -> u64 {
        layout(config).ring_bytes() as u64 + ring_size(config).locked_bytes()
    }

    /// Builds the worker on the calling (already pinned) thread.
    pub(crate) fn new(
        config: SinkConfig,
        node: u32,
        shared: Arc<SinkShared>,
    ) -> Result<Self, Error> {
        limits::check_memlock(Self::locked_bytes(&config))?;
        let layout = layout(&config);
        let recv = recv_memory(&config);
        // The kernel writes into the receive buffers and never pins them: fault in the entry
        // ring and the first page of every buffer now, the rest on first use (`mem::Populate`);
        // `RecvMemory::reserve` faults in the receive memory after the buffers.
        let populate = Populate::Strided {
            head: layout.ring_bytes(),
            stride: BUFFER_BYTES as usize,
            touch: PAGE_SIZE,
        };
        let arena = Arena::allocate_on_node_with(
            recv.end() + Answers::ARENA_BYTES,
            node,
            config.hugepages,
            populate,
        )
        .map_err(|e| Error::Unsupported(e.to_string()))?;
        let mut engine = Engine::new(
            ring_size(&config),
            arena,
            probe::SINK_OPS,
            false,
            Some(layout),
        )?;
        recv.reserve(&mut engine)?;
        let answers = Answers::new(&mut engine, recv.end())?;
        let socket = net::sink_socket(
            config.listen,
            net::SinkSocketOptions {
                gro: config.gro,
                reuse_port: true,
                receive_stamps: config.arrival == crate::timestamps::Arrival::Kernel,
            },
        )?;
        if let Some(queues) = config.steer_queues {
            net::steer::attach(&socket, queues)?;
        }
        if !config.wait.receives_inline()
            && !recv.push_multishot(&mut engine, socket.as_raw_fd(), USER_DATA_RECV)
        {
            return Err(Error::Unsupported(
                "cannot queue the first multishot receive".into(),
            ));
        }
        engine
            .submit(Wait::Nothing)
            .map_err(|e| Error::io("io_uring_enter (arm multishot receive)", e))?;
        let latency = Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
            .map_err(|e| Error::Usage(format!("latency histogram: {e}")))?;
        let queueing = latency.clone();
        Ok(SinkWorker {
            engine,
            socket,
            books: Books::new(config.max_sessions, config.max_flows, config.gro)
                .with_admission(config.admission)
                .with_figures(shared.figures.clone()),
            completions: vec![Completion::default(); ring_size(&config).cq_entries as usize],
            counters: WorkerCounters::default(),
            latency,
            queueing,
            last_drops: 0,
            first_packet_ns: 0,
            last_packet_ns: 0,
            inline: inline::InlineState::default(),
            recv,
            circulation: Circulation::new(config.buffers),
            answers,
            last_answer_ns: 0,
            shared,
            config,
        })
    }

    /// Counts the datagram(s) in provided buffer `bid`, `len` bytes long: a multishot
    /// receive's output (`inline_slot` None) or the payload of an inline receive whose name and
    /// control bytes are in its slot.
    fn process(
        &mut self,
        bid: u16,
        len: usize,
        inline_slot: Option<usize>,
        now_real: u64,
        now_ns: u64,
    ) -> bool {
        let buffer = self.engine.received_buffer(bid);
        let Some(buffer) = buffer.get(..len) else {
            return false;
        };
        let out;
        let (control_bytes, name_bytes, payload) = match inline_slot {
            None => {
                out = match parse_multishot(buffer) {
                    Some(out) => out,
                    None => {
                        self.counters.invalid[INVALID_SHORT] += 1;
                        return false;
                    }
                };
                (out.control_data(), out.name_data(), out.payload_data())
            }
            Some(slot) => match self.recv.inline_meta(&self.engine, slot) {
                Some(meta) => (meta.control, meta.name, buffer),
                None => return false,
            },
        };
        let control = net::cmsg::parse(control_bytes);
        // The kernel's receive stamp is the arrival, so the time a datagram waited for this
        // worker is not network latency; that wait is this queue's queueing delay. Without a
        // stamp the arrival is when the worker reaped it, and the wait is unknown.
        let now_real = match control.stamp_ns {
            Some(stamp) => {
                let arrival = clock::on_sink_clock(stamp);
                self.queueing
                    .saturating_record(now_real.saturating_sub(arrival).max(1));
                arrival
            }
            None => now_real,
        };
        // The socket's drop count when the kernel queued this datagram (no cmsg: none yet).
        let queued_drops = control.drops.unwrap_or(0);
        let new = queued_drops.wrapping_sub(self.last_drops);
        if new < 1 << 31 {
            self.last_drops = queued_drops;
            self.books.add_kernel_drops(u64::from(new));
        }
        let source = net::cmsg::parse_source(name_bytes);
        if payload.is_empty() {
            // A zero-length datagram: `chunks` would yield nothing.
            self.counters.invalid[INVALID_SHORT] += 1;
            return false;
        }
        let segment = control
            .gro_segment
            .map_or(payload.len(), usize::from)
            .max(1);
        let mut valid = false;
        self.books
            .set_announcements_waiting(!self.shared.mailbox.inbox.is_empty());
        // Every segment but maybe the last has the segment's length, so its size class is looked
        // up once, at the first valid one (a length claims a class only from a valid datagram);
        // the segments of one send share a timestamp, so their equal delays go into the
        // histogram as one run.
        let full_len = segment.min(payload.len());
        let mut full_class = None;
        let mut run = LatencyRun::default();
        // Requests counted in this buffer, answered once the buffer is no longer borrowed (set
        // up at the first one: a stream's buffers pay nothing for it).
        let mut requests: Option<Requests> = None;
        for datagram in payload.chunks(segment) {
            let (h, form) = match header::parse_any(datagram) {
                Ok(h) => h,
                Err(reason) => {
                    self.counters.invalid[reason as usize] += 1;
                    continue;
                }
            };
            let compact = form == header::Form::Compact;
            let mut packet = Packet {
                key: SessionKey {
                    epoch: h.epoch,
                    flow: h.flow,
                },
                seq: h.seq,
                failed32: h.failed,
                bytes: datagram.len() as u64,
                source,
                now_ns,
                now_real_ns: now_real,
                sent_ns: h.timestamp_ns,
                compact,
                proof: Proof::read(datagram, (!compact).then_some(h.flags)),
                size_class: if datagram.len() == full_len {
                    *full_class.get_or_insert_with(|| self.config.sizes.class_of(full_len))
                } else {
                    self.config.sizes.class_of(datagram.len())
                },
                // A datagram queued before the last `/proc` read carries an older count.
                drops_behind: u64::from(self.last_drops.wrapping_sub(queued_drops)),
            };
            let mut booked = self.books.record(packet);
            if matches!(booked, Err(Refused::Unannounced | Refused::TableFull))
                && !self.shared.mailbox.inbox.is_empty()
            {
                // Its sender's hello may wait in the inbox (drained at the publish cadence):
                // apply what senders said, then look again.
                // The catch-up moves the books' count past this datagram's: it is as far
                // behind as the count read now (or its session would open marked after drops
                // that came after it, and a dropped tail would be booked lost).
                catch_up_drops(&self.socket, &mut self.last_drops, &mut self.books);
                packet.drops_behind = u64::from(self.last_drops.wrapping_sub(queued_drops));
                while let Some(message) = self.shared.mailbox.inbox.pop() {
                    self.books.apply(message, &self.shared.mailbox, now_ns);
                }
                self.books.set_announcements_waiting(false);
                booked = self.books.record(packet);
            }
            if matches!(
                booked,
                Err(Refused::FlowId | Refused::TableFull | Refused::Unannounced)
            ) {
                // Its run's own datagrams may be among these; a datagram refused for its source
                // or as implausible is no sender's, so it says nothing of any run.
                self.books.note_refusal(packet.key, now_ns);
            }
            match booked {
                Ok(sample) => {
                    valid = true;
                    if h.flags & exchange::FLAG_REQUEST != 0
                        && !compact
                        && sample != LatencySample::Duplicate
                    {
                        // A session opened by data alone gets no answer longer than its request.
                        let cap = (!self.books.last_vouched()).then_some(datagram.len());
                        requests
                            .get_or_insert_with(|| Requests::new(name_bytes))
                            .push(datagram, cap);
                    }
                    match sample {
                        LatencySample::Delay { ns, cell, clamped } => {
                            self.counters.latency_cells[cell] += 1;
                            self.counters.latency_sum_ns[cell] =
                                self.counters.latency_sum_ns[cell].saturating_add(ns);
                            self.counters.latency_clamped += u64::from(clamped);
                            run.add(ns.max(1), &mut self.latency);
                        }
                        LatencySample::Unknown => self.counters.latency_unknown += 1,
                        LatencySample::NoTimestamp | LatencySample::Duplicate => {}
                    }
                }
                Err(Refused::FlowId) => self.counters.invalid[INVALID_FLOW_ID] += 1,
                Err(Refused::TableFull) => self.counters.invalid[INVALID_TABLE_FULL] += 1,
                Err(Refused::Unannounced) => self.counters.invalid[INVALID_UNANNOUNCED] += 1,
                Err(Refused::Source) => self.counters.invalid[INVALID_SOURCE] += 1,
                Err(Refused::Implausible) => self.counters.invalid[INVALID_IMPLAUSIBLE] += 1,
                Err(Refused::Auth) => self.counters.invalid[INVALID_AUTH] += 1,
            }
        }
        run.flush(&mut self.latency);
        if let Some(requests) = requests {
            self.answer(&requests, now_ns);
        }
        valid
    }

    /// Counts completion `c` if it is an answer's send (and frees its slot); false otherwise.
    fn answer_completed(&mut self, c: &Completion) -> bool {
        if !self.answers.completed(c.user_data) {
            return false;
        }
        if c.result < 0 {
            self.counters.unanswered += 1;
        } else {
            self.counters.answered += 1;
        }
        true
    }

    /// Answers the requests counted in one buffer (they share its source).
    fn answer(&mut self, requests: &Requests, now_ns: u64) {
        let fd = self.socket.as_raw_fd();
        let name = &requests.name[..requests.name_len];
        for (head, len) in &requests.items[..requests.len] {
            // An answer queued is counted when its send completes.
            let queued = len.is_some_and(|len| {
                self.answers
                    .answer(&mut self.engine, fd, head, name, usize::from(len))
            });
            if !queued {
                self.counters.unanswered += 1;
            }
        }
        self.counters.unanswered += requests.overflow;
        self.last_answer_ns = now_ns;
    }

    /// Catches the books up with the socket's kernel drop counter (`/proc/net/udp`). A datagram
    /// only carries the count as it was when the datagram was queued, so drops after the last
    /// datagram read (a dropped tail) show nowhere else before the run ends.
    fn refresh_drops(&mut self) {
        catch_up_drops(&self.socket, &mut self.last_drops, &mut self.books);
    }

    /// Applies what senders said since the last call (never blocks: a lock-free queue). Before
    /// a goodbye closes a tail, the kernel's drop counter is read, so a tail the kernel dropped
    /// is charged to kernel drops, not to loss (only when closes are pending: goodbyes are rare).
    /// Applies the control messages; deferred goodbyes are judged quiet as of `looked_ns`, the
    /// start of the latest submit whose completions were reaped, so a worker that was not
    /// running can not call a tail quiet that still waits in its socket.
    fn drain_inbox(&mut self, looked_ns: u64) {
        let now = clock::monotonic_ns();
        if !self.shared.mailbox.inbox.is_empty() || self.books.closing() {
            self.refresh_drops();
        }
        while let Some(message) = self.shared.mailbox.inbox.pop() {
            self.books.apply(message, &self.shared.mailbox, now);
        }
        self.books.retry_closes(looked_ns, &self.shared.mailbox);
    }

    fn publish(&mut self, looked_ns: u64) {
        self.drain_inbox(looked_ns);
        let overflow = self.engine.cq_overflow();
        self.counters.set_ring(&self.engine.counters(), overflow, 1);
        self.counters.kernel_drops = self.books.kernel_drops();
        self.counters.buffers_circulating = self.circulation.circulating() as u64;
        for (i, shared) in self.shared.flows.iter().enumerate() {
            shared.publish(&self.books.flow(i));
        }
        self.books.publish(&self.shared.mailbox);
        self.shared.worker.publish(&self.counters);
    }

    /// Reaps and counts completions; returns (valid packets seen, ring still armed).
    fn reap(&mut self) -> (bool, bool) {
        let n = self.engine.reap(&mut self.completions);
        if n == 0 {
            return (false, true);
        }
        let now_real = clock::sink_realtime_ns();
        let now_ns = clock::monotonic_ns();
        let mut got = false;
        let mut armed = true;
        for i in 0..n {
            let c = self.completions[i];
            if self.answer_completed(&c) {
                continue;
            }
            if let Some(bid) = c.buffer_id() {
                got |= self.take_buffer(bid, c.result, None, now_real, now_ns);
            } else if c.result == -libc::ENOBUFS {
                self.counters.buffer_ring_empty += 1;
            } else if c.result < 0 {
                self.counters.rx_errors[errno_class(-c.result)] += 1;
            }
            if !c.more() {
                armed = false;
            }
        }
        self.publish_buffers();
        (got, armed)
    }

    /// Counts the datagrams a completion left in buffer `bid` (`result` bytes, none unless
    /// positive) and gives the buffer back. Returns whether a valid packet was counted.
    fn take_buffer(
        &mut self,
        bid: u16,
        result: i32,
        slot: Option<usize>,
        now_real: u64,
        now_ns: u64,
    ) -> bool {
        let len = result.max(0) as usize;
        let got = len > 0 && self.process(bid, len, slot, now_real, now_ns);
        self.circulation.give_back(&mut self.engine, bid, len);
        got
    }

    /// Hands the kernel the buffers given back since the last reap, as many as circulate.
    fn publish_buffers(&mut self) {
        self.circulation.retarget(&mut self.engine);
        self.engine.publish_buffers();
    }

    fn finish(&mut self) {
        self.refresh_drops();
        // Goodbyes that arrived while draining close their sessions first, with their tails.
        let looked = clock::monotonic_ns();
        self.drain_inbox(looked);
        self.books.sweep(None, &self.shared.mailbox);
        self.publish(looked);
    }
}
