//! The sink's books per sender, kept beside the workers (never on them): what each sender said
//! on the control channel (or the in-process `pair` sender), the sessions the workers closed,
//! and the live sessions they publish. Senders are known by the name they give on the control
//! channel; a sender run without one is known by its source IP and its epoch (`IP/epoch`), so
//! one run is one sender however many flows, queues and source ports it uses. A sender restarted under the same
//! name is a new session (epoch) of the same sender, so its series continue. Each sender run's
//! clock (`latency_clock`: the sink's own, an estimated offset, or unknown) is kept here and
//! sent to the workers whenever its correction changes, so their books correct that run's
//! latency from then on.
//!
//! Workers are reached only through their lock-free mailboxes; the lock here is taken by the
//! reporter and the control threads alone.

use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use self::figures::{FigureBook, SenderFigures};
use super::{
    SinkShared,
    mailbox::{EpochRefusals, FromWorker, SessionKey, ToWorker},
    senders::{OTHER, SenderBooks, Tally},
    sizes::{ClassCount, SizeTable},
};
use crate::{
    clock,
    latency_clock::LatencyClock,
    stats::{Jitter, Latency, SessionCounters},
};

/// A session younger than this whose sender has not said hello yet is not attributed to its
/// source address yet, so a named sender's counts never move between two series.
const ATTRIBUTE_AFTER_NS: u64 = 2_000_000_000;

/// Disjoint active spans kept of pruned epochs: beyond it the two nearest are joined (the gap
/// between them, when the whole sink was idle, then counts as active).
const PRUNED_SPANS: usize = 4096;

/// One flow as the sender reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlowReport {
    /// Flow id.
    pub(crate) flow: u32,
    /// The flow's first sequence number this run.
    pub(crate) first_seq: u64,
    /// One past the highest sequence number sent.
    pub(crate) next_seq: u64,
    /// Sends of the flow that failed so far.
    pub(crate) failed: u64,
}

/// A sender's hello.
#[derive(Clone, Debug)]
pub(crate) struct Hello {
    /// The sender's name.
    pub(crate) name: String,
    /// Its run's epoch.
    pub(crate) epoch: u32,
    /// Its flows.
    pub(crate) flows: Vec<FlowReport>,
    /// Nanoseconds since its first send (0 before it).
    pub(crate) elapsed_ns: u64,
    /// A later step of a rate schedule (from 1): the same sender run, so no new session.
    pub(crate) step: u32,
    /// Its clock as the hello tells: the sink's own (same kernel), or unknown until an estimate.
    pub(crate) clock: LatencyClock,
    /// With a secret, the proof its datagrams carry (`proto::proof`).
    pub(crate) proof: Option<crate::proto::proof::RunProof>,
    /// How far a paced run's numbers can reach, on this sink's clock (`None`: unpaced, or a
    /// sender older than protocol version 8).
    pub(crate) reach: Option<crate::proto::reach::RunReach>,
}

/// What the sink saw of one sender run, after its goodbye.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunTally {
    /// Sum over the flows.
    pub(crate) totals: SessionCounters,
    /// Per flow id.
    pub(crate) flows: Vec<(u32, SessionCounters)>,
    /// Every worker answered for every flow in time.
    pub(crate) complete: bool,
    /// One-way latency of this sender's packets (the sink's latency cells' resolution).
    pub(crate) latency: Latency,
    /// Jitter of this sender's packets (|D| of consecutive packets of each of its sessions).
    pub(crate) jitter: Jitter,
    /// The sink's size classes of this sender's packets (empty when the sink did not say).
    pub(crate) sizes: Vec<ClassCount>,
    /// How its latency relates to its clock.
    pub(crate) clock: LatencyClock,
    /// Its datagrams that arrived after its hello but found no slot in a sink queue's session
    /// table (counted as invalid `table_full`, never as received or lost).
    pub(crate) refused: u64,
}

/// One sender's books, as the reporter shows them.
#[derive(Clone, Debug, Default)]
pub(crate) struct SenderRow {
    /// Name, or source address.
    pub(crate) name: String,
    /// Closed plus live sessions.
    pub(crate) counters: SessionCounters,
    /// Sessions (epochs) seen.
    pub(crate) sessions: u64,
    /// Sessions with packets still being counted.
    pub(crate) active_sessions: u64,
    /// Nanoseconds during which its sessions received packets (gaps between sessions excluded).
    pub(crate) active_ns: u64,
    /// How its latency relates to its clock (its latest run's with a known clock).
    pub(crate) clock: LatencyClock,
    /// It said hello (its name is its own, not `IP/epoch`).
    pub(crate) announced: bool,
    /// Its latency and jitter as figures.
    pub(crate) figures: SenderFigures,
    /// When its latest run's first datagram arrived, on this host's monotonic clock (`None`:
    /// none yet).
    pub(crate) first_rx_ns: Option<u64>,
}

