//! Prometheus series of TCP runs, all with `protocol="tcp"`: per sender queue bytes, records,
//! delivered records, connects, connect failures, resets, open connections, rr transactions and
//! RTT quantiles, and TCP_INFO (largest srtt, summed cwnd, retransmits) as the reporter last
//! sampled it; per sink queue bytes, records, invalid by reason, accepts, resets, open
//! connections and records without a latency sample (no clock estimate); and context switches of the process and the machine. Registered before the
//! workers start and flushed by the reporter thread from what the workers publish.

use std::sync::Arc;

use metrics::{Counter, Gauge, Label, counter, gauge};

use super::names::*;
use crate::{
    metrics::ctx::CtxSample,
    report::QueueView,
    sender::{
        rtt::quantile,
        tcp::{TcpSendShared, TxCounter, info::QueueInfo},
    },
    sink::tcp::{RxCounter, TcpSinkShared},
};

const QUANTILES: [(f64, &str); 4] = [(0.5, "0.5"), (0.99, "0.99"), (0.999, "0.999"), (1.0, "1")];
const INVALID: [(RxCounter, &str); 6] = [
    (RxCounter::InvalidSequence, "sequence"),
    (RxCounter::InvalidMagic, "magic"),
    (RxCounter::InvalidVersion, "version"),
    (RxCounter::InvalidLength, "length"),
    (RxCounter::InvalidTruncated, "truncated"),
    (RxCounter::InvalidDepth, "depth"),
];

fn labels(q: &QueueView) -> Vec<Label> {
    vec![
        Label::new("node", q.node.to_string()),
        Label::new("queue", q.queue.to_string()),
        Label::new("protocol", "tcp"),
    ]
}

struct TxQueue {
    shared: Arc<TcpSendShared>,
    counters: Vec<(TxCounter, Counter)>,
    conns: Gauge,
    rtt: Vec<(f64, Gauge)>,
    /// TCP_INFO: largest srtt, summed cwnd, retransmits.
    srtt: Gauge,
    cwnd: Gauge,
    retransmits: Counter,
}

struct RxQueue {
    shared: Arc<TcpSinkShared>,
    counters: Vec<(RxCounter, Counter)>,
    conns: Gauge,
}

/// Every TCP series of a run.
pub(crate) struct TcpHandles {
    tx: Vec<TxQueue>,
    rx: Vec<RxQueue>,
    ctx_start: CtxSample,
    ctx: [Counter; 2],
}

impl TcpHandles {
    /// Registers every series (at 0) for these queues.
    pub(crate) fn register(
        tx: &[(QueueView, Arc<TcpSendShared>)],
        rx: &[(QueueView, Arc<TcpSinkShared>)],
        ctx_start: CtxSample,
    ) -> TcpHandles {
        for role in tx
            .first()
            .map(|_| "send")
            .into_iter()
            .chain(rx.first().map(|_| "sink"))
        {
            gauge!(RUN_INFO, "role" => role, "protocol" => "tcp").set(1.0);
        }
        gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        let tx = tx
            .iter()
            .map(|(q, shared)| {
                let l = labels(q);
                let c = |name: &'static str, k: TxCounter| (k, counter!(name, l.clone()));
                TxQueue {
                    shared: shared.clone(),
                    counters: vec![
                        c(TCP_TX_BYTES, TxCounter::Bytes),
                        c(TCP_TX_RECORDS, TxCounter::Records),
                        c(TCP_DELIVERED_RECORDS, TxCounter::DeliveredRecords),
                        c(TCP_CONNECTS, TxCounter::Connects),
                        c(TCP_CONNECT_FAILURES, TxCounter::ConnectFailures),
                        c(TCP_TX_RESETS, TxCounter::Resets),
                        c(RR_TRANSACTIONS, TxCounter::Transactions),
                    ],
                    conns: gauge!(TCP_TX_CONNS_OPEN, l.clone()),
                    srtt: gauge!(TCP_SRTT, l.clone()),
                    cwnd: gauge!(TCP_CWND, l.clone()),
                    retransmits: counter!(TCP_RETRANSMITS, l.clone()),
                    rtt: QUANTILES
                        .iter()
                        .map(|(x, name)| {
                            let mut l = l.clone();
                            l.push(Label::new("quantile", *name));
                            (*x, gauge!(RR_RTT, l))
                        })
                        .collect(),
                }
            })
            .collect();
        let rx = rx
            .iter()
            .map(|(q, shared)| {
                let l = labels(q);
                let mut counters = vec![
                    (RxCounter::Bytes, counter!(TCP_RX_BYTES, l.clone())),
                    (RxCounter::Records, counter!(TCP_RX_RECORDS, l.clone())),
                    (RxCounter::Accepts, counter!(TCP_ACCEPTS, l.clone())),
                    (RxCounter::Resets, counter!(TCP_RX_RESETS, l.clone())),
                    (
                        RxCounter::LatencyUnknown,
                        counter!(RX_LATENCY_UNKNOWN, l.clone()),
                    ),
                ];
                for (k, reason) in INVALID {
                    let mut l = l.clone();
                    l.push(Label::new("reason", reason));
                    counters.push((k, counter!(TCP_RX_INVALID, l)));
                }
                RxQueue {
                    shared: shared.clone(),
                    counters,
                    conns: gauge!(TCP_RX_CONNS_OPEN, l.clone()),
                }
            })
            .collect();
        TcpHandles {
            tx,
            rx,
            ctx_start,
            ctx: [
                counter!(CTX_SWITCHES, "scope" => "process"),
                counter!(CTX_SWITCHES, "scope" => "machine"),
            ],
        }
    }

    /// Sets the TCP_INFO series from the reporter's last sample (one entry per sender queue).
    pub(crate) fn flush_info(&self, infos: &[QueueInfo]) {
        for (q, info) in self.tx.iter().zip(infos) {
            q.srtt.set(info.srtt_us_max as f64 / 1e6);
            q.cwnd.set(info.cwnd_segments as f64);
            q.retransmits.absolute(info.retransmits);
        }
    }

    /// Copies the published counters into the series (reporter thread).
    pub(crate) fn flush(&self, ctx_now: &CtxSample) {
        for q in &self.tx {
            let c = q.shared.counters.load();
            for (k, h) in &q.counters {
                h.absolute(c.get(*k));
            }
            q.conns.set(c.get(TxCounter::ConnsUp) as f64);
            let rtt = q.shared.rtt.load();
            for (x, g) in &q.rtt {
                g.set(quantile(&rtt, *x) as f64 / 1e9);
            }
        }
        for q in &self.rx {
            let c = q.shared.counters.load();
            for (k, h) in &q.counters {
                h.absolute(c.get(*k));
            }
            q.conns.set(c.get(RxCounter::ConnsOpen) as f64);
        }
        let (process, machine) = crate::metrics::ctx::delta(&self.ctx_start, ctx_now);
        for (h, v) in self.ctx.iter().zip([process, machine]) {
            if let Some(v) = v {
                h.absolute(v);
            }
        }
    }
}
