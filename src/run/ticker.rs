//! The one reporting loop of every run, UDP or TCP: tick every 20 ms, stop on a signal or a
//! closed stdout, tell the run once when its senders have all ended (so it can close their
//! books and let the sinks drain), let it do its per-tick work, print an interval when one is
//! due, and end when every worker has, with a last, partial interval up to that end. What differs between the protocols (what a tick reads,
//! what an interval prints, how an interrupt stops the workers) is the [`Ticked`] run's; the
//! clock is a [`TickClock`], so tests drive the loop without sleeping, as hyperfine tests its
//! loop with a mock executor.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use crate::clock;

/// The loop's period.
pub(crate) const TICK: Duration = Duration::from_millis(20);

/// A started run as the loop sees it.
pub(crate) trait Ticked {
    /// Whether the run sends (a sink-only run never ends its senders).
    fn sends(&self) -> bool;
    /// Every sender worker has ended (true without senders).
    fn senders_finished(&self) -> bool;
    /// Every sink worker has ended (true without sinks).
    fn sinks_finished(&self) -> bool;
    /// A signal or a closed stdout asks the run to stop (called on every tick while it holds).
    fn interrupt(&mut self);
    /// The senders have all ended; called once, before that tick's [`Ticked::tick`].
    fn senders_ended(&mut self, now_ns: u64);
    /// The work of every tick: samples, books, metrics, events.
    fn tick(&mut self, now_ns: u64);
    /// One interval, from `from_ns` to `now_ns`, is due (never with `--interval 0`); called
    /// after that tick's [`Ticked::tick`].
    fn interval(&mut self, from_ns: u64, now_ns: u64);
}

/// Where the loop's time comes from.
pub(crate) trait TickClock {
    /// The monotonic clock now.
    fn now_ns(&self) -> u64;
    /// Waits one tick.
    fn sleep(&self, period: Duration);
}

/// The process's monotonic clock.
pub(crate) struct Monotonic;

impl TickClock for Monotonic {
    fn now_ns(&self) -> u64 {
        clock::monotonic_ns()
    }

    fn sleep(&self, period: Duration) {
        std::thread::sleep(period);
    }
}

/// How a run's reporting ended.
pub(crate) struct Ended {
    /// The run's own result.
    pub(crate) result: Result<(), crate::error::Error>,
    /// A signal or a closed stdout stopped it (so a set signal flag is that stop, not a later
    /// signal).
    pub(crate) interrupted: bool,
}

/// Ticks `run` until every worker has ended; `start_ns` is when its workers were released.
/// Intervals fall every `interval` from `start_ns` (none when it is zero). Returns whether a
/// signal or a closed stdout stopped the run.
pub(crate) fn drive(
    run: &mut dyn Ticked,
    clock: &dyn TickClock,
    stop: &AtomicBool,
    start_ns: u64,
    interval: Duration,
) -> bool {
    let interval_ns = interval.as_nanos() as u64;
    let mut last_interval = start_ns;
    let mut ended = false;
    let mut interrupted = false;
    loop {
        clock.sleep(TICK);
        // A closed stdout (`| head`) stops the run like SIGINT, quietly.
        if stop.load(Ordering::Relaxed) || crate::output::closed() {
            run.interrupt();
            interrupted = true;
        }
        let senders_done = run.senders_finished();
        let sinks_done = run.sinks_finished();
        let now = clock.now_ns();
        if run.sends() && senders_done && !ended {
            ended = true;
            run.senders_ended(now);
        }
        run.tick(now);
        if interval_ns > 0 && now.saturating_sub(last_interval) >= interval_ns {
            run.interval(last_interval, now);
            last_interval = now;
        }
        if senders_done && sinks_done {
            // The last interval, partial, with its real length: every interval is printed, so
            // the intervals add up to the summary, which reads the same final counters.
            if interval_ns > 0 && now > last_interval {
                run.interval(last_interval, now);
            }
            return interrupted;
        }
    }
}

/// A clock for tests that moves by exactly the period asked for at each sleep.
#[cfg(test)]
pub(crate) struct FakeClock(pub(crate) std::cell::Cell<u64>);

