//! The sink worker's books: a fixed-capacity, open-addressed table of sessions keyed by
//! (epoch, flow), one sequence tracker each, allocated at set-up and never grown. Two senders
//! that both use flow 0 have different epochs, so they never close each other's session; a
//! restarted sender is a new epoch, so it never shows as false loss or reordering.
//!
//! Gaps are attributed in this order, each never counted twice:
//! 1. **failed sends**: every header carries its flow's failed-send count (mod 2^32), so a gap
//!    the sender could not send is netted out as `send_failed`, live, without a control
//!    channel. The count is known within [`MAX_SEND_LAG`] packets, long before a gap settles
//!    at the back of the reorder window, so netting only settled gaps keeps `lost` monotonic;
//! 2. **kernel drops** on this socket (`SO_RXQ_OVFL`): a gap that opens while the counter
//!    moved is charged to them (with GRO one dropped buffer may hold 64 datagrams, so this is a
//!    heuristic; without GRO charges never exceed the counter);
//! 3. what remains is `lost`.
//!
//! A goodbye closes a session with its true end, so a dropped tail is lost exactly. A session
//! idle for `--session-idle` is closed; its tail after the last packet, up to the sender's last
//! progress report, is `unconfirmed`: its fate is unknown, so it is neither lost nor nothing.
//!
//! **Admission**: a session opened by a sender run that said hello (`ToWorker::Announce`) is
//! *announced*; one opened by data alone is *unannounced*. Unannounced sessions hold at most
//! `max_unannounced` slots ([`Admission`]), so the rest of the table is reserved for announced
//! senders and forged datagrams (random epochs, flows, ports) can never take it; a sink with a
//! secret refuses them outright once its start-up grace is over. A refused datagram
//! arrived, so it is never lost: it counts as invalid (`unannounced` or `table_full`), and an
//! announced run whose datagrams were refused while it ran does not claim the sequence numbers
//! its books never saw as lost (its stated start is dropped, its refusals go to its verdict).
//!
//! **Latency** is taken here, after the session lookup, because each session holds its sender
//! run's clock correction (`latency_clock`): the sink's clock minus the sender's, 0 on the same
//! kernel, or the control channel's estimate, set by a `ToWorker::Clock` for the session's
//! epoch (kept for the epoch's sessions still to come, up to [`CLOCK_EPOCHS`] epochs). The
//! one-way latency is the receive time less the header's send time less the correction, in
//! signed arithmetic; one still negative (the estimate's error) is taken as 0 and counted as
//! clamped. A session without a correction takes no sample and counts the packet as
//! `latency_unknown`: a raw difference of two clocks would be their offset, not a latency.
//!
//! **Jitter** is counted in the same step, from the same corrected transit: |D| of RFC 3550
//! section 6.4.1, the difference between this sample's transit and the session's previous
//! one (in arrival order), into a cell and that cell's sum. A session without a correction
//! gives no jitter either, though D would cancel a constant offset: the rule is one for every
//! latency figure, and an estimate that changes would not be constant. So a new correction
//! also forgets the previous transit (the difference across it would hold the change).

use std::{net::SocketAddr, sync::Arc};

use super::{
    figure_pool::{FigureLeases, FigurePool},
    mailbox::{CloseCause, EpochRefusals, Mailbox, SessionKey, SessionView, ToWorker},
};
use crate::{
    proto::{
        header::extend_seq,
        proof::{Proof, RunProof},
        reach::RunReach,
        seq::{Outcome, SeqCounters, SeqTracker, WINDOW},
    },
    stats::{NO_TRANSIT, RxFlow, SessionCounters, count_jitter, latency_cell},
};

/// The most packets of one flow a sender keeps in flight, so a failure is known to the sink
/// within this many sequence numbers (the sender refuses a larger `--window` × `--gso`).
pub(crate) const MAX_SEND_LAG: u64 = WINDOW / 2;
/// The fastest one flow is taken to send, in ns per datagram (250 M datagrams/s: above what one
/// connected socket on one queue reaches, GSO included; 100 GbE at 64 B is 148.8 Mpps).
pub(crate) const CEILING_NS_PER_DATAGRAM: u64 = 4;
/// How far the sink's reading may lag the sender's sending (a stalled sink reads a backlog in a
/// burst), in ns: the plausibility bound counts this much time on top of what it measured.
pub(crate) const READ_LAG_SLACK_NS: u64 = 100_000_000;
/// Bytes of memory one session takes (tracker bitmap included).
pub(crate) const SESSION_BYTES: usize = std::mem::size_of::<Session>() + (WINDOW / 8) as usize;
// docs/pairing.md states about 3.2 KiB per session (3.1 KiB before the run's reach, 2.6 KiB
// before the per-sender latency sums and jitter cells, 2.5 KiB before the size classes): keep
// it true.
const _: () = assert!(SESSION_BYTES <= 3_280);
const EMPTY: u32 = u32::MAX;
const PENDING_STARTS: usize = 1024;
/// Epochs whose clock correction waits for sessions still to come (the oldest is overwritten).
pub(crate) const CLOCK_EPOCHS: usize = 1024;
/// Announced sender runs a worker remembers (the oldest is overwritten).
pub(crate) const ANNOUNCED_EPOCHS: usize = 1024;
const DEFERRED_CLOSES: usize = 4096;

