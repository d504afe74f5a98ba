//! The one reporting session of every `send`, `sink` and `pair` run, UDP or TCP: releases the
//! sinks before the senders, drives the reporting loop (`ticker`) with the workers' snapshots,
//! flushes the exporter each tick, stops or drains the workers, and at the end joins every
//! worker, flushes its last counters, and has the summaries printed from them. What differs
//! between the protocols is a [`Proto`]: what a snapshot is, what a tick and an interval print,
//! what the summaries say. The session is tested with a fake protocol and a fake clock, as
//! hyperfine tests its loop with a mock executor.

use std::{
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use super::ticker::{self, Ended, TickClock, Ticked};
use crate::{
    control::server::ServerStats,
    error::Error,
    metrics::{Exporter, Series},
    worker::{Control, Group, Outcome},
};

/// A started group of worker threads as the session sees it.
pub(crate) trait Workers {
    /// What each worker returns.
    type Outcome: Outcome;
    /// Releases the workers from their start barrier (once).
    fn release(&self);
    /// Whether every worker has ended.
    fn finished(&self) -> bool;
    /// Waits for every worker; one that panicked yields `None`.
    fn join(&mut self) -> Vec<Option<Self::Outcome>>;
}

impl<O: Outcome> Workers for Group<O> {
    type Outcome = O;

    fn release(&self) {
        Group::release(self);
    }

    fn finished(&self) -> bool {
        Group::finished(self)
    }

    fn join(&mut self) -> Vec<Option<O>> {
        Group::join(self)
    }
}

/// The joined workers' outcomes of each role (`None`: the run has no such role).
pub(crate) type Outcomes<P> = (
    Option<Vec<Option<<<P as Proto>::Senders as Workers>::Outcome>>>,
    Option<Vec<Option<<<P as Proto>::Sinks as Workers>::Outcome>>>,
);

/// An interval of the run: its start and end, and when the workers were released.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Span {
    pub(crate) run_start_ns: u64,
    pub(crate) from_ns: u64,
    pub(crate) to_ns: u64,
}

impl Span {
    /// Seconds from the workers' release to the interval's start.
    pub(crate) fn start_s(&self) -> f64 {
        (self.from_ns - self.run_start_ns) as f64 / 1e9
    }

    /// Seconds from the workers' release to the interval's end.
    pub(crate) fn end_s(&self) -> f64 {
        (self.to_ns - self.run_start_ns) as f64 / 1e9
    }

    /// The interval's length in seconds.
    pub(crate) fn seconds(&self) -> f64 {
        (self.to_ns - self.from_ns) as f64 / 1e9
    }
}

/// What one protocol brings to the session: its worker groups, what a tick reads of them, and
/// what its lines say. The constants are the protocol's row of the session's table.
pub(crate) trait Proto {
    /// The started sender group.
    type Senders: Workers;
    /// The started sink group.
    type Sinks: Workers;
    /// What one tick reads of the workers' published counters.
    type Snapshot: Default;
    /// The exporter's series of the run.
    type Series: Series;

    /// After an interrupt a pair's sinks drain what is on the way (rather than stop at once),
    /// so that the books close with every packet sent.
    const DRAIN_AFTER_INTERRUPT: bool;
    /// The sinks are stopped this long after the senders ended, if still draining.
    const DRAIN_BOUND: Option<Duration>;

    /// The sender group, if this run sends.
    fn senders(&self) -> Option<&Self::Senders>;
    /// The sender group, to join.
    fn senders_mut(&mut self) -> Option<&mut Self::Senders>;
    /// The sink group, if this run receives.
    fn sinks(&self) -> Option<&Self::Sinks>;
    /// The sink group, to join.
    fn sinks_mut(&mut self) -> Option<&mut Self::Sinks>;

    /// The sinks are released; the senders are next (a UDP sender waits for its sink's first
    /// answer here).
    fn before_senders(&mut self) {}
    /// Whether the sink refused the senders for good (their credentials, or the other
    /// protocol): asked before they are released and on every tick, and they stop at once.
    fn senders_refused(&self) -> bool {
        false
    }
    /// Every worker was released at `start_ns`: the start-up lines.
    fn released(&mut self, _start_ns: u64) {}
    /// The senders have all ended (called once, before that tick's [`Proto::tick`]); the
    /// sinks are asked to drain right after.
    fn senders_ended(&mut self, _now_ns: u64) {}
    /// Reads every queue's published counters.
    fn snapshot(&self) -> Self::Snapshot;
    /// What the first interval is measured from, taken as the workers are released (their
    /// snapshot then, unless the protocol counts its first interval from zero).
    fn baseline(&self) -> Self::Snapshot {
        self.snapshot()
    }
    /// The work of every tick, with this tick's snapshot: books, samples, events, warnings.
    fn tick(&mut self, now_ns: u64, snapshot: &Self::Snapshot);
    /// Prints one interval from the snapshots at its end and at its start.
    fn interval(&mut self, span: Span, now: &Self::Snapshot, before: &Self::Snapshot);
    /// Copies what the reporter sampled itself into the series, before a flush.
    fn update_series(&self, _series: &mut Self::Series) {}
    /// Every worker has been joined: the verdict and the last samples are taken here, before
    /// the exporter's final flush.
    fn conclude(&mut self) {}
    /// Prints the summaries from the last snapshot and the workers' outcomes; an error is the
    /// run's own failure (a failed verdict, no connection).
    fn summaries(self, last: Self::Snapshot, outcomes: Outcomes<Self>) -> Result<(), Error>
    where
        Self: Sized;
}

