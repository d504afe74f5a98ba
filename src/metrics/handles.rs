//! Pre-registered metric handles for every worker, and the flush that copies the workers'
//! published counters into them.
//!
//! Handles are created once, after the workers are set up and before they start, so every series
//! that will ever exist is exported (at 0) from the first scrape. The flush runs on the
//! reporting thread, never on a worker: it loads the shared counter blocks and sets each counter
//! to its absolute value, so scraped values equal the workers' own counts exactly.

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Label, counter, gauge, histogram};

use super::names::*;
use crate::{
    report::QueueView,
    sender::SenderShared,
    sink::SinkShared,
    stats::{
        ERRNO_CLASSES, ERRNO_LABELS, INVALID_LABELS, LATENCY_CELLS, RxFlow, TxFlow, WorkerCounters,
    },
};

const PROTOCOL: &str = "udp";

fn base(q: &QueueView) -> Vec<Label> {
    vec![
        Label::new("node", q.node.to_string()),
        Label::new("queue", q.queue.to_string()),
    ]
}

fn with(mut labels: Vec<Label>, key: &'static str, value: impl Into<String>) -> Vec<Label> {
    labels.push(Label::new(key, value.into()));
    labels
}

fn traffic(q: &QueueView, flow: &str) -> Vec<Label> {
    with(
        with(base(q), "flow", flow.to_string()),
        "protocol",
        PROTOCOL,
    )
}

/// Ring health handles of one worker.
struct RingHandles {
    enter: Counter,
    sqes: Counter,
    cqes: Counter,
    sq_full: Counter,
    cq_overflow: Counter,
    inflight: Gauge,
}

impl RingHandles {
    fn register(role: &str, q: &QueueView) -> RingHandles {
        let l = with(base(q), "role", role.to_string());
        RingHandles {
            enter: counter!(RING_ENTER, l.clone()),
            sqes: counter!(RING_SQES, l.clone()),
            cqes: counter!(RING_CQES, l.clone()),
            sq_full: counter!(RING_SQ_FULL, l.clone()),
            cq_overflow: counter!(RING_CQ_OVERFLOW, l.clone()),
            inflight: gauge!(RING_INFLIGHT, l),
        }
    }

    fn flush(&self, w: &WorkerCounters) {
        self.enter.absolute(w.enter_calls);
        self.sqes.absolute(w.sqes_submitted);
        self.cqes.absolute(w.cqes_reaped);
        self.sq_full.absolute(w.sq_full);
        self.cq_overflow.absolute(w.cq_overflow);
        self.inflight.set(w.inflight as f64);
    }
}

struct TxFlowHandles {
    packets: Counter,
    bytes: Counter,
    errors: [Counter; ERRNO_CLASSES],
}

/// One sender queue's handles.
pub(crate) struct TxWorker {
    shared: Arc<SenderShared>,
    flows: Vec<TxFlowHandles>,
    ring: RingHandles,
    lag: Gauge,
    target: Gauge,
    /// `--pattern rr`: transactions, timeouts and unmatched responses.
    exchange: Option<[Counter; 3]>,
}

impl TxWorker {
    /// Registers every series of a sender queue that owns `flow_ids`, pacing at `target_pps`
    /// (and its request/response series when `exchange`).
    pub(crate) fn register(
        q: &QueueView,
        flow_ids: &[u32],
        target_pps: Option<f64>,
        exchange: bool,
        shared: Arc<SenderShared>,
    ) -> TxWorker {
        let flows = flow_ids
            .iter()
            .map(|f| {
                let l = traffic(q, &f.to_string());
                TxFlowHandles {
                    packets: counter!(TX_PACKETS, l.clone()),
                    bytes: counter!(TX_BYTES, l.clone()),
                    errors: std::array::from_fn(|i| {
                        counter!(TX_ERRORS, with(l.clone(), "errno", ERRNO_LABELS[i]))
                    }),
                }
            })
            .collect();
        gauge!(TX_TARGET, base(q)).set(target_pps.unwrap_or(0.0));
        gauge!(
            WORKER_INFO,
            with(with(base(q), "role", "send"), "cpu", q.cpu.to_string())
        )
        .set(1.0);
        TxWorker {
            shared,
            flows,
            ring: RingHandles::register("send", q),
            lag: gauge!(TX_PACING_LAG, base(q)),
            target: gauge!(TX_TARGET, base(q)),
            exchange: exchange.then(|| {
                let l = with(base(q), "protocol", PROTOCOL);
                [RR_TRANSACTIONS, RR_TIMEOUTS, RR_UNMATCHED].map(|name| counter!(name, l.clone()))
            }),
        }
    }

