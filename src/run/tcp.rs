//! TCP runs (`--proto tcp` on `send`, `sink` and `pair`): checks the TCP options once, plans the
//! queues as UDP runs do, starts the TCP workers and hands them to the TCP reporter.
//!
//! The control channel runs on the sink's data port (see `tcp_control`): a sender's
//! `--control auto` reaches it at `--to`, and `pair --proto tcp` uses it over loopback.

use std::{sync::Arc, time::Duration};

use super::{
    PAIR_DEFAULT_DURATION, link_state, placement_args, plan_pair, planned,
    tcp_control::{self, HANDOFF_SLOTS, SenderLink},
    tcp_groups::{start_senders, start_sinks},
    tcp_report::Reporter,
};
use crate::{
    cli::tcp::{Pattern, TcpSendArgs},
    cli::{ControlTarget, PairArgs, SendArgs, SinkArgs, SinkTuning, TrafficArgs},
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

/// `ringblast send --proto tcp`.
pub(crate) fn send(args: SendArgs) -> Result<(), Error> {
    let common = args.common;
    let conns_per_queue = args.tcp.conns.unwrap_or(1);
    let link = match args.control {
        ControlTarget::Off => None,
        target => Some(SenderLink {
            addr: match target {
                ControlTarget::At(addr) => addr,
                _ => args.to,
            },
            secret: super::read_secret(args.secret_file.as_deref())?,
            name: super::sender_name(args.name, common.queues, conns_per_queue as usize)?,
        }),
    };
    let (configs, target) = send_configs(
        args.to,
        &args.traffic,
        &args.tcp,
        common.queues,
        None,
        common.hugepages,
    )?;
    let conns: u64 = configs.iter().map(|c| u64::from(c.conns)).sum();
    ensure_fds(conns, common.queues as u64)?;
    let (epoch, size) = (configs[0].epoch, configs[0].size);
    let mut notes = String::new();
    let queues = planned("send", &placement_args(&common, args.to, &[]), &mut notes)?;
    let signal = super::session::install_signals()?;
    let metrics = install_metrics(common.metrics, common.max_series)?;
    let control = Arc::new(Control::default());
    let senders = start_senders(&control, queues, configs, target)?;
    super::print_plan(&notes);
    crate::output::human_text(&senders.memory_text());
    say!(
        "tcp send to {}: {conns_per_queue} connection(s) per queue, {}-byte records, control channel {}",
        args.to,
        record_size(&args.traffic),
        link.as_ref()
            .map_or("off".to_string(), |l| format!("to tcp {}", l.addr))
    );
    let (ask, refused) = match link {
        Some(l) => {
            let (ask, refused) =
                tcp_control::connect(l, epoch, size, target, senders.shared.clone());
            (ask, Some(refused))
        }
        None => (tcp_control::off(), None),
    };
    let result = Reporter::new(
        common.json,
        common.interval,
        Some(senders),
        None,
        control,
        None,
    )
    .with_metrics(metrics)
    .with_control(None, Some(ask))
    .with_link(refused.clone())
    .run(&signal);
    linger(metrics, common.metrics_linger, &signal);
    link_state::refused_means_exit_3(result, refused.as_deref())
}

/// `ringblast sink --proto tcp`.
pub(crate) fn sink(args: SinkArgs) -> Result<(), Error> {
    let common = args.common;
    let secret = super::read_secret(args.secret_file.as_deref())?;
    let serve_control = secret.is_some() || args.listen.ip().is_loopback() || args.insecure_control;
    let mut config = sink_config(
        args.listen,
        args.tcp.max_conns,
        &args.tuning,
        common.hugepages,
    )?;
    ensure_fds(
        u64::from(config.max_conns) * common.queues as u64,
        common.queues as u64,
    )?;
    let mut notes = String::new();
    let queues = planned(
        "sink",
        &placement_args(&common, args.listen, &[]),
        &mut notes,
    )?;
    notes.push_str(config.recv.note());
    let signal = super::session::install_signals()?;
    let metrics = install_metrics(common.metrics, common.max_series)?;
    let handoff = serve_control.then(|| Arc::new(ControlHandoff::new(HANDOFF_SLOTS)));
    config.control.clone_from(&handoff);
    let control = Arc::new(Control::default());
    let sinks = start_sinks(&control, queues, config)?;
    let books = Arc::new(TcpBooks::new(sinks.shared.clone(), args.tuning.max_senders));
    super::print_plan(&notes);
    crate::output::human_text(&sinks.memory_text());
    say!("tcp sink listening on {}", args.listen);
    let server = match handoff {
        Some(h) => Some(tcp_control::serve(args.listen, secret, books.clone(), h)),
        None => {
            say!(
                "control: off: the sink listens on {} (not loopback) without --secret-file; give it --secret-file FILE or --insecure-control to serve senders their verdicts",
                args.listen
            );
            None
        }
    };
    let result = Reporter::new(
        common.json,
        common.interval,
        None,
        Some(sinks),
        Arc::new(Control::default()),
        Some((control, args.duration)),
    )
    .with_metrics(metrics)
    .with_control(Some(books), None)
    .with_control_stats(server.as_ref().map(|s| s.stats()))
    .run(&signal);
    if let Some(s) = server {
        s.stop();
    }
    linger(metrics, common.metrics_linger, &signal);
    result
}

/// `ringblast pair --proto tcp`.
pub(crate) fn pair(args: PairArgs) -> Result<(), Error> {
    let common = args.common;
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
    let conns: u64 = configs.iter().map(|c| u64::from(c.conns)).sum();
    let (epoch, size) = (configs[0].epoch, configs[0].size);
    let handoff = Arc::new(ControlHandoff::new(HANDOFF_SLOTS));
    let mut sink_cfg = sink_config(probe, 1024, &args.tuning, common.hugepages)?;
    sink_cfg.control = Some(Arc::clone(&handoff));
    ensure_fds(
        conns * 2 + 1024 * common.queues as u64,
        2 * common.queues as u64,
    )?;
    let mut notes = String::new();
    let (send_queues, sink_queues) = plan_pair(&common, probe, &mut notes)?;
    notes.push_str(sink_cfg.recv.note());
    let signal = super::session::install_signals()?;
    let metrics_addr = if args.no_metrics {
        None
    } else {
        Some(common.metrics.unwrap_or(crate::cli::DEFAULT_METRICS))
    };
    let metrics = install_metrics(metrics_addr, common.max_series)?;
    let sink_control = Arc::new(Control::default());
    let sinks = start_sinks(&sink_control, sink_queues, sink_cfg)?;
    let books = Arc::new(TcpBooks::new(sinks.shared.clone(), args.tuning.max_senders));
    let server = tcp_control::serve(probe, None, books.clone(), handoff);
    sinks.group.release();
    let send_control = Arc::new(Control::default());
    let senders = match start_senders(&send_control, send_queues, configs, target) {
        Ok(s) => s,
        Err(e) => {
            sink_control.request_stop();
            sinks.group.join();
            return Err(e);
        }
    };
    super::print_plan(&notes);
    crate::output::human_text(&(senders.memory_text() + &sinks.memory_text()));
    let link = SenderLink {
        addr: probe,
        secret: None,
        name: "pair".into(),
    };
    let (ask, refused) = tcp_control::connect(link, epoch, size, target, senders.shared.clone());
    let result = Reporter::new(
        common.json,
        common.interval,
        Some(senders),
        Some(sinks),
        send_control,
        Some((sink_control, None)),
    )
    .pair_released()
    .with_metrics(metrics)
    .with_control(Some(books), Some(ask))
    .with_link(Some(Arc::clone(&refused)))
    .with_control_stats(Some(server.stats()))
    .run(&signal);
    server.stop();
    linger(metrics, common.metrics_linger, &signal);
    link_state::refused_means_exit_3(result, Some(&refused))
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
