//! Builds and starts UDP's worker groups of each role from the plan: splits the sender run into
//! its queues' shares once (rate, count, schedule and flows), creates each worker on its pinned
//! thread, and keeps the handles the reporter reads.

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc};

use super::plan::{UdpSend, count_share};

use crate::{
    error::Error,
    metrics::{self, Exporter, handles},
    net::claim,
    report::{QueueView, RxSample, TxSample},
    sender::{
        SenderConfig, SenderOutcome, SenderPlacement, SenderShared, UdpSendJob, mix::SizePlan,
        parts::PartMarks,
    },
    sink::{
        INVALID_TABLE_FULL, SinkConfig, SinkOutcome, SinkShared, SinkWorker,
        registry::{FlowReport, Registry},
        sizes::SizeTable,
    },
    stats::{RxFlow, TxFlow},
    worker::{self, Control, Group},
};

/// Registers every UDP worker's series (at 0) and the info gauges.
pub(crate) fn register_series(
    senders: Option<&SenderSet>,
    sinks: Option<&SinkSet>,
    exported_flows: usize,
    arena_bytes: (u64, u64),
) -> Exporter<handles::Handles> {
    let mut roles = Vec::new();
    let mut by_node: BTreeMap<u32, u64> = BTreeMap::new();
    let mut tx = Vec::new();
    let senders_set = senders;
    if let Some(s) = senders {
        roles.push("send");
        for (((q, flows), shared), pps) in s
            .queues
            .iter()
            .zip(&s.flows)
            .zip(&s.shared)
            .zip(&s.queue_pps)
        {
            tx.push(handles::TxWorker::register(
                q,
                flows,
                *pps,
                s.exchange,
                shared.clone(),
            ));
            *by_node.entry(q.node).or_default() += arena_bytes.0;
        }
    }
    let mut rx = Vec::new();
    if let Some(s) = sinks {
        roles.push("sink");
        for (q, shared) in s.queues.iter().zip(&s.shared) {
            rx.push(handles::RxWorker::register(
                q,
                exported_flows,
                shared.clone(),
            ));
            *by_node.entry(q.node).or_default() += arena_bytes.1;
        }
    }
    metrics::set_info(&roles, &by_node.into_iter().collect::<Vec<_>>());
    if let Some(s) = senders_set {
        metrics::set_memory("send", &s.queues, s.group.memory());
    }
    if let Some(s) = sinks {
        metrics::set_memory("sink", &s.queues, s.group.memory());
    }
    let senders = sinks.map(|s| crate::metrics::senders::SenderSeries::new(s.registry.clone()));
    let steps = senders_set.map(|s| {
        let n = s.schedule.as_ref().map_or(1, |s| s.parts().len());
        crate::metrics::steps::StepSeries::register(s.shared.clone(), n, Arc::clone(&s.tally))
    });
    let sizes = (
        senders_set
            .map(|s| crate::metrics::sizes::TxSizeSeries::register(s.shared.clone(), &s.sizes)),
        sinks.map(|s| {
            crate::metrics::sizes::RxSizeSeries::new(s.registry.clone(), Arc::clone(&s.sizes))
        }),
    );
    Exporter::new(handles::Handles {
        tx,
        rx,
        senders,
        steps,
        sizes,
    })
}

/// Running senders.
pub(crate) struct SenderSet {
    /// Placement of each queue.
    pub(crate) queues: Vec<QueueView>,
    /// Shared counters per queue.
    pub(crate) shared: Vec<Arc<SenderShared>>,
    /// The threads.
    pub(crate) group: Group<SenderOutcome>,
    /// The session epoch in every header.
    pub(crate) epoch: u32,
    /// Flow ids per queue.
    pub(crate) flows: Vec<Vec<u32>>,
    /// Target packets per second over all queues (None = max).
    pub(crate) target_pps: Option<f64>,
    /// Each queue's share of it, as its worker paces (None = max).
    pub(crate) queue_pps: Vec<Option<f64>>,
    /// First sequence number of every flow.
    pub(crate) first_seq: u64,
    /// UDP payload bytes of the largest datagram.
    pub(crate) size: usize,
    /// The size classes sent.
    pub(crate) sizes: Arc<SizePlan>,
    /// Where the datagrams go.
    pub(crate) to: SocketAddr,
    /// Packets per pacing tick (1 = evenly spaced).
    pub(crate) burst: u64,
    /// The whole run's rate schedule, if any.
    pub(crate) schedule: Option<Arc<crate::schedule::RateSchedule>>,
    /// The session epoch of each part of the schedule.
    pub(crate) part_epochs: Arc<[u32]>,
    /// The sink's results of the steps judged so far (a constant rate: one step).
    pub(crate) tally: Arc<crate::metrics::steps::StepTally>,
    /// The header fields and port mapping line for the start plan, if any is set.
    pub(crate) fields_plan: Option<String>,
    /// How fast its flows can number their datagrams, for the sink's reach bound.
    pub(crate) pace: RunPace,
    /// Its queues exchange requests and responses (`--pattern rr`).
    pub(crate) exchange: bool,
}

