//! The rate schedule's series: the step each sender is in, how many steps its schedule has, and
//! the sink's results of the steps judged so far. A constant rate is a one-step schedule: its
//! only step is judged when the run's verdict arrives. The tally is filled where verdicts arrive
//! (the parts thread, the reporter) and copied into the series by the reporter's flush, never by
//! a worker.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering::Relaxed},
};

use metrics::{Counter, Gauge, counter, gauge};

use super::names::*;
use crate::{control::msg::Verdict, sender::SenderShared};

/// The `result` label values of `ringblast_tx_step_packets_total`, in tally order.
pub(crate) const STEP_RESULTS: [&str; 6] = [
    "sent",
    "received",
    "lost",
    "kernel_drops",
    "duplicates",
    "send_failed",
];

/// The sink's results of the judged steps, summed, and how many steps were judged or not.
#[derive(Debug, Default)]
pub(crate) struct StepTally {
    packets: [AtomicU64; STEP_RESULTS.len()],
    judged: AtomicU64,
    unknown: AtomicU64,
}

impl StepTally {
    /// A step ended: `sent` packets the kernel accepted in it, and the sink's complete verdict
    /// for it, or none (it counts as unknown, its packets in no result).
    pub(crate) fn add(&self, sent: u64, verdict: Option<&Verdict>) {
        let Some(v) = verdict.filter(|v| v.complete()) else {
            self.unknown.fetch_add(1, Relaxed);
            return;
        };
        let t = &v.totals;
        let values = [
            sent,
            t.rx_packets,
            t.rx_lost,
            t.rx_kernel_drops,
            t.rx_duplicates,
            t.tx_failed,
        ];
        for (into, n) in self.packets.iter().zip(values) {
            into.fetch_add(n, Relaxed);
        }
        self.judged.fetch_add(1, Relaxed);
    }
}

/// The schedule series of one sender process.
pub(crate) struct StepSeries {
    shared: Vec<Arc<SenderShared>>,
    tally: Arc<StepTally>,
    /// Steps of the schedule; a search's trials are steps that grow as it posts them.
    steps: usize,
    steps_gauge: Gauge,
    step: Gauge,
    packets: [Counter; STEP_RESULTS.len()],
    judged: Counter,
    unknown: Counter,
}

impl StepSeries {
    /// Registers the series (at 0) for senders of a `steps`-step schedule.
    pub(crate) fn register(
        shared: Vec<Arc<SenderShared>>,
        steps: usize,
        tally: Arc<StepTally>,
    ) -> Self {
        let steps_gauge = gauge!(TX_SCHEDULE_STEPS);
        steps_gauge.set(steps as f64);
        let step = gauge!(TX_SCHEDULE_STEP);
        step.set(1.0);
        StepSeries {
            shared,
            tally,
            steps,
            steps_gauge,
            step,
            packets: std::array::from_fn(
                |i| counter!(TX_STEP_PACKETS, "result" => STEP_RESULTS[i]),
            ),
            judged: counter!(TX_STEPS, "verdict" => "judged"),
            unknown: counter!(TX_STEPS, "verdict" => "unknown"),
        }
    }

    /// Copies the queues' current step and the tally into the series.
    pub(crate) fn flush(&self) {
        let step = self
            .shared
            .iter()
            .map(|s| s.part.load(Relaxed))
            .max()
            .unwrap_or(0);
        self.step.set((step + 1) as f64);
        self.steps_gauge
            .set(self.steps.max(step as usize + 1) as f64);
        for (c, n) in self.packets.iter().zip(&self.tally.packets) {
            c.absolute(n.load(Relaxed));
        }
        self.judged.absolute(self.tally.judged.load(Relaxed));
        self.unknown.absolute(self.tally.unknown.load(Relaxed));
    }
}
