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
    link_state, placement_args, plan_pair, planned,
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

fn ensure_fds(sockets: u64, queues: u64) -> Result<(), Error> {
    super::fds::ensure(&super::fds::Needs {
        sender_flows: sockets,
        sender_queues: queues,
        ..Default::default()
    })
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

/// What one TCP invocation runs: senders, sinks or both, and how it reports. Built by
/// [`send`], [`sink`] and [`pair`] from their arguments; run by [`run`].
struct TcpRunSpec {
    senders: Option<SendSide>,
    sinks: Option<SinkSide>,
    output: super::Output,
    metrics: Option<std::net::SocketAddr>,
    /// The placement plan, printed once the workers are set up.
    notes: String,
}

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
    run(TcpRunSpec {
        senders: Some(SendSide {
            queues,
            configs,
            target,
            to: args.to,
            record: record_size(&args.traffic),
            link,
        }),
        sinks: None,
        output: super::Output::of(common),
        metrics: common.metrics,
        notes,
    })
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
    run(TcpRunSpec {
        senders: None,
        sinks: Some(SinkSide {
            queues,
            config,
            max_senders: args.tuning.max_senders,
            duration: args.duration,
            serve: serve_control.then_some(secret),
        }),
        output: super::Output::of(common),
        metrics: common.metrics,
        notes,
    })
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
    run(TcpRunSpec {
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
        output: super::Output::of(common),
        metrics: super::pair_metrics(args.no_metrics, common),
        notes,
    })
}

/// Runs a TCP invocation: its sinks first (in a pair also serving the control channel, and
/// released before the senders start, so that their connections find them working), then its
/// senders, the start plan, the control channel, and the reporter until the end.
fn run(spec: TcpRunSpec) -> Result<(), Error> {
    let (sockets, queues) = spec.fds();
    ensure_fds(sockets, queues)?;
    let is_pair = spec.senders.is_some() && spec.sinks.is_some();
    let signal = super::session::install_signals()?;
    let metrics = install_metrics(spec.metrics, spec.output.max_series)?;
    let sink_control = Arc::new(Control::default());
    let mut server = None;
    let mut sinks = None;
    // A sink-only run starts its control server once its plan is printed.
    let mut serve_later = None;
    if let Some(side) = spec.sinks {
        let handoff = side
            .serve
            .is_some()
            .then(|| Arc::new(ControlHandoff::new(HANDOFF_SLOTS)));
        let mut config = side.config;
        config.control.clone_from(&handoff);
        let listen = config.listen;
        let group = start_sinks(&sink_control, side.queues, config)?;
        let books = Arc::new(TcpBooks::new(group.shared.clone(), side.max_senders));
        let serve = side.serve.zip(handoff);
        if is_pair {
            server = serve.map(|(secret, h)| tcp_control::serve(listen, secret, books.clone(), h));
            group.group.release();
        } else {
            serve_later = Some((listen, serve));
        }
        sinks = Some((group, books, side.duration));
    }
    let send_control = Arc::new(Control::default());
    let mut senders = None;
    let mut start_line = None;
    if let Some(side) = spec.senders {
        let (epoch, size, conns) = (
            side.configs[0].epoch,
            side.configs[0].size,
            side.configs[0].conns,
        );
        if !is_pair {
            start_line = Some(format!(
                "tcp send to {}: {conns} connection(s) per queue, {}-byte records, control channel {}",
                side.to,
                side.record,
                side.link
                    .as_ref()
                    .map_or("off".to_string(), |l| format!("to tcp {}", l.addr))
            ));
        }
        let group = match start_senders(&send_control, side.queues, side.configs, side.target) {
            Ok(g) => g,
            Err(e) => {
                if let Some((group, _, _)) = sinks {
                    sink_control.request_stop();
                    group.group.join();
                }
                return Err(e);
            }
        };
        senders = Some((group, side.link, side.target, epoch, size));
    }
    super::print_plan(&spec.notes);
    let memory: String = senders
        .iter()
        .map(|s| s.0.memory_text())
        .chain(sinks.iter().map(|s| s.0.memory_text()))
        .collect();
    crate::output::human_text(&memory);
    if let Some(line) = start_line {
        say!("{line}");
    }
    if let (Some((_, books, _)), Some((listen, serve))) = (&sinks, serve_later) {
        say!("tcp sink listening on {listen}");
        server = match serve {
            Some((secret, h)) => Some(tcp_control::serve(listen, secret, books.clone(), h)),
            None => {
                say!(
                    "control: off: the sink listens on {listen} (not loopback) without --secret-file; give it --secret-file FILE or --insecure-control to serve senders their verdicts"
                );
                None
            }
        };
    }
    let (sender_group, ask, refused) = match senders {
        Some((group, Some(link), target, epoch, size)) => {
            let (ask, refused) =
                tcp_control::connect(link, epoch, size, target, group.shared.clone());
            (Some(group), Some(ask), Some(refused))
        }
        Some((group, None, ..)) => (Some(group), Some(tcp_control::off()), None),
        None => (None, None, None),
    };
    let (sink_group, books, duration) = match sinks {
        Some((group, books, duration)) => (Some(group), Some(books), duration),
        None => (None, None, None),
    };
    let sink = sink_group.as_ref().map(|_| (sink_control, duration));
    let mut reporter = Reporter::new(
        spec.output.json,
        spec.output.interval,
        sender_group,
        sink_group,
        send_control,
        sink,
    );
    if is_pair {
        reporter = reporter.pair_released();
    }
    let result = reporter
        .with_metrics(metrics)
        .with_control(books, ask)
        .with_link(refused.clone())
        .with_control_stats(server.as_ref().map(|s| s.stats()))
        .run(&signal);
    if let Some(s) = server {
        s.stop();
    }
    linger(metrics, spec.output.metrics_linger, &signal);
    link_state::refused_means_exit_3(result, refused.as_deref())
}

/// Starts the metrics endpoint when asked (before any worker); says whether it runs.
fn install_metrics(addr: Option<std::net::SocketAddr>, max_series: usize) -> Result<bool, Error> {
    let Some(addr) = addr else {
        return Ok(false);
    };
    super::exporting::install(&super::exporting::Plan {
        addr,
        max_series,
        shape: crate::metrics::Shape::default(),
    })?;
    Ok(true)
}

fn linger(metrics: bool, linger: Duration, signal: &std::sync::atomic::AtomicBool) {
    if metrics {
        super::exporting::linger(linger, signal);
    }
}