/// How fast a sender run's flows can number their datagrams: what its Hello tells the sink so
/// that a datagram numbered beyond what the run could have sent is refused (`proto::reach`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunPace {
    /// Monotonic ns before any of its pacers started.
    pub(crate) started_ns: u64,
    /// The most datagrams per second any one flow is paced at: the fastest queue's peak rate
    /// (`None`: a queue is unpaced, or a search, whose trials tell their own).
    pub(crate) flow_pps: Option<f64>,
}

/// The most datagrams per second one flow of `configs` is paced at: the fastest queue's peak
/// (a flow is sent no faster than its queue); `None` when a queue is unpaced or runs trials.
fn flow_pps(configs: &[(SenderConfig, Vec<u32>)]) -> Option<f64> {
    configs
        .iter()
        .map(|(c, _)| match (&c.schedule, c.trials.is_some()) {
            (_, true) => None,
            (Some(s), false) => Some(s.peak_rate()),
            (None, false) => c.rate_pps,
        })
        .try_fold(0.0, |peak: f64, r| r.map(|r| peak.max(r)))
}

/// Running sinks.
pub(crate) struct SinkSet {
    /// Placement of each queue.
    pub(crate) queues: Vec<QueueView>,
    /// Shared counters per queue.
    pub(crate) shared: Vec<Arc<SinkShared>>,
    /// The threads.
    pub(crate) group: Group<SinkOutcome>,
    /// Books per sender, beside the workers.
    pub(crate) registry: Arc<Registry>,
    /// Session slots per queue.
    pub(crate) max_sessions: usize,
    /// Monotonic ns when every queue was bound with its receive armed.
    pub(crate) ready_ns: u64,
    /// The size classes the sink counts.
    pub(crate) sizes: Arc<SizeTable>,
    /// Where each datagram's arrival time comes from.
    pub(crate) arrival: crate::timestamps::Arrival,
}

/// Each queue's share of a sender run: the run's rate, count and schedule split once, and its
/// flows.
fn shares(send: &UdpSend) -> Vec<(SenderConfig, Vec<u32>)> {
    let run = &send.run;
    let queues = send.queues.len().max(1) as u64;
    send.queue_flows()
        .into_iter()
        .enumerate()
        .map(|(q, flows)| {
            let q = q as u64;
            let config = SenderConfig {
                rate_pps: run.rate_pps.map(|r| r / queues as f64),
                count: run.count.map(|c| count_share(c, queues, q)),
                schedule: run
                    .schedule
                    .as_ref()
                    .map(|s| Arc::new(s.scaled(1.0 / queues as f64))),
                ..run.clone()
            };
            (config, flows)
        })
        .collect()
}

