//! The UDP request/response sender worker (`--proto udp --pattern rr`, wire in
//! `proto::exchange`): one connected socket per flow, each keeping up to `depth` requests
//! outstanding, with a multishot `RECV` per socket into the worker's provided-buffer ring for
//! the responses.
//!
//! Every request slot of the registered arena belongs to one flow's window. A request is
//! stamped and sent from its slot; its response is matched by flow, epoch and sequence number
//! to the slot that still waits for it, and the round trip is taken on this worker's monotonic
//! clock from the moment the request was queued, so a response's bytes decide no figure. A
//! request unanswered after `timeout` is counted timed out and its slot reused; a response that
//! matches no waiting request (late, duplicated or forged) is counted unmatched and changes
//! nothing else. A failed send is a failed send (the flow's `errors`, stamped into the next
//! header as for streams), never a timeout. At the end the worker stops sending and waits until
//! every request is answered or timed out. The loop never allocates, locks, logs or formats.

use std::{os::fd::AsRawFd, sync::Arc};

use hdrhistogram::Histogram;
use socket2::Socket;

use super::{SenderConfig, SenderOutcome, SenderPlacement, SenderShared};
use crate::{
    clock,
    error::Error,
    host_time::ThreadTime,
    mem::{Arena, limits},
    pacing::Pacer,
    proto::{
        exchange::{self, ECHO_AT, FLAG_REQUEST, FLAG_RESPONSE, MAX_RESPONSE},
        header::{self, Header},
        proof::{FLAG_TAGGED, RunProof},
    },
    ring::{BufOrder, BufRingLayout, Completion, Engine, RingSize, Wait, probe},
    stats::{TxFlow, WorkerCounters, errno_class},
    worker::{Control, Job},
};

const PUBLISH_EVERY_NS: u64 = 10_000_000;
/// The longest one wait sleeps, so a stop request and a timeout are seen promptly.
const MAX_SLEEP_NS: u64 = 1_000_000;
/// Receive buffers for responses: one response each.
const RECV_LAYOUT: BufRingLayout = BufRingLayout {
    entries: 1024,
    buf_size: MAX_RESPONSE as u32,
    order: BufOrder::AsReturned,
};
/// `user_data` of flow `i`'s receive is `RECV_TAG | i`; a send's is its slot.
const RECV_TAG: u64 = 1 << 40;

/// The request/response shape of a UDP sender: the shape every transport shares, and how long
/// a request waits for its response (a datagram may never come back).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExchangeShape {
    /// Request and response bytes, requests outstanding per flow.
    pub(crate) rr: super::pattern::RrShape,
    /// How long a request waits for its response before it counts as timed out.
    pub(crate) timeout_ns: u64,
}

crate::stats::counter_set! {
    /// Counters of one UDP request/response queue.
    ExchangeCounters / SharedExchange {
        /// Responses matched to their requests in time (round trips completed).
        transactions:,
        /// Bytes of those responses.
        response_bytes:,
        /// Requests sent whose response did not come within the timeout.
        timeouts:,
        /// Responses that matched no waiting request (late, duplicated or forged).
        unmatched:,
        /// Smallest round trip in ns (0: none yet; a queue's own: never to be summed).
        rtt_min_ns:,
        /// Largest round trip in ns (a queue's own: never to be summed).
        rtt_max_ns:,
        /// Sum of the round trips in ns (saturating).
        rtt_sum_ns:,
    }
}

/// Where one request slot stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SlotState {
    #[default]
    Free,
    /// Queued; its send has not completed.
    Sending,
    /// Sent; waiting for the response.
    Waiting,
    /// Answered before its send's completion was reaped.
    Answered,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    state: SlotState,
    seq: u64,
    sent_ns: u64,
}

