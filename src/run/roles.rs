//! Builds and starts the worker groups of each role from validated arguments: splits rate,
//! count and flows over the queues, creates each worker on its pinned thread, and keeps the
//! handles the reporter reads.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use crate::{
    cli::{SinkTuning, Steer, TrafficArgs},
    error::Error,
    net::claim,
    report::{QueueView, RxSample, TxSample},
    sender::{
        SenderConfig, SenderOutcome, SenderPlacement, SenderShared, SenderWorker, mix::SizePlan,
        parts::PartMarks,
    },
    sink::books::{Admission, MAX_SEND_LAG},
    sink::{
        INVALID_TABLE_FULL, SinkConfig, SinkOutcome, SinkShared, SinkWorker,
        registry::{FlowReport, Registry},
        sizes::SizeTable,
    },
    stats::{RxFlow, TxFlow},
    worker::{self, Control, Group},
};

/// Largest UDP payload of one send (IPv4: 65535 − 20 − 8).
pub(crate) const MAX_SEND_BYTES: usize = 65_507;
/// Largest GSO segment count the kernel accepts per send (`UDP_MAX_SEGMENTS`).
pub(crate) const MAX_GSO_SEGMENTS: u16 = 128;

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
    /// The whole run's rate schedule, if any (the queues' shares summed).
    pub(crate) schedule: Option<Arc<crate::schedule::RateSchedule>>,
    /// The session epoch of each part of the schedule.
    pub(crate) part_epochs: Arc<[u32]>,
    /// The sink's results of the steps judged so far (a constant rate: one step).
    pub(crate) tally: Arc<crate::metrics::steps::StepTally>,
    /// The header fields and port mapping line for the start plan, if any is set.
    pub(crate) fields_plan: Option<String>,
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
}

