//! Runs a parsed command: resolves placement, validates options, starts the worker groups and
//! hands them to the reporting session. This is the second stage of argument handling; `cli`
//! only parses.

pub(crate) mod control_link;
pub(crate) mod exporting;
pub(crate) mod fds;
pub(crate) mod judge;
pub(crate) mod link_state;
pub(crate) mod part_link;
pub(crate) mod pipeline;
pub(crate) mod placement;
pub(crate) mod roles;
pub(crate) mod search;
pub(crate) mod session;
pub(crate) mod shape;
pub(crate) mod steps;
pub(crate) mod tcp;
pub(crate) mod tcp_control;
pub(crate) mod tcp_groups;
pub(crate) mod tcp_report;
pub(crate) mod ticker;
pub(crate) mod trials;
pub(crate) mod verdict;

use crate::say;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use self::{
    placement::{PlacementArgs, discover, plan_queues},
    roles::{sender_configs, sink_config, start_senders, start_sinks},
    session::Session,
};
use crate::{
    cli::{
        Cli, Command, CommonArgs, ControlTarget, DEFAULT_METRICS, PairArgs, SendArgs, SinkArgs,
        TopoArgs,
    },
    error::Error,
    metrics::Shape,
    report::{self, QueueView},
    sender::{SenderConfig, SenderWorker},
    sink::{SinkConfig, SinkWorker},
    topology,
    worker::Control,
};

/// `pair`'s default run length when neither --duration nor --count is given.
pub(crate) const PAIR_DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Runs one command to completion.
pub fn execute(cli: Cli) -> Result<(), Error> {
    let json = match &cli.command {
        Command::Send(a) => a.common.json,
        Command::Sink(a) => a.common.json,
        Command::Pair(a) => a.common.json,
        Command::Search(a) => a.json,
        Command::Topo(_) | Command::Generate(_) | Command::Report(_) => false,
    };
    crate::output::json_on_stdout(json);
    match cli.command {
        Command::Send(args) => send(args),
        Command::Sink(args) => sink(args),
        Command::Pair(args) => pair(args),
        Command::Search(args) => search::command(args),
        Command::Topo(args) => topo(args),
        Command::Report(args) => crate::html_report::command(&args),
        Command::Generate(args) => crate::cli::generate::run(args.kind, args.dir.as_deref()),
    }
}

fn random_epoch() -> u32 {
    rand::random::<u32>().max(1)
}

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

/// Prints the start plan once the workers are set up: the placement `notes`, then each fallback
/// this kernel forces on the rings (never taken silently).
fn print_plan(notes: &str) {
    crate::output::human_text(notes);
    if let Some(note) = crate::ring::probe::ring_setup_note() {
        crate::output::human_text(note);
    }
}

/// Sender queues, their configs with flow ids, and the total target rate.
type SenderSpec = (Vec<QueueView>, Vec<(SenderConfig, Vec<u32>)>, Option<f64>);

/// What one UDP invocation runs: senders, sinks or both, and how they link and report.
struct RunSpec {
    senders: Option<SenderSpec>,
    /// The sink's queues and config.
    sinks: Option<(Vec<QueueView>, SinkConfig)>,
    /// Sink flows with series of their own (`--metrics-flows`, capped by the flow table).
    exported_flows: usize,
    output: Output,
    /// Senders with their own series and JSON entry at the sink.
    max_senders: usize,
    /// How the sender and the sink talk.
    link: control_link::Link,
    /// A sender run below this share of its target fails.
    min_rate_ratio: Option<f64>,
    /// Live lines show the L1 wire rate.
    wire_rate: bool,
    /// Let the sink share its UDP port with another process (`--share-port`).
    share_port: bool,
    /// Each role's packet memory per worker, for the exporter (set as the groups start).
    arena_bytes: (u64, u64),
}

/// How a run reports: plain data taken from the command line's common options.
struct Output {
    /// One JSON object per line instead of text.
    json: bool,
    /// Between live lines (0: none).
    interval: Duration,
    /// The exporter's series cap.
    max_series: usize,
    /// How long `/metrics` stays up after the run.
    metrics_linger: Duration,
}

impl Output {
    fn of(common: &CommonArgs) -> Output {
        Output {
            json: common.json,
            interval: common.interval,
            max_series: common.max_series,
            metrics_linger: common.metrics_linger,
        }
    }

    /// What the pipeline needs of it, with the exporter's address and the placement plan.
    fn reporting(&self, metrics: Option<SocketAddr>, notes: String) -> pipeline::Reporting {
        pipeline::Reporting {
            metrics,
            max_series: self.max_series,
            metrics_linger: self.metrics_linger,
            notes,
        }
    }
}

impl pipeline::Transport for RunSpec {
    type Senders = roles::SenderSet;
    type Sinks = roles::SinkSet;

