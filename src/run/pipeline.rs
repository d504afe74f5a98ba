//! The one run pipeline of `send`, `sink`, `pair` and `search`, for both protocols: check the
//! descriptor budget, install the exporter, start the sinks, then the senders (stopping the
//! sinks again if the senders cannot start), print the start plan and where the packet memory
//! is ([`start`]); then, for a run, install the signal handlers, link the control channel,
//! report until the end through the run's [`Session`], and linger for the last scrape ([`run`]).
//! A search drives its trials over what [`start`] brought up instead (`trials`, `tcp_trials`). What differs between UDP and TCP is the
//! [`Transport`] a run is given: how its groups start, how its control channel links them, and
//! the [`Proto`] its session reports them with.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use super::{
    exporting, fds,
    link_state::LinkState,
    session::{Proto, Session},
    ticker::{self, Ended},
};
use crate::{control::server::RunningServer, error::Error, metrics::Shape, worker::Control};

/// How a run reports and what it prints first.
pub(crate) struct Reporting {
    /// Serve Prometheus metrics here.
    pub(crate) metrics: Option<SocketAddr>,
    /// The exporter's series cap.
    pub(crate) max_series: usize,
    /// How long `/metrics` stays up after the run.
    pub(crate) metrics_linger: Duration,
    /// The placement plan, printed once the workers are set up.
    pub(crate) notes: String,
    /// `--start-at`: the workers, set up and linked, start on it.
    pub(crate) start_at: Option<StartTime>,
}

/// When a run's workers start (`--start-at`), on this host's monotonic clock.
#[derive(Clone, Debug)]
pub(crate) struct StartTime {
    /// The wall-clock time asked, as RFC 3339, for the line that says the run waits.
    pub(crate) wall: String,
    /// The same instant on the monotonic clock (read against the wall clock once).
    pub(crate) monotonic_ns: u64,
}

/// Below this much left, [`wait_for_start`] stops sleeping and spins, so that runs on one host
/// start within microseconds of the time, not within a sleep's slack.
const SPIN_BEFORE_START_NS: u64 = 2_000_000;

/// Waits until `start`, set up and linked, or until a signal asks the run to stop.
pub(crate) fn wait_for_start(start: &StartTime, signal: &AtomicBool) {
    let left = start
        .monotonic_ns
        .saturating_sub(crate::clock::monotonic_ns());
    crate::say!(
        "start: set up; waiting {:.3} s for --start-at {}",
        left as f64 / 1e9,
        start.wall
    );
    loop {
        let left = start
            .monotonic_ns
            .saturating_sub(crate::clock::monotonic_ns());
        if left == 0 || signal.load(Ordering::Relaxed) {
            return;
        }
        if left > SPIN_BEFORE_START_NS {
            // Wake at least every 100 ms to see a signal.
            std::thread::sleep(Duration::from_nanos(
                (left - SPIN_BEFORE_START_NS).min(100_000_000),
            ));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// What one protocol brings to a run.
pub(crate) trait Transport {
    /// The started sending side.
    type Senders;
    /// The started receiving side.
    type Sinks;
    /// How its session reports the groups.
    type Report: Proto;

    /// The descriptors the run's groups and control channel will hold (the exporter's are
    /// added by the pipeline).
    fn fd_needs(&self) -> fds::Needs;
    /// The series the exporter registers before the workers start.
    fn exporter_shape(&self) -> Result<Shape, Error>;
    /// Starts the sinks, if the run has any.
    fn start_sinks(&mut self, control: &Arc<Control>) -> Result<Option<Self::Sinks>, Error>;
    /// Starts the senders, if the run has any.
    fn start_senders(&mut self, control: &Arc<Control>) -> Result<Option<Self::Senders>, Error>;
    /// Ends sinks whose senders could not start (their stop is already requested).
    fn abandon_sinks(&self, sinks: Self::Sinks);
    /// The start-up lines saying where each queue's packet memory is.
    fn memory_text(senders: Option<&Self::Senders>, sinks: Option<&Self::Sinks>) -> String;
    /// Links the control channel and makes the session that reports the run (an error: the
    /// control channel could not start, and the groups were told to stop).
    fn link(self, run: Started<Self::Senders, Self::Sinks>) -> Result<Linked<Self::Report>, Error>;
}

/// A run whose sender and sink are linked, ready to report.
pub(crate) struct Linked<P: Proto> {
    /// The session that reports the run to its end.
    pub(crate) session: Session<P>,
    /// The control server the run serves, stopped once the run has ended.
    pub(crate) server: Option<RunningServer>,
    /// What a sender's control channel finds out (whether the sink refused it).
    pub(crate) link: Option<Arc<LinkState>>,
}

/// The groups of a run as the pipeline started them, with their stop flags.
pub(crate) struct Started<S, K> {
    pub(crate) senders: Option<S>,
    pub(crate) sinks: Option<K>,
    pub(crate) send_control: Arc<Control>,
    pub(crate) sink_control: Arc<Control>,
    /// The exporter is installed (its series are registered and flushed by the reporter).
    pub(crate) exporting: bool,
}

/// Installs SIGINT/SIGTERM handlers: the first asks for a clean stop, a second exits at once.
fn install_signals() -> Result<Arc<AtomicBool>, Error> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&flag))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&flag)))
            .map_err(|e| Error::io("install signal handler", e))?;
    }
    Ok(flag)
}