/// A UDP request/response worker, set up and ready to run on its thread.
pub(crate) struct ExchangeWorker {
    // Sockets must outlive the ring's in-flight operations, so they are declared after it.
    engine: Engine,
    _sockets: Vec<Socket>,
    fds: Vec<i32>,
    flow_ids: Vec<u32>,
    config: SenderConfig,
    shape: ExchangeShape,
    proof: Option<(RunProof, bool)>,
    shared: Arc<SenderShared>,
    flows: Vec<TxFlow>,
    /// `depth` slots per flow, flow-major.
    slots: Vec<Slot>,
    /// Per flow: its free slots (indices into `slots`).
    free: Vec<Vec<u32>>,
    next_seq: Vec<u64>,
    failed: Vec<u64>,
    /// Per flow: its multishot receive is queued (false once the kernel ended it).
    armed: Vec<bool>,
    /// Flows whose receive waits to be queued again.
    disarmed: usize,
    /// When the oldest request in flight times out (`u64::MAX`: none in flight), so the
    /// windows are searched only when one can have.
    next_expiry: u64,
    counters: WorkerCounters,
    exchange: ExchangeCounters,
    completions: Vec<Completion>,
    rtt: Histogram<u64>,
    /// Requests queued and not settled (answered, timed out or failed).
    outstanding: usize,
    /// Sends not yet completed.
    sending: usize,
    next_flow: usize,
}

fn ring_size(slots: usize, flows: usize) -> RingSize {
    let sq = (slots + flows).next_power_of_two().clamp(16, 4096) as u32;
    RingSize {
        sq_entries: sq,
        cq_entries: (sq * 2).max(u32::from(RECV_LAYOUT.entries) * 2),
    }
}

impl ExchangeWorker {
    fn slot_base() -> usize {
        RECV_LAYOUT.arena_bytes()
    }

    /// Bytes of packet memory one worker registers: the response buffers, then the requests.
    pub(crate) fn arena_bytes(config: &SenderConfig, flows: usize) -> u64 {
        let shape = config.exchange.expect("an exchange sender has its shape");
        let slots = flows * shape.rr.depth as usize;
        (Self::slot_base() + slots * shape.rr.request).div_ceil(4096) as u64 * 4096
    }

    /// Bytes of locked memory one worker registers (arena plus ring).
    pub(crate) fn locked_bytes(config: &SenderConfig, flows: usize) -> u64 {
        let depth = config.exchange.map_or(1, |s| s.rr.depth as usize);
        Self::arena_bytes(config, flows) + ring_size(flows * depth, flows).locked_bytes()
    }

    /// Builds the worker on the calling (already pinned) thread.
    pub(crate) fn new(
        config: SenderConfig,
        place: &SenderPlacement,
        shared: Arc<SenderShared>,
    ) -> Result<Self, Error> {
        let shape = config
            .exchange
            .ok_or_else(|| Error::Usage("a request/response worker needs its shape".into()))?;
        let n = place.flows.len();
        let depth = shape.rr.depth as usize;
        limits::check_memlock(Self::locked_bytes(&config, n))?;
        let arena = Arena::allocate_on_node(
            Self::arena_bytes(&config, n) as usize,
            place.node,
            config.hugepages,
        )
        .map_err(|e| Error::Unsupported(e.to_string()))?;
        let size = ring_size(n * depth, n);
        let mut engine = Engine::new(size, arena, probe::EXCHANGE_OPS, true, Some(RECV_LAYOUT))?;
        let sockets = super::flow_sockets(&config, &place.flows, None)?;
        let fds: Vec<i32> = sockets.iter().map(|s| s.as_raw_fd()).collect();
        // Every request's payload is written once; only its header and proof change.
        for i in 0..n * depth {
            let at = Self::slot_base() + i * shape.rr.request;
            let bytes = engine
                .arena_bytes_mut(at, shape.rr.request)
                .ok_or_else(|| Error::Unsupported("request slots outside the arena".into()))?;
            config.payload.fill(bytes);
            exchange::write_response_len(bytes, shape.rr.response as u32);
        }
        for (i, &fd) in fds.iter().enumerate() {
            if !engine.push_recv_multi(fd, RECV_TAG | i as u64) {
                return Err(Error::Unsupported(
                    "cannot queue the responses' multishot receive".into(),
                ));
            }
        }
        let proof = config
            .proof
            .as_ref()
            .map(|(key, tagged)| (key.run(config.epoch), *tagged));
        let rtt = Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
            .map_err(|e| Error::Usage(format!("round-trip histogram: {e}")))?;
        Ok(ExchangeWorker {
            engine,
            _sockets: sockets,
            fds,
            flow_ids: place.flows.clone(),
            proof,
            slots: vec![Slot::default(); n * depth],
            free: (0..n)
                .map(|f| {
                    ((f * depth) as u32..((f + 1) * depth) as u32)
                        .rev()
                        .collect()
                })
                .collect(),
            next_seq: vec![config.first_seq; n],
            failed: vec![0; n],
            armed: vec![true; n],
            disarmed: 0,
            next_expiry: u64::MAX,
            flows: vec![TxFlow::default(); n],
            counters: WorkerCounters::default(),
            exchange: ExchangeCounters::default(),
            completions: vec![Completion::default(); size.cq_entries as usize],
            rtt,
            outstanding: 0,
            sending: 0,
            next_flow: 0,
            shared,
            shape,
            config,
        })
    }

