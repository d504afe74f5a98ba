//! Wires a run to the Prometheus exporter: checks cardinality and installs the exporter before
//! any worker starts, registers every worker's handles while the workers wait at their start
//! barrier, and keeps the endpoint up for `--metrics-linger` after the run.

use crate::say;
use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use super::roles::{SenderSet, SinkSet};
use crate::{
    error::Error,
    metrics::{self, Exporter, Shape, handles},
};

/// What the exporter needs to know before workers start.
pub(crate) struct Plan {
    /// Listen address.
    pub(crate) addr: SocketAddr,
    /// Series limit.
    pub(crate) max_series: usize,
    /// Shape of the run.
    pub(crate) shape: Shape,
}

/// Checks the series count and starts the HTTP listener; returns the line that says where,
/// for the run to print with its plan.
pub(crate) fn install(plan: &Plan) -> Result<String, Error> {
    let series = metrics::check_cardinality(&plan.shape, plan.max_series)?;
    metrics::install(plan.addr)?;
    Ok(format!(
        "metrics: http://{}/metrics ({series} series)\n",
        plan.addr
    ))
}

/// Registers every worker's series (at 0) and the info gauges.
pub(crate) fn register(
    senders: Option<&SenderSet>,
    sinks: Option<&SinkSet>,
    exported_flows: usize,
    arena_bytes: (u64, u64),
) -> Exporter<handles::Handles> {
    let mut roles = Vec::new();
    let mut by_node: BTreeMap<u32, u64> = BTreeMap::new();
    let mut tx = Vec::new();
    let senders_set = senders;
    if let Some(s) = senders {
        roles.push("send");
        let per_queue = s.target_pps.map(|r| r / s.queues.len() as f64);
        for ((q, flows), shared) in s.queues.iter().zip(&s.flows).zip(&s.shared) {
            tx.push(handles::TxWorker::register(
                q,
                flows,
                per_queue,
                s.exchange,
                shared.clone(),
            ));
            *by_node.entry(q.node).or_default() += arena_bytes.0;
        }
    }
    let mut rx = Vec::new();
    if let Some(s) = sinks {
        roles.push("sink");
        for (q, shared) in s.queues.iter().zip(&s.shared) {
            rx.push(handles::RxWorker::register(
                q,
                exported_flows,
                shared.clone(),
            ));
            *by_node.entry(q.node).or_default() += arena_bytes.1;
        }
    }
    metrics::set_info(&roles, &by_node.into_iter().collect::<Vec<_>>());
    if let Some(s) = senders_set {
        metrics::set_memory("send", &s.queues, s.group.memory());
    }
    if let Some(s) = sinks {
        metrics::set_memory("sink", &s.queues, s.group.memory());
    }
    let senders = sinks.map(|s| crate::metrics::senders::SenderSeries::new(s.registry.clone()));
    let steps = senders_set.map(|s| {
        let n = s.schedule.as_ref().map_or(1, |s| s.parts().len());
        crate::metrics::steps::StepSeries::register(s.shared.clone(), n, Arc::clone(&s.tally))
    });
    let sizes = (
        senders_set
            .map(|s| crate::metrics::sizes::TxSizeSeries::register(s.shared.clone(), &s.sizes)),
        sinks.map(|s| {
            crate::metrics::sizes::RxSizeSeries::new(s.registry.clone(), Arc::clone(&s.sizes))
        }),
    );
    Exporter::new(handles::Handles {
        tx,
        rx,
        senders,
        steps,
        sizes,
    })
}

/// Keeps the process (and its endpoint) alive for `linger`, or until a signal that comes during
/// it. A run stopped by SIGINT or SIGTERM (`stopped_by_signal`: its reporting loop saw the
/// flag) lingers too (its final values are what a scrape should see): the signal that ended the
/// run is forgotten here, so the next one ends the linger cleanly, where a second signal during
/// the run exits at once. A signal that came after the run had ended, while its summaries were
/// printed, asks to stop: there is no linger.
pub(crate) fn linger(linger: Duration, signal: &AtomicBool, stopped_by_signal: bool) {
    if linger.is_zero() {
        return;
    }
    if signal.load(Ordering::SeqCst) && !stopped_by_signal {
        say!("metrics: not serving final values: a signal came as the run ended");
        return;
    }
    signal.store(false, Ordering::SeqCst);
    say!(
        "metrics: serving final values for {}s (a signal ends it)",
        linger.as_secs_f64()
    );
    let until = std::time::Instant::now() + linger;
    while std::time::Instant::now() < until && !signal.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_after_the_run_means_no_linger_and_the_one_that_stopped_it_is_forgotten() {
        let long = Duration::from_secs(600);
        let started = std::time::Instant::now();
        let late = AtomicBool::new(true);
        linger(long, &late, false);
        assert!(late.load(Ordering::SeqCst), "the late signal still stands");
        // The run was stopped by the signal: the linger forgets it and waits for the next one,
        // which this thread sends once it sees the flag cleared.
        let flag = Arc::new(AtomicBool::new(true));
        let next = {
            let flag = Arc::clone(&flag);
            std::thread::spawn(move || {
                while flag.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                flag.store(true, Ordering::SeqCst);
            })
        };
        linger(long, &flag, true);
        next.join().unwrap();
        assert!(
            started.elapsed() < long / 2,
            "neither linger ran its course"
        );
    }
}