/// Starts one sender per planned queue, each on its share of the run.
pub(crate) fn start_senders(control: &Arc<Control>, send: UdpSend) -> Result<SenderSet, Error> {
    let configs = shares(&send);
    let UdpSend {
        queues,
        run,
        flows: all_flows,
    } = send;
    // Before any worker exists, so before any pacer starts.
    let pace = RunPace {
        started_ns: crate::clock::monotonic_ns(),
        flow_pps: flow_pps(&configs),
    };
    let mut shared = Vec::new();
    let mut workers = Vec::new();
    let mut queue_flows = Vec::new();
    let mut queue_pps = Vec::new();
    for (q, (config, my_flows)) in queues.iter().zip(configs) {
        queue_pps.push(config.rate_pps);
        // Marks for each part of a schedule or each trial of a search.
        let parts = if config.schedule.is_some() || config.trials.is_some() {
            config.part_epochs.len()
        } else {
            0
        };
        let s = Arc::new(SenderShared {
            flows: my_flows.iter().map(|_| Default::default()).collect(),
            worker: Default::default(),
            stamp: Default::default(),
            part: Default::default(),
            parts: (0..parts)
                .map(|_| PartMarks::new(my_flows.len(), config.first_seq))
                .collect(),
            exchange: Default::default(),
        });
        shared.push(Arc::clone(&s));
        queue_flows.push(my_flows.clone());
        let place = SenderPlacement {
            node: q.node,
            flows: my_flows,
        };
        workers.push((q.cpu, move || UdpSendJob::new(config, &place, s)));
    }
    let group = worker::start("send", control, workers)?;
    Ok(SenderSet {
        queues,
        shared,
        group,
        flows: queue_flows,
        target_pps: run.rate_pps,
        queue_pps,
        first_seq: run.first_seq,
        size: run.size,
        sizes: run.sizes,
        to: run.to,
        burst: run.burst,
        fields_plan: run.fields.describe(all_flows, run.to),
        schedule: run.schedule,
        part_epochs: run.part_epochs,
        epoch: run.epoch,
        tally: Arc::default(),
        pace,
        exchange: run.exchange.is_some(),
    })
}

/// Starts one sink per planned queue, all on the same `SO_REUSEPORT` address. Unless
/// `share_port`, the address must be held by no other process, before binding and after every
/// queue is bound (`net::claim` explains the two checks).
pub(crate) fn start_sinks(
    control: &Arc<Control>,
    queues: Vec<QueueView>,
    config: SinkConfig,
    max_senders: usize,
    share_port: bool,
) -> Result<SinkSet, Error> {
    let max_sessions = config.max_sessions;
    let listen = config.listen;
    let mut config = config;
    config.steer_queues =
        (config.steer_by_flow && !share_port && queues.len() > 1).then_some(queues.len() as u32);
    let sizes = Arc::clone(&config.sizes);
    let arrival = config.arrival;
    if !share_port {
        claim::refuse_others(listen)?;
    }
    let mut shared = Vec::new();
    let mut workers = Vec::new();
    for q in &queues {
        // Two figure slots per sender: half of them are all that runs without a hello hold.
        let s = Arc::new(
            SinkShared::new(config.max_flows, config.max_sessions)
                .with_figure_slots(2 * max_senders.max(1)),
        );
        shared.push(Arc::clone(&s));
        let (config, node) = (config.clone(), q.node);
        workers.push((q.cpu, move || SinkWorker::new(config, node, s)));
    }
    let mut group = worker::start("sink", control, workers)?;
    if let Err(e) = (!share_port)
        .then(|| claim::refuse_others(listen))
        .transpose()
    {
        control.request_stop();
        group.release();
        group.join();
        return Err(e);
    }
    // Every socket is bound now: a sender whose first packet came later was seen from its start.
    let registry = Arc::new(
        Registry::new(shared.clone(), max_senders, crate::clock::monotonic_ns())
            .with_sizes(Arc::clone(&sizes)),
    );
    Ok(SinkSet {
        queues,
        shared,
        group,
        registry,
        max_sessions,
        ready_ns: crate::clock::monotonic_ns(),
        sizes,
        arrival,
    })
}

/// Sums per-flow counters into one value.
fn sum<T: Default>(items: impl Iterator<Item = T>, add: impl Fn(&mut T, &T)) -> T {
    items.fold(T::default(), |mut acc, item| {
        add(&mut acc, &item);
        acc
    })
}

impl SenderSet {
    /// Current counters per queue.
    pub(crate) fn samples(&self) -> Vec<TxSample> {
        self.shared
            .iter()
            .map(|s| {
                let (sample, published_ns) = s.stamp.read(|| TxSample {
                    worker: s.worker.load(),
                    traffic: sum(s.flows.iter().map(|f| f.load()), TxFlow::add),
                    published_ns: 0,
                    exchange: s.exchange.load(),
                });
                TxSample {
                    published_ns,
                    ..sample
                }
            })
            .collect()
    }
}