    fn publish(&mut self) {
        let overflow = self.engine.cq_overflow();
        self.counters
            .set_ring(&self.engine.counters(), overflow, self.outstanding as u64);
        self.shared.stamp.begin();
        for (shared, local) in self.shared.flows.iter().zip(&self.flows) {
            shared.publish(local);
        }
        self.shared.worker.publish(&self.counters);
        self.shared.exchange.publish(&self.exchange);
        self.shared.stamp.end(clock::monotonic_ns());
    }

    /// Queues up to `budget` requests, one per flow with a free slot in turn; returns how many.
    fn push_requests(&mut self, budget: u64, now: u64) -> u64 {
        let n = self.fds.len();
        let mut queued = 0;
        let mut idle = 0;
        while queued < budget && idle < n {
            let flow = self.next_flow;
            self.next_flow = if flow + 1 == n { 0 } else { flow + 1 };
            let Some(&slot) = self.free[flow].last() else {
                idle += 1;
                continue;
            };
            idle = 0;
            let seq = self.next_seq[flow];
            let header = Header {
                flags: FLAG_REQUEST
                    | if self.proof.as_ref().is_some_and(|p| p.1) {
                        FLAG_TAGGED
                    } else {
                        0
                    },
                failed: self.failed[flow] as u32,
                flow: self.flow_ids[flow],
                epoch: self.config.epoch,
                seq,
                timestamp_ns: clock::realtime_ns(),
            };
            let at = Self::slot_base() + slot as usize * self.shape.rr.request;
            if let Some(bytes) = self.engine.arena_bytes_mut(at, self.shape.rr.request) {
                match &self.proof {
                    Some((proof, tagged)) => proof.write(&header, *tagged, bytes),
                    None => header.write(bytes),
                }
            }
            if !self.engine.push_send(
                self.fds[flow],
                at,
                self.shape.rr.request as u32,
                u64::from(slot),
            ) {
                break;
            }
            self.free[flow].pop();
            self.slots[slot as usize] = Slot {
                state: SlotState::Sending,
                seq,
                sent_ns: now,
            };
            self.next_seq[flow] = seq + 1;
            self.next_expiry = self
                .next_expiry
                .min(now.saturating_add(self.shape.timeout_ns + 1));
            self.outstanding += 1;
            self.sending += 1;
            queued += 1;
        }
        queued
    }

    fn release(&mut self, slot: u32) {
        let flow = slot as usize / self.shape.rr.depth as usize;
        self.slots[slot as usize].state = SlotState::Free;
        self.free[flow].push(slot);
        self.outstanding -= 1;
    }