/// One session's state.
#[derive(Debug)]
struct Session {
    key: SessionKey,
    generation: u64,
    tracker: SeqTracker,
    folded: SeqCounters,
    /// Settled gaps net of failed sends, as far as counted.
    netted: u64,
    /// The last failed-send count (mod 2^32) seen at the highest sequence number.
    failed32: u32,
    /// Failed sends reported since the session's first packet.
    failed: u64,
    /// The start was stated by the sender (its failures all lie inside the session).
    stated_start: bool,
    /// The failed-send count (mod 2^32) of the first packet: failures before it.
    first_failed32: u32,
    drops_mark: u64,
    kernel_budget: u64,
    counters: SessionCounters,
    source: Option<SocketAddr>,
    first_ns: u64,
    last_ns: u64,
    /// Monotonic ns when the datagram with the highest sequence number so far arrived.
    high_ns: u64,
    progress: Option<(u64, u64)>,
    /// The sink's clock minus the sender's, in ns; `None`: unknown, no latency samples.
    correction: Option<i64>,
    /// The corrected transit of its latest latency sample, for jitter ([`NO_TRANSIT`]: none).
    last_transit: i64,
    /// Its sender run said hello (it holds no unannounced slot).
    announced: bool,
    /// With a secret, the proof its run's datagrams carry (`proto::proof`): any other is refused.
    proof: Option<RunProof>,
    /// How far its paced run's numbers can reach (`proto::reach`), and the limit last found
    /// at or above its highest number (the limit only grows, so most datagrams skip it;
    /// `u64::MAX` without a reach, so one comparison passes them all).
    reach: Option<RunReach>,
    reach_limit: u64,
    /// Its run's slot in the figure pool (`None`: the pool had none for it).
    figures: Option<u16>,
    dirty: bool,
}

/// Who may open a session: how many slots sessions opened by data alone may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Admission {
    /// Most slots unannounced sessions hold; the rest are reserved for announced senders.
    pub(crate) max_unannounced: usize,
    /// From this monotonic time on, unannounced datagrams get no slot at all (a sink with a
    /// secret, by default, after a grace for the senders that were running before it started);
    /// `u64::MAX`: never.
    pub(crate) refuse_unannounced_from_ns: u64,
    /// A sink with a secret: its senders mask a compact header's numbers with their run's
    /// proof, so a compact datagram is read only once its run said hello (before that, its
    /// numbers would be read masked: garbage sequence numbers and failed counts).
    pub(crate) compact_needs_proof: bool,
}

/// A sender run that said hello, as one worker knows it.
#[derive(Clone, Copy, Debug)]
struct Announced {
    epoch: u32,
    refusals: EpochRefusals,
    proof: Option<RunProof>,
    reach: Option<RunReach>,
}

/// Why a packet was not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The flow id is outside `0..max_flows`.
    FlowId,
    /// Its session is bound to another source address (that of its first datagram).
    Source,
    /// Its sequence number is further ahead than its flow could have sent since the session's
    /// highest, or beyond its paced run's reach (`proto::reach`), or its failed-send count rose
    /// by more than the numbers it spans could fail.
    Implausible,
    /// Every session slot it may take is taken.
    TableFull,
    /// Its run is proven (a sink with a secret) and it carries no proof, or a wrong one.
    Auth,
    /// Its sender never said hello, and the sink books only senders that did.
    Unannounced,
}

