//! The sink's inline receive mode (`--rx-wait inline`): no receive waits on the socket while
//! datagrams keep coming, so the sending core (which runs the loopback and veth receive path)
//! never runs io_uring's wake callback for them.
//!
//! Each step queues up to [`INLINE_BATCH`] non-blocking single-shot `RECVMSG`s
//! (`MSG_DONTWAIT`), each through its own slot of `recv_memory` (a `msghdr` with address and
//! control buffers in the arena) into a buffer of the provided-buffer ring. They run inside the
//! same `io_uring_enter`, in the sink's context, and complete with a datagram or `-EAGAIN`. The
//! batch follows the traffic (twice what the last one found, at least [`MIN_BATCH`]), so a
//! paced sink does not spend most receives on `-EAGAIN`. A batch that finds the socket empty
//! while traffic flows is followed by a 50 µs sleep with nothing armed (the datagrams queue up
//! meanwhile, as with `--rx-wait batch`); once traffic stops, one `POLL_ADD` waits for the next
//! datagram, so an idle or slowly paced sink sleeps instead of polling.

use std::os::fd::RawFd;

use super::{
    SinkWorker,
    recv_memory::INLINE_BATCH,
    run_loop::{BATCH_WAIT_NS, RxWait, SLEEP_NS},
};
use crate::{clock, ring::Wait, stats::errno_class};

/// `user_data` of inline receive slot `i` is `FIRST_SLOT + i`.
const FIRST_SLOT: u64 = 16;
/// `user_data` of the idle `POLL_ADD`.
const POLL: u64 = 2;
/// The smallest batch of receives queued at once.
const MIN_BATCH: usize = 4;

/// Where the inline loop stands between steps.
#[derive(Debug, Default)]
pub(super) struct InlineState {
    /// Receives queued and not yet reaped.
    in_flight: usize,
    /// The idle `POLL_ADD` is queued and not yet reaped.
    poll_armed: bool,
    /// The last batch found the socket empty.
    empty: bool,
    /// Receives the next batch queues (0 before the first: the full batch).
    batch: usize,
}

impl SinkWorker {
    /// One inline step: queue a batch (or wait as described in the module docs), submit, reap.
    /// Returns whether a valid packet was counted; `Err` when the ring failed.
    pub(super) fn inline_step(&mut self, fd: RawFd, busy: bool) -> std::io::Result<bool> {
        let state = &mut self.inline;
        let wait = if state.in_flight > 0 || state.poll_armed {
            Wait::One {
                timeout_ns: SLEEP_NS,
            }
        } else if !state.empty || (busy && self.config.wait == RxWait::Spin) {
            state.empty = false;
            let batch = match state.batch {
                0 => INLINE_BATCH,
                n => n,
            };
            for slot in 0..batch {
                if !self
                    .recv
                    .push_inline(&mut self.engine, fd, slot, FIRST_SLOT + slot as u64)
                {
                    break;
                }
                self.inline.in_flight += 1;
            }
            Wait::Nothing
        } else if busy {
            self.inline.empty = false;
            Wait::One {
                timeout_ns: BATCH_WAIT_NS,
            }
        } else {
            self.inline.empty = false;
            self.inline.poll_armed = self.engine.push_poll_readable(fd, POLL);
            Wait::One {
                timeout_ns: SLEEP_NS,
            }
        };
        self.engine.submit(wait)?;
        Ok(self.reap_inline())
    }

    fn reap_inline(&mut self) -> bool {
        let n = self.engine.reap(&mut self.completions);
        if n == 0 {
            return false;
        }
        let now_real = clock::sink_realtime_ns();
        let now_ns = clock::monotonic_ns();
        let mut got = false;
        let mut datagrams = 0;
        let mut receives = 0;
        for i in 0..n {
            let c = self.completions[i];
            if c.user_data == POLL {
                self.inline.poll_armed = false;
                continue;
            }
            if self.answer_completed(&c) {
                continue;
            }
            let Some(slot) = c
                .user_data
                .checked_sub(FIRST_SLOT)
                .map(|s| s as usize)
                .filter(|&s| s < INLINE_BATCH)
            else {
                continue;
            };
            self.recv.completed(slot);
            self.inline.in_flight = self.inline.in_flight.saturating_sub(1);
            receives += 1;
            if let Some(bid) = c.buffer_id() {
                if c.result > 0 {
                    datagrams += 1;
                }
                got |= self.take_buffer(bid, c.result, Some(slot), now_real, now_ns);
            } else if c.result == -libc::ENOBUFS {
                self.counters.buffer_ring_empty += 1;
            } else if c.result < 0 && c.result != -libc::EAGAIN {
                self.counters.rx_errors[errno_class(-c.result)] += 1;
            }
        }
        if receives > 0 && self.inline.in_flight == 0 {
            self.inline.empty = datagrams == 0;
            self.inline.batch = (2 * datagrams).clamp(MIN_BATCH, INLINE_BATCH);
        }
        self.publish_buffers();
        got
    }
}
