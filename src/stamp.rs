//! When a worker's published counters were taken, readable together with them.
//!
//! Workers publish their plain counters every few milliseconds. A reporter that divides the
//! change in a count by its own wake-up interval is off by up to one publish period (10 ms in a
//! 100 ms window is ±10 %). A [`PublishStamp`] dates each publish with the worker's own clock,
//! seqlock-style: the worker marks the publish as under way, stores the counters and then the
//! time; a reader retries until it saw one whole publish, so a rate over two stamps is exact to
//! the worker's clock. The worker never waits: only readers retry.

use std::sync::atomic::{AtomicU64, Ordering, fence};

/// A publish counter (odd while a publish is under way) and the publish's monotonic time.
#[derive(Debug, Default)]
pub(crate) struct PublishStamp {
    sequence: AtomicU64,
    at_ns: AtomicU64,
}

/// Reader attempts before taking a possibly torn sample (a worker publishes every few ms, so a
/// clash twice in a row is already rare).
const READ_ATTEMPTS: usize = 8;

impl PublishStamp {
    /// Worker: a publish starts; the counters' stores follow.
    pub(crate) fn begin(&self) {
        let s = self.sequence.load(Ordering::Relaxed);
        self.sequence.store(s | 1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Worker: the counters are stored; they date from `now_ns`.
    pub(crate) fn end(&self, now_ns: u64) {
        self.at_ns.store(now_ns, Ordering::Relaxed);
        let s = self.sequence.load(Ordering::Relaxed);
        self.sequence.store((s | 1) + 1, Ordering::Release);
    }

    /// Reader: `read()`'s result together with the time of the publish it saw whole; 0 (not
    /// known) before the first publish or when every attempt overlapped a publish.
    pub(crate) fn read<T>(&self, mut read: impl FnMut() -> T) -> (T, u64) {
        let mut last = None;
        for _ in 0..READ_ATTEMPTS {
            let before = self.sequence.load(Ordering::Acquire);
            let value = read();
            let at = self.at_ns.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let after = self.sequence.load(Ordering::Relaxed);
            if before == after && before & 1 == 0 {
                return (value, at);
            }
            last = Some(value);
        }
        (last.expect("READ_ATTEMPTS is not zero"), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, atomic::AtomicBool};

    #[test]
    fn a_reader_sees_counts_and_time_of_the_same_publish() {
        let stamp = Arc::new(PublishStamp::default());
        let count = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let worker = {
            let (stamp, count, done) = (stamp.clone(), count.clone(), done.clone());
            std::thread::spawn(move || {
                for i in 1..=200_000u64 {
                    stamp.begin();
                    count.store(i, Ordering::Relaxed);
                    stamp.end(i * 10);
                    for _ in 0..200 {
                        std::hint::spin_loop();
                    }
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut whole = 0;
        while !done.load(Ordering::Acquire) {
            let (n, at) = stamp.read(|| count.load(Ordering::Relaxed));
            if at != 0 {
                assert_eq!(n * 10, at, "a count and a stamp of different publishes");
                whole += 1;
            }
        }
        worker.join().unwrap();
        assert_eq!(
            stamp.read(|| count.load(Ordering::Relaxed)),
            (200_000, 2_000_000)
        );
        assert!(whole > 0);
    }
}
