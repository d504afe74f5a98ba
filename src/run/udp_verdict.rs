//! The UDP sink's verdict on a sender run, as the sender holds it: its result type, and the
//! conversions between the control channel's messages and the UDP registry's books (flows'
//! ends, per-flow counters, latency, jitter and size classes).

use super::verdict::{clock_of, latency_of};
use crate::{
    control::msg::{FlowProgress, FlowVerdict, Verdict, VerdictJitter},
    sink::{
        registry::{FlowReport, RunVerdict},
        sizes::ClassCount,
    },
    stats::{Jitter, Latency, SessionCounters},
};

/// The sink's session name and its books for one sender run, or why none came.
pub(crate) type VerdictResult = Result<(String, RunVerdict), String>;
/// Asks a remote sink for its verdict, given the flows' ends.
pub(crate) type AskSink = Box<dyn FnOnce(&[FlowReport]) -> VerdictResult>;

/// A sender's per-flow progress (PROGRESS or GOODBYE) as the registry's reports.
pub(crate) fn reports_of(flows: &[FlowProgress]) -> Vec<FlowReport> {
    flows
        .iter()
        .map(|f| FlowReport {
            flow: f.flow,
            first_seq: 0,
            next_seq: f.next_seq,
            failed: f.failed,
        })
        .collect()
}

pub(crate) fn progress_of(f: &FlowReport) -> FlowProgress {
    FlowProgress {
        flow: f.flow,
        next_seq: f.next_seq,
        failed: f.failed,
    }
}

pub(crate) fn flow_verdict(c: &SessionCounters) -> FlowVerdict {
    FlowVerdict {
        rx_packets: c.packets,
        rx_bytes: c.bytes,
        rx_lost: c.lost,
        rx_reordered: c.reordered,
        rx_duplicates: c.duplicates,
        rx_invalid: 0,
        rx_kernel_drops: c.kernel_drops,
        rx_unconfirmed: c.unconfirmed,
        tx_failed: c.send_failed,
    }
}

pub(crate) fn counters_of(f: &FlowVerdict) -> SessionCounters {
    SessionCounters {
        packets: f.rx_packets,
        bytes: f.rx_bytes,
        lost: f.rx_lost,
        reordered: f.rx_reordered,
        duplicates: f.rx_duplicates,
        kernel_drops: f.rx_kernel_drops,
        unconfirmed: f.rx_unconfirmed,
        send_failed: f.tx_failed,
        ..SessionCounters::default()
    }
}

/// A run's jitter as a verdict carries it.
pub(crate) fn verdict_jitter(j: &Jitter) -> VerdictJitter {
    VerdictJitter {
        samples: j.samples,
        mean_ns: j.mean_ns,
        p50_ns: j.bounds.p50_ns,
        p99_ns: j.bounds.p99_ns,
        p999_ns: j.bounds.p999_ns,
        max_ns: j.bounds.max_ns,
    }
}

/// The jitter a verdict carries (none from a sink older than protocol version 5).
fn jitter_of(v: Option<&VerdictJitter>) -> Jitter {
    v.map_or_else(Jitter::default, |j| Jitter {
        samples: j.samples,
        mean_ns: j.mean_ns,
        bounds: Latency {
            p50_ns: j.p50_ns,
            p99_ns: j.p99_ns,
            p999_ns: j.p999_ns,
            max_ns: j.max_ns,
            figures: None,
        },
    })
}

pub(crate) fn run_verdict(v: &Verdict) -> RunVerdict {
    let mut totals = counters_of(&v.totals);
    if let Some(c) = &v.clock {
        totals.latency_unknown = c.latency_unknown_packets;
        totals.latency_clamped = c.latency_clamped_packets;
    }
    RunVerdict {
        totals,
        flows: v.flows.iter().map(|(f, c)| (*f, counters_of(c))).collect(),
        complete: !v.incomplete,
        latency: latency_of(v),
        jitter: jitter_of(v.jitter.as_deref()).with_figures(v.jitter_figures.as_deref().copied()),
        sizes: v
            .sizes
            .iter()
            .map(|c| ClassCount {
                payload: (c.payload > 0).then_some(c.payload),
                packets: c.packets,
                bytes: c.bytes,
            })
            .collect(),
        clock: clock_of(v.clock.as_ref()),
        refused: v.totals.rx_invalid,
    }
}