    fn flush(&self) {
        for (h, shared) in self.flows.iter().zip(&self.shared.flows) {
            let f: TxFlow = shared.load();
            h.packets.absolute(f.packets);
            h.bytes.absolute(f.bytes);
            for (c, v) in h.errors.iter().zip(f.errors) {
                c.absolute(v);
            }
        }
        let w = self.shared.worker.load();
        self.ring.flush(&w);
        self.lag.set(w.pacing_lag_ns as f64 / 1e9);
        if w.target_milli_pps > 0 {
            // A paced queue's target follows its schedule.
            self.target.set(w.target_milli_pps as f64 / 1000.0);
        }
        if let Some([transactions, timeouts, unmatched]) = &self.exchange {
            let e = self.shared.exchange.load();
            transactions.absolute(e.transactions);
            timeouts.absolute(e.timeouts);
            unmatched.absolute(e.unmatched);
        }
    }
}

struct RxFlowHandles {
    packets: Counter,
    bytes: Counter,
    lost: Counter,
    reordered: Counter,
    duplicates: Counter,
}

/// One sink queue's handles.
pub(crate) struct RxWorker {
    shared: Arc<SinkShared>,
    /// Flow ids below this get their own series; the rest are summed into `flow="other"`.
    exported_flows: usize,
    flows: Vec<RxFlowHandles>,
    invalid: [Counter; INVALID_LABELS.len()],
    kernel_drops: Counter,
    buffer_ring_empty: Counter,
    /// Requests answered and left unanswered.
    answers: [Counter; 2],
    buffers_circulating: Gauge,
    errors: [Counter; ERRNO_CLASSES],
    last_packet: Gauge,
    latency: Histogram,
    latency_unknown: Counter,
    seen_cells: [u64; LATENCY_CELLS],
    seen_sums: [u64; LATENCY_CELLS],
    ring: RingHandles,
}

impl RxWorker {
    /// Registers every series of a sink queue: flows `0..exported_flows` and `other`.
    pub(crate) fn register(
        q: &QueueView,
        exported_flows: usize,
        shared: Arc<SinkShared>,
    ) -> RxWorker {
        let names: Vec<String> = (0..exported_flows)
            .map(|f| f.to_string())
            .chain(["other".into()])
            .collect();
        let flows = names
            .iter()
            .map(|f| {
                let t = traffic(q, f);
                let l = with(base(q), "flow", f.clone());
                RxFlowHandles {
                    packets: counter!(RX_PACKETS, t.clone()),
                    bytes: counter!(RX_BYTES, t),
                    lost: counter!(RX_LOST, l.clone()),
                    reordered: counter!(RX_REORDERED, l.clone()),
                    duplicates: counter!(RX_DUPLICATES, l),
                }
            })
            .collect();
        let errno_base = with(base(q), "protocol", PROTOCOL);
        gauge!(
            WORKER_INFO,
            with(with(base(q), "role", "sink"), "cpu", q.cpu.to_string())
        )
        .set(1.0);
        RxWorker {
            exported_flows,
            flows,
            invalid: std::array::from_fn(|i| {
                counter!(RX_INVALID, with(base(q), "reason", INVALID_LABELS[i]))
            }),
            kernel_drops: counter!(RX_KERNEL_DROPS, base(q)),
            buffer_ring_empty: counter!(RX_BUFFER_RING_EMPTY, base(q)),
            answers: ["sent", "unanswered"]
                .map(|r| counter!(RX_ANSWERS, with(base(q), "result", r))),
            buffers_circulating: gauge!(RX_BUFFERS_CIRCULATING, base(q)),
            errors: std::array::from_fn(|i| {
                counter!(
                    RX_ERRORS,
                    with(errno_base.clone(), "errno", ERRNO_LABELS[i])
                )
            }),
            last_packet: gauge!(RX_LAST_PACKET, base(q)),
            latency: histogram!(RX_LATENCY, base(q)),
            latency_unknown: counter!(RX_LATENCY_UNKNOWN, errno_base.clone()),
            seen_cells: [0; LATENCY_CELLS],
            seen_sums: [0; LATENCY_CELLS],
            ring: RingHandles::register("sink", q),
            shared,
        }
    }