/// One valid packet, as the worker parsed it.
#[derive(Clone, Copy, Debug)]
pub struct Packet {
    pub key: SessionKey,
    pub seq: u64,
    pub failed32: u32,
    pub bytes: u64,
    pub source: Option<SocketAddr>,
    pub now_ns: u64,
    /// The sink's realtime clock when it was received (`clock::sink_realtime_ns`).
    pub now_real_ns: u64,
    /// The send timestamp of its header (the sender's realtime clock); none in a compact one.
    pub sent_ns: u64,
    /// It carried the compact header: `seq` holds only the low 32 bits, and no timestamp.
    pub compact: bool,
    /// The proof after its header (`proto::proof`).
    pub proof: Proof,
    /// Its size class (`sink::sizes`).
    pub size_class: usize,
    /// Kernel drops the books know of that happened after the kernel queued it (its
    /// `SO_RXQ_OVFL` count is older than the books' latest): a `/proc` read can run ahead of
    /// the datagrams still queued, and drops after a session's last datagram are its tail's.
    pub drops_behind: u64,
}

/// What a counted packet gave the latency books.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LatencySample {
    /// A compact header: no timestamp.
    NoTimestamp,
    /// Its session has no clock correction: no sample (counted as `latency_unknown`).
    Unknown,
    /// A copy of a number already received: no sample (its send time says nothing new, and a
    /// replayed copy could say anything).
    Duplicate,
    /// Its corrected one-way delay, in ns, and that delay's latency cell; `clamped` when the
    /// corrected transit came out negative and was taken as 0.
    Delay { ns: u64, cell: usize, clamped: bool },
}

/// The sessions one sink worker sees.
#[derive(Debug)]
pub struct Books {
    sessions: Vec<Session>,
    index: Vec<u32>,
    free: Vec<u32>,
    live: Vec<u32>,
    per_flow: Vec<RxFlow>,
    pending: Vec<(SessionKey, u64)>,
    pending_next: usize,
    /// Goodbyes waiting for their tail (or, with no session yet, for their head): key, end,
    /// failed, when the goodbye arrived.
    deferred: Vec<(SessionKey, u64, u64, u64)>,
    /// Monotonic ns at the start of the latest look at the socket that found no datagram.
    empty_look_ns: u64,
    next_generation: u64,
    socket_drops: u64,
    charged_drops: u64,
    /// Datagrams the sessions' books show as kernel drops (gaps charged to them).
    counted_drops: u64,
    gro: bool,
    /// The slot the last packet was counted in (`EMPTY` after a removal): the segments of one
    /// GRO buffer, and most datagrams in a row, belong to one session, so they skip the lookup.
    last_slot: u32,
    /// Clock corrections by epoch, for the epochs' sessions still to come.
    clocks: Vec<(u32, i64)>,
    clocks_next: usize,
    admission: Admission,
    /// Live sessions that are not announced.
    unannounced_live: usize,
    /// Sender runs that said hello, with what was refused of them.
    announced: Vec<Announced>,
    announced_next: usize,
    /// Monotonic ns of the latest refused datagram (0: none yet).
    last_refusal_ns: u64,
    /// The worker's mailbox holds messages not applied yet, maybe the hello of a run whose
    /// datagrams arrive now: until they are applied, a datagram of a run not announced opens
    /// no session ([`Refused::Unannounced`], which the worker answers by applying them and
    /// trying again), so a proven run's first compact datagrams are never read masked.
    announcements_waiting: bool,
    /// Latency and jitter figures per sender run, shared with the registry.
    figures: Arc<FigurePool>,
    figure_leases: FigureLeases,
}

