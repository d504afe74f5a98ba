//! Wires a run to the Prometheus exporter, for either protocol: checks cardinality and
//! installs the exporter before any worker starts, and keeps the endpoint up for
//! `--metrics-linger` after the run. Each protocol registers its workers' handles itself while
//! they wait at their start barrier (UDP: `roles::register_series`).

use crate::say;
use std::{
    net::SocketAddr,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use crate::{
    error::Error,
    metrics::{self, Shape},
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
    use std::sync::Arc;

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
