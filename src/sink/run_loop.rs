//! The sink worker's loop: how it waits for completions (`RxWait`) while traffic flows and
//! when it is slow, when it publishes its counters and sweeps idle sessions, and how it stops
//! (at the deadline, on a stop, or once a drain has gone quiet), counting what already
//! completed before it closes the books.

use std::os::fd::AsRawFd;

use super::{SinkOutcome, SinkWorker, USER_DATA_RECV};
use crate::{
    clock,
    host_time::ThreadTime,
    ring::Wait,
    worker::{Control, Job},
};

const PUBLISH_EVERY_NS: u64 = 10_000_000;
/// Traffic counts as flowing while the last packet is at most this old: a queue that sees a
/// packet at least every 100 µs (10 kpps and up) waits the busy way (`RxWait`), a slower one
/// sleeps until its next completion, so paced soak runs do not burn a core per sink queue.
const SPIN_AFTER_PACKET_NS: u64 = 100_000;
/// A sink answering requests polls for the next one this long after its last packet (not
/// with `--rx-wait sleep`), then sleeps until it comes.
const EXCHANGE_POLL_NS: u64 = 50_000;
/// `RxWait::Batch`: completions to wait for while traffic flows ...
const BATCH_COMPLETIONS: u32 = 32;
/// ... or this long, whichever comes first.
pub(super) const BATCH_WAIT_NS: u64 = 50_000;

/// How a sink worker waits for completions while traffic flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxWait {
    /// Sleep until 32 completions are ready or 50 µs pass (default): the sending core rarely
    /// pays for a wake-up and the sink core stays mostly idle.
    Batch,
    /// Never sleep while traffic flows, one full core per queue. A UDP sink receives inline
    /// (as `Inline`) with the batches back to back, so no poll is armed and the sending core
    /// runs no wake-up; one poll when traffic stops. A TCP sink polls its completion queue.
    Spin,
    /// Sleep until the next completion.
    Sleep,
    /// Receive inline: batches of non-blocking receives run in the sink's own context with no
    /// poll armed while traffic flows, so the sending core never runs a wake-up for them; a
    /// 50 µs sleep when the socket is empty, one poll when traffic stops.
    Inline,
}
impl RxWait {
    /// The worker receives with batches of non-blocking receives (`inline`), not a multishot.
    pub(super) fn receives_inline(self) -> bool {
        matches!(self, RxWait::Inline | RxWait::Spin)
    }
}

pub(super) const SLEEP_NS: u64 = 10_000_000;
/// While draining, stop after this long without a packet.
const DRAIN_IDLE_NS: u64 = 300_000_000;
/// While draining, stop after this long in any case.
const DRAIN_MAX_NS: u64 = 3_000_000_000;
/// How often idle sessions are looked for.
const SWEEP_EVERY_NS: u64 = 100_000_000;

impl Job for SinkWorker {
    type Output = SinkOutcome;

    fn arena(&self) -> &crate::mem::Arena {
        self.engine.arena()
    }

    fn run(mut self, control: &Control) -> SinkOutcome {
        let time_before = ThreadTime::of_this_thread();
        let started = clock::monotonic_ns();
        let deadline = self.config.duration.map(|d| started + d.as_nanos() as u64);
        let fd = self.socket.as_raw_fd();
        let mut last_publish = started;
        let mut last_sweep = started;
        let idle_ns = self.config.session_idle.as_nanos() as u64;
        let mut drain_started = None;
        let mut ring_failed = false;
        // What senders said before this worker was released (`pair`'s hello: its flows'
        // starts and its clock) applies from the first packet on.
        self.drain_inbox(started);
        loop {
            let now = clock::monotonic_ns();
            if control.stop_requested() || deadline.is_some_and(|d| now >= d) {
                break;
            }
            if control.drain_requested() {
                let since = *drain_started.get_or_insert(now);
                let idle_since = self.last_packet_ns.max(since);
                if now - idle_since >= DRAIN_IDLE_NS || now - since >= DRAIN_MAX_NS {
                    break;
                }
            }
            let busy = self.config.wait != RxWait::Sleep
                && self.last_packet_ns != 0
                && now - self.last_packet_ns < SPIN_AFTER_PACKET_NS;
            // Requests wait for their answers' round trip: wake on the next one, not a batch.
            let exchanging = self.last_answer_ns != 0 && now - self.last_answer_ns < DRAIN_IDLE_NS;
            let wait = if exchanging
                && self.config.wait != RxWait::Sleep
                && now - self.last_packet_ns < EXCHANGE_POLL_NS
            {
                // Requests come back within a round trip of each answer: poll for the next
                // one for a while, as a TCP sink does, instead of paying a wake-up for each.
                Wait::Poll
            } else if exchanging {
                // The answers in flight complete at once; wait for them and the next request
                // in one call.
                Wait::Many {
                    count: self.answers.in_flight() as u32 + 1,
                    timeout_ns: SLEEP_NS,
                }
            } else if busy {
                Wait::Many {
                    count: BATCH_COMPLETIONS,
                    timeout_ns: BATCH_WAIT_NS,
                }
            } else {
                Wait::One {
                    timeout_ns: SLEEP_NS,
                }
            };
            let (got, armed) = if self.config.wait.receives_inline() {
                match self.inline_step(fd, busy) {
                    Ok(got) => (got, true),
                    Err(_) => {
                        ring_failed = true;
                        break;
                    }
                }
            } else {
                if self.engine.submit(wait).is_err() {
                    ring_failed = true;
                    break;
                }
                self.reap()
            };
            if !got {
                self.books.looked_empty(now);
            }
            if got {
                let t = clock::monotonic_ns();
                if self.first_packet_ns == 0 {
                    self.first_packet_ns = t;
                }
                self.last_packet_ns = t;
                self.counters.last_packet_unix_ns = clock::realtime_ns();
            }
            if !armed {
                self.counters.rearms += 1;
                self.recv
                    .push_multishot(&mut self.engine, fd, USER_DATA_RECV);
            }
            if now - last_publish >= PUBLISH_EVERY_NS {
                // `now` is when this step started to look at the socket.
                self.publish(now);
                last_publish = now;
            }
            if now - last_sweep >= SWEEP_EVERY_NS {
                self.books
                    .sweep(Some(now.saturating_sub(idle_ns)), &self.shared.mailbox);
                last_sweep = now;
            }
        }
        // Count what already completed before closing the books.
        let got = if self.config.wait.receives_inline() {
            self.inline_step(fd, false).unwrap_or(false)
        } else {
            let _ = self.engine.submit(Wait::Poll);
            self.reap().0
        };
        if got {
            self.last_packet_ns = clock::monotonic_ns();
        }
        self.finish();
        SinkOutcome {
            active: (self.first_packet_ns != 0)
                .then_some((self.first_packet_ns, self.last_packet_ns)),
            latency: self.latency,
            queueing: self.queueing,
            ring_failed,
            loop_ns: clock::monotonic_ns().saturating_sub(started),
            time: ThreadTime::of_this_thread()
                .zip(time_before)
                .map(|(after, before)| after.since(before)),
        }
    }
}
