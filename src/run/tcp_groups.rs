//! The started TCP worker groups of a run: one sender or sink worker per planned queue, with the
//! counters each shares with the reporter.

use std::sync::Arc;

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

/// Starts one TCP sender worker per queue.
pub(crate) fn start_senders(
    control: &Arc<Control>,
    queues: Vec<QueueView>,
    configs: Vec<TcpSendConfig>,
    target_rps: Option<f64>,
) -> Result<TcpSenders, Error> {
    let mut shared = Vec::new();
    let mut workers = Vec::new();
    let rr = configs.iter().any(|c| c.rr.is_some());
    for (q, config) in queues.iter().zip(configs) {
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
        target_rps,
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
