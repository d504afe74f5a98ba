//! TCP's runs from the command line (`--proto tcp` on `send`, `sink` and `pair`): the TCP
//! options checked once, the queues planned as UDP's are, and the run described as a [`TcpPlan`]:
//! a sending side, a receiving side or both.

use std::{sync::Arc, time::Duration};

use super::{
    DEFAULT_DURATION, output, pair_metrics, placement_args, plan_pair, planned, read_secret,
    reporting, rr_shape, sender_link, udp::rx_buffers,
};
use crate::{
    cli::tcp::TcpSendArgs,
    cli::{PairArgs, SendArgs, SinkArgs, SinkTuning, TrafficArgs},
    error::Error,
    proto::record::{MAX_RECORD, MAX_RESPONSE, RECORD_HEADER_LEN, REQUEST_HEADER_LEN},
    run::link::SenderLink,
    run::plan::{Plan, TcpPlan, TcpSendSide, TcpSinkSide},
    sender::{mix::SizeSpec, pattern::RrLimits, tcp::TcpSendConfig},
    sink::tcp::{RecvMode, TCP_RX_BUFFERS, TcpSinkConfig, TcpWait},
};

/// The record size a TCP run was given (a mix is refused before a run starts).
fn record_size(traffic: &TrafficArgs) -> usize {
    match &traffic.size {
        SizeSpec::Payload(bytes) => *bytes,
        SizeSpec::Frames(_) => 0,
    }
}

/// A TCP sender's whole run as one worker would send it alone: its records/s target and count
/// over all queues (its start splits them into the queues' shares).
fn send_config(
    to: std::net::SocketAddr,
    traffic: &TrafficArgs,
    tcp: &TcpSendArgs,
    queues: usize,
    default_duration: Option<Duration>,
    hugepages: bool,
) -> Result<TcpSendConfig, Error> {
    let rr = rr_shape(tcp, &TCP_RR)?;
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
    let duration = super::run_length(traffic.duration, traffic.count, default_duration);
    Ok(TcpSendConfig {
        to,
        size,
        conns,
        first_flow: 0,
        rate_rps: target,
        count: traffic.count,
        duration,
        op: traffic
            .send_op
            .map_or(crate::sender::SendOp::WriteFixed, Into::into),
        epoch,
        proof_token: None,
        hugepages,
        rr,
    })
}

/// What a TCP record stream can carry of a request/response shape.
const TCP_RR: RrLimits = RrLimits {
    request: REQUEST_HEADER_LEN..=MAX_RECORD,
    request_why: "a request carries the 32-byte header and the response length",
    response: RECORD_HEADER_LEN..=MAX_RESPONSE,
    over: "",
    per: "connection",
};

fn sink_config(
    listen: std::net::SocketAddr,
    max_conns: u32,
    tuning: &SinkTuning,
    hugepages: bool,
) -> Result<TcpSinkConfig, Error> {
    let rx_buffers = rx_buffers(tuning.rx_buffers, TCP_RX_BUFFERS)?;
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
        data_key: None,
    })
}

/// `ringblast send --proto tcp`.
pub(crate) fn send(args: SendArgs) -> Result<Plan, Error> {
    let common = &args.common;
    let conns_per_queue = args.tcp.conns.unwrap_or(1);
    let link = sender_link(&args, conns_per_queue as usize)?;
    if args.auth_data {
        return Err(Error::Usage(
            "--auth-data tags UDP datagrams; a TCP connection proves its run in its first record (with --secret-file) and TCP guards the rest of the stream, so leave --auth-data off with --proto tcp".into(),
        ));
    }
    let secret = match &link {
        Some(link) => link.secret.clone(),
        None => read_secret(args.secret_file.as_deref())?,
    };
    let mut run = send_config(
        args.to,
        &args.traffic,
        &args.tcp,
        common.queues,
        Some(DEFAULT_DURATION),
        common.hugepages,
    )?;
    if let Some(secret) = secret {
        run.proof_token = Some(secret.data_key().token(run.epoch));
    }
    let mut notes = String::new();
    let queues = planned("send", &placement_args(common, args.to, &[]), &mut notes)?;
    notes.push_str(crate::timestamps::TCP_PLAN_LINE);
    notes.push_str(super::default_length_line(&args.traffic));
    let reporting = reporting(common, common.metrics, notes)?;
    Ok(Plan::Tcp(
        TcpPlan {
            senders: Some(TcpSendSide {
                queues,
                run,
                to: args.to,
                record: record_size(&args.traffic),
                link,
            }),
            sinks: None,
            output: output(common),
            min_rate_ratio: args.traffic.min_rate_ratio,
        },
        reporting,
    ))
}

/// `ringblast sink --proto tcp`.
pub(crate) fn sink(args: SinkArgs) -> Result<Plan, Error> {
    let common = &args.common;
    let secret = read_secret(args.secret_file.as_deref())?;
    let serve_control = secret.is_some() || args.listen.ip().is_loopback() || args.insecure_control;
    let mut config = sink_config(
        args.listen,
        args.tcp.max_conns,
        &args.tuning,
        common.hugepages,
    )?;
    config.data_key = secret.as_ref().map(|s| Arc::new(s.data_key()));
    let mut notes = String::new();
    let queues = planned(
        "sink",
        &placement_args(common, args.listen, &[]),
        &mut notes,
    )?;
    notes.push_str(config.recv.note());
    notes.push_str(crate::timestamps::TCP_PLAN_LINE);
    let reporting = reporting(common, common.metrics, notes)?;
    Ok(Plan::Tcp(
        TcpPlan {
            senders: None,
            sinks: Some(TcpSinkSide {
                queues,
                config,
                max_senders: args.tuning.max_senders,
                duration: args.duration,
                serve: serve_control.then_some(secret),
            }),
            output: output(common),
            min_rate_ratio: None,
        },
        reporting,
    ))
}

/// `ringblast pair --proto tcp`.
pub(crate) fn pair(args: PairArgs) -> Result<Plan, Error> {
    let common = &args.common;
    let probe = std::net::TcpListener::bind((args.address, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::Usage(format!("cannot bind {}: {e}", args.address)))?;
    let run = send_config(
        probe,
        &args.traffic,
        &args.tcp,
        common.queues,
        Some(DEFAULT_DURATION),
        common.hugepages,
    )?;
    let sink_cfg = sink_config(probe, 1024, &args.tuning, common.hugepages)?;
    let mut notes = String::new();
    let (send_queues, sink_queues) = plan_pair(common, probe, &mut notes)?;
    notes.push_str(sink_cfg.recv.note());
    notes.push_str(crate::timestamps::TCP_PLAN_LINE);
    notes.push_str(super::default_length_line(&args.traffic));
    let reporting = reporting(common, pair_metrics(args.no_metrics, common), notes)?;
    Ok(Plan::Tcp(
        TcpPlan {
            senders: Some(TcpSendSide {
                queues: send_queues,
                run,
                to: probe,
                record: record_size(&args.traffic),
                link: Some(SenderLink {
                    addr: probe,
                    secret: None,
                    name: "pair".into(),
                }),
            }),
            sinks: Some(TcpSinkSide {
                queues: sink_queues,
                config: sink_cfg,
                max_senders: args.tuning.max_senders,
                duration: None,
                serve: Some(None),
            }),
            output: output(common),
            min_rate_ratio: args.traffic.min_rate_ratio,
        },
        reporting,
    ))
}
