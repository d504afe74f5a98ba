//! The trials of `ringblast search --proto tcp`. The run pipeline prepares the search once (the
//! descriptor budget and the exporter); each trial is then one TCP sender run at the trial's
//! rate and for its length: its queues start as `send --proto tcp`'s do (`tcp_groups`), connect
//! afresh as a run epoch of their own, and link to the sink through their own control
//! connection (`tcp_control`), whose verdict counts that epoch's records alone.
//!
//! **A TCP trial's loss is its shortfall:** the records it offered that the sink had not
//! acknowledged counting when the trial's drain ended
//! (`--drain`, by default 2 % of the trial and at least 50 ms, after the trial's length). TCP
//! loses nothing, so above the path's rate the excess waits: in the sender's socket buffer, in
//! the bottleneck's queue, or unwritten while the kernel holds the sender back. None of it
//! counts as delivered, so a trial at a rate `r` for `d` passes only where the path carried
//! `r·d` records within `d` and the drain: the drain bounds what buffering can hide to a share
//! `drain / d` of the rate. The acknowledgements are the sink's in-band counts; the verdict the
//! sink signs over the control channel caps them, so a forged acknowledgement counts nothing.
//!
//! What a trial offered is what it wrote or, where the kernel held the sender back for at least
//! `--offered-tolerance` of the trial (`backpressure_ns`: records were due that no connection
//! could take, each with a write the kernel had not finished), what its pacers were due to
//! write (the rate times the trial's length, less one record per queue): the records the path
//! would not take were offered and not delivered. A sender that wrote fewer records than were
//! due by more than the tolerance, and was held back for less, was limited by its own host:
//! **sender-limited**, as a UDP trial that could not send its rate.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use super::{
    link::SenderLink, link_state, pipeline, pipeline::Reporting, plan::TcpSendSide, tcp_control,
    tcp_groups, trials::Trial,
};
use crate::{error::Error, report::QueueView, sender::tcp::TcpSendConfig, worker::Control};

/// How often the search thread looks whether a trial's drain ended.
const DRAIN_POLL: Duration = Duration::from_millis(1);
/// The shortest drain by default, and the share of a trial's length a default drain lasts.
const DRAIN_AT_LEAST: Duration = Duration::from_millis(50);
const DRAIN_SHARE: f64 = 0.02;

/// A search's TCP sender: each trial starts, runs and ends its own sender run.
pub(crate) struct TcpTrialSender {
    queues: Vec<QueueView>,
    /// The sender's whole run; each trial sets its own rate, length and epoch.
    run: TcpSendConfig,
    link: SenderLink,
    record: usize,
    drain: Option<Duration>,
    /// `--offered-tolerance`: held back for this share of a trial, the sender was the path's.
    tolerance: f64,
    /// The placement plan, printed with the first trial's memory.
    notes: Option<String>,
    trials: u32,
    /// `--start-at`, until the first trial waited for it.
    start_at: Option<pipeline::StartTime>,
    started: Instant,
}

impl TcpTrialSender {
    /// Prepares the search's runs (descriptors for one trial's connections and queues, the
    /// exporter); `drain` is `--drain` (`None`: the default), `tolerance`
    /// `--offered-tolerance`.
    pub(crate) fn start(
        side: TcpSendSide,
        reporting: Reporting,
        drain: Option<Duration>,
        tolerance: f64,
    ) -> Result<TcpTrialSender, Error> {
        let started = Instant::now();
        let link = side.link.ok_or_else(|| {
            Error::Usage(
                "a search's trials need the sink's control channel for their verdicts".into(),
            )
        })?;
        let conns = u64::from(side.run.conns) * side.queues.len() as u64;
        let exporter_line = pipeline::prepare(
            super::fds::Needs {
                sender_flows: conns,
                sender_queues: side.queues.len() as u64,
                ..Default::default()
            },
            &reporting,
            || Ok(crate::metrics::Shape::default()),
        )?;
        Ok(TcpTrialSender {
            queues: side.queues,
            run: side.run,
            link,
            record: side.record,
            drain,
            tolerance,
            notes: Some(reporting.notes + &exporter_line),
            trials: 0,
            start_at: reporting.start_at,
            started,
        })
    }

    /// The drain after a trial of `duration`.
    fn drain(&self, duration: Duration) -> Duration {
        self.drain
            .unwrap_or_else(|| duration.mul_f64(DRAIN_SHARE).max(DRAIN_AT_LEAST))
    }

