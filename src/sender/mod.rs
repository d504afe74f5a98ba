//! The sender worker: keeps a window of sends in flight on its own ring, writes each packet's
//! header in place in its registered slot, and submits a batch of SQEs per `io_uring_enter`.
//!
//! Set-up (`SenderWorker::new`) maps the node-local arena, opens one connected socket per flow,
//! registers the arena and writes the fixed header fields. The loop (`run`) only stamps headers,
//! pushes SQEs, submits and reaps: no allocation, locks, logging or metrics calls. Counters are
//! plain fields published to the worker's shared block every few milliseconds and at the end.

pub(crate) mod exchange;
pub(crate) mod mix;
pub(crate) mod parts;
pub(crate) mod pattern;
pub(crate) mod payload;
pub(crate) mod rtt;
mod slots;
pub(crate) mod tcp;
pub(crate) mod trials;
mod tx_lag;

use std::{os::fd::AsRawFd, sync::Arc, time::Duration};

use socket2::Socket;

use self::{
    parts::{PartClock, PartMarks},
    slots::Slots,
    tx_lag::TxLag,
};
use crate::{
    clock,
    error::Error,
    host_time::ThreadTime,
    mem::{Arena, limits},
    net,
    pacing::Pacer,
    ring::{ArenaRange, Completion, Engine, RingSize, Wait, probe},
    stats::{TxFlow, WorkerCounters, errno_class},
    worker::{Control, Job},
};

/// How often counters are published to the shared block.
const PUBLISH_EVERY_NS: u64 = 10_000_000;
/// The longest a sender sleeps in one wait, so a stop request is seen promptly.
const MAX_SLEEP_NS: u64 = 5_000_000;
/// How long after its deadline a paced sender may still send what fell due before it.
const DEADLINE_GRACE_NS: u64 = 20_000_000;

/// Which io_uring operation sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SendOp {
    /// `WRITE_FIXED` on the connected socket from the registered arena (the TCP default).
    WriteFixed,
    /// `SEND_ZC` with `buf_index` (zero-copy; every loopback send is copied anyway).
    SendZc,
    /// Plain `SEND` from the same node-local arena (the registration is not used; the UDP
    /// default: it skips the file-write path `WRITE_FIXED` takes, 1.01-1.20x its datagrams per
    /// second on loopback, benches/README.md).
    Send,
}

/// Everything one sender worker needs, resolved and validated before start.
#[derive(Clone, Debug)]
pub(crate) struct SenderConfig {
    /// Destination.
    pub(crate) to: std::net::SocketAddr,
    /// UDP payload bytes of the largest packet (header included).
    pub(crate) size: usize,
    /// The size classes and the order they are sent in.
    pub(crate) sizes: Arc<mix::SizePlan>,
    /// Packets per send (1 = no GSO).
    pub(crate) gso: u16,
    /// SQEs per `io_uring_enter`.
    pub(crate) batch: u32,
    /// Sends kept in flight at most.
    pub(crate) window: u32,
    /// Packets per second for this worker, `None` = as fast as possible.
    pub(crate) rate_pps: Option<f64>,
    /// Packets this worker sends before it stops.
    pub(crate) count: Option<u64>,
    /// How long this worker sends.
    pub(crate) duration: Option<Duration>,
    /// The send operation.
    pub(crate) op: SendOp,
    /// Session epoch written into every header.
    pub(crate) epoch: u32,
    /// Try 2 MiB pages for the arena.
    pub(crate) hugepages: bool,
    /// First sequence number of every flow.
    pub(crate) first_seq: u64,
    /// Packets sent back to back at each pacing tick (1 = evenly spaced).
    pub(crate) burst: u64,
    /// TOS, TTL and the port tuple of each flow.
    pub(crate) fields: crate::net::fields::HeaderFields,
    /// What the payload after the header carries (written at set-up).
    pub(crate) payload: payload::PayloadFill,
    /// This worker's share of a rate schedule (`--rate-steps`, `--ramp`) instead of `rate_pps`.
    pub(crate) schedule: Option<Arc<crate::schedule::RateSchedule>>,
    /// The epoch of each part of the schedule (`[epoch]` without one); see `parts`.
    pub(crate) part_epochs: Arc<[u32]>,
    /// `ringblast search`'s trials, one part each, instead of `rate_pps` and `duration`.
    pub(crate) trials: Option<Arc<trials::TrialBoard>>,
    /// With a secret: the key each part's proof is derived from (`proto::proof`), and whether
    /// the proof is a tag (`--auth-data`) rather than the run's token.
    pub(crate) proof: Option<(Arc<crate::proto::proof::DataKey>, bool)>,
    /// `--pattern rr`: requests and responses (`exchange`) instead of a stream.
    pub(crate) exchange: Option<exchange::ExchangeShape>,
}