/// A started run, ready to be reported to its end.
pub(crate) struct Session<P: Proto> {
    proto: P,
    send_control: Arc<Control>,
    sink_control: Arc<Control>,
    sinks_released: bool,
    interval: Duration,
    exporter: Option<Exporter<P::Series>>,
    /// The control server's counters, exported with the run's series.
    server_stats: Option<Arc<ServerStats>>,
}

impl<P: Proto> Session<P> {
    /// A session of `proto`'s groups, stopped through these controls, with interval lines every
    /// `interval` (none when zero).
    pub(crate) fn new(
        proto: P,
        (send_control, sink_control): (Arc<Control>, Arc<Control>),
        interval: Duration,
    ) -> Session<P> {
        Session {
            proto,
            send_control,
            sink_control,
            sinks_released: false,
            interval,
            exporter: None,
            server_stats: None,
        }
    }

    /// The sinks were released already (a TCP pair starts them before its senders connect).
    pub(crate) fn sinks_released(mut self) -> Session<P> {
        self.sinks_released = true;
        self
    }

    /// Flushes these series every tick and once at the end (with the control server's counters).
    pub(crate) fn exporting(
        mut self,
        exporter: Option<Exporter<P::Series>>,
        server_stats: Option<Arc<ServerStats>>,
    ) -> Session<P> {
        self.exporter = exporter;
        self.server_stats = server_stats;
        self
    }

    fn flush(&mut self, last: bool) {
        if let Some(e) = self.exporter.as_mut() {
            if let Some(stats) = &self.server_stats {
                crate::metrics::set_control_connections(stats);
            }
            self.proto.update_series(e.series_mut());
            e.tick(last);
        }
    }

    /// Releases the workers (sinks first), reports until every worker has ended, then joins
    /// them, flushes their last counters and prints the summaries.
    pub(crate) fn run(mut self, signal: &AtomicBool, clock: &dyn TickClock) -> Ended {
        if !self.sinks_released
            && let Some(s) = self.proto.sinks()
        {
            s.release();
        }
        if self.proto.senders().is_some() {
            self.proto.before_senders();
            if self.proto.senders_refused() {
                // Released only to stop: nothing they would send could be counted.
                self.send_control.request_stop();
            }
        }
        if let Some(s) = self.proto.senders() {
            s.release();
        }
        let start = clock.now_ns();
        self.proto.released(start);
        let before = self.proto.baseline();
        let interval = self.interval;
        let mut ticks = Ticks {
            session: &mut self,
            start,
            senders_ended_at: None,
            now: P::Snapshot::default(),
            before,
        };
        let interrupted = ticker::drive(&mut ticks, clock, signal, start, interval);
        let outcomes = (
            self.proto.senders_mut().map(Workers::join),
            self.proto.sinks_mut().map(Workers::join),
        );
        let ring_failed =
            outcomes.0.iter().flatten().any(failed) || outcomes.1.iter().flatten().any(failed);
        self.proto.conclude();
        // Every worker has ended and published its last counters: flush them to the exporter
        // before printing, so scraped values equal the summary.
        self.flush(true);
        let last = self.proto.snapshot();
        let result = self.proto.summaries(last, outcomes).and_then(|()| {
            if ring_failed {
                Err(Error::io(
                    "a worker's io_uring failed during the run",
                    std::io::Error::other("see the counts above"),
                ))
            } else {
                Ok(())
            }
        });
        Ended {
            result,
            interrupted,
        }
    }
}

/// A worker that panicked, or whose ring failed.
fn failed<O: Outcome>(outcome: &Option<O>) -> bool {
    outcome.as_ref().is_none_or(Outcome::ring_failed)
}

/// The session as the reporting loop drives it, with what it keeps between ticks.
struct Ticks<'a, P: Proto> {
    session: &'a mut Session<P>,
    start: u64,
    senders_ended_at: Option<u64>,
    /// The snapshot of this tick, and of the last interval's end.
    now: P::Snapshot,
    before: P::Snapshot,
}

impl<P: Proto> Ticked for Ticks<'_, P> {
    fn sends(&self) -> bool {
        self.session.proto.senders().is_some()
    }

    fn senders_finished(&self) -> bool {
        self.session.proto.senders().is_none_or(Workers::finished)
    }

    fn sinks_finished(&self) -> bool {
        self.session.proto.sinks().is_none_or(Workers::finished)
    }

    fn interrupt(&mut self) {
        // Senders stop at once; sinks stop too, or drain what is still on the way.
        let s = &*self.session;
        s.send_control.request_stop();
        if !(P::DRAIN_AFTER_INTERRUPT && self.sends()) {
            s.sink_control.request_stop();
        }
    }

    fn senders_ended(&mut self, now_ns: u64) {
        self.senders_ended_at = Some(now_ns);
        self.session.proto.senders_ended(now_ns);
        self.session.sink_control.request_drain();
    }

    fn tick(&mut self, now_ns: u64) {
        if let (Some(at), Some(bound)) = (self.senders_ended_at, P::DRAIN_BOUND)
            && now_ns - at > bound.as_nanos() as u64
        {
            self.session.sink_control.request_stop();
        }
        if self.session.proto.senders_refused() {
            self.session.send_control.request_stop();
        }
        self.now = self.session.proto.snapshot();
        self.session.proto.tick(now_ns, &self.now);
        self.session.flush(false);
    }

    fn interval(&mut self, from_ns: u64, now_ns: u64) {
        let span = Span {
            run_start_ns: self.start,
            from_ns,
            to_ns: now_ns,
        };
        self.session.proto.interval(span, &self.now, &self.before);
        // The next tick takes `now` afresh before any interval reads it.
        self.before = std::mem::take(&mut self.now);
    }
}

#[cfg(test)]
mod tests;
