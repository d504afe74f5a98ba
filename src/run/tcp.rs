//! TCP's transport for the run pipeline (`--proto tcp` on `send`, `sink` and `pair`): how a
//! [`TcpPlan`]'s groups start, how its control channel links them, and how the TCP reporter reads
//! them.
//!
//! The control channel runs on the sink's data port (see `tcp_control`): a sender's
//! `--control auto` reaches it at `--to`, and `pair --proto tcp` uses it over loopback.

use std::{sync::Arc, time::Duration};

use super::{
    link::SenderLink,
    plan::TcpPlan,
    session::Session,
    tcp_control::{self, HANDOFF_SLOTS},
    tcp_groups::{start_senders, start_sinks},
    tcp_report::TcpReport,
};
use crate::{
    error::Error,
    say,
    sink::tcp::{books::TcpBooks, peers::ControlHandoff},
    worker::Control,
};

/// A TCP plan as the run pipeline starts it.
pub(crate) struct TcpRunSpec {
    plan: TcpPlan,
    /// What starting the groups set up for linking and reporting them.
    started: TcpStarted,
}

/// What a TCP run's start leaves for its control channel and reporter.
#[derive(Default)]
struct TcpStarted {
    /// The sink's per-sender books.
    books: Option<Arc<TcpBooks>>,
    /// A pair's control server, started before its senders.
    server: Option<crate::control::server::RunningServer>,
    /// A sink-only run's control server, started once the plan is printed: the address, and
    /// the secret and handoff when it is served.
    serve_later: Option<(std::net::SocketAddr, Option<ServeWith>)>,
    /// A sink-only run's `--duration`.
    sink_duration: Option<Duration>,
    /// The sender's control channel, target, epoch and record size.
    link: Option<SenderLink>,
    target: Option<f64>,
    epoch: u32,
    size: usize,
    /// A sender-only run's start-up line.
    start_line: Option<String>,
}

/// A control server's secret and the handoff its sink's workers feed.
type ServeWith = (
    Option<Arc<crate::control::auth::Secret>>,
    Arc<ControlHandoff>,
);

impl TcpRunSpec {
    pub(crate) fn new(plan: TcpPlan) -> TcpRunSpec {
        TcpRunSpec {
            plan,
            started: TcpStarted::default(),
        }
    }

    fn is_pair(&self) -> bool {
        self.plan.senders.is_some() && self.plan.sinks.is_some()
    }

    /// Descriptors the run holds: each connection's socket (both ends in a pair), each sink
    /// queue's connection cap, and a ring per queue.
    fn fds(&self) -> (u64, u64) {
        let conns: u64 = self
            .plan
            .senders
            .iter()
            .map(|s| u64::from(s.run.conns) * s.queues.len() as u64)
            .sum();
        let ends = if self.plan.sinks.is_some() { 2 } else { 1 };
        let sink_conns = self
            .plan
            .sinks
            .as_ref()
            .map_or(0, |s| u64::from(s.config.max_conns) * s.queues.len() as u64);
        let queues = self.plan.senders.as_ref().map_or(0, |s| s.queues.len())
            + self.plan.sinks.as_ref().map_or(0, |s| s.queues.len());
        (conns * ends + sink_conns, queues as u64)
    }
}

impl super::pipeline::Transport for TcpRunSpec {
    type Senders = super::tcp_groups::TcpSenders;
    type Sinks = super::tcp_groups::TcpSinks;
    type Report = TcpReport;

    fn fd_needs(&self) -> super::fds::Needs {
        let (sockets, queues) = self.fds();
        super::fds::Needs {
            sender_flows: sockets,
            sender_queues: queues,
            ..Default::default()
        }
    }

    fn exporter_shape(&self) -> Result<crate::metrics::Shape, Error> {
        // The TCP series are registered by the reporter, before it releases the workers.
        Ok(crate::metrics::Shape::default())
    }