/// Where a worker runs and which flows it owns.
#[derive(Clone, Debug)]
pub(crate) struct SenderPlacement {
    /// NUMA node of the worker's CPU (the arena is bound there).
    pub(crate) node: u32,
    /// Flow ids this worker sends, one socket each.
    pub(crate) flows: Vec<u32>,
}

/// Counters a sender shares with the reporter.
#[derive(Debug, Default)]
pub(crate) struct SenderShared {
    /// Per flow, in the order of `SenderPlacement::flows`.
    pub(crate) flows: Vec<crate::stats::SharedTxFlow>,
    /// Engine counters.
    pub(crate) worker: crate::stats::SharedWorkerCounters,
    /// When the counters above were published (the worker's clock).
    pub(crate) stamp: crate::stamp::PublishStamp,
    /// Each part of the rate schedule, its own session epoch (none without a schedule).
    pub(crate) parts: Vec<PartMarks>,
    /// The part the worker is in (0 without a schedule).
    pub(crate) part: std::sync::atomic::AtomicU64,
    /// Request/response counters (`--pattern rr`; zero for a stream).
    pub(crate) exchange: exchange::SharedExchange,
}

/// What a sender reports when it ends.
#[derive(Clone, Debug, Default)]
pub(crate) struct SenderOutcome {
    /// Monotonic ns when sending began.
    pub(crate) started_ns: u64,
    /// Monotonic ns when the last completion was reaped.
    pub(crate) ended_ns: u64,
    /// A fatal ring error ended the run early.
    pub(crate) ring_failed: bool,
    /// What the host gave the worker between the two; `None`: unknown.
    pub(crate) time: Option<crate::host_time::ThreadTime>,
    /// Sampled lags from the send stamp to the kernel's software transmit stamp (`tx_lag`);
    /// `None` where the kernel reports no transmit stamps (unknown).
    pub(crate) transmit_lag: Option<hdrhistogram::Histogram<u64>>,
    /// Samples whose transmit stamp never came.
    pub(crate) transmit_lag_missing: u64,
    /// Error-queue reads the samples took (SQEs that are not sends).
    pub(crate) transmit_lag_reads: u64,
    /// `--pattern rr`: every round trip, in ns (`None` for a stream).
    pub(crate) round_trips: Option<hdrhistogram::Histogram<u64>>,
}

impl crate::worker::Outcome for SenderOutcome {
    fn ring_failed(&self) -> bool {
        self.ring_failed
    }

    fn span(&self) -> Option<(u64, u64)> {
        Some((self.started_ns, self.ended_ns))
    }
}

/// A sender worker, set up and ready to run on its thread.
pub(crate) struct SenderWorker {
    // Sockets must outlive the ring's in-flight sends, so they are declared after `engine`.
    engine: Engine,
    _sockets: Vec<Socket>,
    fds: Vec<i32>,
    slots: Slots,
    config: SenderConfig,
    shared: Arc<SenderShared>,
    flows: Vec<TxFlow>,
    /// Epochs, sequence numbers and failed sends (stamped into every header) per part.
    parts: PartClock,
    next_flow: usize,
    counters: WorkerCounters,
    completions: Vec<Completion>,
    /// Samples the lag from send stamp to the kernel's transmit.
    tx_lag: TxLag,
}