    /// A request's send completed with `result`.
    fn on_sent(&mut self, slot: u32, result: i32) {
        let Some(s) = self.slots.get(slot as usize).copied() else {
            return;
        };
        let flow = slot as usize / self.shape.rr.depth as usize;
        self.sending = self.sending.saturating_sub(1);
        if result < 0 {
            self.flows[flow].errors[errno_class(-result)] += 1;
            self.failed[flow] += 1;
            self.release(slot);
            return;
        }
        let f = &mut self.flows[flow];
        f.packets += 1;
        f.bytes += result as u64;
        f.size_packets[0] += 1;
        f.size_bytes[0] += result as u64;
        match s.state {
            SlotState::Answered => self.release(slot),
            _ => self.slots[slot as usize].state = SlotState::Waiting,
        }
    }

    /// Flow `flow`'s socket delivered a datagram of `len` bytes in buffer `bid` at `now`.
    fn on_response(&mut self, flow: usize, bid: u16, len: usize, now: u64) {
        let matched = {
            let data = self.engine.received_buffer(bid);
            let data = &data[..len.min(data.len())];
            match header::parse(data) {
                Ok(h)
                    if h.flags & FLAG_RESPONSE != 0
                        && h.epoch == self.config.epoch
                        && h.flow == self.flow_ids[flow] =>
                {
                    let depth = self.shape.rr.depth as usize;
                    (flow * depth..(flow + 1) * depth).find(|&i| {
                        let s = &self.slots[i];
                        s.seq == h.seq
                            && matches!(s.state, SlotState::Sending | SlotState::Waiting)
                            && (self.proof.is_none() || self.echoes_proof(i, data))
                    })
                }
                _ => None,
            }
        };
        self.engine.recycle_buffer(bid);
        let Some(i) = matched else {
            self.exchange.unmatched += 1;
            return;
        };
        let rtt = now.saturating_sub(self.slots[i].sent_ns).max(1);
        let e = &mut self.exchange;
        e.transactions += 1;
        e.response_bytes += len as u64;
        e.rtt_sum_ns = e.rtt_sum_ns.saturating_add(rtt);
        e.rtt_max_ns = e.rtt_max_ns.max(rtt);
        e.rtt_min_ns = if e.rtt_min_ns == 0 {
            rtt
        } else {
            e.rtt_min_ns.min(rtt)
        };
        self.rtt.saturating_record(rtt);
        if self.slots[i].state == SlotState::Sending {
            self.slots[i].state = SlotState::Answered;
        } else {
            self.release(i as u32);
        }
    }

    /// A proven run's response carries the proof of the request in slot `slot` (the bytes the
    /// request carried after its header, which stay in the slot until it is reused).
    fn echoes_proof(&self, slot: usize, response: &[u8]) -> bool {
        let at = Self::slot_base() + slot * self.shape.rr.request;
        let sent = self.engine.arena().bytes(at, self.shape.rr.request);
        match (sent.and_then(|s| s.get(ECHO_AT)), response.get(ECHO_AT)) {
            (Some(sent), Some(got)) => sent == got,
            _ => false,
        }
    }

    /// Takes every completion ready at `now`.
    fn reap(&mut self, now: u64) {
        let n = self.engine.reap(&mut self.completions);
        for k in 0..n {
            let c = self.completions[k];
            if c.user_data & RECV_TAG == 0 {
                self.on_sent(c.user_data as u32, c.result);
                continue;
            }
            let flow = (c.user_data & 0xffff_ffff) as usize;
            if flow >= self.fds.len() {
                continue;
            }
            match c.buffer_id() {
                Some(bid) if c.result > 0 => self.on_response(flow, bid, c.result as usize, now),
                Some(bid) => self.engine.recycle_buffer(bid),
                None => {}
            }
            if !c.more() && self.armed[flow] {
                self.armed[flow] = false;
                self.disarmed += 1;
            }
        }
        self.engine.publish_buffers();
    }