    /// The sinks, their books and their control server: in a pair the server starts now and
    /// the sinks are released before the senders start, so that their connections find them
    /// working; a sink alone serves once its plan is printed.
    fn start_sinks(&mut self, control: &Arc<Control>) -> Result<Option<Self::Sinks>, Error> {
        let is_pair = self.is_pair();
        let Some(side) = self.plan.sinks.take() else {
            return Ok(None);
        };
        let handoff = side
            .serve
            .is_some()
            .then(|| Arc::new(ControlHandoff::new(HANDOFF_SLOTS)));
        let mut config = side.config;
        config.control.clone_from(&handoff);
        let listen = config.listen;
        let sinks = start_sinks(control, side.queues, config)?;
        let books = Arc::new(TcpBooks::new(sinks.shared.clone(), side.max_senders));
        let serve = side.serve.zip(handoff);
        if is_pair {
            self.started.server =
                serve.map(|(secret, h)| tcp_control::serve(listen, secret, books.clone(), h));
            sinks.group.release();
        } else {
            self.started.serve_later = Some((listen, serve));
        }
        self.started.books = Some(books);
        self.started.sink_duration = side.duration;
        Ok(Some(sinks))
    }

    fn start_senders(&mut self, control: &Arc<Control>) -> Result<Option<Self::Senders>, Error> {
        let is_pair = self.is_pair();
        let Some(side) = self.plan.senders.take() else {
            return Ok(None);
        };
        let run = &side.run;
        let (epoch, size, conns) = (run.epoch, run.size, run.conns);
        if !is_pair {
            self.started.start_line = Some(format!(
                "tcp send to {}: {conns} connection(s) per queue, {}-byte records, control channel {}",
                side.to,
                side.record,
                side.link
                    .as_ref()
                    .map_or("off".to_string(), |l| format!("to tcp {}", l.addr))
            ));
        }
        let senders = start_senders(control, side.queues, &side.run)?;
        let started = &mut self.started;
        (started.link, started.target, started.epoch, started.size) =
            (side.link, side.run.rate_rps, epoch, size);
        Ok(Some(senders))
    }

    fn abandon_sinks(&self, mut sinks: Self::Sinks) {
        // Only a pair has senders that can fail to start, and its sinks are released already.
        sinks.group.join();
    }

    fn memory_text(senders: Option<&Self::Senders>, sinks: Option<&Self::Sinks>) -> String {
        senders
            .map(|s| s.memory_text())
            .into_iter()
            .chain(sinks.map(|s| s.memory_text()))
            .collect()
    }

    fn link(
        self,
        run: super::pipeline::Started<Self::Senders, Self::Sinks>,
    ) -> Result<super::pipeline::Linked<TcpReport>, Error> {
        let is_pair = run.senders.is_some() && run.sinks.is_some();
        let mut started = self.started;
        if let Some(line) = started.start_line.take() {
            say!("{line}");
        }
        if let (Some(books), Some((listen, serve))) = (&started.books, started.serve_later.take()) {
            say!("tcp sink listening on {listen}");
            started.server = match serve {
                Some((secret, h)) => Some(tcp_control::serve(listen, secret, books.clone(), h)),
                None => {
                    say!(
                        "control: off: the sink listens on {listen} (not loopback) without --secret-file; give it --secret-file FILE or --insecure-control to serve senders their verdicts"
                    );
                    None
                }
            };
        }
        let (ask, refused) = match (&run.senders, started.link.take()) {
            (Some(senders), Some(link)) => {
                let (ask, refused) = tcp_control::connect(
                    link,
                    started.epoch,
                    started.size,
                    started.target,
                    senders.shared.clone(),
                );
                (Some(ask), Some(refused))
            }
            (Some(_), None) => (Some(tcp_control::off()), None),
            (None, _) => (None, None),
        };
        // Set only as the sinks start.
        let sink_duration = started
            .sink_duration
            .map(|d| (Arc::clone(&run.sink_control), d));
        let report = TcpReport::new(self.plan.output.json, run.senders, run.sinks, sink_duration)
            .with_control(started.books, ask)
            .with_link(refused.clone())
            .with_min_rate_ratio(self.plan.min_rate_ratio);
        let exporter = run
            .exporting
            .then(|| crate::metrics::Exporter::new(report.series()));
        let mut session = Session::new(
            report,
            (run.send_control, run.sink_control),
            self.plan.output.interval,
        )
        .exporting(exporter, started.server.as_ref().map(|s| s.stats()));
        if is_pair {
            session = session.sinks_released();
        }
        Ok(super::pipeline::Linked {
            session,
            server: started.server,
            link: refused,
        })
    }
}