impl SenderWorker {
    /// Bytes of packet memory one worker registers: its send slots, then its transmit-lag
    /// sampler's.
    pub(crate) fn arena_bytes(config: &SenderConfig) -> u64 {
        (Slots::arena_bytes(config) + TxLag::ARENA_BYTES) as u64
    }

    /// Bytes of locked memory one worker registers (arena plus ring).
    pub(crate) fn locked_bytes(config: &SenderConfig) -> u64 {
        Self::arena_bytes(config) + ring_size(config).locked_bytes()
    }

    /// Builds the worker on the calling (already pinned) thread.
    pub(crate) fn new(
        config: SenderConfig,
        place: &SenderPlacement,
        shared: Arc<SenderShared>,
    ) -> Result<Self, Error> {
        limits::check_memlock(Self::locked_bytes(&config))?;
        let arena = Arena::allocate_on_node(
            Self::arena_bytes(&config) as usize,
            place.node,
            config.hugepages,
        )
        .map_err(|e| Error::Unsupported(e.to_string()))?;
        let ops = match config.op {
            SendOp::WriteFixed => probe::SEND_OPS,
            SendOp::SendZc => probe::SEND_ZC_OPS,
            SendOp::Send => probe::SEND_PLAIN_OPS,
        };
        let mut engine = Engine::new(ring_size(&config), arena, ops, true, None)?;
        let gso = (config.gso > 1).then_some(config.size as u16);
        let sockets = flow_sockets(&config, &place.flows, gso)?;
        let fds = sockets.iter().map(|s| s.as_raw_fd()).collect();
        let mut slots = Slots::new(&config, &mut engine, &place.flows)?;
        let stamps = sockets.iter().all(net::report_software_stamps);
        let tx_lag = TxLag::new(&mut engine, Slots::arena_bytes(&config), stamps);
        if let Some((key, tagged)) = &config.proof {
            slots.prove(
                config.part_epochs.iter().map(|e| key.run(*e)).collect(),
                *tagged,
            );
        }
        let n = place.flows.len();
        // A search's trials are parts with no end on the clock: each ends when its trial does.
        let part_ends: Vec<u64> = match (&config.schedule, &config.trials) {
            (Some(s), _) => s.parts().iter().map(|p| p.1).collect(),
            (None, Some(board)) => vec![u64::MAX; board.capacity()],
            (None, None) => Vec::new(),
        };
        let parts = PartClock::new(
            &part_ends,
            Arc::clone(&config.part_epochs),
            n,
            config.window as usize,
            config.first_seq,
        );
        Ok(SenderWorker {
            engine,
            _sockets: sockets,
            fds,
            slots,
            completions: vec![Completion::default(); ring_size(&config).cq_entries as usize],
            flows: vec![TxFlow::default(); n],
            parts,
            next_flow: 0,
            counters: WorkerCounters::default(),
            shared,
            config,
            tx_lag,
        })
    }

