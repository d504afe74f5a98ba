//! How a session of the books ends: a sender's goodbye with its true end (a tail that has not
//! all arrived waits for quiet first), an idle sweep, or the end of the run. Each close settles
//! the tracker, attributes the tail (failed sends, then kernel drops, then lost; without a
//! goodbye, unconfirmed) and answers into the outbox.

use super::{Books, chargeable, fold};
use crate::sink::mailbox::{CloseCause, FromWorker, Mailbox, SessionKey};

/// A goodbye whose tail has not all arrived waits until its flow has been quiet this long
/// since the goodbye and its last packet, as of the worker's latest look at its socket (a
/// worker descheduled between a reap and this check must not call its unread tail quiet).
/// Quiet is only a guess that the tail is gone: on a host starved of CPU, datagrams wait in
/// the sender's qdisc or a backlog queue for ksoftirqd, and 50 ms was seen to be too short
/// (21 datagrams of a tbf-limited run counted lost, then arriving) ...
const CLOSE_QUIET_NS: u64 = 250_000_000;
/// ... or this long after the goodbye, so packets still on the way are counted, not lost.
const CLOSE_WAIT_NS: u64 = 1_000_000_000;

impl Books {
    /// Closes the session at index position `at`. With `end`, the sender's true end and its
    /// failed-send total, the tail is lost; otherwise the tail up to its last progress report
    /// is unconfirmed. The final books go to the outbox and the shared slot is freed.
    pub(super) fn close(
        &mut self,
        at: usize,
        end: Option<(u64, u64)>,
        cause: CloseCause,
        mailbox: &Mailbox,
    ) {
        let slot = self.index[at];
        let refusals = self.refusals(self.sessions[slot as usize].key.epoch);
        let s = &mut self.sessions[slot as usize];
        s.tracker.finish();
        let stated = end.or(s.progress);
        // The sender's failures the sink has not heard of (a send can fail after a later
        // number was stamped): the sender's total since the last packet (32 bits never wrap
        // within one tail). They count before the window's gaps settle, or a gap the goodbye
        // explains would be booked lost, and a count booked never comes back.
        let in_session = stated.map(|(_, failed_total)| {
            // A progress report older than the last packet is behind it: nothing late.
            let late = match (failed_total as u32).wrapping_sub(s.failed32) {
                ahead if ahead <= u32::MAX >> 1 => u64::from(ahead),
                _ => 0,
            };
            if s.stated_start {
                failed_total
            } else {
                s.failed.saturating_add(late)
            }
        });
        if let Some(in_session) = in_session {
            s.failed = s.failed.max(in_session);
        }
        fold(s, &mut self.per_flow, &mut self.counted_drops);
        if let (Some((tail_end, _)), Some(highest)) = (stated, s.tracker.highest()) {
            let in_session = s.failed;
            let tail = tail_end.saturating_sub(highest.saturating_add(1));
            let gaps = s.tracker.counters().lost + tail;
            let net = gaps.saturating_sub(in_session);
            let new = net.saturating_sub(s.netted);
            s.netted += new;
            s.counters.send_failed = s.counters.send_failed.max(in_session.min(gaps));
            if end.is_some() {
                let charged = if self.socket_drops > s.drops_mark {
                    chargeable(self.gro, self.socket_drops, self.charged_drops, new)
                } else {
                    0
                };
                self.charged_drops += charged;
                s.counters.kernel_drops += charged;
                self.counted_drops += charged;
                s.counters.lost += new - charged;
                self.per_flow[s.key.flow as usize].lost += new - charged;
            } else {
                s.counters.unconfirmed += new;
            }
        }
        // The run's last session here hands its figures to the registry before its answer.
        if let Some(figures) = s.figures.take() {
            self.figure_leases
                .close(&self.figures, s.key.epoch, figures);
        }
        let answer = FromWorker::Closed {
            slot,
            generation: s.generation,
            key: s.key,
            source: s.source,
            counters: s.counters,
            active_ns: (s.first_ns, s.last_ns),
            cause,
            refusals,
        };
        let _ = mailbox.outbox.push(answer);
        if let Some(shared) = mailbox.sessions.get(slot as usize) {
            shared.clear();
        }
        self.remove(at);
    }

    /// Answers a goodbye for `key`, which this worker has no session of.
    pub(super) fn disown(&self, key: SessionKey, mailbox: &Mailbox) {
        let refusals = self.refusals(key.epoch);
        let _ = mailbox.outbox.push(FromWorker::NotMine { key, refusals });
    }

    /// The worker's look at its socket that started at monotonic `at_ns` found no datagram.
    pub(crate) fn looked_empty(&mut self, at_ns: u64) {
        self.empty_look_ns = at_ns;
    }

    /// Goodbyes wait for their tail.
    pub(crate) fn closing(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Closes the deferred goodbyes whose tail arrived, whose flow went quiet, or whose wait
    /// is over, as of `now`: the start of the worker's latest look at its socket.
    pub(crate) fn retry_closes(&mut self, now: u64, mailbox: &Mailbox) {
        let mut i = 0;
        while i < self.deferred.len() {
            let (key, end, failed, arrived) = self.deferred[i];
            let Some(at) = self.find(key) else {
                // No session of its own (never opened, or closed meanwhile): disowned once the
                // socket was seen empty after the goodbye, or quiet for as long as a tail.
                if self.empty_look_ns >= arrived || now >= arrived.saturating_add(CLOSE_QUIET_NS) {
                    self.deferred.swap_remove(i);
                    self.disown(key, mailbox);
                } else {
                    i += 1;
                }
                continue;
            };
            let s = &self.sessions[self.index[at] as usize];
            let complete = s.tracker.highest().is_some_and(|h| h + 1 >= end);
            let quiet = now.saturating_sub(s.last_ns.max(arrived)) >= CLOSE_QUIET_NS;
            if complete || quiet || now >= arrived.saturating_add(CLOSE_WAIT_NS) {
                self.deferred.swap_remove(i);
                self.close(at, Some((end, failed)), CloseCause::Goodbye, mailbox);
            } else {
                i += 1;
            }
        }
    }

    /// Closes sessions idle since before `idle_before` (all of them with `None`), answering into
    /// the outbox. A session whose answer does not fit stays open until the next sweep.
    pub(crate) fn sweep(&mut self, idle_before: Option<u64>, mailbox: &Mailbox) {
        if idle_before.is_none() {
            self.retry_closes(u64::MAX, mailbox);
        }
        let mut i = 0;
        while i < self.live.len() {
            let slot = self.live[i] as usize;
            let s = &self.sessions[slot];
            let expired = idle_before.is_none_or(|t| s.last_ns < t);
            if expired && mailbox.outbox.len() < mailbox.outbox.capacity() {
                let cause = if idle_before.is_some() {
                    CloseCause::Idle
                } else {
                    CloseCause::End
                };
                if let Some(at) = self.find(s.key) {
                    self.close(at, None, cause, mailbox);
                    continue;
                }
            }
            i += 1;
        }
    }
}