/// Prints the start plan once the workers are set up: the run's start record and first line
/// (once per process), the placement `notes`, then each fallback this kernel forces on the
/// rings (never taken silently).
pub(crate) fn print_plan(notes: &str) {
    crate::start_record::emit();
    crate::output::human_text(notes);
    if let Some(note) = crate::ring::probe::ring_setup_note() {
        crate::output::human_text(note);
    }
}

/// A transport's groups as [`start`] brought them up, not yet linked: `run` links and reports
/// them, and `search` drives its trials over them.
pub(crate) struct Up<T: Transport> {
    pub(crate) transport: T,
    pub(crate) started: Started<T::Senders, T::Sinks>,
}

/// Checks the descriptor budget of `needs` (the exporter's added), and installs the exporter
/// with the series of `shape`: what every run does before its first group starts. Returns
/// the line saying where the metrics are (empty without an exporter), printed with the plan.
pub(crate) fn prepare(
    needs: fds::Needs,
    reporting: &Reporting,
    shape: impl FnOnce() -> Result<Shape, Error>,
) -> Result<String, Error> {
    fds::ensure(&fds::Needs {
        exporter: reporting.metrics.is_some(),
        ..needs
    })?;
    match reporting.metrics {
        Some(addr) => exporting::install(&exporting::Plan {
            addr,
            max_series: reporting.max_series,
            shape: shape()?,
        }),
        None => Ok(String::new()),
    }
}

/// Brings `transport`'s groups up: [`prepare`]s the run, starts the sinks, then the senders
/// (stopping the sinks again if the senders cannot start), and prints the start plan and where
/// the packet memory is.
pub(crate) fn start<T: Transport>(mut transport: T, reporting: &Reporting) -> Result<Up<T>, Error> {
    let exporter_line = prepare(transport.fd_needs(), reporting, || {
        transport.exporter_shape()
    })?;
    // Before the groups start: a pair's sink serves control (and says so) as it starts.
    crate::start_record::emit();
    let send_control = Arc::new(Control::default());
    let sink_control = Arc::new(Control::default());
    let sinks = transport.start_sinks(&sink_control)?;
    let senders = match transport.start_senders(&send_control) {
        Ok(senders) => senders,
        Err(e) => {
            if let Some(sinks) = sinks {
                sink_control.request_stop();
                transport.abandon_sinks(sinks);
            }
            return Err(e);
        }
    };
    print_plan(&reporting.notes);
    crate::output::human_text(&exporter_line);
    crate::output::human_text(&T::memory_text(senders.as_ref(), sinks.as_ref()));
    Ok(Up {
        transport,
        started: Started {
            senders,
            sinks,
            send_control,
            sink_control,
            exporting: reporting.metrics.is_some(),
        },
    })
}

/// Runs `transport` to its end.
pub(crate) fn run<T: Transport>(transport: T, reporting: Reporting) -> Result<(), Error> {
    let signal = install_signals()?;
    let Up { transport, started } = start(transport, &reporting)?;
    let Linked {
        session,
        server,
        link,
    } = transport.link(started)?;
    if let Some(start) = &reporting.start_at {
        // A signal while waiting: the session sees it at once and stops the workers unreleased.
        wait_for_start(start, &signal);
    }
    let Ended {
        result,
        interrupted,
    } = session.run(&signal, &ticker::Monotonic);
    if let Some(server) = server {
        server.stop();
    }
    // A sender the sink refused, or gave up on as busy, ends at once, without lingering for
    // a scrape.
    if let Some(e) = super::link_state::refusal(link.as_deref(), result.is_ok()) {
        return Err(e);
    }
    if reporting.metrics.is_some() {
        exporting::linger(reporting.metrics_linger, &signal, interrupted);
    }
    result
}
