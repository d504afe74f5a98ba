//! The TCP sender worker's loop: connect what is due, queue the writes the pacer allows,
//! submit, reap, publish every 10 ms; at the end, FIN every stream and wait (bounded) for the
//! sink to acknowledge every record.

use std::os::fd::AsRawFd;

use super::{MAX_SLEEP_NS, PUBLISH_EVERY_NS, STOP_GRACE_NS, State, TcpSendOutcome, TcpSendWorker};
use crate::{clock, pacing::Pacer, ring::Wait};

impl TcpSendWorker {
    /// When the next connection that is down is due to reconnect.
    fn next_reconnect_ns(&self) -> Option<u64> {
        self.conns
            .iter()
            .filter(|c| c.state == State::Down)
            .map(|c| c.retry_at)
            .min()
    }

    /// Sends FIN on every connection, so the sink sees each stream end cleanly, and waits (at
    /// most [`STOP_GRACE_NS`]) until the sink has acknowledged every record of every stream
    /// still up and closed it.
    fn drain(&mut self) {
        self.draining = true;
        for c in &self.conns {
            if let (State::Up, Some(s)) = (c.state, c.socket.as_ref()) {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
        }
        let until = clock::monotonic_ns() + STOP_GRACE_NS;
        let mut last_publish = 0;
        let stream = self.config.rr.is_none();
        while clock::monotonic_ns() < until
            && self
                .conns
                .iter()
                .any(|c| c.state == State::Up && (!stream || c.acked < c.next_seq))
        {
            let wait = Wait::One {
                timeout_ns: MAX_SLEEP_NS,
            };
            if self.engine.submit(wait).is_err() {
                break;
            }
            self.reap();
            // A search samples the acknowledgements as its trial's drain ends.
            let now = clock::monotonic_ns();
            if now - last_publish >= PUBLISH_EVERY_NS {
                self.publish();
                last_publish = now;
            }
        }
    }
}

impl crate::worker::Job for TcpSendWorker {
    type Output = TcpSendOutcome;

    fn arena(&self) -> &crate::mem::Arena {
        self.engine.arena()
    }

    fn run(mut self, control: &crate::worker::Control) -> TcpSendOutcome {
        let started_ns = clock::monotonic_ns();
        let burst = self.config.records_per_write() * u64::from(self.config.conns);
        let mut pacer = Pacer::new(self.config.rate_rps, started_ns, burst);
        let deadline = self
            .config
            .duration
            .map(|d| started_ns + d.as_nanos() as u64);
        let mut remaining = self.config.count.unwrap_or(u64::MAX);
        let mut last_publish = started_ns;
        let mut stop_at: Option<u64> = None;
        let mut ring_failed = false;
        // Since when records have been due that the kernel held back (every connection up
        // had a write it had not finished: the peer's or the path's flow control).
        let mut held_since: Option<u64> = None;
        loop {
            let now = clock::monotonic_ns();
            if let Some(since) = held_since.take() {
                self.counters.backpressure_ns += now.saturating_sub(since);
            }
            // Stopping, or records are due that no connection could take (all down, connecting
            // or with a write in flight): the next event is a completion or a reconnect, not
            // the pacer.
            let mut blocked = stop_at.is_some();
            if stop_at.is_none()
                && (control.stop_requested()
                    || remaining == 0
                    || deadline.is_some_and(|d| now >= d))
            {
                stop_at = Some(now);
            }
            match stop_at {
                Some(at)
                    if (self.writing == 0 && self.outstanding() == 0)
                        || now - at > STOP_GRACE_NS =>
                {
                    break;
                }
                Some(_) => {}
                None => {
                    self.connect_due(now);
                    let budget = pacer.allowance(now).min(remaining);
                    if budget > 0 {
                        let queued = self.push_writes(budget, clock::realtime_ns());
                        pacer.commit(queued);
                        remaining -= queued;
                        blocked = queued < budget;
                        if blocked && self.writing > 0 {
                            held_since = Some(now);
                        }
                    }
                }
            }
            let until = if blocked {
                self.next_reconnect_ns().unwrap_or(u64::MAX)
            } else {
                pacer.next_due_ns().unwrap_or(u64::MAX)
            }
            .min(now + MAX_SLEEP_NS);
            let timeout_ns = until.saturating_sub(now).clamp(1_000, MAX_SLEEP_NS);
            if self.engine.submit(Wait::One { timeout_ns }).is_err() {
                ring_failed = true;
                break;
            }
            self.reap();
            if now - last_publish >= PUBLISH_EVERY_NS {
                self.publish();
                last_publish = now;
            }
        }
        if !ring_failed {
            self.drain();
        }
        self.publish();
        // The sockets close when the worker is dropped, right after this: each connection's
        // final TCP_INFO first, now that the drain has seen its records acknowledged.
        for (i, c) in self.conns.iter().enumerate() {
            self.shared
                .fds
                .down(i, c.socket.as_ref().map(|s| s.as_raw_fd()));
        }
        TcpSendOutcome {
            started_ns,
            ended_ns: clock::monotonic_ns(),
            ring_failed,
        }
    }
}
