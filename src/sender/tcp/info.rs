//! TCP_INFO of a sender queue's connections, sampled by the reporter thread while they are open,
//! and once more by the worker as it closes each (off the hot path: after a failure, or at the
//! end, after the drain has seen the sink acknowledge every record).
//!
//! Descriptor sharing: the worker owns its sockets; it publishes each connection's descriptor
//! in one atomic word per connection, `(change count << 32) | (fd + 1)` (low half 0: no
//! socket up), storing a new word with a higher change count when a connection comes up and
//! before it closes one. The reporter reads the word, samples TCP_INFO on the descriptor, and
//! reads the word again: only when both reads are equal was the descriptor this connection's
//! for the whole call (the worker marks it down before closing it, so a number closed and
//! reused meanwhile always changes the word), and only then is the sample used. A socket is
//! never kept open by the reporter (no `dup`), so closing stays the worker's alone.
//!
//! Per queue: the largest smoothed RTT, the sum of congestion windows, and the retransmits of
//! the open connections plus the closed ones' final counts, which the worker adds to its
//! connection slot's `closed_retrans` after marking the slot down. A sample reads that sum
//! before the word, so it never counts a connection both open and closed; each slot's figure
//! is kept monotonic across the moment between the mark and the add. What the kernel resends
//! after the final sample (a lost FIN) is not seen.

use std::{
    os::fd::RawFd,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use super::TcpSendShared;
use crate::ring::tcp_info;

const LOW: u64 = 0xffff_ffff;

/// The published descriptors of one queue's connections, and their closed connections'
/// retransmits.
#[derive(Debug, Default)]
pub(crate) struct ConnFds {
    words: Box<[AtomicU64]>,
    /// Per slot: the final `total_retrans` of every connection that has closed in it.
    closed_retrans: Box<[AtomicU64]>,
}

impl ConnFds {
    /// Slots for `conns` connections.
    pub(crate) fn new(conns: u32) -> ConnFds {
        ConnFds {
            words: (0..conns).map(|_| AtomicU64::new(0)).collect(),
            closed_retrans: (0..conns).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn set(&self, i: usize, low: u64) {
        if let Some(w) = self.words.get(i) {
            let next = (w.load(Ordering::Relaxed) >> 32).wrapping_add(1) << 32;
            w.store(next | low, Ordering::SeqCst);
        }
    }

    /// Worker: connection `i` is up on `fd`.
    pub(super) fn up(&self, i: usize, fd: RawFd) {
        if let Ok(fd) = u64::try_from(fd) {
            self.set(i, (fd + 1) & LOW);
        }
    }

    /// Worker: connection `i` is about to close its socket `fd` (or has none): takes the
    /// connection's final TCP_INFO, marks the slot down, then books the final retransmits.
    pub(super) fn down(&self, i: usize, fd: Option<RawFd>) {
        let retrans = fd
            .and_then(tcp_info::sample)
            .map_or(0, |s| u64::from(s.total_retrans));
        self.set(i, 0);
        if let Some(closed) = self.closed_retrans.get(i) {
            closed.fetch_add(retrans, Ordering::SeqCst);
        }
    }
}

/// One queue's TCP_INFO, as last sampled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueInfo {
    /// Connections sampled.
    pub(crate) conns: u64,
    /// Largest smoothed RTT among them, microseconds.
    pub(crate) srtt_us_max: u64,
    /// Sum of their congestion windows, segments.
    pub(crate) cwnd_segments: u64,
    /// Retransmitted segments: the open connections' and those last seen on closed ones.
    pub(crate) retransmits: u64,
}

/// The reporter's sampler over every sender queue.
pub(crate) struct Sampler {
    queues: Vec<Arc<TcpSendShared>>,
    /// Per queue, per connection slot: the retransmits of its last sample (closed connections'
    /// and the open one's), never lowered.
    seen: Vec<Vec<u64>>,
}

impl Sampler {
    /// A sampler over these queues.
    pub(crate) fn new(queues: Vec<Arc<TcpSendShared>>) -> Sampler {
        let seen = queues.iter().map(|q| vec![0; q.fds.words.len()]).collect();
        Sampler { queues, seen }
    }

    /// Samples every open connection; one entry per queue.
    pub(crate) fn sample(&mut self) -> Vec<QueueInfo> {
        let mut out = Vec::with_capacity(self.queues.len());
        for (q, shared) in self.queues.iter().enumerate() {
            let mut info = QueueInfo::default();
            for (i, word) in shared.fds.words.iter().enumerate() {
                // The closed connections' sum first: a connection whose final count is in it
                // was marked down before, so the word read next no longer names it.
                let closed = shared.fds.closed_retrans[i].load(Ordering::SeqCst);
                let before = word.load(Ordering::SeqCst);
                let sample = match before & LOW {
                    0 => None,
                    fd => tcp_info::sample((fd - 1) as RawFd),
                };
                let valid = word.load(Ordering::SeqCst) == before;
                let mut retrans = closed;
                if let (Some(s), true) = (sample, valid) {
                    info.conns += 1;
                    info.srtt_us_max = info.srtt_us_max.max(u64::from(s.srtt_us));
                    info.cwnd_segments += u64::from(s.snd_cwnd);
                    retrans += u64::from(s.total_retrans);
                }
                // Between a slot's mark and its add the sum lacks the closing connection.
                let seen = &mut self.seen[q][i];
                *seen = (*seen).max(retrans);
                info.retransmits += *seen;
            }
            out.push(info);
        }
        out
    }
}

/// The queues' samples together: connections, the largest RTT, the sums.
pub(crate) fn total(infos: &[QueueInfo]) -> QueueInfo {
    infos.iter().fold(QueueInfo::default(), |a, q| QueueInfo {
        conns: a.conns + q.conns,
        srtt_us_max: a.srtt_us_max.max(q.srtt_us_max),
        cwnd_segments: a.cwnd_segments + q.cwnd_segments,
        retransmits: a.retransmits + q.retransmits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn only_a_descriptor_published_up_is_sampled_and_retransmits_survive_its_close() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let shared = Arc::new(TcpSendShared::new(2));
        let mut sampler = Sampler::new(vec![shared.clone()]);
        assert_eq!(sampler.sample()[0].conns, 0);
        shared.fds.up(1, c.as_raw_fd());
        let s = sampler.sample()[0];
        assert_eq!(s.conns, 1);
        assert!(s.cwnd_segments > 0, "{s:?}");
        sampler.seen[0][1] = 5;
        shared.fds.down(1, None);
        drop(c);
        let s = sampler.sample()[0];
        assert_eq!((s.conns, s.retransmits), (0, 5), "never lowered");
        shared.fds.closed_retrans[1].store(7, Ordering::SeqCst);
        let s = sampler.sample()[0];
        assert_eq!(
            (s.conns, s.retransmits),
            (0, 7),
            "a closed connection's final count"
        );
    }
}