/// What the registry keeps of one sender run beside its name and clock.
#[derive(Debug, Default)]
struct RunBook {
    /// Flow id → (start, next at hello).
    flows: HashMap<u32, (u64, u64)>,
    sink_predates: bool,
    span: Option<(u64, u64)>,
    /// Its end was said (one line per session, not per flow).
    ended: bool,
    /// What the Goodbye of each flow was answered with: a Goodbye repeated on a new connection
    /// (the verdict was lost on the way) gets the same answer, and nothing is booked twice.
    answered: HashMap<u32, SessionCounters>,
    /// The refusals the answered Goodbyes reported, for a repeated one.
    answered_refused: u64,
    /// Its latency and jitter cells until its verdict.
    figures: Option<Box<FigureBook>>,
    /// Some of its cells were let go before its verdict (too many runs waiting): its
    /// verdict's figures are unknown.
    figures_dropped: bool,
    /// Its verdict's figures, for a repeated Goodbye.
    answered_figures: SenderFigures,
}

/// What a sender's closed sessions counted: the UDP sink's [`Tally`].
#[derive(Debug, Default)]
struct ClosedBook {
    counters: SessionCounters,
    /// Sessions of its that ended and were pruned from its runs (their books are in
    /// `counters`).
    pruned_sessions: u64,
    /// The active time of those sessions, in ns.
    pruned_active_ns: u64,
    /// Latency and jitter cells of its runs' slots handed back so far.
    figures: Option<Box<FigureBook>>,
}

impl ClosedBook {
    fn of(counters: &SessionCounters) -> ClosedBook {
        ClosedBook {
            counters: *counters,
            ..ClosedBook::default()
        }
    }
}

impl Tally for ClosedBook {
    fn add(&mut self, other: &ClosedBook) {
        self.counters.add(&other.counters);
        self.pruned_sessions = self.pruned_sessions.saturating_add(other.pruned_sessions);
        self.pruned_active_ns = self.pruned_active_ns.saturating_add(other.pruned_active_ns);
        if let Some(f) = &other.figures {
            self.figures.get_or_insert_with(Box::default).add(f);
        }
    }
}

#[derive(Debug, Default)]
struct Waiting {
    answers: usize,
    found: Option<SessionCounters>,
    /// Each answering worker's refusals of the run.
    refusals: Vec<(usize, EpochRefusals)>,
}

#[derive(Debug)]
struct Inner {
    /// Every sender's closed sessions, and every run's own books.
    books: SenderBooks<ClosedBook, RunBook>,
    closed_generation: Vec<Vec<u64>>,
    waiting: HashMap<SessionKey, Waiting>,
    /// Epochs that are later steps of a sender's run (not sessions of their own).
    steps: std::collections::HashSet<u32>,
    unseen_lost: u64,
    /// For the log: sessions seen without a hello, sessions ended.
    events: Vec<timeline::SessionEvent>,
    /// The active spans of pruned epochs, disjoint and sorted (at most [`PRUNED_SPANS`]).
    pruned_spans: Vec<(u64, u64)>,
}

/// The sink's per-sender books.
#[derive(Debug)]
pub(crate) struct Registry {
    workers: Vec<Arc<SinkShared>>,
    started_ns: u64,
    sizes: Arc<SizeTable>,
    inner: Mutex<Inner>,
    /// This sink's random key for the series labels of runs without a hello.
    label_key: std::collections::hash_map::RandomState,
}

fn span_union(a: Option<(u64, u64)>, b: (u64, u64)) -> Option<(u64, u64)> {
    if b.0 == 0 {
        return a;
    }
    Some(a.map_or(b, |a| (a.0.min(b.0), a.1.max(b.1))))
}

impl Registry {
    /// Books over these workers' mailboxes; `started_ns` is when their sockets were bound.
    pub(crate) fn new(
        workers: Vec<Arc<SinkShared>>,
        max_senders: usize,
        started_ns: u64,
    ) -> Registry {
        let inner = Inner {
            books: SenderBooks::new(max_senders),
            closed_generation: workers
                .iter()
                .map(|w| vec![0; w.mailbox.sessions.len()])
                .collect(),
            waiting: HashMap::new(),
            steps: std::collections::HashSet::new(),
            unseen_lost: 0,
            events: Vec::new(),
            pruned_spans: Vec::new(),
        };
        Registry {
            workers,
            started_ns,
            sizes: Arc::default(),
            inner: Mutex::new(inner),
            label_key: std::collections::hash_map::RandomState::new(),
        }
    }