fn hash(key: SessionKey) -> usize {
    let x = (u64::from(key.epoch) << 32 | u64::from(key.flow)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as usize
}

impl Books {
    /// Books for `capacity` sessions and flow ids `0..max_flows`; allocates everything now.
    pub fn new(capacity: usize, max_flows: usize, gro: bool) -> Books {
        Books {
            sessions: (0..capacity)
                .map(|_| Session {
                    key: SessionKey { epoch: 0, flow: 0 },
                    generation: 0,
                    tracker: SeqTracker::new(),
                    folded: SeqCounters::default(),
                    netted: 0,
                    failed32: 0,
                    failed: 0,
                    stated_start: false,
                    first_failed32: 0,
                    drops_mark: 0,
                    kernel_budget: 0,
                    counters: SessionCounters::default(),
                    source: None,
                    first_ns: 0,
                    last_ns: 0,
                    high_ns: 0,
                    progress: None,
                    correction: None,
                    last_transit: NO_TRANSIT,
                    announced: false,
                    proof: None,
                    reach: None,
                    reach_limit: u64::MAX,
                    figures: None,
                    dirty: false,
                })
                .collect(),
            index: vec![EMPTY; (capacity * 2).next_power_of_two().max(2)],
            free: (0..capacity as u32).rev().collect(),
            live: Vec::with_capacity(capacity),
            per_flow: vec![RxFlow::default(); max_flows],
            pending: Vec::with_capacity(PENDING_STARTS),
            pending_next: 0,
            deferred: Vec::with_capacity(DEFERRED_CLOSES),
            next_generation: 1,
            socket_drops: 0,
            charged_drops: 0,
            counted_drops: 0,
            gro,
            last_slot: EMPTY,
            clocks: Vec::with_capacity(CLOCK_EPOCHS),
            clocks_next: 0,
            admission: Admission {
                max_unannounced: capacity,
                refuse_unannounced_from_ns: u64::MAX,
                compact_needs_proof: false,
            },
            unannounced_live: 0,
            announced: Vec::with_capacity(ANNOUNCED_EPOCHS),
            announced_next: 0,
            last_refusal_ns: 0,
            announcements_waiting: false,
            figures: Arc::default(),
            figure_leases: FigureLeases::default(),
            empty_look_ns: 0,
        }
    }

    /// The worker says whether its mailbox holds messages not applied yet.
    pub(crate) fn set_announcements_waiting(&mut self, waiting: bool) {
        self.announcements_waiting = waiting;
    }

    /// The same books recording latency and jitter figures per sender run into `pool`
    /// (without: no figures).
    pub(crate) fn with_figures(mut self, pool: Arc<FigurePool>) -> Books {
        self.figure_leases = FigureLeases::new(pool.slots());
        self.figures = pool;
        self
    }

    /// The same books under `admission` (without: every slot open to every session).
    pub(crate) fn with_admission(mut self, admission: Admission) -> Books {
        self.admission = admission;
        self
    }

    /// Where sender run `epoch` is in the announced list, if it said hello.
    fn announced_at(&self, epoch: u32) -> Option<usize> {
        self.announced.iter().position(|a| a.epoch == epoch)
    }

    /// What was refused of sender run `epoch`.
    fn refusals(&self, epoch: u32) -> EpochRefusals {
        self.announced_at(epoch)
            .map(|i| self.announced[i].refusals)
            .unwrap_or_default()
    }

    /// Counts a datagram of `key` the books refused at monotonic `now_ns` (after `record`
    /// said why): an announced run's own refusals go to its verdict.
    pub(crate) fn note_refusal(&mut self, key: SessionKey, now_ns: u64) {
        self.last_refusal_ns = now_ns.max(1);
        if let Some(i) = self.announced_at(key.epoch) {
            let r = &mut self.announced[i].refusals;
            r.packets += 1;
            r.uncertain = true;
        }
    }

    /// Opens a session for `p`'s key if the admission allows it.
    fn open(&mut self, p: &Packet) -> Result<u32, Refused> {
        match self.announced_at(p.key.epoch) {
            Some(i) => {
                let Announced { proof, reach, .. } = self.announced[i];
                if !p.compact && proof.is_some_and(|r| !r.admits(&p.proof)) {
                    return Err(Refused::Auth);
                }
                let slot = self
                    .insert(p.key, p.source, true)
                    .ok_or(Refused::TableFull)?;
                let s = &mut self.sessions[slot as usize];
                s.proof = proof;
                s.reach = reach;
                s.reach_limit = if reach.is_some() { 0 } else { u64::MAX };
                Ok(slot)
            }
            None if self.announcements_waiting
                || p.now_ns >= self.admission.refuse_unannounced_from_ns
                || (p.compact && self.admission.compact_needs_proof) =>
            {
                Err(Refused::Unannounced)
            }
            None if self.unannounced_live >= self.admission.max_unannounced => {
                Err(Refused::TableFull)
            }
            None => self
                .insert(p.key, p.source, false)
                .ok_or(Refused::TableFull),
        }
    }

    /// Sender run `epoch` said hello; its first send was at monotonic `since_ns`, its
    /// datagrams carry `proof` (with a secret), and a paced run's numbers stay within `reach`.
    fn announce(
        &mut self,
        epoch: u32,
        since_ns: u64,
        proof: Option<RunProof>,
        reach: Option<RunReach>,
    ) {
        if self.announced_at(epoch).is_none() {
            let entry = Announced {
                epoch,
                refusals: EpochRefusals {
                    packets: 0,
                    uncertain: self.last_refusal_ns != 0 && self.last_refusal_ns >= since_ns,
                },
                proof,
                reach,
            };
            if self.announced.len() < ANNOUNCED_EPOCHS {
                self.announced.push(entry);
            } else {
                self.announced[self.announced_next] = entry;
                self.announced_next = (self.announced_next + 1) % ANNOUNCED_EPOCHS;
            }
        }
        for &slot in &self.live {
            let s = &mut self.sessions[slot as usize];
            if s.key.epoch == epoch {
                // A session opened before the hello (a sink's start-up grace) is proven, and
                // bounded by its run's reach, from now.
                s.proof = proof;
                s.reach = reach;
                s.reach_limit = if reach.is_some() { 0 } else { u64::MAX };
                if !s.announced {
                    s.announced = true;
                    self.unannounced_live -= 1;
                }
            }
        }
        self.figure_leases.announce(epoch);
    }

    /// Whether the session of the packet booked last was announced by its sender's hello or
    /// is proven by its run's proof: the sink answers its requests in full, where one opened
    /// by data alone gets answers no longer than its requests (nothing to amplify).
    pub(crate) fn last_vouched(&self) -> bool {
        self.sessions
            .get(self.last_slot as usize)
            .is_some_and(|s| s.announced || s.proof.is_some())
    }

    /// Tells the books the kernel dropped `n` more buffers on this socket.
    pub(crate) fn add_kernel_drops(&mut self, n: u64) {
        self.socket_drops += n;
    }

    /// Datagrams the kernel dropped on this socket. Without GRO its counter counts datagrams:
    /// the gaps charged to it, or the counter when larger (drops after the last packet leave no
    /// gap). With GRO the counter counts buffers of up to 64 datagrams, so the figure is what
    /// the sessions' books charged, and sent = received + kernel drops + lost holds exactly.
    pub(crate) fn kernel_drops(&self) -> u64 {
        if self.gro {
            self.counted_drops
        } else {
            self.charged_drops.max(self.socket_drops)
        }
    }

    /// Counters of flow id `flow`, summed over its sessions.
    pub(crate) fn flow(&self, flow: usize) -> RxFlow {
        self.per_flow.get(flow).copied().unwrap_or_default()
    }

    #[cfg(test)]
    /// Live sessions.
    pub(crate) fn live(&self) -> usize {
        self.live.len()
    }

    fn find(&self, key: SessionKey) -> Option<usize> {
        let mask = self.index.len() - 1;
        let mut at = hash(key) & mask;
        loop {
            let slot = self.index[at];
            if slot == EMPTY {
                return None;
            }
            if self.sessions[slot as usize].key == key {
                return Some(at);
            }
            at = (at + 1) & mask;
        }
    }

    fn insert(
        &mut self,
        key: SessionKey,
        source: Option<SocketAddr>,
        announced: bool,
    ) -> Option<u32> {
        let slot = self.free.pop()?;
        // Datagrams of its run were refused: its head may be among them, so the start its
        // sender stated is not taken (the sequence numbers before its first are not lost).
        let uncertain = self.refusals(key.epoch).uncertain;
        let mask = self.index.len() - 1;
        let mut at = hash(key) & mask;
        while self.index[at] != EMPTY {
            at = (at + 1) & mask;
        }
        self.index[at] = slot;
        self.live.push(slot);
        let generation = self.next_generation;
        self.next_generation += 1;
        let hint = self
            .pending
            .iter()
            .find(|(k, _)| *k == key && !uncertain)
            .map(|(_, start)| *start);
        let correction = self
            .clocks
            .iter()
            .find(|(epoch, _)| *epoch == key.epoch)
            .map(|(_, c)| *c);
        let s = &mut self.sessions[slot as usize];
        s.key = key;
        s.generation = generation;
        s.tracker.reset();
        s.folded = SeqCounters::default();
        s.netted = 0;
        s.failed = 0;
        s.stated_start = hint.is_some();
        if let Some(start) = hint {
            s.tracker.extend_start(start);
        }
        s.drops_mark = self.socket_drops;
        s.kernel_budget = 0;
        s.counters = SessionCounters::default();
        s.source = source;
        s.progress = None;
        s.correction = correction;
        s.last_transit = NO_TRANSIT;
        s.announced = announced;
        s.proof = None;
        s.reach = None;
        s.reach_limit = u64::MAX;
        s.figures = self.figure_leases.open(
            &self.figures,
            key.epoch,
            announced,
            super::mailbox::encode_source(source),
        );
        s.dirty = true;
        self.unannounced_live += usize::from(!announced);
        Some(slot)
    }

    /// Removes the session at index position `at` (backward-shift deletion keeps probes short).
    fn remove(&mut self, at: usize) {
        let mask = self.index.len() - 1;
        let slot = self.index[at];
        self.index[at] = EMPTY;
        let mut hole = at;
        let mut next = (at + 1) & mask;
        while self.index[next] != EMPTY {
            let home = hash(self.sessions[self.index[next] as usize].key) & mask;
            if (next.wrapping_sub(home) & mask) >= (next.wrapping_sub(hole) & mask) {
                self.index[hole] = self.index[next];
                self.index[next] = EMPTY;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        if let Some(pos) = self.live.iter().position(|&s| s == slot) {
            self.live.swap_remove(pos);
        }
        let s = &mut self.sessions[slot as usize];
        s.generation = 0;
        self.unannounced_live -= usize::from(!s.announced);
        self.free.push(slot);
        self.last_slot = EMPTY;
    }

    /// Counts one valid packet; returns what it gave the latency books.
    pub fn record(&mut self, p: Packet) -> Result<LatencySample, Refused> {
        if p.key.flow as usize >= self.per_flow.len() {
            return Err(Refused::FlowId);
        }
        let last = self.last_slot;
        let slot = if last != EMPTY && self.sessions[last as usize].key == p.key {
            last
        } else {
            match self.find(p.key) {
                Some(at) => self.index[at],
                None => self.open(&p)?,
            }
        };
        self.last_slot = slot;
        let s = &mut self.sessions[slot as usize];
        let mut p = p;
        match s.proof {
            Some(r) if p.compact => {
                let (failed32, seq32) = r.unmask(p.failed32, p.seq as u32);
                (p.failed32, p.seq) = (failed32, u64::from(seq32));
            }
            Some(r) if !r.admits(&p.proof) => return Err(Refused::Auth),
            // A session opened by full headers in a sink's start-up grace, before its hello:
            // its compact datagrams are masked with a proof not known yet.
            None if p.compact && self.admission.compact_needs_proof => {
                return Err(Refused::Unannounced);
            }
            _ => {}
        }
        if s.source != p.source {
            return Err(Refused::Source);
        }
        if p.compact {
            // The low 32 bits, next to the highest number so far (or the stated start).
            p.seq = extend_seq(s.tracker.reference().unwrap_or(0), p.seq as u32);
        }
        let queued_at = self.socket_drops.saturating_sub(p.drops_behind);
        let first = s.tracker.highest().is_none();
        let ahead = s.tracker.highest().map_or(0, |h| p.seq.saturating_sub(h));
        let failed_rise = u64::from(p.failed32.wrapping_sub(s.failed32));
        if p.seq >= s.reach_limit
            && let Some(reach) = s.reach
        {
            s.reach_limit = reach.limit(p.now_ns);
            if p.seq >= s.reach_limit {
                return Err(Refused::Implausible);
            }
        }
        if ahead > 0 && !plausible(s, &p, ahead, failed_rise, queued_at, self.gro) {
            return Err(Refused::Implausible);
        }
        let failed_before = s.failed;
        if first {
            s.failed32 = p.failed32;
            s.first_failed32 = p.failed32;
            if s.stated_start {
                s.failed = u64::from(p.failed32);
            }
            s.first_ns = p.now_ns;
            s.high_ns = p.now_ns;
        } else if ahead > 0 {
            s.failed += failed_rise;
            s.failed32 = p.failed32;
            s.high_ns = p.now_ns;
        }
        s.last_ns = p.now_ns;
        let outcome = s.tracker.observe(p.seq);
        if let Outcome::Gap(missing) = outcome
            && queued_at > s.drops_mark
        {
            let charged = chargeable(self.gro, self.socket_drops, self.charged_drops, missing);
            s.kernel_budget += charged;
            self.charged_drops += charged;
        }
        // The first datagram replaces the mark its session opened with (the books' latest).
        s.drops_mark = if first {
            queued_at
        } else {
            s.drops_mark.max(queued_at)
        };
        let duplicate = outcome == Outcome::Duplicate;
        if !duplicate {
            s.counters.bytes = s.counters.bytes.saturating_add(p.bytes);
            s.counters.size_packets[p.size_class] += 1;
        }
        let sample = match (p.compact, s.correction) {
            _ if duplicate => LatencySample::Duplicate,
            (true, _) => LatencySample::NoTimestamp,
            (false, None) => {
                s.counters.latency_unknown += 1;
                LatencySample::Unknown
            }
            (false, Some(correction)) => {
                let transit =
                    i128::from(p.now_real_ns) - i128::from(p.sent_ns) - i128::from(correction);
                let ns = transit.clamp(0, i128::from(u64::MAX)) as u64;
                let cell = latency_cell(ns);
                s.counters.latency_cells[cell] += 1;
                s.counters.latency_sum_ns[cell] =
                    s.counters.latency_sum_ns[cell].saturating_add(ns);
                let signed = transit.clamp(i128::from(i64::MIN + 1), i128::from(i64::MAX)) as i64;
                match s.figures {
                    Some(at) => {
                        let slot = self.figures.slot(at);
                        slot.latency.record(ns);
                        if s.last_transit != NO_TRANSIT {
                            slot.jitter.record(signed.abs_diff(s.last_transit));
                        }
                    }
                    None => s.counters.latency_unfigured += 1,
                }
                s.last_transit = count_jitter(&mut s.counters, s.last_transit, signed);
                let clamped = transit < 0;
                s.counters.latency_clamped += u64::from(clamped);
                LatencySample::Delay { ns, cell, clamped }
            }
        };
        let flow = &mut self.per_flow[p.key.flow as usize];
        if !duplicate {
            flow.bytes = flow.bytes.saturating_add(p.bytes);
        }
        let before = s.folded;
        if s.failed == failed_before
            && s.tracker.counters()
                == (SeqCounters {
                    received: before.received + 1,
                    ..before
                })
        {
            // Only `received` moved (a packet in order that settled no gap): all `fold` would
            // do, without the netting, which cannot change when `lost` and `failed` did not.
            // `failed` is compared with its value at the top of this call, which is its value
            // at the last fold: every other place that changes it (`apply`'s Start) folds at once.
            s.folded.received += 1;
            s.counters.packets += 1;
            flow.packets += 1;
            s.dirty = true;
        } else {
            fold(s, &mut self.per_flow, &mut self.counted_drops);
        }
        Ok(sample)
    }

    /// Applies one message from the inbox at monotonic time `now`. A close answers into the
    /// outbox at once, or once its tail has arrived or gone quiet (see `retry_closes`).
    pub fn apply(&mut self, message: ToWorker, mailbox: &Mailbox, now: u64) {
        match message {
            ToWorker::Start { key, .. } if self.refusals(key.epoch).uncertain => {}
            ToWorker::Start { key, start } => match self.find(key) {
                Some(at) => {
                    let s = &mut self.sessions[self.index[at] as usize];
                    s.tracker.extend_start(start);
                    if !s.stated_start {
                        s.stated_start = true;
                        s.failed += u64::from(s.first_failed32);
                    }
                    fold(s, &mut self.per_flow, &mut self.counted_drops);
                }
                None => {
                    if self.pending.len() < PENDING_STARTS {
                        self.pending.push((key, start));
                    } else {
                        self.pending[self.pending_next] = (key, start);
                        self.pending_next = (self.pending_next + 1) % PENDING_STARTS;
                    }
                }
            },
            ToWorker::Progress {
                key,
                next_seq,
                failed,
            } => {
                if let Some(at) = self.find(key) {
                    self.sessions[self.index[at] as usize].progress = Some((next_seq, failed));
                }
            }
            ToWorker::Clock { epoch, correction } => {
                for &slot in &self.live {
                    let s = &mut self.sessions[slot as usize];
                    if s.key.epoch == epoch && s.correction != Some(correction) {
                        s.correction = Some(correction);
                        s.last_transit = NO_TRANSIT;
                    }
                }
                match self.clocks.iter().position(|(e, _)| *e == epoch) {
                    Some(at) => self.clocks[at].1 = correction,
                    None if self.clocks.len() < CLOCK_EPOCHS => {
                        self.clocks.push((epoch, correction));
                    }
                    None => {
                        self.clocks[self.clocks_next] = (epoch, correction);
                        self.clocks_next = (self.clocks_next + 1) % CLOCK_EPOCHS;
                    }
                }
            }
            ToWorker::Announce {
                epoch,
                since_ns,
                proof,
                reach,
            } => self.announce(epoch, since_ns, proof, reach),
            ToWorker::Close { key, end, failed } => {
                self.pending.retain(|(k, _)| *k != key);
                self.pending_next = 0;
                match self.find(key) {
                    Some(at) => {
                        let s = &self.sessions[self.index[at] as usize];
                        // An incomplete tail always waits: datagrams may still sit in the
                        // socket, unread while this worker was not running.
                        let complete = s.tracker.highest().is_some_and(|h| h + 1 >= end);
                        if complete || self.deferred.len() == DEFERRED_CLOSES {
                            self.close(at, Some((end, failed)), CloseCause::Goodbye, mailbox);
                        } else {
                            self.deferred.push((key, end, failed, now));
                        }
                    }
                    // No session yet: its datagrams may still sit in the socket, unread while
                    // this worker was not running, so it is not disowned before the socket was
                    // seen empty (or quiet) after this goodbye (see `retry_closes`).
                    None if self.deferred.len() < DEFERRED_CLOSES => {
                        self.deferred.push((key, end, failed, now));
                    }
                    // The outbox holds one answer per session slot plus room for these.
                    None => self.disown(key, mailbox),
                }
            }
        }
    }

    /// Publishes every session whose books changed into its shared slot.
    pub(crate) fn publish(&mut self, mailbox: &Mailbox) {
        for &slot in &self.live {
            let s = &mut self.sessions[slot as usize];
            if !s.dirty {
                continue;
            }
            s.dirty = false;
            if let Some(shared) = mailbox.sessions.get(slot as usize) {
                shared.publish(
                    s.generation,
                    &SessionView {
                        generation: s.generation,
                        key: s.key,
                        source: s.source,
                        active_ns: (s.first_ns, s.last_ns),
                        counters: s.counters,
                    },
                );
            }
        }
    }
}

/// Whether datagram `p`, `ahead` numbers past session `s`'s highest, could have been sent by
/// the session's sender:
/// - its flow sends at most one datagram per [`CEILING_NS_PER_DATAGRAM`], so the numbers it
///   skips fit in the time since the highest arrived (plus [`READ_LAG_SLACK_NS`] for a sink
///   that read a backlog in a burst), plus one reorder window, plus what the socket's kernel
///   drops since then can hide (a whole GRO buffer each, with GRO);
/// - its failed-send count rose by no more than the numbers it spans, plus the
///   [`MAX_SEND_LAG`] numbers before them whose failure the sender learned late.
///
/// A legitimate datagram always passes, and one that fails changes no number: it is refused
/// as `implausible`, so a forged jump, such as one to 2^64−2, is never counted as loss.
fn plausible(
    s: &Session,
    p: &Packet,
    ahead: u64,
    failed_rise: u64,
    queued_at: u64,
    gro: bool,
) -> bool {
    let elapsed = p
        .now_ns
        .saturating_sub(s.high_ns)
        .saturating_add(READ_LAG_SLACK_NS);
    let dropped = queued_at.saturating_sub(s.drops_mark);
    let hidden = if gro {
        dropped.saturating_mul(64)
    } else {
        dropped
    };
    let reach = (elapsed / CEILING_NS_PER_DATAGRAM)
        .saturating_add(WINDOW)
        .saturating_add(hidden);
    ahead <= reach && failed_rise <= ahead.saturating_add(MAX_SEND_LAG)
}

/// How many of `missing` datagrams a kernel drop can explain: all of them with GRO (one
/// dropped buffer may hold many), otherwise no more than the drops not yet charged.
fn chargeable(gro: bool, socket_drops: u64, charged: u64, missing: u64) -> u64 {
    if gro {
        missing
    } else {
        missing.min(socket_drops.saturating_sub(charged))
    }
}

/// Moves the tracker's new counts into the session (and its flow id's totals): settled gaps
/// net of the failed sends heard of so far, then the kernel-drop budget, then lost.
fn fold(s: &mut Session, per_flow: &mut [RxFlow], counted_drops: &mut u64) {
    let now = s.tracker.counters();
    let before = s.folded;
    let net = now.lost.saturating_sub(s.failed).max(s.netted);
    let new = net - s.netted;
    s.netted = net;
    let by_kernel = new.min(s.kernel_budget);
    s.kernel_budget -= by_kernel;
    let c = &mut s.counters;
    let packets = now.received - before.received;
    let reordered = now.reordered - before.reordered;
    let duplicates = now.duplicates - before.duplicates;
    let late = now.late_beyond_window - before.late_beyond_window;
    c.packets += packets;
    c.lost += new - by_kernel;
    c.kernel_drops += by_kernel;
    *counted_drops += by_kernel;
    c.reordered += reordered;
    c.duplicates += duplicates;
    c.late += late;
    c.send_failed = c.send_failed.max(s.failed.min(now.lost));
    if let Some(f) = per_flow.get_mut(s.key.flow as usize) {
        f.packets += packets;
        f.lost += new - by_kernel;
        f.reordered += reordered;
        f.duplicates += duplicates;
        f.late += late;
    }
    s.folded = now;
    s.dirty = true;
}

#[path = "books_closing.rs"]
mod closing;

#[cfg(test)]
#[path = "books_tests.rs"]
mod tests;
