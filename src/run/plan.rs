//! What `run` is given: plain data that `cli`'s resolve step builds from the command line, with
//! every option checked, the queues placed and the workers' configs made, and no clap type in
//! it. One [`Plan`] a command; `run::execute` only carries it out.

use std::{net::SocketAddr, time::Duration};

use super::{link, pipeline::Reporting};
use crate::{
    control::{auth::Secret, msg::DataProto},
    report::QueueView,
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

/// What a UDP sender run sends: where its queues run, and the whole run, said once.
pub(crate) struct UdpSend {
    /// Where each queue runs.
    pub(crate) queues: Vec<QueueView>,
    /// The whole run as one worker would send it alone: its target rate, count and schedule
    /// over all queues, and every fact its queues share. The run's start splits it into the
    /// queues' shares once (`run::roles`); nothing sums them back.
    pub(crate) run: SenderConfig,
    /// Flows over all queues (at least one per queue).
    pub(crate) flows: u32,
}

/// Queue `q`'s share of `count` over `queues`: an even part, the remainder going one each to
/// the first queues (the shares sum to `count`).
pub(crate) fn count_share(count: u64, queues: u64, q: u64) -> u64 {
    count / queues + u64::from(q < count % queues)
}

impl UdpSend {
    /// Each queue's flow ids: flow `f` goes to queue `f mod queues`.
    pub(crate) fn queue_flows(&self) -> Vec<Vec<u32>> {
        let queues = self.queues.len().max(1);
        (0..queues)
            .map(|q| {
                (0..self.flows)
                    .filter(|f| *f as usize % queues == q)
                    .collect()
            })
            .collect()
    }
}

/// The receiving side of a UDP run: one config for the whole sink, every queue bound to its
/// address.
pub(crate) struct UdpSinkSide {
    pub(crate) queues: Vec<QueueView>,
    pub(crate) config: SinkConfig,
}

/// What one UDP invocation runs: senders, sinks or both, and how they link and report.
pub(crate) struct UdpPlan {
    pub(crate) senders: Option<UdpSend>,
    /// The sink's queues and config.
    pub(crate) sinks: Option<UdpSinkSide>,
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
    /// The whole run as one worker would send it alone: its records/s target (`None`:
    /// unpaced) and count over all queues, split into the queues' shares at start
    /// (`run::tcp_groups`).
    pub(crate) run: TcpSendConfig,
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
