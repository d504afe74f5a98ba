//! TCP runs (`--proto tcp` on `send`, `sink` and `pair`): each entry point checks the TCP
//! options once, plans the queues as UDP runs do, and describes its run as plain data (a
//! `TcpRunSpec`: a sending side, a receiving side or both); one `run` starts whatever the spec
//! holds, links the control channel and hands the groups to the TCP reporter.
//!
//! The control channel runs on the sink's data port (see `tcp_control`): a sender's
//! `--control auto` reaches it at `--to`, and `pair --proto tcp` uses it over loopback.

use std::{sync::Arc, time::Duration};

use super::{
    PAIR_DEFAULT_DURATION,
    control_link::SenderLink,
    placement_args, plan_pair, planned,
    tcp_control::{self, HANDOFF_SLOTS},
    tcp_groups::{start_senders, start_sinks},
    tcp_report::Reporter,
};
use crate::{
    cli::tcp::{Pattern, TcpSendArgs},
    cli::{PairArgs, SendArgs, SinkArgs, SinkTuning, TrafficArgs},
    error::Error,
    proto::record::{MAX_RECORD, MAX_RESPONSE, RECORD_HEADER_LEN, REQUEST_HEADER_LEN},
    say,
    sender::{
        mix::SizeSpec,
        tcp::{RrShape, TcpSendConfig},
    },
    sink::tcp::{
        RecvMode, TCP_RX_BUFFERS, TcpSinkConfig, TcpWait, books::TcpBooks, peers::ControlHandoff,
    },
    worker::Control,
};

/// The record size a TCP run was given (a mix is refused before a run starts).
fn record_size(traffic: &TrafficArgs) -> usize {
    match &traffic.size {
        SizeSpec::Payload(bytes) => *bytes,
        SizeSpec::Frames(_) => 0,
    }
}

/// Per-queue configs of a TCP sender, and the total records/s target.
fn send_configs(
    to: std::net::SocketAddr,
    traffic: &TrafficArgs,
    tcp: &TcpSendArgs,
    queues: usize,
    default_duration: Option<Duration>,
    hugepages: bool,
) -> Result<(Vec<TcpSendConfig>, Option<f64>), Error> {
    let rr = rr_shape(tcp)?;
    let conns = tcp.conns.unwrap_or(1);
    if conns == 0 || conns as usize * queues > 65_536 {
        return Err(Error::Usage(format!(
            "--conns {conns} × --queues {queues} must be between 1 and 65536 connections (flow ids are 16 bits)"
        )));
    }
    let record = match &traffic.size {
        SizeSpec::Payload(bytes) => *bytes,
        SizeSpec::Frames(_) => {
            return Err(Error::Usage(
                "size mixes (imix, FRAME:WEIGHT) apply to UDP only; give one --size for --proto tcp"
                    .into(),
            ));
        }
    };
    if record > MAX_RECORD {
        return Err(Error::Usage(format!(
            "--size {record} exceeds the largest TCP record ({MAX_RECORD} bytes)"
        )));
    }
    let size = rr.map_or(record, |r| r.request);
    let target = traffic.rate.packets_per_second(size);
    let epoch = rand::random::<u32>().max(1);
    let duration = traffic.duration.or(if traffic.count.is_none() {
        default_duration
    } else {
        None
    });
    let configs = (0..queues)
        .map(|q| TcpSendConfig {
            to,
            size,
            conns,
            first_flow: (q as u32 * conns) as u16,
            rate_rps: target.map(|r| r / queues as f64),
            count: traffic
                .count
                .map(|c| c / queues as u64 + u64::from((q as u64) < c % queues as u64)),
            duration,
            op: traffic
                .send_op
                .map_or(crate::sender::SendOp::WriteFixed, Into::into),
            epoch,
            hugepages,
            rr,
        })
        .collect();
    Ok((configs, target))
}

