//! How a TCP sink worker waits for completions (`--rx-wait`). A TCP stream is paced by its
//! receiver: every read opens the window the sender is waiting on, so a sink that sleeps until
//! a batch of completions piles up (UDP's `batch`) starves the stream (35 Gbit/s against 52 on
//! loopback). The default instead polls while completions keep coming and sleeps once none has
//! come for [`BUSY_POLL_NS`]: at full speed the sending core never runs a wake-up for the
//! sink (loopback +9 %, veth +45 %, request/response 2.8x), and at paced rates the sink core
//! still sleeps between records. A poll that finds nothing yields the core (`sched_yield`), so
//! a sender pinned to the same core loses nothing to it: there, rr went from 170 000 to 116 000
//! transactions/s with a poll that did not yield, and stays at 174 000 with one that does.

use crate::{ring::Wait, sink::RxWait};

/// How long the default mode keeps polling after the last completion.
const BUSY_POLL_NS: u64 = 50_000;
/// Longest sleep in one enter (the worker's tick still runs).
const MAX_SLEEP_NS: u64 = 5_000_000;

/// A TCP sink worker's way of waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TcpWait {
    /// Poll while completions keep coming, sleep after [`BUSY_POLL_NS`] without one
    /// (`--rx-wait batch`, the default).
    BusyPoll,
    /// Always poll: one full core per queue (`--rx-wait spin`).
    Spin,
    /// Sleep until the next completion (`--rx-wait sleep`).
    Sleep,
}

impl TcpWait {
    /// The TCP meaning of `--rx-wait`; `None` for `inline`, which is UDP only.
    pub(crate) fn from_rx_wait(wait: RxWait) -> Option<TcpWait> {
        match wait {
            RxWait::Batch => Some(TcpWait::BusyPoll),
            RxWait::Spin => Some(TcpWait::Spin),
            RxWait::Sleep => Some(TcpWait::Sleep),
            RxWait::Inline => None,
        }
    }

    /// What to wait for, `idle_ns` after the last reap that found completions.
    pub(crate) fn wait(self, idle_ns: u64) -> Wait {
        let sleep = Wait::One {
            timeout_ns: MAX_SLEEP_NS,
        };
        match self {
            TcpWait::Spin => Wait::Poll,
            TcpWait::BusyPoll if idle_ns < BUSY_POLL_NS => Wait::Poll,
            TcpWait::BusyPoll | TcpWait::Sleep => sleep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_poll_polls_only_while_completions_keep_coming() {
        let w = TcpWait::BusyPoll;
        assert_eq!(w.wait(0), Wait::Poll);
        assert_eq!(w.wait(BUSY_POLL_NS - 1), Wait::Poll);
        assert_eq!(
            w.wait(BUSY_POLL_NS),
            Wait::One {
                timeout_ns: MAX_SLEEP_NS
            }
        );
        assert_eq!(TcpWait::Spin.wait(u64::MAX), Wait::Poll);
        assert_eq!(
            TcpWait::Sleep.wait(0),
            Wait::One {
                timeout_ns: MAX_SLEEP_NS
            }
        );
    }

    #[test]
    fn rx_wait_maps_to_tcp_and_inline_is_udp_only() {
        assert_eq!(
            TcpWait::from_rx_wait(RxWait::Batch),
            Some(TcpWait::BusyPoll)
        );
        assert_eq!(TcpWait::from_rx_wait(RxWait::Spin), Some(TcpWait::Spin));
        assert_eq!(TcpWait::from_rx_wait(RxWait::Sleep), Some(TcpWait::Sleep));
        assert_eq!(TcpWait::from_rx_wait(RxWait::Inline), None);
    }
}
