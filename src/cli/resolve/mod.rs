//! The one resolve step, as ripgrep's `HiArgs` is: turns a parsed command line into the
//! plain-data [`Plan`] that `run` carries out. Every option is checked here, once, before
//! anything starts; the queues are placed, the workers' configs made and the secret read, so a
//! bad option is one line naming the fix and no clap type reaches `run`. `udp` and `tcp` make
//! each protocol's configs, `shape` checks the traffic shape, and `search` makes a search's
//! trial sender from the same steps as `send`.

mod search;
mod shape;
mod tcp;
mod udp;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use self::udp::{sender_config, sink_config};
use super::{CommonArgs, ControlTarget, DEFAULT_METRICS, PairArgs, SendArgs, SinkArgs, TopoArgs};
use crate::{
    error::Error,
    report::QueueView,
    run::{
        link,
        pipeline::Reporting,
        placement::{PlacementArgs, plan_queues},
        plan::{Output, Plan, TopoPlan, UdpPlan, UdpSend, UdpSinkSide},
    },
};

pub(crate) use self::search::search;

/// The run length of `send` and `pair` when neither --duration nor --count (nor a schedule)
/// says how long, as iperf3's `-t`.
const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// The plan line of a sender that runs for [`DEFAULT_DURATION`] because nothing said how long.
fn default_length_line(t: &crate::cli::TrafficArgs) -> &'static str {
    if t.duration.is_none() && t.count.is_none() && t.rate_steps.is_none() && t.ramp.is_none() {
        "  length: 10 s, the default (--duration D or --count N sets it; --duration 0 runs until stopped)\n"
    } else {
        ""
    }
}

/// A sender's run length: `--duration` (`0`: until stopped), else none with `--count` (the
/// count ends it), else `default`.
fn run_length(
    duration: Option<Duration>,
    count: Option<u64>,
    default: Option<Duration>,
) -> Option<Duration> {
    match duration {
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d),
        None if count.is_some() => None,
        None => default,
    }
}

/// A sender run's epoch: random and never 0, so a restarted sender is a new run at the sink.
fn random_epoch() -> u32 {
    rand::random::<u32>().max(1)
}

/// The placement inputs of a role that sends to or listens on `address`, staying off `avoid`.
fn placement_args<'a>(
    common: &'a CommonArgs,
    address: SocketAddr,
    avoid: &'a [u32],
) -> PlacementArgs<'a> {
    PlacementArgs {
        queues: common.queues,
        cpus: common.cpus.as_deref(),
        node: common.node,
        address: Some(address),
        avoid_cpus: avoid,
        from_top: false,
    }
}

/// Plans the sender's and then the sink's queues of a `pair` run towards `addr`: the sink takes
/// other CPUs than the sender (an explicit `--cpus` applies to the sender only).
fn plan_pair(
    common: &CommonArgs,
    addr: SocketAddr,
    notes: &mut String,
) -> Result<(Vec<QueueView>, Vec<QueueView>), Error> {
    let send_queues = planned("send", &placement_args(common, addr, &[]), notes)?;
    let send_cpus: Vec<u32> = send_queues.iter().map(|q| q.cpu).collect();
    let sink_common = CommonArgs {
        cpus: None,
        ..common.clone()
    };
    let sink_queues = planned(
        "sink",
        &placement_args(&sink_common, addr, &send_cpus),
        notes,
    )?;
    Ok((send_queues, sink_queues))
}

/// Plans a role's queues and adds the plan to `notes`, which the run prints once its workers
/// are set up (placement is never silent, and a run that cannot start prints one line only).
fn planned(
    role: &str,
    args: &PlacementArgs<'_>,
    notes: &mut String,
) -> Result<Vec<QueueView>, Error> {
    // Separate processes on one host stay apart: a sink counts CPUs from the top.
    let args = PlacementArgs {
        from_top: role == "sink",
        ..args.clone()
    };
    let (queues, mut text) = plan_queues(role, &args)?;
    if args.cpus.is_none() {
        text.push_str(if args.from_top {
            "  (a sink takes CPUs from the top of each node's list and a sender from the bottom, so separate processes stay apart; --cpus overrides)\n"
        } else {
            "  (a sender takes CPUs from the bottom of each node's list and a sink from the top, so separate processes stay apart; --cpus overrides)\n"
        });
    }
    notes.push_str(&text);
    Ok(queues)
}