/// The request/response shape from `--pattern rr` and its sizes, checked.
fn rr_shape(tcp: &TcpSendArgs) -> Result<Option<RrShape>, Error> {
    if tcp.pattern != Pattern::Rr {
        if tcp.request_size.is_some() || tcp.response_size.is_some() || tcp.depth.is_some() {
            return Err(Error::Usage(
                "--request-size, --response-size and --depth need --pattern rr".into(),
            ));
        }
        return Ok(None);
    }
    let shape = RrShape {
        request: tcp.request_size.unwrap_or(64),
        response: tcp.response_size.unwrap_or(64),
        depth: tcp.depth.unwrap_or(1),
    };
    if !(REQUEST_HEADER_LEN..=MAX_RECORD).contains(&shape.request) {
        return Err(Error::Usage(format!(
            "--request-size {} must be {REQUEST_HEADER_LEN} to {MAX_RECORD} bytes (a request carries the 32-byte header and the response length)",
            shape.request
        )));
    }
    if !(RECORD_HEADER_LEN..=MAX_RESPONSE).contains(&shape.response) {
        return Err(Error::Usage(format!(
            "--response-size {} must be {RECORD_HEADER_LEN} to {MAX_RESPONSE} bytes",
            shape.response
        )));
    }
    if !(1..=64).contains(&shape.depth) {
        return Err(Error::Usage(format!(
            "--depth {} must be 1 to 64 requests outstanding per connection",
            shape.depth
        )));
    }
    Ok(Some(shape))
}

fn sink_config(
    listen: std::net::SocketAddr,
    max_conns: u32,
    tuning: &SinkTuning,
    hugepages: bool,
) -> Result<TcpSinkConfig, Error> {
    let rx_buffers = super::roles::rx_buffers(tuning.rx_buffers, TCP_RX_BUFFERS)?;
    let wait = TcpWait::from_rx_wait(tuning.rx_wait.into()).ok_or_else(|| {
        Error::Usage(
            "--rx-wait inline is for UDP sinks; give a TCP sink batch (the default), spin or sleep"
                .into(),
        )
    })?;
    if max_conns == 0 {
        return Err(Error::Usage("--max-conns must be at least 1".into()));
    }
    Ok(TcpSinkConfig {
        listen,
        max_conns,
        rx_buffers,
        hugepages,
        control: None,
        recv: RecvMode::choose()?,
        wait,
    })
}

/// What one TCP invocation runs: senders, sinks or both, and how they link and report. Built
/// by [`send`], [`sink`] and [`pair`] from their arguments; the run pipeline starts it.
struct TcpRunSpec {
    senders: Option<SendSide>,
    sinks: Option<SinkSide>,
    output: super::Output,
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

/// The sending side of a TCP run.
struct SendSide {
    queues: Vec<crate::report::QueueView>,
    configs: Vec<TcpSendConfig>,
    target: Option<f64>,
    /// The sink's data address, and the record size the start-up line names.
    to: std::net::SocketAddr,
    record: usize,
    /// The control channel (none with `--control off`).
    link: Option<SenderLink>,
}

/// The receiving side of a TCP run.
struct SinkSide {
    queues: Vec<crate::report::QueueView>,
    config: TcpSinkConfig,
    max_senders: usize,
    /// A sink-only run's `--duration`.
    duration: Option<Duration>,
    /// Its control server on the data port, with the secret (none: not served).
    serve: Option<Option<Arc<crate::control::auth::Secret>>>,
}

impl TcpRunSpec {
    fn is_pair(&self) -> bool {
        self.senders.is_some() && self.sinks.is_some()
    }