    /// Queues the receive again of every flow whose multishot the kernel ended (a full SQ
    /// leaves it for the next step).
    fn rearm(&mut self) {
        if self.disarmed == 0 {
            return;
        }
        for flow in 0..self.fds.len() {
            if !self.armed[flow]
                && self
                    .engine
                    .push_recv_multi(self.fds[flow], RECV_TAG | flow as u64)
            {
                self.armed[flow] = true;
                self.disarmed -= 1;
                self.counters.rearms += 1;
            }
        }
    }

    /// Counts every request waiting longer than the timeout at `now` as timed out, once the
    /// oldest in flight can have (requests go out in time order, so the next one to time out
    /// is the oldest left).
    fn expire(&mut self, now: u64) {
        if now < self.next_expiry {
            return;
        }
        let mut oldest = u64::MAX;
        for i in 0..self.slots.len() {
            let s = self.slots[i];
            match s.state {
                SlotState::Waiting if now.saturating_sub(s.sent_ns) > self.shape.timeout_ns => {
                    self.exchange.timeouts += 1;
                    self.release(i as u32);
                }
                SlotState::Free => {}
                _ => oldest = oldest.min(s.sent_ns),
            }
        }
        self.next_expiry = oldest.saturating_add(self.shape.timeout_ns + 1);
    }

    /// Exchanges until `count` requests or `deadline`, then until every request is settled;
    /// false when the ring failed.
    fn exchange_until(
        &mut self,
        control: &Control,
        pacer: &mut Pacer,
        deadline: Option<u64>,
    ) -> bool {
        let mut remaining = self.config.count.unwrap_or(u64::MAX);
        let mut last_publish = clock::monotonic_ns();
        let mut stopping = false;
        loop {
            let now = clock::monotonic_ns();
            if !stopping
                && (control.stop_requested()
                    || remaining == 0
                    || deadline.is_some_and(|d| now >= d))
            {
                stopping = true;
            }
            if stopping && self.outstanding == 0 {
                return true;
            }
            self.rearm();
            if !stopping {
                let budget = pacer.allowance(now).min(remaining);
                if budget > 0 {
                    let queued = self.push_requests(budget, now);
                    pacer.commit(queued);
                    remaining -= queued;
                }
            }
            let until = pacer
                .next_due_ns()
                .filter(|_| !stopping)
                .unwrap_or(u64::MAX);
            // The sends in flight complete at once: wait for them and a response in one call.
            let wait = Wait::Many {
                count: self.sending as u32 + 1,
                timeout_ns: until.saturating_sub(now).clamp(1, MAX_SLEEP_NS),
            };
            if self.engine.submit(wait).is_err() {
                return false;
            }
            let now = clock::monotonic_ns();
            self.reap(now);
            self.expire(now);
            if now - last_publish >= PUBLISH_EVERY_NS {
                self.publish();
                last_publish = now;
            }
        }
    }
}

impl Job for ExchangeWorker {
    type Output = SenderOutcome;

    fn arena(&self) -> &Arena {
        self.engine.arena()
    }

    fn run(mut self, control: &Control) -> SenderOutcome {
        let time_before = ThreadTime::of_this_thread();
        let started_ns = clock::monotonic_ns();
        let mut pacer = Pacer::new(self.config.rate_pps, started_ns, 64);
        let deadline = self
            .config
            .duration
            .map(|d| started_ns + d.as_nanos() as u64);
        let ring_failed = !self.exchange_until(control, &mut pacer, deadline);
        let ended_ns = clock::monotonic_ns();
        self.publish();
        SenderOutcome {
            started_ns,
            ended_ns,
            ring_failed,
            time: ThreadTime::of_this_thread()
                .zip(time_before)
                .map(|(after, before)| after.since(before)),
            transmit_lag: None,
            transmit_lag_missing: 0,
            transmit_lag_reads: 0,
            round_trips: Some(self.rtt),
        }
    }
}