/// Where every flow of these sender queues stands: first and next sequence numbers, failed sends.
pub(crate) fn flow_reports(
    shared: &[Arc<SenderShared>],
    flows: &[Vec<u32>],
    first_seq: u64,
) -> Vec<FlowReport> {
    let mut out = Vec::new();
    for (shared, flow_ids) in shared.iter().zip(flows) {
        for (counters, &flow) in shared.flows.iter().zip(flow_ids) {
            let c = counters.load();
            let failed: u64 = c.errors.iter().sum();
            out.push(FlowReport {
                flow,
                first_seq,
                next_seq: first_seq + c.packets + failed,
                failed,
            });
        }
    }
    out
}

impl SenderSet {
    /// Where every flow stands: its first and next sequence numbers and its failed sends.
    pub(crate) fn flow_reports(&self) -> Vec<FlowReport> {
        flow_reports(&self.shared, &self.flows, self.first_seq)
    }
}

impl SinkSet {
    /// The line that says a queue's session table is full, if one is (print it once).
    pub(crate) fn table_full_line(&self, rx: &[RxSample]) -> Option<String> {
        let (q, _) = self
            .queues
            .iter()
            .zip(rx)
            .find(|(_, r)| r.worker.invalid[INVALID_TABLE_FULL] > 0)?;
        Some(format!(
            "sink: queue {} session table full ({} sessions): datagrams of new sessions count as invalid table_full; raise --max-sessions (or, for senders without a hello, --max-unannounced-sessions) or lower --session-idle",
            q.queue, self.max_sessions
        ))
    }

    /// Current counters per queue.
    pub(crate) fn samples(&self) -> Vec<RxSample> {
        self.shared
            .iter()
            .map(|s| RxSample {
                worker: s.worker.load(),
                traffic: sum(s.flows.iter().map(|f| f.load()), RxFlow::add),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{schedule::RateSchedule, sender::SendOp};

    fn run(rate_pps: Option<f64>, count: Option<u64>) -> SenderConfig {
        SenderConfig {
            to: SocketAddr::from(([127, 0, 0, 1], 9)),
            size: 64,
            sizes: Arc::new(SizePlan::single(64)),
            gso: 1,
            batch: 32,
            window: 64,
            rate_pps,
            count,
            duration: None,
            op: SendOp::Send,
            epoch: 7,
            hugepages: false,
            first_seq: 0,
            burst: 1,
            fields: Default::default(),
            payload: Default::default(),
            schedule: None,
            part_epochs: Arc::from([7]),
            trials: None,
            proof: None,
            exchange: None,
        }
    }

    fn send(queues: usize, flows: u32, run: SenderConfig) -> UdpSend {
        UdpSend {
            queues: (0..queues)
                .map(|q| QueueView {
                    queue: q,
                    node: 0,
                    cpu: q as u32,
                })
                .collect(),
            run,
            flows,
        }
    }

    #[test]
    fn a_run_is_split_into_its_queues_shares_once() {
        let plan = send(3, 7, run(Some(1000.0), Some(10)));
        let split = shares(&plan);
        let flows: Vec<&[u32]> = split.iter().map(|(_, f)| f.as_slice()).collect();
        assert_eq!(flows, [&[0, 3, 6][..], &[1, 4], &[2, 5]]);
        let counts: Vec<_> = split.iter().map(|(c, _)| c.count).collect();
        assert_eq!(
            counts,
            [Some(4), Some(3), Some(3)],
            "the remainder to the first"
        );
        for (c, _) in &split {
            assert_eq!(c.rate_pps, Some(1000.0 / 3.0));
            assert_eq!(c.epoch, 7, "every fact but the share is the run's");
        }
        let unpaced = shares(&send(2, 2, run(None, None)));
        assert!(
            unpaced
                .iter()
                .all(|(c, _)| c.rate_pps.is_none() && c.count.is_none())
        );
    }

    #[test]
    fn a_schedule_is_shared_out() {
        let schedule = Arc::new(RateSchedule::parse_steps("100kpps:1s,200kpps:2s", 64.0).unwrap());
        let mut whole = run(Some(schedule.mean_rate(0, 3_000_000_000)), None);
        whole.schedule = Some(Arc::clone(&schedule));
        let plan = send(4, 4, whole);
        for (c, _) in shares(&plan) {
            let share = c.schedule.expect("each queue paces its share");
            assert_eq!(share.due_by(3_000_000_000, &mut 0), 125_001);
        }
    }
}