/// `ringblast send`.
pub(crate) fn send(args: SendArgs) -> Result<Plan, Error> {
    crate::cli::protocols::check_send(&args).map_err(Error::Usage)?;
    if args.tcp.proto == crate::cli::tcp::Proto::Tcp {
        return tcp::send(args);
    }
    let common = &args.common;
    let mut notes = String::new();
    let (send, link) = udp_sender(&args, &mut notes)?;
    let metrics = common.metrics;
    let link = match link {
        Some(link) => link::Link::Connect(link),
        None => link::Link::Off,
    };
    Ok(Plan::Udp(
        UdpPlan {
            senders: Some(send),
            sinks: None,
            exported_flows: 0,
            output: output(common),
            max_senders: 0,
            link,
            min_rate_ratio: args.traffic.min_rate_ratio,
            wire_rate: args.traffic.wire_rate,
            share_port: false,
        },
        reporting(common, metrics, notes)?,
    ))
}

/// A UDP sender's queues (their plan added to `notes`), its whole run, and its control channel
/// (none with `--control off`).
fn udp_sender(args: &SendArgs, notes: &mut String) -> Result<UdpSender, Error> {
    let common = &args.common;
    let (mut run, flows) = sender_config(
        args.to,
        &args.traffic,
        common.queues,
        Some(DEFAULT_DURATION),
        random_epoch(),
        common.hugepages,
    )?;
    let queues = planned("send", &placement_args(common, args.to, &[]), notes)?;
    notes.push_str(crate::timestamps::udp_send_plan_line());
    notes.push_str(default_length_line(&args.traffic));
    let link = sender_link(args, flows as usize)?;
    let proven = link.as_ref().is_some_and(|l| l.secret.is_some());
    exchange(&mut run, &args.tcp, &args.traffic, proven)?;
    if let Some(secret) = link.as_ref().and_then(|l| l.secret.as_ref()) {
        prove_sends(&mut run, secret, args.auth_data)?;
    }
    Ok((UdpSend { queues, run, flows }, link))
}

/// Makes a UDP sender's run request/response when `--pattern rr` asks for it; `proven`: the
/// run has a secret, so every response must carry its request's proof.
fn exchange(
    run: &mut crate::sender::SenderConfig,
    p: &crate::cli::tcp::TcpSendArgs,
    t: &crate::cli::TrafficArgs,
    proven: bool,
) -> Result<(), Error> {
    if let Some(shape) = udp::exchange_shape(p, t)? {
        let echo = crate::proto::exchange::ECHO_AT.end;
        if proven && shape.rr.response < echo {
            return Err(Error::Usage(format!(
                "--response-size {} is too short to carry its request's proof back; with --secret-file use at least {echo}",
                shape.rr.response
            )));
        }
        run.exchange = Some(shape);
        run.size = shape.rr.request;
        run.sizes = Arc::new(crate::sender::mix::SizePlan::single(shape.rr.request));
    }
    Ok(())
}

/// What [`udp_sender`] resolves: what it sends, and its control channel.
type UdpSender = (UdpSend, Option<link::SenderLink>);

/// `ringblast sink`.
pub(crate) fn sink(args: SinkArgs) -> Result<Plan, Error> {
    crate::cli::protocols::check_sink(&args).map_err(Error::Usage)?;
    if args.tcp.proto == crate::cli::tcp::Proto::Tcp {
        return tcp::sink(args);
    }
    let common = args.common;
    let secret = read_secret(args.secret_file.as_deref())?;
    // With a secret, only senders that said an authenticated hello are counted by default,
    // once those that were sending before this sink started have had time to reconnect.
    let refuse_from = if secret.is_some() && !args.accept_unannounced {
        crate::clock::monotonic_ns().saturating_add(args.unannounced_grace.as_nanos() as u64)
    } else {
        u64::MAX
    };
    let config = sink_config(
        args.listen,
        &args.tuning,
        args.duration,
        common.hugepages,
        refuse_from,
        // A sender with the secret masks its compact headers with its run's proof: they are read
        // once its hello told it (unless data-only senders are to be counted too).
        secret.is_some() && !args.accept_unannounced,
    )?;
    let mut notes = String::new();
    let queues = planned(
        "sink",
        &placement_args(&common, args.listen, &[]),
        &mut notes,
    )?;
    notes.push_str(config.arrival.plan_line(asked_arrival(&args.tuning)));
    let exported = args.tuning.metrics_flows.min(config.max_flows);
    let metrics = common.metrics;
    if secret.is_none() && !args.listen.ip().is_loopback() && !args.insecure_control {
        return Err(Error::Unsupported(format!(
            "the sink listens on {} (not loopback) but has no secret for its control channel; give it --secret-file FILE (make one with `umask 077; head -c32 /dev/urandom | base64 > FILE`) or accept unauthenticated senders with --insecure-control",
            args.listen
        )));
    }
    Ok(Plan::Udp(
        UdpPlan {
            senders: None,
            sinks: Some(UdpSinkSide { queues, config }),
            exported_flows: exported,
            output: output(&common),
            max_senders: args.tuning.max_senders,
            link: link::Link::Serve {
                listen: args.listen,
                secret,
                share: args.share_port,
            },
            min_rate_ratio: None,
            wire_rate: false,
            share_port: args.share_port,
        },
        reporting(&common, metrics, notes)?,
    ))
}

