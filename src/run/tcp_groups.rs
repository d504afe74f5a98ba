//! The started TCP worker groups of a run: the sender run split into its queues' shares once,
//! one sender or sink worker per planned queue, with the counters each shares with the reporter.

use std::sync::Arc;

use super::plan::count_share;
use crate::{
    error::Error,
    report::{self, QueueView},
    sender::tcp::{TcpSendConfig, TcpSendOutcome, TcpSendShared, TcpSendWorker},
    sink::tcp::{TcpSinkConfig, TcpSinkOutcome, TcpSinkShared, TcpSinkWorker},
    worker::{self, Control},
};

/// Started sender queues.
pub(crate) struct TcpSenders {
    /// Placement.
    pub(crate) queues: Vec<QueueView>,
    /// Counters per queue.
    pub(crate) shared: Vec<Arc<TcpSendShared>>,
    /// The threads.
    pub(crate) group: worker::Group<TcpSendOutcome>,
    /// Records/s target of the run.
    pub(crate) target_rps: Option<f64>,
    /// The senders run request/response.
    pub(crate) rr: bool,
}

/// Started sink queues.
pub(crate) struct TcpSinks {
    /// Placement.
    pub(crate) queues: Vec<QueueView>,
    /// Counters per queue.
    pub(crate) shared: Vec<Arc<TcpSinkShared>>,
    /// The threads.
    pub(crate) group: worker::Group<TcpSinkOutcome>,
}

impl TcpSenders {
    /// The start-up lines saying where each queue's packet memory is.
    pub(crate) fn memory_text(&self) -> String {
        report::memory_text("send", &self.queues, self.group.memory())
    }
}

impl TcpSinks {
    /// The start-up lines saying where each queue's packet memory is.
    pub(crate) fn memory_text(&self) -> String {
        report::memory_text("sink", &self.queues, self.group.memory())
    }
}

/// Each queue's share of a TCP sender run: its connections' flow ids, and the run's rate and
/// count split once.
fn shares(run: &TcpSendConfig, queues: usize) -> Vec<TcpSendConfig> {
    let n = queues.max(1) as u64;
    (0..n)
        .map(|q| TcpSendConfig {
            first_flow: (q as u32 * run.conns) as u16,
            rate_rps: run.rate_rps.map(|r| r / n as f64),
            count: run.count.map(|c| count_share(c, n, q)),
            ..run.clone()
        })
        .collect()
}

/// Starts one TCP sender worker per queue, each on its share of `run`.
pub(crate) fn start_senders(
    control: &Arc<Control>,
    queues: Vec<QueueView>,
    run: &TcpSendConfig,
) -> Result<TcpSenders, Error> {
    let mut shared = Vec::new();
    let mut workers = Vec::new();
    let rr = run.rr.is_some();
    for (q, config) in queues.iter().zip(shares(run, queues.len())) {
        let s = Arc::new(TcpSendShared::new(config.conns));
        shared.push(Arc::clone(&s));
        let node = q.node;
        workers.push((q.cpu, move || TcpSendWorker::new(config, node, s)));
    }
    let group = worker::start("send", control, workers)?;
    Ok(TcpSenders {
        queues,
        shared,
        group,
        target_rps: run.rate_rps,
        rr,
    })
}

/// Starts one TCP sink worker per queue.
pub(crate) fn start_sinks(
    control: &Arc<Control>,
    queues: Vec<QueueView>,
    config: TcpSinkConfig,
) -> Result<TcpSinks, Error> {
    let mut shared = Vec::new();
    let mut workers = Vec::new();
    for q in &queues {
        let s = Arc::new(TcpSinkShared::new(config.max_conns));
        shared.push(Arc::clone(&s));
        let (node, config) = (q.node, config.clone());
        workers.push((q.cpu, move || TcpSinkWorker::new(config, node, s)));
    }
    let group = worker::start("sink", control, workers)?;
    Ok(TcpSinks {
        queues,
        shared,
        group,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::SendOp;

    #[test]
    fn a_tcp_run_is_split_into_its_queues_shares_once() {
        let run = TcpSendConfig {
            to: ([127, 0, 0, 1], 9).into(),
            size: 1000,
            conns: 3,
            first_flow: 0,
            rate_rps: Some(900.0),
            count: Some(8),
            duration: None,
            op: SendOp::WriteFixed,
            epoch: 5,
            proof_token: None,
            hugepages: false,
            rr: None,
        };
        let split = shares(&run, 3);
        let firsts: Vec<_> = split.iter().map(|c| c.first_flow).collect();
        assert_eq!(
            firsts,
            [0, 3, 6],
            "each queue's connections have flow ids of their own"
        );
        let counts: Vec<_> = split.iter().map(|c| c.count).collect();
        assert_eq!(counts, [Some(3), Some(3), Some(2)]);
        assert!(
            split
                .iter()
                .all(|c| c.rate_rps == Some(300.0) && c.epoch == 5)
        );
    }
}