    fn fd_needs(&self) -> fds::Needs {
        fds::Needs {
            sender_flows: self
                .senders
                .as_ref()
                .map_or(0, |s| s.1.iter().map(|(_, f)| f.len() as u64).sum::<u64>()),
            sender_queues: self.senders.as_ref().map_or(0, |s| s.0.len() as u64),
            sink_queues: self.sinks.as_ref().map_or(0, |s| s.0.len() as u64),
            // The control server accepts up to its connection cap, whatever --max-senders says.
            sink_senders: self.sinks.as_ref().map_or(0, |_| {
                crate::control::server::ServerConfig::new(([127, 0, 0, 1], 0).into(), "")
                    .max_connections as u64
            }),
            exporter: false,
        }
    }

    fn exporter_shape(&self) -> Result<Shape, Error> {
        Ok(Shape {
            tx_flows_per_queue: self
                .senders
                .as_ref()
                .map(|s| s.1.iter().map(|(_, f)| f.len()).collect())
                .unwrap_or_default(),
            rx_queues: self.sinks.as_ref().map_or(0, |s| s.0.len()),
            rx_exported_flows: self.exported_flows,
            rx_senders: if self.sinks.is_some() {
                self.max_senders + 1
            } else {
                0
            },
            nodes: self
                .senders
                .iter()
                .flat_map(|s| &s.0)
                .chain(self.sinks.iter().flat_map(|s| &s.0))
                .map(|q| q.node)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            memory_nodes: topology::Topology::detect()
                .map_err(|e| Error::Unsupported(e.to_string()))?
                .nodes
                .len(),
        })
    }

    fn start_sinks(&mut self, control: &Arc<Control>) -> Result<Option<roles::SinkSet>, Error> {
        let Some((queues, config)) = self.sinks.take() else {
            return Ok(None);
        };
        self.arena_bytes.1 = SinkWorker::arena_bytes(&config);
        start_sinks(control, queues, config, self.max_senders, self.share_port).map(Some)
    }

    fn start_senders(&mut self, control: &Arc<Control>) -> Result<Option<roles::SenderSet>, Error> {
        let Some((queues, configs, target)) = self.senders.take() else {
            return Ok(None);
        };
        self.arena_bytes.0 = configs
            .first()
            .map_or(0, |(c, _)| SenderWorker::arena_bytes(c));
        start_senders(control, queues, configs, target).map(Some)
    }

    fn abandon_sinks(&self, sinks: roles::SinkSet) {
        sinks.group.release();
        sinks.group.join();
    }

    fn memory_text(senders: Option<&roles::SenderSet>, sinks: Option<&roles::SinkSet>) -> String {
        let send = senders.map(|s| report::memory_text("send", &s.queues, s.group.memory()));
        let sink = sinks.map(|s| report::memory_text("sink", &s.queues, s.group.memory()));
        send.into_iter().chain(sink).collect()
    }

    fn link_and_report(
        self,
        run: pipeline::Started<roles::SenderSet, roles::SinkSet>,
        signal: &std::sync::atomic::AtomicBool,
    ) -> Result<pipeline::Reported, Error> {
        let pipeline::Started {
            senders,
            sinks,
            send_control,
            sink_control,
            exporting,
        } = run;
        if let (Some(s), Some(k)) = (&senders, &sinks) {
            say!(
                "pair: {} sink queue(s), {} sender queue(s), sender epoch {}",
                k.queues.len(),
                s.queues.len(),
                s.epoch
            );
        }
        let link = match control_link::start(self.link, senders.as_ref(), sinks.as_ref()) {
            Ok(link) => link,
            Err(e) => {
                send_control.request_stop();
                sink_control.request_stop();
                if let Some(s) = senders.as_ref() {
                    s.group.release();
                }
                if let Some(s) = sinks.as_ref() {
                    s.group.release();
                }
                return Err(e);
            }
        };
        let server_stats = link.server.as_ref().map(|s| s.stats());
        let mut exporter = exporting.then(|| {
            exporting::register(
                senders.as_ref(),
                sinks.as_ref(),
                self.exported_flows,
                self.arena_bytes,
            )
        });
        let session = Session {
            send_control,
            sink_control,
            prefix_roles: senders.is_some() && sinks.is_some(),
            senders,
            sinks,
            json: self.output.json,
            interval: self.output.interval,
            verdict: link.verdict,
            min_rate_ratio: self.min_rate_ratio,
            wire_rate: self.wire_rate,
            link: Arc::clone(&link.state),
        };
        let result = session.run(signal, &mut |force| {
            if let Some(e) = exporter.as_mut() {
                if let Some(stats) = &server_stats {
                    control_link::export_server_stats(stats);
                }
                e.tick(force);
            }
        });
        if let Some(server) = link.server {
            server.stop();
        }
        Ok(pipeline::Reported {
            result,
            link: Some(link.state),
        })
    }
}