    /// Descriptors the run holds: each connection's socket (both ends in a pair), each sink
    /// queue's connection cap, and a ring per queue.
    fn fds(&self) -> (u64, u64) {
        let conns: u64 = self
            .senders
            .iter()
            .flat_map(|s| &s.configs)
            .map(|c| u64::from(c.conns))
            .sum();
        let ends = if self.sinks.is_some() { 2 } else { 1 };
        let sink_conns = self
            .sinks
            .as_ref()
            .map_or(0, |s| u64::from(s.config.max_conns) * s.queues.len() as u64);
        let queues = self.senders.as_ref().map_or(0, |s| s.queues.len())
            + self.sinks.as_ref().map_or(0, |s| s.queues.len());
        (conns * ends + sink_conns, queues as u64)
    }
}

/// `ringblast send --proto tcp`.
pub(crate) fn send(args: SendArgs) -> Result<(), Error> {
    let common = &args.common;
    let conns_per_queue = args.tcp.conns.unwrap_or(1);
    let link = super::sender_link(&args, conns_per_queue as usize)?;
    let (configs, target) = send_configs(
        args.to,
        &args.traffic,
        &args.tcp,
        common.queues,
        None,
        common.hugepages,
    )?;
    let mut notes = String::new();
    let queues = planned("send", &placement_args(common, args.to, &[]), &mut notes)?;
    let output = super::Output::of(common);
    let reporting = output.reporting(common.metrics, notes);
    super::pipeline::run(
        TcpRunSpec {
            senders: Some(SendSide {
                queues,
                configs,
                target,
                to: args.to,
                record: record_size(&args.traffic),
                link,
            }),
            sinks: None,
            output,
            started: TcpStarted::default(),
        },
        reporting,
    )
}

/// `ringblast sink --proto tcp`.
pub(crate) fn sink(args: SinkArgs) -> Result<(), Error> {
    let common = &args.common;
    let secret = super::read_secret(args.secret_file.as_deref())?;
    let serve_control = secret.is_some() || args.listen.ip().is_loopback() || args.insecure_control;
    let config = sink_config(
        args.listen,
        args.tcp.max_conns,
        &args.tuning,
        common.hugepages,
    )?;
    let mut notes = String::new();
    let queues = planned(
        "sink",
        &placement_args(common, args.listen, &[]),
        &mut notes,
    )?;
    notes.push_str(config.recv.note());
    let output = super::Output::of(common);
    let reporting = output.reporting(common.metrics, notes);
    super::pipeline::run(
        TcpRunSpec {
            senders: None,
            sinks: Some(SinkSide {
                queues,
                config,
                max_senders: args.tuning.max_senders,
                duration: args.duration,
                serve: serve_control.then_some(secret),
            }),
            output,
            started: TcpStarted::default(),
        },
        reporting,
    )
}

/// `ringblast pair --proto tcp`.
pub(crate) fn pair(args: PairArgs) -> Result<(), Error> {
    let common = &args.common;
    let probe = std::net::TcpListener::bind((args.address, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Usage(format!("cannot bind {}: {e}", args.address)))?;
    let (configs, target) = send_configs(
        probe,
        &args.traffic,
        &args.tcp,
        common.queues,
        Some(PAIR_DEFAULT_DURATION),
        common.hugepages,
    )?;
    let sink_cfg = sink_config(probe, 1024, &args.tuning, common.hugepages)?;
    let mut notes = String::new();
    let (send_queues, sink_queues) = plan_pair(common, probe, &mut notes)?;
    notes.push_str(sink_cfg.recv.note());
    let output = super::Output::of(common);
    let reporting = output.reporting(super::pair_metrics(args.no_metrics, common), notes);
    super::pipeline::run(
        TcpRunSpec {
            senders: Some(SendSide {
                queues: send_queues,
                configs,
                target,
                to: probe,
                record: record_size(&args.traffic),
                link: Some(SenderLink {
                    addr: probe,
                    secret: None,
                    name: "pair".into(),
                }),
            }),
            sinks: Some(SinkSide {
                queues: sink_queues,
                config: sink_cfg,
                max_senders: args.tuning.max_senders,
                duration: None,
                serve: Some(None),
            }),
            output,
            started: TcpStarted::default(),
        },
        reporting,
    )
}

impl super::pipeline::Transport for TcpRunSpec {
    type Senders = super::tcp_groups::TcpSenders;
    type Sinks = super::tcp_groups::TcpSinks;

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
        let Some(side) = self.sinks.take() else {
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
        let Some(side) = self.senders.take() else {
            return Ok(None);
        };
        let first = &side.configs[0];
        let (epoch, size, conns) = (first.epoch, first.size, first.conns);
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
        let senders = start_senders(control, side.queues, side.configs, side.target)?;
        let started = &mut self.started;
        (started.link, started.target, started.epoch, started.size) =
            (side.link, side.target, epoch, size);
        Ok(Some(senders))
    }

    fn abandon_sinks(&self, sinks: Self::Sinks) {
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

    fn link_and_report(
        self,
        run: super::pipeline::Started<Self::Senders, Self::Sinks>,
        signal: &std::sync::atomic::AtomicBool,
    ) -> Result<super::pipeline::Reported, Error> {
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
        let sink = run
            .sinks
            .as_ref()
            .map(|_| (run.sink_control, started.sink_duration));
        let mut reporter = Reporter::new(
            self.output.json,
            self.output.interval,
            run.senders,
            run.sinks,
            run.send_control,
            sink,
        );
        if is_pair {
            reporter = reporter.pair_released();
        }
        let result = reporter
            .with_metrics(run.exporting)
            .with_control(started.books, ask)
            .with_link(refused.clone())
            .with_control_stats(started.server.as_ref().map(|s| s.stats()))
            .run(signal);
        if let Some(s) = started.server {
            s.stop();
        }
        Ok(super::pipeline::Reported {
            result,
            link: refused,
        })
    }
}
