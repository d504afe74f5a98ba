//! The control channel's two ends over any protocol's books. A sink serves the channel through
//! one adapter, [`SinkEnd`], over its protocol's [`SinkLedger`]: the adapter says who came and
//! who left, works out each sender's clock at its hello, and names the session, the sender and
//! the run in every verdict; the ledger books what the sender tells and counts what arrived.
//! A sender's control thread reads one view, [`SenderEnd`], over its protocol's
//! [`SenderLedger`]: the view announces the run (its name, epoch, size, rate, step and reach)
//! and the ledger says where each flow or queue stands. Nothing here runs on a worker thread.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use super::verdict::{GOODBYE_WAIT, hello_clock};
use crate::{
    clock,
    control::{
        client::{ControlClient, SenderView},
        msg::{
            ClockEstimate, DataProto, FlowProgress, FlowStart, Goodbye, Hello, Progress, Reach,
            Verdict,
        },
        server::{HelloFrom, SinkBooks},
    },
    latency_clock::LatencyClock,
    say,
};

/// The sink's session name and its verdict on one sender run, or why none came.
pub(crate) type SinkVerdict = Result<(String, Verdict), String>;

/// How long a sender waits for the verdict after its goodbye: the sink's own wait and a margin.
const VERDICT_WAIT: Duration = GOODBYE_WAIT.saturating_add(Duration::from_secs(2));

/// A protocol's sink books as the control channel feeds them. Called from connection threads.
pub(crate) trait SinkLedger: Send + Sync + 'static {
    /// What a sender that went away without a goodbye leaves behind, said after that line.
    const GONE_WITHOUT_GOODBYE: &'static str;
    /// Books a sender run's hello with its `clock`; returns the sink's uptime for the Welcome
    /// and the line that says who came.
    fn hello(&self, hello: &Hello, from: &HelloFrom, clock: LatencyClock) -> (u64, String);
    /// A sender's progress: where its flows (or queues) stand.
    fn progress(&self, epoch: u32, flows: &[FlowProgress]);
    /// A sender's estimate of this sink's clock offset.
    fn clock(&self, epoch: u32, estimate: &ClockEstimate);
    /// Closes a sender run with its goodbye's true ends and returns what the books counted,
    /// waiting up to [`GOODBYE_WAIT`], `incomplete` when not every count was in by then (the
    /// adapter fills in the session, the sender's name and the epoch).
    fn goodbye(&self, epoch: u32, goodbye: &Goodbye) -> Verdict;
}

/// The one control-channel adapter of every sink: its session name over its ledger.
pub(crate) struct SinkEnd<L> {
    ledger: L,
    sink_session: String,
}

impl<L: SinkLedger> SinkEnd<L> {
    /// Serves `ledger` as the sink session `sink_session`.
    pub(crate) fn new(ledger: L, sink_session: String) -> SinkEnd<L> {
        SinkEnd {
            ledger,
            sink_session,
        }
    }
}

impl<L: SinkLedger> SinkBooks for SinkEnd<L> {
    fn hello(&self, hello: &Hello, from: HelloFrom) -> u64 {
        let clock = hello_clock(hello, from.version);
        let (uptime, line) = self.ledger.hello(hello, &from, clock);
        let rate = match (hello.rate_pps, hello.proto) {
            (None, _) => "unpaced".to_string(),
            (Some(r), Some(DataProto::Tcp)) => format!("{r:.0} records/s"),
            (Some(r), _) => format!("{r:.0}pps"),
        };
        say!("{line} ({} B, {rate})", hello.size);
        uptime
    }

    fn progress(&self, _peer: SocketAddr, _name: &str, epoch: u32, progress: &Progress) {
        self.ledger.progress(epoch, &progress.flows);
    }

    fn clock(&self, _peer: SocketAddr, _name: &str, epoch: u32, estimate: &ClockEstimate) {
        self.ledger.clock(epoch, estimate);
    }

    fn goodbye(&self, _peer: SocketAddr, name: &str, epoch: u32, goodbye: &Goodbye) -> Verdict {
        let verdict = self.ledger.goodbye(epoch, goodbye);
        if verdict.incomplete {
            say!(
                "sink: sender {name} said goodbye with counts still open after {GOODBYE_WAIT:?}; its verdict counts what arrived so far"
            );
        }
        Verdict {
            sink_session: self.sink_session.clone(),
            name: name.into(),
            epoch,
            ..verdict
        }
    }

    fn disconnected(&self, peer: SocketAddr, name: &str, _epoch: u32, clean: bool) {
        if !clean {
            say!(
                "sink: sender {name} ({peer}) went away without a goodbye{}",
                L::GONE_WITHOUT_GOODBYE
            );
        }
    }
}

/// Where a protocol's sender run stands, as its control thread reads it.
pub(crate) trait SenderLedger: Send + Sync + 'static {
    /// The data the run sends.
    const PROTO: DataProto;
    /// Where each flow (or queue) stands in `part` of the run (a run without parts: part 0).
    fn flows(&self, part: usize) -> Vec<FlowStart>;
}