fn send(args: SendArgs) -> Result<(), Error> {
    crate::cli::protocols::check(&args.traffic, &args.tcp).map_err(Error::Usage)?;
    if args.tcp.proto == crate::cli::tcp::Proto::Tcp {
        return tcp::send(args);
    }
    let common = &args.common;
    let configs = sender_configs(
        args.to,
        &args.traffic,
        common.queues,
        None,
        random_epoch(),
        common.hugepages,
    )?;
    let mut notes = String::new();
    let queues = planned("send", &placement_args(common, args.to, &[]), &mut notes)?;
    let target = roles::target_pps(&configs);
    let metrics = common.metrics;
    let flows = configs.iter().map(|(_, f)| f.len()).sum::<usize>();
    let link = match sender_link(&args, flows)? {
        Some(link) => control_link::Link::Connect(link),
        None => control_link::Link::Off,
    };
    let output = Output::of(common);
    let reporting = output.reporting(metrics, notes);
    pipeline::run(
        RunSpec {
            senders: Some((queues, configs, target)),
            sinks: None,
            exported_flows: 0,
            output,
            max_senders: 0,
            link,
            min_rate_ratio: args.traffic.min_rate_ratio,
            wire_rate: args.traffic.wire_rate,
            share_port: false,
            arena_bytes: (0, 0),
        },
        reporting,
    )
}

fn sink(args: SinkArgs) -> Result<(), Error> {
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
    )?;
    let mut notes = String::new();
    let queues = planned(
        "sink",
        &placement_args(&common, args.listen, &[]),
        &mut notes,
    )?;
    let exported = args.tuning.metrics_flows.min(config.max_flows);
    let metrics = common.metrics;
    if secret.is_none() && !args.listen.ip().is_loopback() && !args.insecure_control {
        return Err(Error::Unsupported(format!(
            "the sink listens on {} (not loopback) but has no secret for its control channel; give it --secret-file FILE (make one with `head -c32 /dev/urandom | base64 > FILE`) or accept unauthenticated senders with --insecure-control",
            args.listen
        )));
    }
    let output = Output::of(&common);
    let reporting = output.reporting(metrics, notes);
    pipeline::run(
        RunSpec {
            senders: None,
            sinks: Some((queues, config)),
            exported_flows: exported,
            output,
            max_senders: args.tuning.max_senders,
            link: control_link::Link::Serve {
                listen: args.listen,
                secret,
                share: args.share_port,
            },
            min_rate_ratio: None,
            wire_rate: false,
            share_port: args.share_port,
            arena_bytes: (0, 0),
        },
        reporting,
    )
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

fn pair(args: PairArgs) -> Result<(), Error> {
    crate::cli::protocols::check(&args.traffic, &args.tcp).map_err(Error::Usage)?;
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
    let configs = sender_configs(
        addr,
        &args.traffic,
        common.queues,
        Some(PAIR_DEFAULT_DURATION),
        random_epoch(),
        common.hugepages,
    )?;
    let sink_cfg = sink_config(addr, &args.tuning, None, common.hugepages, u64::MAX)?;
    // The sink's classes of the mix's lengths are claimed now, so their series exist from the
    // first scrape.
    for class in configs.iter().take(1).flat_map(|(c, _)| &c.sizes.classes) {
        sink_cfg.sizes.class_of(class.payload);
    }
    let mut notes = String::new();
    let (send_queues, sink_queues) = plan_pair(&common, addr, &mut notes)?;
    let target = roles::target_pps(&configs);
    let metrics = pair_metrics(args.no_metrics, &common);
    let exported = args.tuning.metrics_flows.min(sink_cfg.max_flows);
    let output = Output::of(&common);
    let reporting = output.reporting(metrics, notes);
    pipeline::run(
        RunSpec {
            senders: Some((send_queues, configs, target)),
            sinks: Some((sink_queues, sink_cfg)),
            exported_flows: exported,
            output,
            max_senders: args.tuning.max_senders,
            link: control_link::Link::InProcess,
            min_rate_ratio: args.traffic.min_rate_ratio,
            wire_rate: args.traffic.wire_rate,
            share_port: false,
            arena_bytes: (0, 0),
        },
        reporting,
    )
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
fn sender_link(args: &SendArgs, flows: usize) -> Result<Option<control_link::SenderLink>, Error> {
    if matches!(args.control, ControlTarget::Off) {
        return Ok(None);
    }
    Ok(Some(control_link::SenderLink {
        addr: control_addr(args.to, &args.control),
        secret: read_secret(args.secret_file.as_deref())?,
        name: sender_name(args.name.clone(), args.common.queues, flows)?,
    }))
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
    let name = name.unwrap_or_else(|| control_link::default_sender_name(queues, flows));
    crate::control::msg::check_name("--name", &name).map_err(Error::Usage)?;
    Ok(name)
}

fn topo(args: TopoArgs) -> Result<(), Error> {
    let (topo, nic) = discover(args.to)?;
    let place = PlacementArgs {
        queues: args.queues,
        cpus: args.cpus.as_deref(),
        node: args.node,
        address: args.to,
        avoid_cpus: &[],
        from_top: false,
    };
    let (_, plan) = plan_queues("send", &place)?;
    print!(
        "{}{plan}{}{}",
        topology::render_topology(&topo, nic.as_ref().map(|(n, l)| (n.as_str(), l))),
        crate::sink::tcp::RecvMode::choose()?.note(),
        crate::ring::probe::ring_setup_note().unwrap_or_default()
    );
    Ok(())
}
