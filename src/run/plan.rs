//! What `run` is given: plain data that `cli`'s resolve step builds from the command line, with
//! every option checked, the queues placed and the workers' configs made, and no clap type in
//! it. One [`Plan`] a command; `run::execute` only carries it out.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use super::{link, pipeline::Reporting};
use crate::{
    control::{auth::Secret, msg::DataProto},
    report::QueueView,
    schedule::RateSchedule,
    sender::SenderConfig,
    sender::tcp::TcpSendConfig,
    sink::SinkConfig,
    sink::tcp::TcpSinkConfig,
};

/// One command's run.
pub(crate) enum Plan {
    /// `send`, `sink` or `pair` over UDP.
    Udp(UdpPlan, Reporting),
    /// `send`, `sink` or `pair` with `--proto tcp`.
    Tcp(TcpPlan, Reporting),
    /// `search`: the search's own parameters and the sender its trials run on.
    Search(SearchPlan, TrialPlan),
    /// `topo`: the placement a `send` would get.
    Topo(TopoPlan),
}

/// The live lines of a run.
#[derive(Clone, Copy)]
pub(crate) struct Output {
    /// One JSON object per line instead of text.
    pub(crate) json: bool,
    /// Between live lines (0: none).
    pub(crate) interval: Duration,
}

/// What a UDP sender run sends: where its queues run, each queue's share, and the run's rate,
/// said once.
pub(crate) struct UdpSend {
    /// Where each queue runs.
    pub(crate) queues: Vec<QueueView>,
    /// Per queue: its worker's config (its share of the run's rate, count and schedule) and its
    /// flow ids.
    pub(crate) shares: QueueShares,
    /// The run's rate, which the resolve step split into the shares once.
    pub(crate) rate: RunRate,
}

/// Per queue of a UDP sender: its worker's config and its flow ids.
pub(crate) type QueueShares = Vec<(SenderConfig, Vec<u32>)>;

/// A sender run's rate over all its queues, as asked: what its shares were split from, and what
/// the judge, the report and the control channel's hellos hold it to (never the shares summed
/// back).
#[derive(Clone, Default)]
pub(crate) struct RunRate {
    /// Target packets per second (`None`: unpaced); a schedule's mean rate.
    pub(crate) target_pps: Option<f64>,
    /// The rate schedule (`--rate-steps`, `--ramp`), if any.
    pub(crate) schedule: Option<Arc<RateSchedule>>,
}

/// What one UDP invocation runs: senders, sinks or both, and how they link and report.
pub(crate) struct UdpPlan {
    pub(crate) senders: Option<UdpSend>,
    /// The sink's queues and config.
    pub(crate) sinks: Option<(Vec<QueueView>, SinkConfig)>,
    /// Sink flows with series of their own (`--metrics-flows`, capped by the flow table).
    pub(crate) exported_flows: usize,
    pub(crate) output: Output,
    /// Senders with their own series and JSON entry at the sink.
    pub(crate) max_senders: usize,
    /// How the sender and the sink talk.
    pub(crate) link: link::Link,
    /// A sender run below this share of its target fails.
    pub(crate) min_rate_ratio: Option<f64>,
    /// Live lines show the L1 wire rate.
    pub(crate) wire_rate: bool,
    /// Let the sink share its UDP port with another process (`--share-port`).
    pub(crate) share_port: bool,
}

/// What one TCP invocation runs: senders, sinks or both.
pub(crate) struct TcpPlan {
    pub(crate) senders: Option<TcpSendSide>,
    pub(crate) sinks: Option<TcpSinkSide>,
    pub(crate) output: Output,
    /// Exit 1 below this share of the target records/s.
    pub(crate) min_rate_ratio: Option<f64>,
}

/// The sending side of a TCP run.
pub(crate) struct TcpSendSide {
    pub(crate) queues: Vec<QueueView>,
    pub(crate) configs: Vec<TcpSendConfig>,
    pub(crate) target: Option<f64>,
    /// The sink's data address, and the record size the start-up line names.
    pub(crate) to: SocketAddr,
    pub(crate) record: usize,
    /// The control channel (none with `--control off`).
    pub(crate) link: Option<link::SenderLink>,
}

/// The receiving side of a TCP run.
pub(crate) struct TcpSinkSide {
    pub(crate) queues: Vec<QueueView>,
    pub(crate) config: TcpSinkConfig,
    pub(crate) max_senders: usize,
    /// A sink-only run's `--duration`.
    pub(crate) duration: Option<Duration>,
    /// Its control server on the data port, with the secret (none: not served).
    pub(crate) serve: Option<Option<std::sync::Arc<Secret>>>,
}

/// The sender a search's trials run on: a `send` to `to` with the search's size, queues,
/// secret and exporter, its rate, length and count left to each trial.
pub(crate) struct TrialSendPlan {
    /// The sender's queues and shares (each trial sets its own rate).
    pub(crate) send: UdpSend,
    /// Its control channel to the sink, which gives each trial's verdict.
    pub(crate) link: link::SenderLink,
    pub(crate) reporting: Reporting,
}

/// `topo`: where a sender to `to` would run.
pub(crate) struct TopoPlan {
    pub(crate) to: Option<SocketAddr>,
    pub(crate) queues: usize,
    pub(crate) cpus: Option<String>,
    pub(crate) node: Option<u32>,
}

/// What the search is asked.
#[derive(Clone, Debug)]
pub(crate) struct SearchPlan {
    /// Loss ratios to find the highest rate for, ascending.
    pub(crate) loss_ratios: Vec<f64>,
    /// Lowest rate searched (pps).
    pub(crate) min_rate: f64,
    /// Highest rate searched (pps); `None`: measure the unpaced rate in a first trial.
    pub(crate) max_rate: Option<f64>,
    /// Relative width of the final interval.
    pub(crate) precision: f64,
    /// Short trial length.
    pub(crate) trial: Duration,
    /// Final trial length.
    pub(crate) final_trial: Duration,
    /// Give up after this long.
    pub(crate) max_time: Duration,
    /// How far below its rate a trial may offer and still be judged (0.01 = 1 %); one that
    /// offered less is sender-limited.
    pub(crate) offered_tolerance: f64,
    /// A trial whose p99 one-way latency exceeds this fails, whatever its loss.
    pub(crate) max_latency_p99: Option<Duration>,
    /// JSON Lines on stdout.
    pub(crate) json: bool,
    /// What the trials send: datagrams (rates in pps) or TCP records (rates in records/s).
    pub(crate) proto: DataProto,
}

/// The sender a search's trials run on.
pub(crate) enum TrialPlan {
    /// UDP: one sender run, each trial the next part of it.
    Udp(TrialSendPlan),
    /// TCP: one sender run per trial, each followed by its drain (`--drain`; `None`: the
    /// default).
    Tcp {
        side: TcpSendSide,
        reporting: Reporting,
        drain: Option<Duration>,
    },
}