/// What a sender run announces in its hello, whatever its protocol.
pub(crate) struct Announce {
    /// Its `--name`.
    pub(crate) name: String,
    /// Its largest payload or record, in bytes.
    pub(crate) size: u32,
    /// The epoch of each part of the run (a run without parts: one).
    pub(crate) epochs: Arc<[u32]>,
    /// The part the connection opens in.
    pub(crate) part: usize,
    /// The part's target rate per second over all queues (`None`: unpaced).
    pub(crate) rate: Option<f64>,
    /// The most datagrams per second one flow is paced at (`None`: nothing to bound).
    pub(crate) flow_pps: Option<f64>,
    /// Monotonic ns the run (or its part) started, for the hello's age of it.
    pub(crate) started_ns: u64,
    /// Monotonic ns before any of the run's pacers started, for the reach's age.
    pub(crate) paced_since_ns: u64,
}

/// The one view every sender's control thread reads: what the run announces, over its ledger.
pub(crate) struct SenderEnd<L> {
    name: String,
    size: u32,
    epochs: Arc<[u32]>,
    part: AtomicUsize,
    /// The part's target rate as `f64` bits (0: unpaced).
    rate_bits: AtomicU64,
    /// The most datagrams per second one flow is paced at in this part, as `f64` bits (0:
    /// unpaced or unbounded).
    flow_bits: AtomicU64,
    started_ns: u64,
    paced_since_ns: u64,
    ledger: L,
}

fn rate_bits(rate: Option<f64>) -> u64 {
    rate.filter(|r| r.is_finite() && *r > 0.0)
        .map_or(0, f64::to_bits)
}

fn rate_of(bits: &AtomicU64) -> Option<f64> {
    match bits.load(Ordering::Relaxed) {
        0 => None,
        bits => Some(f64::from_bits(bits)),
    }
}

impl<L: SenderLedger> SenderEnd<L> {
    /// The view of a run that announces itself as `announce`, standing as `ledger` says.
    pub(crate) fn new(announce: Announce, ledger: L) -> SenderEnd<L> {
        SenderEnd {
            name: announce.name,
            size: announce.size,
            epochs: announce.epochs,
            part: AtomicUsize::new(announce.part),
            rate_bits: AtomicU64::new(rate_bits(announce.rate)),
            flow_bits: AtomicU64::new(rate_bits(announce.flow_pps)),
            started_ns: announce.started_ns,
            paced_since_ns: announce.paced_since_ns,
            ledger,
        }
    }

    /// The next hello is for `part`.
    pub(crate) fn enter(&self, part: usize) {
        self.part.store(part, Ordering::Relaxed);
    }

    /// The next hello announces `rate` over all queues, `flow_pps` per flow.
    pub(crate) fn announce_rate(&self, rate: Option<f64>, flow_pps: Option<f64>) {
        self.rate_bits.store(rate_bits(rate), Ordering::Relaxed);
        self.flow_bits.store(rate_bits(flow_pps), Ordering::Relaxed);
    }
}

impl<L: SenderLedger> SenderView for SenderEnd<L> {
    fn hello(&self, reconnect: u32) -> Hello {
        let part = self.part.load(Ordering::Relaxed);
        let now = clock::monotonic_ns();
        Hello {
            name: self.name.clone(),
            epoch: self.epochs.get(part).copied().unwrap_or_default(),
            flows: self.ledger.flows(part),
            size: self.size,
            rate_pps: rate_of(&self.rate_bits),
            elapsed_ns: now.saturating_sub(self.started_ns),
            reconnect,
            step: (part > 0).then_some(part as u32),
            boot_id: None,
            reach: rate_of(&self.flow_bits).map(|flow_pps| Reach {
                flow_pps,
                run_elapsed_ns: now.saturating_sub(self.paced_since_ns),
            }),
            proto: Some(L::PROTO),
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            flows: self
                .ledger
                .flows(self.part.load(Ordering::Relaxed))
                .iter()
                .map(progress_of)
                .collect(),
        }
    }
}

/// A flow's start as its progress.
pub(crate) fn progress_of(f: &FlowStart) -> FlowProgress {
    FlowProgress {
        flow: f.flow,
        next_seq: f.next_seq,
        failed: f.failed,
    }
}

/// Says goodbye with the flows' true ends on a run's last connection and waits for the verdict.
pub(crate) fn finish(client: ControlClient, flows: Vec<FlowProgress>) -> SinkVerdict {
    client
        .finish(Goodbye { flows }, VERDICT_WAIT)
        .map(|v| (v.sink_session.clone(), v))
        .map_err(|e| e.to_string())
}

/// Says goodbye for the connection's current epoch and waits for the verdict; the connection
/// stays open for the next.
pub(crate) fn end_epoch(client: &ControlClient, flows: Vec<FlowProgress>) -> SinkVerdict {
    client
        .end_epoch(Goodbye { flows }, VERDICT_WAIT)
        .map(|v| (v.sink_session.clone(), v))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
#[path = "link_ends_tests.rs"]
mod tests;