    /// Runs one trial at `rate` records/s (`None`: unpaced) for `duration`.
    pub(crate) fn measure(
        &mut self,
        rate: Option<f64>,
        duration: Duration,
    ) -> Result<Trial, Error> {
        let epoch = self.run.epoch.wrapping_add(self.trials).max(1);
        self.trials += 1;
        let queues = self.queues.len();
        let run = TcpSendConfig {
            rate_rps: rate,
            duration: Some(duration),
            count: None,
            epoch,
            proof_token: self.link.secret.as_ref().map(|s| s.data_key().token(epoch)),
            ..self.run.clone()
        };
        let control = Arc::new(Control::default());
        let mut senders = tcp_groups::start_senders(&control, self.queues.clone(), &run)?;
        if let Some(notes) = self.notes.take() {
            pipeline::print_plan(&notes);
            crate::output::human_text(&senders.memory_text());
        }
        let link = SenderLink {
            addr: self.link.addr,
            secret: self.link.secret.clone(),
            name: self.link.name.clone(),
        };
        let (ask, state) =
            tcp_control::connect(link, epoch, self.record, rate, senders.shared.clone());
        // `--start-at`: the first trial, set up and linked, starts on the time; `--max-time`
        // counts from it.
        if let Some(start) = self.start_at.take() {
            pipeline::wait_for_start(&start, &std::sync::atomic::AtomicBool::new(false));
            self.started = Instant::now();
        }
        let drain_end = Instant::now() + duration + self.drain(duration);
        senders.group.release();
        while Instant::now() < drain_end && !senders.group.finished() {
            std::thread::sleep(DRAIN_POLL);
        }
        let acknowledged: u64 = senders
            .shared
            .iter()
            .map(|s| s.counters.load().delivered_records)
            .sum();
        let ended = senders.group.join();
        let counts: Vec<_> = senders.shared.iter().map(|s| s.counters.load()).collect();
        let written: u64 = counts.iter().map(|c| c.tx_records).sum();
        let failed: u64 = counts.iter().map(|c| c.resets + c.send_errors).sum();
        let held_ns = counts.iter().map(|c| c.backpressure_ns).sum::<u64>() / queues as u64;
        let verdict = ask(&senders.shared);
        let rate_arg = rate.map_or("max".to_string(), |r| {
            format!("{}rec/s", r.round().max(1.0))
        });
        if let Some(e) = link_state::refusal(Some(&state), true) {
            return Err(e);
        }
        if ended.iter().any(|o| o.is_none_or(|o| o.ring_failed)) {
            return Err(Error::Unsupported(format!(
                "a trial at {rate_arg} never ended cleanly: a sender worker stopped"
            )));
        }
        // A TCP sink's latency is its cells' bounds: the p99's is a true upper bound, so a
        // trial judged by it (`--max-latency-p99`) never passes above the bound.
        let (counted, latency_p99_ns) = match verdict {
            Ok((_, v)) if v.complete() => (
                v.totals.rx_packets,
                (v.latency_p99_ns > 0).then_some(v.latency_p99_ns),
            ),
            Ok(_) => {
                return Err(Error::Unsupported(format!(
                    "a trial at {rate_arg} got no complete verdict from the sink (its connections were still open after the goodbye's wait); the search needs every record counted"
                )));
            }
            Err(why) => {
                return Err(Error::Unsupported(format!(
                    "a trial at {rate_arg} got no verdict from the sink ({why}); the search needs the sink's control channel"
                )));
            }
        };
        let seconds = duration.as_secs_f64().max(1e-9);
        let due = rate.map_or(0, |r| {
            ((r * seconds).floor() as u64).saturating_sub(queues as u64)
        });
        let held_share = held_ns as f64 / duration.as_nanos().max(1) as f64;
        // What the kernel held back was offered too; a host that fell short by itself offered
        // only what it wrote (and is sender-limited if that is short by the tolerance).
        let offered = if held_share >= self.tolerance {
            due.max(written)
        } else {
            written
        };
        let delivered = acknowledged.min(counted);
        Ok(Trial {
            rate: rate.unwrap_or(written as f64 / seconds),
            duration,
            offered,
            lost: offered.saturating_sub(delivered),
            failed,
            kernel_drops: 0,
            accepted: written,
            achieved: written as f64 / seconds,
            due,
            held_share,
            // The TCP sink's verdict carries no latency figures (refused at resolve).
            latency_p99_ns,
            limited: false,
            over_latency: false,
        })
    }

    /// Time since the search started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}