/// Checks the traffic options and returns one `SenderConfig` per queue with flows assigned.
pub(crate) fn sender_configs(
    to: SocketAddr,
    t: &TrafficArgs,
    queues: usize,
    default_duration: Option<Duration>,
    epoch: u32,
    hugepages: bool,
) -> Result<Vec<(SenderConfig, Vec<u32>)>, Error> {
    let usage = |m: String| Err(Error::Usage(m));
    if queues == 0 {
        return usage("--queues must be at least 1".into());
    }
    let sizes = Arc::new(SizePlan::resolve(&t.size, t.frame_size, to)?);
    let size = sizes.max_payload();
    if sizes.is_mix() && t.gso > 1 {
        return usage(format!(
            "--gso {} sends trains of one size; a --size mix sends one packet per send: use --gso 1",
            t.gso
        ));
    }
    if sizes.is_mix() && t.allow_fragments {
        return usage(
            "--allow-fragments counts fragments for one size; send a --size mix without it (each class must fit the path MTU)".into(),
        );
    }
    // A sink that has not heard the stated start extends a first compact number next to 0,
    // which gives the true number only below 2^32; a start just below it still crosses 2^32.
    if sizes.has_compact() && t.first_seq > u64::from(u32::MAX) {
        return usage(format!(
            "--first-seq {} with packets below 32 bytes: their compact header carries 32 bits of sequence; use --first-seq below 4294967296",
            t.first_seq
        ));
    }
    if t.gso == 0 || t.gso > MAX_GSO_SEGMENTS {
        return usage(format!(
            "--gso {} is out of range; use 1 (off) to {MAX_GSO_SEGMENTS}",
            t.gso
        ));
    }
    let per_send = size * usize::from(t.gso);
    if per_send > MAX_SEND_BYTES {
        let fit = (MAX_SEND_BYTES / size).max(1);
        return usage(if t.gso > 1 {
            format!(
                "--gso {} × --size {} = {per_send} bytes per send exceeds {MAX_SEND_BYTES}; use --gso {fit} or less",
                t.gso, size
            )
        } else {
            format!(
                "--size {} exceeds the largest UDP payload {MAX_SEND_BYTES}",
                size
            )
        });
    }
    if t.batch == 0 || t.batch > 4096 {
        return usage(format!(
            "--batch {} is out of range; use 1 to 4096",
            t.batch
        ));
    }
    let window = t.window.unwrap_or(t.batch * 2);
    if window == 0 || window > 32768 {
        return usage(format!("--window {window} is out of range; use 1 to 32768"));
    }
    let lag = u64::from(window) * u64::from(t.gso);
    if lag > MAX_SEND_LAG {
        return usage(format!(
            "--window {window} × --gso {} keeps {lag} packets in flight; the sink attributes failed sends only within {MAX_SEND_LAG}: lower --window or --gso",
            t.gso
        ));
    }
    super::shape::check_burst(t.burst, t.gso, window)?;
    let flows = t.flows.unwrap_or(queues as u32);
    if (flows as usize) < queues {
        return usage(format!(
            "--flows {flows} is below --queues {queues}; every queue needs at least one flow"
        ));
    }
    if flows > 65_536 {
        return usage(format!("--flows {flows} is too many; use at most 65536"));
    }
    let fields = crate::net::fields::HeaderFields {
        tos: t.tos.or(t.dscp.map(|d| d << 2)),
        ttl: t.ttl,
        src_ports: t.src_ports,
        dst_ports: t.dst_ports,
    };
    fields.check(flows)?;
    crate::net::wire::check_path(to, size, t.allow_fragments)?;
    let schedule = super::shape::schedule(t, sizes.mean_payload())?.map(Arc::new);
    let total_pps = match &schedule {
        // The judge's target: the schedule's mean rate.
        Some(s) => Some(s.mean_rate(0, s.duration().as_nanos() as u64)),
        None => t.rate.packets_per_second_at(sizes.mean_payload()),
    };
    let part_epochs =
        crate::sender::parts::part_epochs(epoch, schedule.as_ref().map_or(1, |s| s.parts().len()));
    let duration = match &schedule {
        Some(s) => Some(s.duration()),
        None => t.duration.or(if t.count.is_none() {
            default_duration
        } else {
            None
        }),
    };
    Ok((0..queues)
        .map(|q| {
            let my_flows: Vec<u32> = (0..flows).filter(|f| *f as usize % queues == q).collect();
            let count = t
                .count
                .map(|c| c / queues as u64 + u64::from((q as u64) < c % queues as u64));
            let config = SenderConfig {
                to,
                size,
                sizes: Arc::clone(&sizes),
                gso: t.gso,
                batch: t.batch,
                window,
                rate_pps: total_pps.map(|r| r / queues as f64),
                count,
                duration,
                op: t.send_op.map_or(crate::sender::SendOp::Send, Into::into),
                epoch,
                hugepages,
                first_seq: t.first_seq,
                burst: t.burst,
                fields,
                payload: t.payload.clone(),
                schedule: schedule
                    .as_ref()
                    .map(|s| Arc::new(s.scaled(1.0 / queues as f64))),
                part_epochs: Arc::clone(&part_epochs),
                trials: None,
            };
            (config, my_flows)
        })
        .collect())
}

/// The whole run's target rate (the queues' shares summed), `None` when unpaced.
pub(crate) fn target_pps(configs: &[(SenderConfig, Vec<u32>)]) -> Option<f64> {
    configs.iter().map(|(c, _)| c.rate_pps).sum::<Option<f64>>()
}

/// Starts one sender per planned queue.
pub(crate) fn start_senders(
    control: &Arc<Control>,
    queues: Vec<QueueView>,
    configs: Vec<(SenderConfig, Vec<u32>)>,
    target_pps: Option<f64>,
) -> Result<SenderSet, Error> {
    let epoch = configs.first().map_or(0, |(c, _)| c.epoch);
    let part_epochs = configs
        .first()
        .map_or_else(|| Arc::from([epoch]), |(c, _)| Arc::clone(&c.part_epochs));
    let first_seq = configs.first().map_or(0, |(c, _)| c.first_seq);
    let size = configs.first().map_or(0, |(c, _)| c.size);
    let burst = configs.first().map_or(1, |(c, _)| c.burst);
    let all_flows = configs.iter().map(|(_, f)| f.len() as u32).sum();
    let fields_plan = configs
        .first()
        .and_then(|(c, _)| c.fields.describe(all_flows, c.to));
    let schedule = configs
        .first()
        .and_then(|(c, _)| c.schedule.as_ref())
        .map(|s| Arc::new(s.scaled(configs.len() as f64)));
    let sizes = configs.first().map_or_else(
        || Arc::new(SizePlan::single(size)),
        |(c, _)| Arc::clone(&c.sizes),
    );
    let to = configs
        .first()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |(c, _)| c.to);
    let mut shared = Vec::new();
    let mut workers = Vec::new();
    let mut flows = Vec::new();
    for (q, (config, my_flows)) in queues.iter().zip(configs) {
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
        });
        shared.push(Arc::clone(&s));
        flows.push(my_flows.clone());
        let place = SenderPlacement {
            node: q.node,
            flows: my_flows,
        };
        workers.push((q.cpu, move || SenderWorker::new(config, &place, s)));
    }
    let group = worker::start("send", control, workers)?;
    Ok(SenderSet {
        queues,
        shared,
        group,
        epoch,
        flows,
        target_pps,
        first_seq,
        size,
        sizes,
        to,
        burst,
        schedule,
        part_epochs,
        tally: Arc::default(),
        fields_plan,
    })
}

