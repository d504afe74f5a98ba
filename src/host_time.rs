//! What the host gave a worker thread over its loop: the CPU time it ran and the time it waited
//! on a run queue for a CPU, from the kernel's `/proc/thread-self/schedstat` (read by the
//! worker itself, once before its loop and once after, never inside it). The wait includes the
//! time a cgroup's CPU quota held the thread throttled, so a starved or capped worker shows as
//! one. From these and the loop's length, [`HostTime::cause`] names why a sender fell short of
//! its rate: it waited for a CPU, its CPU was busy all along, or neither (its sends completed
//! slowly: every slot of its window was in flight).

use serde_json::{Value, json};

/// A worker's share of a run at which it counts as never idle (busy or waiting for a CPU).
const NEVER_IDLE: f64 = 0.9;
/// The share of a run spent waiting for a CPU above which the wait is the cause.
const WAITED: f64 = 0.1;

/// A thread's CPU time and run-queue wait, in ns (cumulative, or over a span).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ThreadTime {
    /// Time it ran on a CPU.
    pub(crate) cpu_ns: u64,
    /// Time it was runnable but waited for a CPU (run-queue delay, throttling included).
    pub(crate) wait_ns: u64,
}

impl ThreadTime {
    /// The calling thread's totals so far; `None` where the kernel keeps no schedstat.
    pub(crate) fn of_this_thread() -> Option<ThreadTime> {
        parse(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
    }

    /// What was spent between `earlier` and `self`.
    pub(crate) fn since(self, earlier: ThreadTime) -> ThreadTime {
        ThreadTime {
            cpu_ns: self.cpu_ns.saturating_sub(earlier.cpu_ns),
            wait_ns: self.wait_ns.saturating_sub(earlier.wait_ns),
        }
    }
}

/// `schedstat`'s three numbers: CPU time, run-queue wait (both ns), time slices.
fn parse(text: &str) -> Option<ThreadTime> {
    let mut words = text.split_whitespace().map(str::parse::<u64>);
    let cpu_ns = words.next()?.ok()?;
    let wait_ns = words.next()?.ok()?;
    Some(ThreadTime { cpu_ns, wait_ns })
}

/// Why a worker was the limit of its run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// It waited for a CPU (another task, or a cgroup quota, had it).
    CpuWait,
    /// It ran all along: one core's worth of work is what it can do.
    CpuBusy,
    /// Neither: it sat waiting on its own sends (all its window's slots in flight).
    Completions,
}

impl Cause {
    /// The JSON word.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Cause::CpuWait => "cpu_wait",
            Cause::CpuBusy => "cpu_busy",
            Cause::Completions => "send_completions",
        }
    }
}

/// One worker's loop: its length and what the host gave it over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostTime {
    /// The worker's queue.
    pub(crate) queue: usize,
    /// The loop's length, in ns.
    pub(crate) wall_ns: u64,
    /// What the host gave it; `None`: unknown (no schedstat).
    pub(crate) time: Option<ThreadTime>,
}

impl HostTime {
    fn share(&self, ns: u64) -> f64 {
        ns as f64 / self.wall_ns.max(1) as f64
    }

    /// Why this worker, if it was the limit, was: `None` when unknown.
    pub(crate) fn cause(&self) -> Option<Cause> {
        let t = self.time?;
        let (cpu, wait) = (self.share(t.cpu_ns), self.share(t.wait_ns));
        Some(if wait >= WAITED {
            Cause::CpuWait
        } else if cpu + wait >= NEVER_IDLE {
            Cause::CpuBusy
        } else {
            Cause::Completions
        })
    }

    /// `{"queue", "wall_s", "cpu_s", "run_queue_wait_s"}`, the last two null when unknown.
    pub(crate) fn json(&self) -> Value {
        let s = |ns: u64| (ns as f64 / 1e6).round() / 1e3;
        json!({"queue": self.queue, "wall_s": s(self.wall_ns),
            "cpu_s": self.time.map(|t| s(t.cpu_ns)),
            "run_queue_wait_s": self.time.map(|t| s(t.wait_ns))})
    }

    /// `queue 0's worker ran 98.0% of its 2.00 s and waited 1.2% for a CPU`, or that it is
    /// unknown.
    pub(crate) fn words(&self) -> String {
        match self.time {
            Some(t) => format!(
                "queue {}'s worker ran {:.1}% of its {:.2} s and waited {:.1}% for a CPU",
                self.queue,
                self.share(t.cpu_ns) * 100.0,
                self.wall_ns as f64 / 1e9,
                self.share(t.wait_ns) * 100.0
            ),
            None => format!(
                "queue {}'s CPU time is unknown (this kernel keeps no schedstat)",
                self.queue
            ),
        }
    }
}

/// The worker that was most the limit: the one that waited longest for a CPU, else the
/// busiest (shares of their own loops).
pub(crate) fn most_limited(workers: &[HostTime]) -> Option<&HostTime> {
    let key = |w: &&HostTime| {
        w.time.map_or((0, 0), |t| {
            let per_mille = |ns: u64| (w.share(ns) * 1000.0) as u64;
            (per_mille(t.wait_ns) / 100, per_mille(t.cpu_ns))
        })
    };
    workers.iter().max_by_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(cpu_ms: u64, wait_ms: u64) -> HostTime {
        HostTime {
            queue: 0,
            wall_ns: 1_000_000_000,
            time: Some(ThreadTime {
                cpu_ns: cpu_ms * 1_000_000,
                wait_ns: wait_ms * 1_000_000,
            }),
        }
    }

    #[test]
    fn reads_the_kernels_three_numbers() {
        assert_eq!(
            parse("950772676 8621017582 1316\n"),
            Some(ThreadTime {
                cpu_ns: 950_772_676,
                wait_ns: 8_621_017_582
            })
        );
        assert_eq!(parse(""), None);
        assert_eq!(parse("12 x 3"), None);
        // The kernel adds CPU time at its ticks and at switches: spin for a few ticks.
        let now = ThreadTime::of_this_thread().expect("this kernel has schedstat");
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let spent = ThreadTime::of_this_thread().unwrap().since(now);
        assert!(
            spent.cpu_ns > 0 && spent.cpu_ns < 10_000_000_000,
            "{spent:?}"
        );
    }

    #[test]
    fn the_cause_is_the_wait_then_a_busy_cpu_then_the_sends() {
        assert_eq!(worker(100, 850).cause(), Some(Cause::CpuWait));
        assert_eq!(worker(950, 20).cause(), Some(Cause::CpuBusy));
        assert_eq!(worker(300, 10).cause(), Some(Cause::Completions));
        let unknown = HostTime {
            time: None,
            ..worker(0, 0)
        };
        assert_eq!(unknown.cause(), None);
        assert_eq!(unknown.json()["cpu_s"], Value::Null);
        assert_eq!(
            worker(980, 12).words(),
            "queue 0's worker ran 98.0% of its 1.00 s and waited 1.2% for a CPU"
        );
    }

    #[test]
    fn the_most_limited_worker_waited_longest_else_ran_most() {
        let mut a = worker(500, 300);
        let mut b = worker(990, 5);
        (a.queue, b.queue) = (0, 1);
        assert_eq!(most_limited(&[b, a]).unwrap().queue, 0);
        let c = HostTime {
            queue: 2,
            ..worker(400, 5)
        };
        assert_eq!(most_limited(&[c, b]).unwrap().queue, 1);
    }
}
