//! The trials of `ringblast search` on one sender run: its workers, rings, sockets and control
//! connection are set up once, and each trial is posted to the workers as the next part of that
//! run (`sender::trials`), its own session epoch at the sink. A trial's loss is the sink's exact
//! verdict for its epoch, asked for over the same control connection once every worker's sends
//! of the trial completed. So no trial pays for a process start, a ring set-up or a handshake,
//! which would otherwise count against short trials.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    control_link, exporting, link,
    link_state::LinkState,
    part_link,
    part_link::PartSink,
    pipeline,
    plan::{Output, TrialSendPlan, UdpPlan},
    roles::SenderSet,
};
use crate::{
    control::client::ClientConfig, error::Error, metrics::Exporter, sender::trials::TrialBoard,
    worker::Control,
};

/// How often the search thread looks whether a trial's sends have settled.
const SETTLE_POLL: Duration = Duration::from_millis(2);
/// How long after a trial's end its sends may take to settle before the trial is given up.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// One trial's outcome.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Trial {
    /// The rate asked for (pps), or the one achieved when unpaced.
    pub(crate) rate: f64,
    /// How long it sent.
    pub(crate) duration: Duration,
    /// Packets stamped: sent, and failed at the sender.
    pub(crate) offered: u64,
    /// Packets that did not arrive: lost, dropped by the sink's kernel, or failed sends.
    pub(crate) lost: u64,
    /// Failed sends (the sender could not offer the rate).
    pub(crate) failed: u64,
    /// Of `lost`, the datagrams the sink's kernel dropped (the rest of `lost` less `failed` is
    /// what the network lost).
    pub(crate) kernel_drops: u64,
    /// Packets (records) the kernel accepted.
    pub(crate) accepted: u64,
    /// The rate the kernel accepted (pps): what the trial really offered.
    pub(crate) achieved: f64,
    /// The share of the trial the kernel held the sender back (TCP's flow control: records
    /// were due that no connection could take); 0 for UDP, whose sends never wait.
    pub(crate) held_share: f64,
    /// The fewest packets the pacers were due to send in the trial (0 when unpaced): each
    /// queue's share of the rate over the trial's length, less one per queue for rounding.
    pub(crate) due: u64,
    /// The sink's 99th percentile one-way latency (its figure, or the upper bound of its cell
    /// from a sink older than protocol version 7); `None` when it had no sample (no clock
    /// estimate, or compact headers).
    pub(crate) latency_p99_ns: Option<u64>,
    /// The search's judgement: the trial offered less than `due` by more than the tolerance,
    /// so it is no pass (and no failure either).
    pub(crate) limited: bool,
    /// The search's judgement: its p99 latency was above `--max-latency-p99`, a failure.
    pub(crate) over_latency: bool,
}

/// A running sender that measures trials.
pub(crate) struct TrialSender {
    senders: SenderSet,
    control: Arc<Control>,
    board: Arc<TrialBoard>,
    sink: part_link::OneConnection,
    books: part_link::PartBooks,
    exporter: Option<Exporter<crate::metrics::handles::Handles>>,
    metrics_linger: Duration,
    /// `--start-at`, until the first trial waited for it.
    start_at: Option<pipeline::StartTime>,
    started: Instant,
    /// What the control connection heard: a refusal or a busy sink ends the search.
    link: Arc<LinkState>,
}

impl TrialSender {
    /// Starts the workers of `plan`, idle until the first trial, with room for `capacity`
    /// trials.
    pub(crate) fn start(plan: TrialSendPlan, capacity: usize) -> Result<TrialSender, Error> {
        let started = Instant::now();
        let TrialSendPlan {
            mut send,
            link,
            reporting,
        } = plan;
        let queues = send.queues.len();
        let board = Arc::new(TrialBoard::new(capacity, queues));
        // Each trial posts its own rate and length: the run has none of its own.
        let run = &mut send.run;
        run.part_epochs = crate::sender::parts::part_epochs(run.epoch, capacity);
        run.trials = Some(Arc::clone(&board));
        run.rate_pps = None;
        run.duration = None;
        run.count = None;
        // The run pipeline brings the sender up as it would a `send`'s, idle until the first
        // trial is posted; the trials then link it to the sink themselves.
        let spec = super::RunSpec {
            plan: UdpPlan {
                senders: Some(send),
                sinks: None,
                exported_flows: 0,
                output: Output {
                    json: false,
                    interval: Duration::ZERO,
                },
                max_senders: 0,
                link: link::Link::Off,
                min_rate_ratio: None,
                wire_rate: false,
                share_port: false,
            },
            arena_bytes: (0, 0),
        };
        let up = pipeline::start(spec, &reporting)?;
        let transport = up.transport;
        let (senders, control) = match up.started.senders {
            Some(senders) => (senders, up.started.send_control),
            None => return Err(Error::Usage("a search needs a sender".into())),
        };
        let exporter = reporting
            .metrics
            .map(|_| super::roles::register_series(Some(&senders), None, 0, transport.arena_bytes));
        let mut config = ClientConfig::new(link.addr);
        config.secret = link.secret;
        let state = Arc::new(LinkState::default());
        let books = control_link::part_books(&senders);
        let sink = part_link::OneConnection::new(
            config,
            link.name,
            books.clone(),
            u32::try_from(senders.size).unwrap_or(u32::MAX),
            Arc::clone(&state),
        );
        senders.group.release();
        Ok(TrialSender {
            senders,
            control,
            board,
            sink,
            books,
            exporter,
            metrics_linger: reporting.metrics_linger,
            start_at: reporting.start_at,
            started,
            link: state,
        })
    }