/// Provided buffers per UDP sink queue, 64 KiB each, when `--rx-buffers` is not given.
pub(crate) const UDP_RX_BUFFERS: u16 = 512;

/// `--rx-buffers`, checked, or `default` when not given.
pub(crate) fn rx_buffers(given: Option<u16>, default: u16) -> Result<u16, Error> {
    match given {
        None => Ok(default),
        Some(n) if n.is_power_of_two() && (8..=32768).contains(&n) => Ok(n),
        Some(n) => Err(Error::Usage(format!(
            "--rx-buffers {n} must be a power of two from 8 to 32768"
        ))),
    }
}

/// Checks the sink options and returns the per-queue config.
pub(crate) fn sink_config(
    listen: SocketAddr,
    t: &SinkTuning,
    duration: Option<Duration>,
    hugepages: bool,
    refuse_unannounced_from_ns: u64,
) -> Result<SinkConfig, Error> {
    let buffers = rx_buffers(t.rx_buffers, UDP_RX_BUFFERS)?;
    if t.max_flows == 0 || t.max_flows > 65_536 {
        return Err(Error::Usage(format!(
            "--max-flows {} is out of range; use 1 to 65536",
            t.max_flows
        )));
    }
    if t.max_sessions == 0 || t.max_sessions > 1 << 20 {
        return Err(Error::Usage(format!(
            "--max-sessions {} is out of range; use 1 to 1048576",
            t.max_sessions
        )));
    }
    let max_unannounced = t
        .max_unannounced_sessions
        .unwrap_or(t.max_sessions.div_ceil(2));
    if max_unannounced > t.max_sessions {
        return Err(Error::Usage(format!(
            "--max-unannounced-sessions {max_unannounced} is more than --max-sessions {}; use 0 to {} (the rest are reserved for senders that said hello)",
            t.max_sessions, t.max_sessions
        )));
    }
    Ok(SinkConfig {
        max_sessions: t.max_sessions,
        admission: Admission {
            max_unannounced,
            refuse_unannounced_from_ns,
        },
        session_idle: t.session_idle,
        listen,
        gro: !t.no_gro,
        wait: t.rx_wait.into(),
        buffers,
        max_flows: t.max_flows,
        duration,
        hugepages,
        steer_by_flow: t.steer == Steer::Flow,
        steer_queues: None,
        sizes: Arc::default(),
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
    if !share_port {
        claim::refuse_others(listen)?;
    }
    let mut shared = Vec::new();
    let mut workers = Vec::new();
    for q in &queues {
        let s = Arc::new(SinkShared::new(config.max_flows, config.max_sessions));
        shared.push(Arc::clone(&s));
        let (config, node) = (config.clone(), q.node);
        workers.push((q.cpu, move || SinkWorker::new(config, node, s)));
    }
    let group = worker::start("sink", control, workers)?;
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
    use super::rx_buffers;

    #[test]
    fn rx_buffers_default_when_not_given_and_checked_when_given() {
        assert_eq!(rx_buffers(None, 64).unwrap(), 64);
        assert_eq!(rx_buffers(Some(8), 64).unwrap(), 8);
        assert_eq!(rx_buffers(Some(32768), 64).unwrap(), 32768);
        for bad in [0, 4, 100, 65535] {
            let err = rx_buffers(Some(bad), 64).unwrap_err().to_string();
            assert!(err.contains("power of two from 8 to 32768"), "{err}");
        }
    }
}