    fn publish(&mut self) {
        let overflow = self.engine.cq_overflow();
        let inflight = u64::from(self.slots.in_flight());
        self.counters
            .set_ring(&self.engine.counters(), overflow, inflight);
        self.shared.stamp.begin();
        for (shared, local) in self.shared.flows.iter().zip(&self.flows) {
            shared.publish(local);
        }
        self.shared.worker.publish(&self.counters);
        self.shared.stamp.end(clock::monotonic_ns());
        self.parts.publish(&self.shared.parts, false);
        self.shared.part.store(
            self.parts.current() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Pushes up to `budget` packets' worth of sends, none shorter than `train` packets, each
    /// stamped `now_real` (at monotonic `now`: when a transmit-lag sample is due, one of them
    /// is it); returns packets queued.
    fn push_sends(&mut self, budget: u64, train: u64, now_real: u64, now: u64) -> u64 {
        let mut queued = 0;
        let mut pushed = 0;
        while pushed < self.config.batch && budget - queued >= train {
            let Some(slot) = self.slots.take() else { break };
            let segs = (budget - queued).min(u64::from(self.config.gso)) as u16;
            let flow = self.next_flow;
            let seq = self.parts.next_seq(flow);
            let failed = self.parts.failed(flow);
            let epoch = self.parts.epoch();
            let (offset, len) = self.slots.stamp(
                &mut self.engine,
                slot,
                (flow, self.parts.current()),
                segs,
                (epoch, seq, failed),
                now_real,
            );
            let fd = self.fds[flow];
            let user_data = u64::from(slot);
            let ok = if self.tx_lag.due(now) {
                let payload = ArenaRange {
                    offset,
                    len: len as usize,
                };
                self.tx_lag
                    .push_sample(&mut self.engine, fd, slot, payload, segs, now_real)
            } else {
                match self.config.op {
                    SendOp::WriteFixed => self.engine.push_write_fixed(fd, offset, len, user_data),
                    SendOp::SendZc => self.engine.push_send_zc_fixed(fd, offset, len, user_data),
                    SendOp::Send => self.engine.push_send(fd, offset, len, user_data),
                }
            };
            if !ok {
                self.slots.give_back(slot);
                break;
            }
            self.parts.sent(slot, flow, u64::from(segs));
            self.next_flow = if flow + 1 == self.fds.len() {
                0
            } else {
                flow + 1
            };
            queued += u64::from(segs);
            pushed += 1;
        }
        queued
    }

    /// Takes every completion ready at monotonic `now`.
    fn reap(&mut self, now: u64) {
        let n = self.engine.reap(&mut self.completions);
        for i in 0..n {
            let c = self.completions[i];
            if c.user_data == tx_lag::USER_DATA_READ {
                self.tx_lag.read_completed(&mut self.engine, &c, now);
                continue;
            }
            let slot = c.user_data as u32;
            if c.is_notification() {
                if c.result as u32 & ZC_COPIED != 0 {
                    self.counters.zc_copied += 1;
                }
                self.slots.release(slot);
                continue;
            }
            self.tx_lag.send_completed(slot, c.result, now);
            let flow = self.slots.flow_of(slot);
            let segs = u64::from(self.slots.segments(slot));
            let f = &mut self.flows[flow];
            if c.result >= 0 {
                let class = self.slots.class_of(slot);
                f.packets += segs;
                f.bytes += c.result as u64;
                f.size_packets[class] += segs;
                f.size_bytes[class] += c.result as u64;
                self.parts.completed(slot, flow, 0);
            } else {
                f.errors[errno_class(-c.result)] += segs;
                self.parts.completed(slot, flow, segs);
            }
            // A zero-copy send keeps its slot until the notification arrives.
            if !c.more() {
                self.slots.release(slot);
            }
        }
    }
}

/// How a sending stretch (the whole run, or one trial) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// Its count or deadline was reached, every send completed.
    Done,
    /// A stop was asked for; every send completed.
    Stopped,
    /// The ring failed.
    RingFailed,
}

/// How long a worker between two trials sleeps before it looks for the next one.
const TRIAL_POLL: Duration = Duration::from_micros(200);

impl SenderWorker {
    fn max_burst(&self) -> u64 {
        (u64::from(self.config.batch) * u64::from(self.config.gso)).max(self.config.burst)
    }