/// The arrival a UDP sink asks for (`--arrival`, kernel stamps by default).
fn asked_arrival(tuning: &crate::cli::SinkTuning) -> crate::timestamps::Arrival {
    tuning.arrival.unwrap_or(crate::timestamps::Arrival::Kernel)
}

/// A free UDP port on `ip`, found by binding port 0.
fn free_udp_port(ip: std::net::IpAddr) -> Result<SocketAddr, Error> {
    let probe = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).map_err(|e| {
        Error::Usage(format!(
            "cannot bind {ip}: {e}; pair needs a loopback address such as 127.0.0.1"
        ))
    })?;
    probe.local_addr().map_err(|e| Error::io("getsockname", e))
}

/// `ringblast pair`.
pub(crate) fn pair(args: PairArgs) -> Result<Plan, Error> {
    crate::cli::protocols::check_pair(&args).map_err(Error::Usage)?;
    if args.tcp.proto == crate::cli::tcp::Proto::Tcp {
        return tcp::pair(args);
    }
    if !args.address.is_loopback() {
        return Err(Error::Usage(format!(
            "pair runs over loopback only; {} is not a loopback address",
            args.address
        )));
    }
    let common = args.common;
    let addr = free_udp_port(args.address)?;
    let (mut run, flows) = sender_config(
        addr,
        &args.traffic,
        common.queues,
        Some(DEFAULT_DURATION),
        random_epoch(),
        common.hugepages,
    )?;
    exchange(&mut run, &args.tcp, &args.traffic, false)?;
    let sink_cfg = sink_config(addr, &args.tuning, None, common.hugepages, u64::MAX, false)?;
    // The sink's classes of the mix's lengths are claimed now, so their series exist from the
    // first scrape.
    for class in &run.sizes.classes {
        sink_cfg.sizes.class_of(class.payload);
    }
    let mut notes = String::new();
    let (send_queues, sink_queues) = plan_pair(&common, addr, &mut notes)?;
    notes.push_str(crate::timestamps::udp_send_plan_line());
    notes.push_str(default_length_line(&args.traffic));
    notes.push_str(sink_cfg.arrival.plan_line(asked_arrival(&args.tuning)));
    let metrics = pair_metrics(args.no_metrics, &common);
    let exported = args.tuning.metrics_flows.min(sink_cfg.max_flows);
    Ok(Plan::Udp(
        UdpPlan {
            senders: Some(UdpSend {
                queues: send_queues,
                run,
                flows,
            }),
            sinks: Some(UdpSinkSide {
                queues: sink_queues,
                config: sink_cfg,
            }),
            exported_flows: exported,
            output: output(&common),
            max_senders: args.tuning.max_senders,
            link: link::Link::InProcess,
            min_rate_ratio: args.traffic.min_rate_ratio,
            wire_rate: args.traffic.wire_rate,
            share_port: false,
        },
        reporting(&common, metrics, notes)?,
    ))
}

/// Where a sender's control channel goes: `--control ADDR:PORT`, or the sink's own address.
fn control_addr(to: SocketAddr, target: &ControlTarget) -> SocketAddr {
    match target {
        ControlTarget::At(addr) => *addr,
        ControlTarget::Auto | ControlTarget::Off => to,
    }
}

/// A sender's control channel from its arguments (none with `--control off`), for either
/// protocol: the address, the secret and the name (`flows`: the plan the default name tells).
fn sender_link(args: &SendArgs, flows: usize) -> Result<Option<link::SenderLink>, Error> {
    if matches!(args.control, ControlTarget::Off) {
        return Ok(None);
    }
    Ok(Some(link::SenderLink {
        addr: control_addr(args.to, &args.control),
        secret: read_secret(args.secret_file.as_deref())?,
        name: sender_name(args.name.clone(), args.common.queues, flows)?,
    }))
}