    fn flush(&mut self) {
        let mut other = RxFlow::default();
        for (i, shared) in self.shared.flows.iter().enumerate() {
            let f = shared.load();
            if i < self.exported_flows {
                set_rx_flow(&self.flows[i], &f);
            } else {
                other.add(&f);
            }
        }
        if let Some(h) = self.flows.last() {
            set_rx_flow(h, &other);
        }
        let w = self.shared.worker.load();
        for (c, v) in self.invalid.iter().zip(w.invalid) {
            c.absolute(v);
        }
        for (c, v) in self.errors.iter().zip(w.rx_errors) {
            c.absolute(v);
        }
        self.kernel_drops.absolute(w.kernel_drops);
        self.buffer_ring_empty.absolute(w.buffer_ring_empty);
        self.answers[0].absolute(w.answered);
        self.answers[1].absolute(w.unanswered);
        self.buffers_circulating.set(w.buffers_circulating as f64);
        self.last_packet.set(w.last_packet_unix_ns as f64 / 1e9);
        self.latency_unknown.absolute(w.latency_unknown);
        // Each cell's new observations are recorded at their mean, which lies inside the cell's
        // bucket: bucket counts stay exact and the sum is exact up to float rounding.
        for cell in 0..LATENCY_CELLS {
            let count = w.latency_cells[cell] - self.seen_cells[cell];
            let sum = w.latency_sum_ns[cell] - self.seen_sums[cell];
            if count > 0 {
                self.latency
                    .record_many(sum as f64 / count as f64 / 1e9, count as usize);
            }
        }
        self.seen_cells = w.latency_cells;
        self.seen_sums = w.latency_sum_ns;
        self.ring.flush(&w);
    }
}

fn set_rx_flow(h: &RxFlowHandles, f: &RxFlow) {
    h.packets.absolute(f.packets);
    h.bytes.absolute(f.bytes);
    h.lost.absolute(f.lost);
    h.reordered.absolute(f.reordered);
    h.duplicates.absolute(f.duplicates);
}

/// All handles of a run.
pub(crate) struct Handles {
    /// Sender queues.
    pub(crate) tx: Vec<TxWorker>,
    /// Sink queues.
    pub(crate) rx: Vec<RxWorker>,
    /// The sink's per-sender series.
    pub(crate) senders: Option<super::senders::SenderSeries<crate::sink::registry::Registry>>,
    /// The sender's rate schedule series.
    pub(crate) steps: Option<super::steps::StepSeries>,
    /// The sender's and the sink's size classes.
    pub(crate) sizes: (
        Option<super::sizes::TxSizeSeries>,
        Option<super::sizes::RxSizeSeries>,
    ),
}

impl super::Series for Handles {
    /// Copies every worker's published counters into the exporter.
    fn flush(&mut self) {
        for w in &self.tx {
            w.flush();
        }
        for w in &mut self.rx {
            w.flush();
        }
        if let Some(s) = self.senders.as_mut() {
            s.flush();
        }
        if let Some(s) = &self.steps {
            s.flush();
        }
        if let Some(s) = &self.sizes.0 {
            s.flush();
        }
        if let Some(s) = self.sizes.1.as_mut() {
            s.flush();
        }
    }
}