    /// Sends as `pacer` allows (`paced`: it holds a rate) until `count` packets or `deadline`,
    /// then lets every send complete.
    fn send_until(
        &mut self,
        control: &Control,
        pacer: &mut Pacer,
        deadline: Option<u64>,
        count: Option<u64>,
        paced: bool,
    ) -> Sent {
        let burst = self.config.burst.max(1);
        let mut remaining = count.unwrap_or(u64::MAX);
        let mut last_publish = clock::monotonic_ns();
        let mut stopping = None;
        loop {
            let now = clock::monotonic_ns();
            // A paced run sends what fell due before its deadline even when its loop comes
            // round a little after it: a late loop never shortens the run's schedule (a sender
            // that is behind by more than the grace stops all the same).
            let pace_now = deadline.map_or(now, |d| now.min(d.saturating_sub(1)));
            // A paced GSO sender waits until a whole train is due instead of sending short ones.
            let train = if paced {
                u64::from(self.config.gso).min(remaining)
            } else {
                1
            };
            // A burst waits until its last packet is due, then leaves back to back.
            let burst_left = (paced && burst > 1)
                .then(|| (burst - pacer.sent() % burst).min(remaining).max(train));
            let need = burst_left.unwrap_or(train).max(1);
            let budget = pacer.allowance(pace_now).min(remaining);
            let budget = burst_left.map_or(budget, |left| budget.min(left));
            let overdue = deadline.is_some_and(|d| {
                now >= d && (!paced || budget < need || now >= d + DEADLINE_GRACE_NS)
            });
            if stopping.is_none() {
                if control.stop_requested() {
                    stopping = Some(Sent::Stopped);
                } else if remaining == 0 || overdue {
                    stopping = Some(Sent::Done);
                }
            }
            if let Some(end) = stopping
                && self.slots.in_flight() == 0
                && !self.tx_lag.reading()
            {
                return end;
            }
            // A part's end switches every flow to the next part's epoch before its sends.
            if self.parts.advance(now) {
                self.parts.publish(&self.shared.parts, false);
            }
            let mut queued = 0;
            if stopping.is_none() && budget >= need {
                // A due error-queue read rides along with sends, so it costs no wake-up.
                self.tx_lag.poll(&mut self.engine, now);
                queued = self.push_sends(budget, train.max(1), clock::realtime_ns(), now);
                pacer.commit(queued);
                remaining -= queued;
            }
            let wait = if queued > 0 {
                Wait::Nothing
            } else if self.slots.in_flight() > 0 {
                Wait::One {
                    timeout_ns: MAX_SLEEP_NS,
                }
            } else {
                let due = pacer.due_ns_for(need).unwrap_or(now);
                let until = deadline.map_or(due, |d| due.min(d));
                Wait::One {
                    timeout_ns: until.saturating_sub(now).clamp(1, MAX_SLEEP_NS),
                }
            };
            if self.engine.submit(wait).is_err() {
                return Sent::RingFailed;
            }
            self.reap(now);
            if now - last_publish >= PUBLISH_EVERY_NS {
                self.counters.pacing_lag_ns = pacer.lag_ns(now);
                self.counters.target_milli_pps =
                    pacer.rate_at(now).map_or(0, |r| (r * 1000.0) as u64);
                self.publish();
                last_publish = now;
            }
        }
    }

    /// `ringblast search`: sends each trial posted on `board` as its own part, from this
    /// worker's clock at the moment it sees it, until a stop; true when the ring failed.
    fn send_trials(&mut self, control: &Control, board: &trials::TrialBoard) -> bool {
        for k in 0..board.capacity() {
            let trial = loop {
                if control.stop_requested() {
                    return false;
                }
                if let Some(t) = board.get(k) {
                    break t;
                }
                std::thread::sleep(TRIAL_POLL);
            };
            let start = clock::monotonic_ns();
            let mut pacer = Pacer::new(trial.rate_pps, start, self.max_burst());
            let deadline = Some(start + trial.duration_ns);
            match self.send_until(
                control,
                &mut pacer,
                deadline,
                None,
                trial.rate_pps.is_some(),
            ) {
                Sent::Done => {}
                Sent::Stopped => return false,
                Sent::RingFailed => return true,
            }
            // Every send of this trial completed: the next part starts, so this one settles.
            self.parts.next_part();
            self.counters.target_milli_pps = 0;
            self.publish();
        }
        false
    }
}

/// One connected socket per flow of `flows`, with the run's header fields (TOS, TTL, ports)
/// and, for GSO, its segment size.
fn flow_sockets(
    config: &SenderConfig,
    flows: &[u32],
    gso: Option<u16>,
) -> Result<Vec<Socket>, Error> {
    flows
        .iter()
        .map(|&flow| {
            let (src, dst) = config.fields.tuple(flow, config.to);
            net::sender_socket_with(dst, gso, |s| config.fields.apply(s, src, dst))
        })
        .collect()
}

/// A UDP sender queue's worker: a stream's, or request/response's (`--pattern rr`).
pub(crate) enum UdpSendJob {
    Stream(Box<SenderWorker>),
    Exchange(Box<exchange::ExchangeWorker>),
}

impl UdpSendJob {
    /// Bytes of packet memory the worker for `config` registers with `flows` flows.
    pub(crate) fn arena_bytes(config: &SenderConfig, flows: usize) -> u64 {
        match config.exchange {
            Some(_) => exchange::ExchangeWorker::arena_bytes(config, flows),
            None => SenderWorker::arena_bytes(config),
        }
    }

