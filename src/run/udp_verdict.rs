//! The UDP registry's side of the verdict: the sink's books of one sender run written as the
//! control channel's [`Verdict`] (by a remote sink's control server and by `pair`'s in-process
//! sink alike), and the conversions between the channel's flow progress and the registry's
//! flow reports. A sender reads the verdict through `control::msg::Verdict`'s own methods.

use super::link_ends::SinkVerdict;
use crate::{
    control::msg::{FlowProgress, FlowVerdict, SizeCount, Verdict, VerdictCells, VerdictClock},
    sink::registry::{FlowReport, RunTally},
};

/// Asks a remote sink for its verdict, given the flows' ends.
pub(crate) type AskSink = Box<dyn FnOnce(&[FlowReport]) -> SinkVerdict>;

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

/// The registry's books of one sender run as its verdict (names are the caller's to give).
pub(crate) fn verdict_of(t: &RunTally) -> Verdict {
    let mut v = Verdict {
        // The run's datagrams that arrived but found no slot (per run, not per flow).
        totals: FlowVerdict {
            rx_invalid: t.refused,
            ..FlowVerdict::of(&t.totals)
        },
        flows: t
            .flows
            .iter()
            .map(|(f, c)| (*f, FlowVerdict::of(c)))
            .collect(),
        sizes: t
            .sizes
            .iter()
            .map(|c| SizeCount {
                payload: c.payload.unwrap_or(0),
                packets: c.packets,
                bytes: c.bytes,
            })
            .collect(),
        clock: Some(VerdictClock::of(
            &t.clock,
            t.totals.latency_unknown,
            t.totals.latency_clamped,
        )),
        incomplete: !t.complete,
        cells: Some(Box::new(VerdictCells::of(&t.totals))),
        ..Verdict::default()
    };
    v.set_figures(&t.latency, &t.jitter);
    v
}
