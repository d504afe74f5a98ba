//! Runs a parsed command: resolves placement, validates options, starts the worker groups and
//! hands them to the reporting session. This is the second stage of argument handling; `cli`
//! only parses.

pub mod placement;
pub mod roles;
pub mod session;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use self::{
    placement::{PlacementArgs, discover, plan_queues},
    roles::{sender_configs, sink_config, start_senders, start_sinks},
    session::{Session, install_signals},
};
use crate::{
    cli::{Cli, Command, CommonArgs, PairArgs, SendArgs, SinkArgs, TopoArgs},
    error::Error,
    report::{RxSample, TxSample},
    topology,
    worker::Control,
};

/// `pair`'s default run length when neither --duration nor --count is given.
pub const PAIR_DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Runs one command to completion.
pub fn execute(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Send(args) => send(args),
        Command::Sink(args) => sink(args),
        Command::Pair(args) => pair(args),
        Command::Topo(args) => topo(args),
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
    }
}

/// Plans a role's queues and prints the plan to stderr (placement is never silent).
fn planned(role: &str, args: &PlacementArgs<'_>) -> Result<Vec<crate::report::QueueView>, Error> {
    let (queues, text) = plan_queues(role, args)?;
    eprint!("{text}");
    Ok(queues)
}

fn no_tick(_: &[TxSample], _: &[RxSample]) {}

fn send(args: SendArgs) -> Result<(), Error> {
    let signal = install_signals()?;
    let common = &args.common;
    let configs = sender_configs(
        args.to,
        &args.traffic,
        common.queues,
        None,
        random_epoch(),
        common.hugepages,
    )?;
    let queues = planned("send", &placement_args(common, args.to, &[]))?;
    let control = Arc::new(Control::default());
    let target = args.traffic.rate.packets_per_second(args.traffic.size);
    let senders = start_senders(&control, queues, configs, target)?;
    let session = Session {
        send_control: control,
        sink_control: Arc::new(Control::default()),
        senders: Some(senders),
        sinks: None,
        json: common.json,
        interval: common.interval,
        prefix_roles: false,
    };
    session.run(&signal, &mut no_tick)
}

fn sink(args: SinkArgs) -> Result<(), Error> {
    let signal = install_signals()?;
    let common = &args.common;
    let config = sink_config(args.listen, &args.tuning, args.duration, common.hugepages)?;
    let queues = planned("sink", &placement_args(common, args.listen, &[]))?;
    let control = Arc::new(Control::default());
    let sinks = start_sinks(&control, queues, config)?;
    let session = Session {
        send_control: Arc::new(Control::default()),
        sink_control: control,
        senders: None,
        sinks: Some(sinks),
        json: common.json,
        interval: common.interval,
        prefix_roles: false,
    };
    session.run(&signal, &mut no_tick)
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
    if !args.address.is_loopback() {
        return Err(Error::Usage(format!(
            "pair runs over loopback only; {} is not a loopback address",
            args.address
        )));
    }
    let signal = install_signals()?;
    let common = &args.common;
    let addr = free_udp_port(args.address)?;
    let configs = sender_configs(
        addr,
        &args.traffic,
        common.queues,
        Some(PAIR_DEFAULT_DURATION),
        random_epoch(),
        common.hugepages,
    )?;
    let sink_cfg = sink_config(addr, &args.tuning, None, common.hugepages)?;
    let send_queues = planned("send", &placement_args(common, addr, &[]))?;
    let send_cpus: Vec<u32> = send_queues.iter().map(|q| q.cpu).collect();
    let sink_common = CommonArgs {
        cpus: None,
        ..common.clone()
    };
    let sink_queues = planned("sink", &placement_args(&sink_common, addr, &send_cpus))?;
    let sink_control = Arc::new(Control::default());
    let send_control = Arc::new(Control::default());
    let sinks = start_sinks(&sink_control, sink_queues, sink_cfg)?;
    let target = args.traffic.rate.packets_per_second(args.traffic.size);
    let senders = match start_senders(&send_control, send_queues, configs, target) {
        Ok(s) => s,
        Err(e) => {
            sink_control.request_stop();
            sinks.group.release();
            sinks.group.join();
            return Err(e);
        }
    };
    eprintln!(
        "pair: {} sink queue(s) on {addr}, sender epoch {}",
        sinks.queues.len(),
        senders.epoch
    );
    let session = Session {
        send_control,
        sink_control,
        senders: Some(senders),
        sinks: Some(sinks),
        json: common.json,
        interval: common.interval,
        prefix_roles: true,
    };
    session.run(&signal, &mut no_tick)
}

fn topo(args: TopoArgs) -> Result<(), Error> {
    let (topo, nic) = discover(args.to)?;
    let place = PlacementArgs {
        queues: args.queues,
        cpus: args.cpus.as_deref(),
        node: args.node,
        address: args.to,
        avoid_cpus: &[],
    };
    let (_, plan) = plan_queues("send", &place)?;
    print!(
        "{}{plan}",
        topology::render_topology(&topo, nic.as_ref().map(|(n, l)| (n.as_str(), l)))
    );
    Ok(())
}