#[cfg(test)]
impl TickClock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.0.get()
    }
    fn sleep(&self, period: Duration) {
        self.0.set(self.0.get() + period.as_nanos() as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A run whose senders end after `send_ticks` ticks and whose sinks end `drain_ticks`
    /// after they are told the senders ended (or at once on an interrupt).
    #[derive(Default)]
    struct FakeRun {
        sends: bool,
        has_sinks: bool,
        send_ticks: u64,
        drain_ticks: u64,
        ticks: u64,
        ended_at: Option<u64>,
        senders_ended_calls: u32,
        interrupted: bool,
        intervals: Vec<(u64, u64)>,
        log: Vec<&'static str>,
    }

    impl Ticked for FakeRun {
        fn sends(&self) -> bool {
            self.sends
        }
        fn senders_finished(&self) -> bool {
            !self.sends || self.interrupted || self.ticks >= self.send_ticks
        }
        fn sinks_finished(&self) -> bool {
            !self.has_sinks
                || self.interrupted && !self.sends
                || self
                    .ended_at
                    .is_some_and(|at| self.ticks >= at + self.drain_ticks)
        }
        fn interrupt(&mut self) {
            self.interrupted = true;
            self.log.push("interrupt");
        }
        fn senders_ended(&mut self, _now_ns: u64) {
            self.senders_ended_calls += 1;
            self.ended_at = Some(self.ticks);
            self.log.push("senders_ended");
        }
        fn tick(&mut self, _now_ns: u64) {
            self.ticks += 1;
            self.log.push("tick");
        }
        fn interval(&mut self, from_ns: u64, now_ns: u64) {
            self.intervals.push((from_ns, now_ns));
        }
    }

    const MS: u64 = 1_000_000;

    fn drive_fake(run: &mut FakeRun, interval: Duration, stop: &AtomicBool) -> u64 {
        let clock = FakeClock(Cell::new(1_000 * MS));
        drive(run, &clock, stop, 1_000 * MS, interval);
        clock.now_ns() - 1_000 * MS
    }

    #[test]
    fn a_pair_ends_its_senders_once_then_drains_its_sinks() {
        let mut run = FakeRun {
            sends: true,
            has_sinks: true,
            send_ticks: 50,
            drain_ticks: 5,
            ..FakeRun::default()
        };
        let elapsed = drive_fake(
            &mut run,
            Duration::from_millis(500),
            &AtomicBool::new(false),
        );
        assert_eq!(run.senders_ended_calls, 1);
        // Told at the tick after the 50th (when it first sees them finished), drained 5 later.
        assert_eq!(run.ended_at, Some(50));
        assert_eq!(run.ticks, 56);
        assert_eq!(elapsed, 56 * 20 * MS);
        // The senders' end comes before that tick's work.
        let at = run.log.iter().position(|l| *l == "senders_ended").unwrap();
        assert_eq!(run.log[at + 1], "tick");
        assert!(!run.interrupted);
    }

    #[test]
    fn the_loop_says_whether_a_signal_stopped_the_run() {
        let clock = FakeClock(Cell::new(0));
        let finished = &mut FakeRun {
            sends: true,
            send_ticks: 3,
            ..FakeRun::default()
        };
        assert!(!drive(
            finished,
            &clock,
            &AtomicBool::new(false),
            0,
            Duration::ZERO
        ));
        let stopped = &mut FakeRun {
            sends: true,
            send_ticks: u64::MAX,
            ..FakeRun::default()
        };
        assert!(drive(
            stopped,
            &clock,
            &AtomicBool::new(true),
            0,
            Duration::ZERO
        ));
    }

    #[test]
    fn intervals_tile_the_run_from_its_start() {
        let mut run = FakeRun {
            sends: true,
            has_sinks: false,
            send_ticks: 130,
            ..FakeRun::default()
        };
        drive_fake(&mut run, Duration::from_secs(1), &AtomicBool::new(false));
        let start = 1_000 * MS;
        // Whole intervals from the start, then the last one, partial, up to the end (the
        // 131st tick: the first that sees the senders finished).
        assert_eq!(
            run.intervals,
            [
                (start, start + 1_000 * MS),
                (start + 1_000 * MS, start + 2_000 * MS),
                (start + 2_000 * MS, start + 2_620 * MS)
            ]
        );
    }

    #[test]
    fn no_interval_lines_with_interval_zero() {
        let mut run = FakeRun {
            sends: true,
            send_ticks: 200,
            ..FakeRun::default()
        };
        drive_fake(&mut run, Duration::ZERO, &AtomicBool::new(false));
        assert!(run.intervals.is_empty());
        assert_eq!(run.ticks, 201);
    }

    #[test]
    fn a_sink_alone_never_ends_senders_and_stops_on_a_signal() {
        let mut run = FakeRun {
            sends: false,
            has_sinks: true,
            ..FakeRun::default()
        };
        let stop = AtomicBool::new(true);
        drive_fake(&mut run, Duration::from_secs(1), &stop);
        assert_eq!(run.senders_ended_calls, 0);
        assert!(run.interrupted);
        assert_eq!(run.log, ["interrupt", "tick"]);
    }

    #[test]
    fn an_interrupted_sender_still_closes_its_books() {
        let mut run = FakeRun {
            sends: true,
            has_sinks: true,
            send_ticks: u64::MAX,
            drain_ticks: 2,
            ..FakeRun::default()
        };
        let stop = AtomicBool::new(true);
        drive_fake(&mut run, Duration::from_secs(1), &stop);
        assert_eq!(run.senders_ended_calls, 1);
        assert_eq!(run.ticks, 3);
    }
}
