//! What the registry reports: every sender's books as rows (closed sessions plus the live ones
//! the workers publish, attributed once a sender has said hello or is old enough), the totals
//! per size class, and the loss of flows no queue ever saw.

use std::{
    collections::{BTreeMap, HashSet},
    net::SocketAddr,
};

use super::{ATTRIBUTE_AFTER_NS, Inner, PRUNED_SPANS, Registry, SenderRow};
use crate::{clock, stats::SessionCounters};

impl Registry {
    /// Valid packets per size class (the last cell: other lengths) and their payload bytes, over
    /// every sender's closed and live sessions (attributed or not).
    pub(crate) fn size_totals(&self) -> ([u64; crate::sink::sizes::CLASSES + 1], u64) {
        let mut inner = self.lock();
        self.drain(&mut inner);
        let mut total = SessionCounters::default();
        for book in inner.books.senders.values() {
            total.add(&book.closed.counters);
        }
        for (w, worker) in self.workers.iter().enumerate() {
            for (slot, shared) in worker.mailbox.sessions.iter().enumerate() {
                if let Some(view) = shared.load()
                    && view.generation > inner.closed_generation[w][slot]
                {
                    total.add(&view.counters);
                }
            }
        }
        (total.size_packets, total.bytes)
    }

    /// Packets lost in flows no sink queue ever saw (booked per sender, not per queue).
    pub(crate) fn unseen_lost(&self) -> u64 {
        self.lock().unseen_lost
    }

    /// Every sender's books now. With `all`, sessions too young to attribute are attributed
    /// anyway (the final summary).
    pub(crate) fn rows(&self, all: bool) -> Vec<SenderRow> {
        let mut inner = self.lock();
        self.drain(&mut inner);
        let now = clock::monotonic_ns();
        let mut live: BTreeMap<String, (SessionCounters, Vec<u32>)> = BTreeMap::new();
        let mut spans: Vec<(u32, Option<SocketAddr>, (u64, u64))> = Vec::new();
        for (w, worker) in self.workers.iter().enumerate() {
            for (slot, shared) in worker.mailbox.sessions.iter().enumerate() {
                let Some(view) = shared.load() else { continue };
                if view.generation <= inner.closed_generation[w][slot] {
                    continue;
                }
                let named = inner.books.runs.contains_key(&view.key.epoch);
                if !named && !all && now.saturating_sub(view.active_ns.0) < ATTRIBUTE_AFTER_NS {
                    continue;
                }
                let name = self.sender_of(&inner, view.key.epoch, view.source);
                // Booked at once, so the next session of this pass sees `--max-senders` filled.
                inner.books.senders.entry(name.clone()).or_default();
                let entry = live.entry(name).or_default();
                entry.0.add(&view.counters);
                if !entry.1.contains(&view.key.epoch) {
                    entry.1.push(view.key.epoch);
                }
                spans.push((view.key.epoch, view.source, view.active_ns));
            }
        }
        for (epoch, source, span) in spans {
            self.note_span(&mut inner, epoch, source, span);
        }
        for (name, (_, epochs)) in &live {
            let book = inner.books.senders.entry(name.clone()).or_default();
            for e in epochs {
                if !book.epochs.contains(e) {
                    book.epochs.push(*e);
                }
            }
        }
        let live_epochs: HashSet<u32> =
            live.values().flat_map(|(_, e)| e.iter().copied()).collect();
        prune(&mut inner, &live_epochs);
        let books = &inner.books;
        books
            .senders
            .iter()
            .map(|(name, book)| {
                let mut counters = book.closed.counters;
                let mut active_sessions = 0;
                if let Some((c, epochs)) = live.get(name) {
                    counters.add(c);
                    active_sessions = epochs.len() as u64;
                }
                let span = |e: &u32| books.runs.get(e).and_then(|e| e.own.span);
                let active_ns = book
                    .epochs
                    .iter()
                    .filter_map(span)
                    .map(|(a, b)| b - a)
                    .fold(book.closed.pruned_active_ns, u64::saturating_add);
                SenderRow {
                    name: name.clone(),
                    figures: self.live_figures(&inner, name, &counters),
                    counters,
                    sessions: book.closed.pruned_sessions
                        + book
                            .epochs
                            .iter()
                            .filter(|e| !inner.steps.contains(e))
                            .count() as u64,
                    active_sessions,
                    active_ns,
                    announced: book.announced,
                    clock: books.sender_clock(name),
                    // Its latest run is the one whose first datagram came last; a schedule's
                    // later steps (a search's later trials) are the same run.
                    first_rx_ns: book
                        .epochs
                        .iter()
                        .filter(|e| !inner.steps.contains(e))
                        .filter_map(span)
                        .map(|(a, _)| a)
                        .max(),
                }
            })
            .collect()
    }
}

/// Prunes the epochs seen in data alone that ended and have no live session: their books are
/// in their sender's `closed` already, so what is kept of them is their count and active time.
/// Forged runs with random epochs then cost the registry nothing once they go idle.
fn prune(inner: &mut Inner, live: &HashSet<u32>) {
    let ended: Vec<u32> = inner
        .books
        .runs
        .iter()
        .filter(|(e, run)| !run.announced && run.own.ended && !live.contains(e))
        .map(|(e, _)| *e)
        .collect();
    for e in ended {
        let Some(run) = inner.books.runs.remove(&e) else {
            continue;
        };
        let step = inner.steps.remove(&e);
        if let Some(book) = inner.books.senders.get_mut(&run.name) {
            book.epochs.retain(|x| *x != e);
            let closed = &mut book.closed;
            closed.pruned_sessions += u64::from(!step);
            closed.pruned_active_ns = closed
                .pruned_active_ns
                .saturating_add(run.own.span.map_or(0, |(a, b)| b - a));
        }
        if let Some(span) = run.own.span.filter(|(a, b)| b > a) {
            add_span(&mut inner.pruned_spans, span);
        }
    }
}

/// Adds `span` to `spans` (sorted, disjoint), joining what it overlaps; beyond
/// [`PRUNED_SPANS`] the two nearest neighbours are joined.
pub(super) fn add_span(spans: &mut Vec<(u64, u64)>, span: (u64, u64)) {
    let at = spans.partition_point(|s| s.1 < span.0);
    let mut joined = span;
    while at < spans.len() && spans[at].0 <= joined.1 {
        let s = spans.remove(at);
        joined = (joined.0.min(s.0), joined.1.max(s.1));
    }
    spans.insert(at, joined);
    if spans.len() > PRUNED_SPANS
        && let Some(i) = (1..spans.len()).min_by_key(|&i| spans[i].0 - spans[i - 1].1)
    {
        let right = spans.remove(i);
        spans[i - 1].1 = right.1;
    }
}