    /// Builds the worker `config` asks for on the calling (already pinned) thread.
    pub(crate) fn new(
        config: SenderConfig,
        place: &SenderPlacement,
        shared: Arc<SenderShared>,
    ) -> Result<UdpSendJob, Error> {
        Ok(if config.exchange.is_some() {
            UdpSendJob::Exchange(Box::new(exchange::ExchangeWorker::new(
                config, place, shared,
            )?))
        } else {
            UdpSendJob::Stream(Box::new(SenderWorker::new(config, place, shared)?))
        })
    }
}

impl Job for UdpSendJob {
    type Output = SenderOutcome;

    fn arena(&self) -> &crate::mem::Arena {
        match self {
            UdpSendJob::Stream(w) => w.arena(),
            UdpSendJob::Exchange(w) => w.arena(),
        }
    }

    fn run(self, control: &Control) -> SenderOutcome {
        match self {
            UdpSendJob::Stream(w) => (*w).run(control),
            UdpSendJob::Exchange(w) => (*w).run(control),
        }
    }
}

/// `IORING_NOTIF_USAGE_ZC_COPIED`: the notification's result says the kernel copied.
const ZC_COPIED: u32 = 1 << 31;

fn ring_size(config: &SenderConfig) -> RingSize {
    let sq = config.window.max(config.batch).next_power_of_two().max(8);
    RingSize {
        sq_entries: sq,
        cq_entries: sq * 4,
    }
}

impl Job for SenderWorker {
    type Output = SenderOutcome;

    fn arena(&self) -> &crate::mem::Arena {
        self.engine.arena()
    }

    fn run(mut self, control: &Control) -> SenderOutcome {
        let time_before = ThreadTime::of_this_thread();
        let started_ns = clock::monotonic_ns();
        self.parts.begin(started_ns);
        let ring_failed = match self.config.trials.clone() {
            Some(board) => self.send_trials(control, &board),
            None => {
                let mut pacer = match &self.config.schedule {
                    Some(s) => Pacer::scheduled(Arc::clone(s), started_ns, self.max_burst()),
                    None => Pacer::new(self.config.rate_pps, started_ns, self.max_burst()),
                };
                let deadline = self
                    .config
                    .duration
                    .map(|d| started_ns + d.as_nanos() as u64);
                let paced = self.config.rate_pps.is_some();
                self.send_until(control, &mut pacer, deadline, self.config.count, paced)
                    == Sent::RingFailed
            }
        };
        let ended_ns = clock::monotonic_ns();
        self.counters.pacing_lag_ns = 0;
        self.publish();
        self.parts.publish(&self.shared.parts, true);
        SenderOutcome {
            started_ns,
            ended_ns,
            ring_failed,
            time: ThreadTime::of_this_thread()
                .zip(time_before)
                .map(|(after, before)| after.since(before)),
            transmit_lag: self.tx_lag.measured().then(|| self.tx_lag.lag.clone()),
            transmit_lag_missing: self.tx_lag.missing,
            transmit_lag_reads: self.tx_lag.reads,
            round_trips: None,
        }
    }
}