/// The request/response shape `--pattern rr` and its sizes ask for, checked against what the
/// transport can carry (`None`: a stream, which takes none of the sizes).
fn rr_shape(
    p: &crate::cli::tcp::TcpSendArgs,
    limits: &crate::sender::pattern::RrLimits,
) -> Result<Option<crate::sender::pattern::RrShape>, Error> {
    if p.pattern != crate::cli::tcp::Pattern::Rr {
        if p.request_size.is_some() || p.response_size.is_some() || p.depth.is_some() {
            return Err(Error::Usage(
                "--request-size, --response-size and --depth need --pattern rr".into(),
            ));
        }
        return Ok(None);
    }
    crate::sender::pattern::RrShape::asked(p.request_size, p.response_size, p.depth)
        .within(limits)
        .map(Some)
        .map_err(Error::Usage)
}

/// With a secret, every datagram carries its run's proof (`proto::proof`); a tag needs the
/// full header and room after it.
fn prove_sends(
    run: &mut crate::sender::SenderConfig,
    secret: &crate::control::auth::Secret,
    tagged: bool,
) -> Result<(), Error> {
    use crate::proto::proof::PROVEN_LEN;
    let smallest = run.sizes.classes.iter().map(|k| k.payload).min();
    if let Some(size) = smallest.filter(|s| tagged && *s < PROVEN_LEN) {
        return Err(Error::Usage(format!(
            "--size {size} leaves no room for the tag --auth-data puts after the 32-byte header; use --size {PROVEN_LEN} or more, or leave --auth-data off (the run's token then masks the small datagrams' numbers)"
        )));
    }
    run.proof = Some((Arc::new(secret.data_key()), tagged));
    Ok(())
}

/// `pair`'s exporter: on by default at the documented port, off with `--no-metrics`.
fn pair_metrics(no_metrics: bool, common: &CommonArgs) -> Option<SocketAddr> {
    (!no_metrics).then(|| common.metrics.unwrap_or(DEFAULT_METRICS))
}

/// The shared secret from `--secret-file`, if given.
fn read_secret(
    path: Option<&std::path::Path>,
) -> Result<Option<Arc<crate::control::auth::Secret>>, Error> {
    path.map(|p| crate::control::auth::Secret::from_file(p).map(Arc::new))
        .transpose()
}

/// `--name`, checked, or the hostname and the queue plan.
fn sender_name(name: Option<String>, queues: usize, flows: usize) -> Result<String, Error> {
    let name = name.unwrap_or_else(|| link::default_sender_name(queues, flows));
    crate::control::msg::check_name("--name", &name).map_err(Error::Usage)?;
    Ok(name)
}

/// The live lines a run's common options ask for.
fn output(common: &CommonArgs) -> Output {
    Output {
        json: common.json,
        interval: common.interval,
    }
}

/// How a run reports, with the exporter's address and the placement plan to print.
fn reporting(
    common: &CommonArgs,
    metrics: Option<SocketAddr>,
    notes: String,
) -> Result<Reporting, Error> {
    Ok(Reporting {
        metrics,
        max_series: common.max_series,
        metrics_linger: common.metrics_linger,
        notes,
        start_at: common.start_at.map(start_time).transpose()?,
    })
}

/// The furthest ahead `--start-at` may be.
const MAX_START_AHEAD: Duration = Duration::from_secs(24 * 3600);

/// `--start-at` on this host's clocks: the wall-clock time read once against the monotonic
/// clock, refused when it is past or more than a day ahead.
fn start_time(asked: crate::cli::StartAt) -> Result<crate::run::pipeline::StartTime, Error> {
    use std::time::SystemTime;
    let (wall_now, mono_now) = (SystemTime::now(), crate::clock::monotonic_ns());
    let wall = match asked {
        crate::cli::StartAt::In(delay) => wall_now + delay,
        crate::cli::StartAt::At(at) => at,
    };
    let shown = humantime::format_rfc3339_millis(wall);
    let ahead = wall.duration_since(wall_now).map_err(|past| {
        Error::Usage(format!(
            "--start-at {shown} is {} in the past (the clock says {}): give a later time, or +DURATION",
            humantime::format_duration(Duration::from_secs(past.duration().as_secs().max(1))),
            humantime::format_rfc3339_seconds(wall_now)
        ))
    })?;
    if ahead > MAX_START_AHEAD {
        return Err(Error::Usage(format!(
            "--start-at {shown} is more than a day ahead (the clock says {}): give a time within 24h",
            humantime::format_rfc3339_seconds(wall_now)
        )));
    }
    Ok(crate::run::pipeline::StartTime {
        wall: shown.to_string(),
        monotonic_ns: mono_now.saturating_add(ahead.as_nanos() as u64),
    })
}

/// `ringblast topo`.
pub(crate) fn topo(args: TopoArgs) -> Plan {
    Plan::Topo(TopoPlan {
        to: args.to,
        queues: args.queues,
        cpus: args.cpus,
        node: args.node,
    })
}