    /// The `sender` label of `row`'s series: its name, except that a run without a hello
    /// (`IP/epoch`) is `IP/run-` and a digest of its epoch under this sink's random key. The
    /// epoch is all an off-path injector must guess, and a scrape may be public.
    pub(crate) fn series_label(&self, row: &SenderRow) -> String {
        use std::hash::BuildHasher;
        match row.name.rsplit_once('/') {
            Some((ip, epoch)) if !row.announced && row.name != OTHER => {
                format!("{ip}/run-{:08x}", self.label_key.hash_one(epoch) as u32)
            }
            _ => row.name.clone(),
        }
    }

    /// The same books with the sink's size classes, for the verdicts.
    pub(crate) fn with_sizes(mut self, sizes: Arc<SizeTable>) -> Registry {
        self.sizes = sizes;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends one message to every worker (their inboxes are bounded: wait a little when full).
    fn broadcast(&self, message: ToWorker) {
        for worker in &self.workers {
            let mut message = message;
            for _ in 0..1000 {
                match worker.mailbox.inbox.push(message) {
                    Ok(()) => break,
                    Err(back) => {
                        message = back;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            }
        }
    }

    /// A sender said hello; returns the sink's uptime for the reply and a line to log.
    pub(crate) fn hello(&self, peer: Option<SocketAddr>, hello: &Hello) -> (u64, String) {
        let uptime = clock::monotonic_ns().saturating_sub(self.started_ns);
        // The sink was listening before the sender's first packet: its flows start where the
        // sender says. Otherwise the sink joined a running stream and counts from what it sees.
        let sink_predates = uptime > hello.elapsed_ns;
        let mut inner = self.lock();
        let from = peer.map_or_else(|| "this process".to_string(), |p| p.to_string());
        let booked = inner
            .books
            .announce(&hello.name, hello.epoch, hello.clock.clone(), || RunBook {
                sink_predates,
                ..RunBook::default()
            });
        let (name, sessions) = (&booked.name, booked.runs);
        if hello.step > 0 {
            inner.steps.insert(hello.epoch);
        }
        let line = match (booked.known, booked.new_run) {
            (true, true) if hello.step > 0 => format!(
                "sink: sender {name} from {from}: step {} (epoch {:08x})",
                hello.step + 1,
                hello.epoch
            ),
            (false, _) => format!(
                "sink: sender {name} from {from}: session 1 (epoch {:08x}, {} flows)",
                hello.epoch,
                hello.flows.len()
            ),
            (true, true) => format!(
                "sink: sender {name} from {from}: restarted, session {sessions} (epoch {:08x})",
                hello.epoch
            ),
            (true, false) => format!(
                "sink: sender {name} from {from}: reconnected (epoch {:08x})",
                hello.epoch
            ),
        };
        let correction = inner.books.correction(hello.epoch);
        let Some(run) = inner.books.runs.get_mut(&hello.epoch) else {
            return (uptime, line);
        };
        for f in &hello.flows {
            run.own
                .flows
                .entry(f.flow)
                .or_insert((f.first_seq, f.next_seq));
        }
        let predates = run.own.sink_predates;
        drop(inner);
        // Announced before its clock and starts, so its sessions are announced when they open.
        self.broadcast(ToWorker::Announce {
            epoch: hello.epoch,
            proof: hello.proof,
            reach: hello.reach,
            since_ns: clock::monotonic_ns().saturating_sub(hello.elapsed_ns),
        });
        if let Some(correction) = correction {
            self.broadcast(ToWorker::Clock {
                epoch: hello.epoch,
                correction,
            });
        }
        if predates {
            for f in &hello.flows {
                self.broadcast(ToWorker::Start {
                    key: SessionKey {
                        epoch: hello.epoch,
                        flow: f.flow,
                    },
                    start: f.first_seq,
                });
            }
        }
        (uptime, line)
    }

    /// A sender run's estimate of this sink's clock offset: its sessions correct their latency
    /// by it from now on (a run on the sink's own clock keeps offset 0).
    pub(crate) fn clock(&self, epoch: u32, offset_ns: i64, error_bound_ns: u64, rtt_ns: u64) {
        let changed = self
            .lock()
            .books
            .estimate(epoch, offset_ns, error_bound_ns, rtt_ns);
        if changed {
            self.broadcast(ToWorker::Clock {
                epoch,
                correction: offset_ns,
            });
        }
    }

    /// A sender's progress: lets a vanished sender's tail be bounded (`unconfirmed`).
    pub(crate) fn progress(&self, epoch: u32, flows: &[FlowReport]) {
        for f in flows {
            self.broadcast(ToWorker::Progress {
                key: SessionKey {
                    epoch,
                    flow: f.flow,
                },
                next_seq: f.next_seq,
                failed: f.failed,
            });
        }
    }

    /// A sender's goodbye: closes its flows with their true ends and returns what the sink saw,
    /// waiting up to `wait` for every worker's answer.
    pub(crate) fn goodbye(&self, epoch: u32, flows: &[FlowReport], wait: Duration) -> RunTally {
        let answered = |inner: &Inner, flow: u32| {
            inner
                .books
                .runs
                .get(&epoch)
                .and_then(|e| e.own.answered.get(&flow))
                .cloned()
        };
        // Flows answered before are not closed again: their sessions are gone from the workers.
        let fresh: Vec<FlowReport> = {
            let mut inner = self.lock();
            let fresh: Vec<FlowReport> = flows
                .iter()
                .filter(|f| answered(&inner, f.flow).is_none())
                .copied()
                .collect();
            for f in &fresh {
                inner.waiting.insert(
                    SessionKey {
                        epoch,
                        flow: f.flow,
                    },
                    Waiting::default(),
                );
            }
            fresh
        };
        for f in &fresh {
            self.broadcast(ToWorker::Close {
                key: SessionKey {
                    epoch,
                    flow: f.flow,
                },
                end: f.next_seq,
                failed: f.failed,
            });
        }
        let deadline = clock::monotonic_ns() + wait.as_nanos() as u64;
        let mut verdict = RunTally::default();
        loop {
            let mut inner = self.lock();
            self.drain(&mut inner);
            let done = fresh.iter().all(|f| {
                inner
                    .waiting
                    .get(&SessionKey {
                        epoch,
                        flow: f.flow,
                    })
                    .is_some_and(|w| w.found.is_some() || w.answers >= self.workers.len())
            });
            if done || clock::monotonic_ns() >= deadline {
                verdict.complete = done;
                let refusals = run_refusals(flows.iter().filter_map(|f| {
                    inner.waiting.get(&SessionKey {
                        epoch,
                        flow: f.flow,
                    })
                }));
                let earlier = inner
                    .books
                    .runs
                    .get(&epoch)
                    .map_or(0, |e| e.own.answered_refused);
                verdict.refused = refusals.packets.max(earlier);
                if let Some(e) = inner.books.runs.get_mut(&epoch) {
                    e.own.answered_refused = verdict.refused;
                }
                for f in flows {
                    let key = SessionKey {
                        epoch,
                        flow: f.flow,
                    };
                    let counters = match answered(&inner, f.flow) {
                        Some(c) => c,
                        None => {
                            let w = inner.waiting.remove(&key).unwrap_or_default();
                            let definitive = match w.found {
                                Some(c) => Some(c),
                                None if w.answers >= self.workers.len() => {
                                    Some(self.never_seen(&mut inner, epoch, f, refusals.uncertain))
                                }
                                None => None,
                            };
                            if let (Some(c), Some(e)) =
                                (&definitive, inner.books.runs.get_mut(&epoch))
                            {
                                e.own.answered.insert(f.flow, *c);
                            }
                            definitive.unwrap_or_default()
                        }
                    };
                    verdict.totals.add(&counters);
                    verdict.flows.push((f.flow, counters));
                }
                let figures = if fresh.is_empty() {
                    inner
                        .books
                        .runs
                        .get(&epoch)
                        .map(|e| e.own.answered_figures)
                        .unwrap_or_default()
                } else {
                    let f = self.run_figures(&mut inner, epoch, &verdict.totals);
                    if let Some(e) = inner.books.runs.get_mut(&epoch) {
                        e.own.answered_figures = f;
                    }
                    f
                };
                verdict.latency = Latency::from_cells(&verdict.totals.latency_cells)
                    .with_figures(figures.latency);
                verdict.jitter = Jitter::of(&verdict.totals).with_figures(figures.jitter);
                verdict.clock = inner.books.clock_of(epoch);
                verdict.sizes = self
                    .sizes
                    .counts(&verdict.totals.size_packets, verdict.totals.bytes);
                return verdict;
            }
            drop(inner);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A flow no worker ever saw a packet of: everything it sent from where the sink could
    /// have seen it is lost, less its failed sends, or unconfirmed when datagrams were refused
    /// while its run was on (they may have been its own). Booked under its sender.
    fn never_seen(
        &self,
        inner: &mut Inner,
        epoch: u32,
        f: &FlowReport,
        refused: bool,
    ) -> SessionCounters {
        let Some(e) = inner.books.runs.get(&epoch) else {
            return SessionCounters::default();
        };
        let (start, next_at_hello) = e
            .own
            .flows
            .get(&f.flow)
            .copied()
            .unwrap_or((f.first_seq, 0));
        let from = if e.own.sink_predates {
            start
        } else {
            next_at_hello
        };
        let sent = f.next_seq.saturating_sub(from);
        let missing = sent.saturating_sub(f.failed);
        let counters = SessionCounters {
            lost: if refused { 0 } else { missing },
            unconfirmed: if refused { missing } else { 0 },
            send_failed: f.failed.min(sent),
            ..SessionCounters::default()
        };
        let name = e.name.clone();
        inner.unseen_lost += counters.lost;
        inner
            .books
            .book_closed(name, epoch, &ClosedBook::of(&counters));
        counters
    }

    /// Moves the workers' answers into the books.
    /// The workers' figure slots handed back are added in after their answers, so a run whose
    /// last answer was read has all its figures.
    fn drain(&self, inner: &mut Inner) {
        self.drain_answers(inner);
        self.harvest_figures(inner);
    }

    fn drain_answers(&self, inner: &mut Inner) {
        for (w, worker) in self.workers.iter().enumerate() {
            while let Some(answer) = worker.mailbox.outbox.pop() {
                match answer {
                    FromWorker::NotMine { key, refusals } => {
                        if let Some(wait) = inner.waiting.get_mut(&key) {
                            wait.answers += 1;
                            wait.refusals.push((w, refusals));
                        }
                    }
                    FromWorker::Closed {
                        slot,
                        generation,
                        key,
                        source,
                        counters,
                        active_ns,
                        cause,
                        refusals,
                    } => {
                        if let Some(g) = inner.closed_generation[w].get_mut(slot as usize) {
                            *g = (*g).max(generation);
                        }
                        if let Some(wait) = inner.waiting.get_mut(&key) {
                            wait.answers += 1;
                            wait.found = Some(counters);
                            wait.refusals.push((w, refusals));
                        }
                        let name = self.sender_of(inner, key.epoch, source);
                        let closed = ClosedBook::of(&counters);
                        inner.books.book_closed(name, key.epoch, &closed);
                        self.note_span(inner, key.epoch, source, active_ns);
                        self.note_end(inner, key.epoch, cause);
                    }
                }
            }
        }
    }

    fn sender_of(&self, inner: &Inner, epoch: u32, source: Option<SocketAddr>) -> String {
        inner
            .books
            .sender_of(epoch, || unannounced_name(epoch, source))
    }

    fn note_span(
        &self,
        inner: &mut Inner,
        epoch: u32,
        source: Option<SocketAddr>,
        span: (u64, u64),
    ) {
        if !inner.books.runs.contains_key(&epoch) {
            let name = self.sender_of(inner, epoch, source);
            inner.events.push(timeline::SessionEvent::Start {
                sender: name.clone(),
                epoch,
            });
            inner.books.seen(epoch, name, RunBook::default);
        }
        if let Some(e) = inner.books.runs.get_mut(&epoch) {
            e.own.span = span_union(e.own.span, span);
        }
    }
}

/// The name of a sender run that never said hello: its source IP and epoch (never its port:
/// each of its flows may come from a port of its own).
pub(crate) fn unannounced_name(epoch: u32, source: Option<SocketAddr>) -> String {
    match source {
        Some(s) => format!("{}/{epoch:08x}", s.ip()),
        None => format!("unknown/{epoch:08x}"),
    }
}

/// A run's refusals over every worker: each worker's count once (its answers for the run's
/// flows all carry the same count), summed; uncertain if any worker was.
fn run_refusals<'a>(waits: impl Iterator<Item = &'a Waiting>) -> EpochRefusals {
    let mut per_worker: BTreeMap<usize, EpochRefusals> = BTreeMap::new();
    for (w, r) in waits.flat_map(|wait| wait.refusals.iter()) {
        let e = per_worker.entry(*w).or_default();
        e.packets = e.packets.max(r.packets);
        e.uncertain |= r.uncertain;
    }
    per_worker
        .values()
        .fold(EpochRefusals::default(), |acc, r| EpochRefusals {
            packets: acc.packets + r.packets,
            uncertain: acc.uncertain || r.uncertain,
        })
}

mod figures;
mod reports;
mod timeline;

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