    /// Runs one trial at `rate` (`None`: unpaced) for `duration`: the sink hears the trial's
    /// Hello, the workers send it, and once their sends settled the sink's verdict gives its
    /// loss.
    pub(crate) fn measure(
        &mut self,
        rate: Option<f64>,
        duration: Duration,
    ) -> Result<Trial, Error> {
        let k = self.board.posted();
        if k >= self.board.capacity() {
            return Err(Error::Unsupported(format!(
                "the search ran all {} trials it has room for; give it a coarser --precision or longer trials",
                self.board.capacity()
            )));
        }
        let rate_arg = rate.map_or("max".to_string(), |r| format!("{}pps", r.round().max(1.0)));
        self.sink.announce_rate(rate);
        self.sink.open(k);
        // `--start-at`: the first trial, linked, starts on the time; `--max-time` counts from it.
        if let Some(start) = self.start_at.take() {
            pipeline::wait_for_start(&start, &std::sync::atomic::AtomicBool::new(false));
            self.started = Instant::now();
        }
        self.board.post(rate, duration.as_nanos() as u64);
        let give_up = Instant::now() + duration + SETTLE_LIMIT;
        while !part_link::settled(&self.books.shared, k) {
            if self.senders.group.finished() || Instant::now() > give_up {
                return Err(Error::Unsupported(format!(
                    "a trial at {rate_arg} never ended: a sender worker stopped"
                )));
            }
            if let Some(e) = self.exporter.as_mut() {
                e.tick(false);
            }
            std::thread::sleep(SETTLE_POLL);
        }
        let flows = self.books.reports(k);
        let stamped: u64 = flows.iter().map(|f| f.next_seq - f.first_seq).sum();
        let errors: u64 = flows.iter().map(|f| f.failed).sum();
        let sent = stamped.saturating_sub(errors);
        let verdict = self.sink.close(k, &flows);
        self.books
            .tally
            .add(sent, verdict.as_ref().ok().map(|(_, v)| v));
        if let Some(e) = self.exporter.as_mut() {
            e.tick(true);
        }
        let verdict = match verdict {
            Ok((_, v)) if v.complete() => v,
            other => {
                let why = match other {
                    Err(e) => e,
                    Ok(_) => "not every sink queue answered in time".into(),
                };
                // A sink that refused the secret, or stayed busy, says so with its own code.
                if let Some(e) = super::link_state::refusal(Some(&self.link), true) {
                    return Err(e);
                }
                return Err(Error::Unsupported(format!(
                    "a trial at {rate_arg} got no complete verdict from the sink ({why}); the search needs the sink's control channel"
                )));
            }
        };
        let seconds = duration.as_secs_f64().max(1e-9);
        let queues = self.senders.queues.len() as u64;
        Ok(Trial {
            rate: rate.unwrap_or(sent as f64 / seconds),
            duration,
            offered: stamped,
            lost: verdict.totals.rx_lost + verdict.totals.rx_kernel_drops + errors,
            failed: errors,
            kernel_drops: verdict.totals.rx_kernel_drops,
            accepted: sent,
            achieved: sent as f64 / seconds,
            held_share: 0.0,
            due: rate.map_or(0, |r| ((r * seconds).floor() as u64).saturating_sub(queues)),
            // The figure (within 1 %), or else the upper bound of its cell (an older sink).
            latency_p99_ns: verdict
                .latency_figures
                .as_deref()
                .map(|f| f.p99_ns)
                .or((verdict.latency_p99_ns > 0).then_some(verdict.latency_p99_ns)),
            limited: false,
            over_latency: false,
        })
    }

    /// Time since the search started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops the workers, and keeps `/metrics` up for `--metrics-linger`.
    pub(crate) fn stop(mut self, signal: &std::sync::atomic::AtomicBool) {
        self.control.request_stop();
        self.senders.group.join();
        if let Some(mut e) = self.exporter {
            e.tick(true);
            exporting::linger(self.metrics_linger, signal, false);
        }
    }
}
