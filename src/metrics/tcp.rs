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
        tcp::{TcpSendShared, TxCounters, info::QueueInfo},
    },
    sink::tcp::{RxCounters, TcpSinkShared},
};

const QUANTILES: [(f64, &str); 4] = [(0.5, "0.5"), (0.99, "0.99"), (0.999, "0.999"), (1.0, "1")];
/// Which of a sender queue's counters a series shows.
type TxField = fn(&TxCounters) -> u64;
/// Which of a sink queue's counters a series shows.
type RxField = fn(&RxCounters) -> u64;

const INVALID: [(RxField, &str); 7] = [
    (|c| c.invalid_sequence, "sequence"),
    (|c| c.invalid_magic, "magic"),
    (|c| c.invalid_version, "version"),
    (|c| c.invalid_length, "length"),
    (|c| c.invalid_truncated, "truncated"),
    (|c| c.invalid_depth, "depth"),
    (|c| c.invalid_auth, "auth"),
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
    counters: Vec<(TxField, Counter)>,
    conns: Gauge,
    rtt: Vec<(f64, Gauge)>,
    /// TCP_INFO: largest srtt, summed cwnd, retransmits.
    srtt: Gauge,
    cwnd: Gauge,
    retransmits: Counter,
}

struct RxQueue {
    shared: Arc<TcpSinkShared>,
    counters: Vec<(RxField, Counter)>,
    conns: Gauge,
}

/// Every TCP series of a run, with the reporter's last TCP_INFO sample per sender queue and the
/// per-sender series of a sink: what [`super::Exporter`] flushes for a TCP run.
pub(crate) struct TcpHandles {
    tx: Vec<TxQueue>,
    rx: Vec<RxQueue>,
    ctx_start: CtxSample,
    ctx: [Counter; 2],
    /// A sink's per-sender series.
    pub(crate) senders: Option<super::senders::SenderSeries<crate::sink::tcp::books::TcpBooks>>,
    /// The reporter's last TCP_INFO sample, one entry per sender queue.
    pub(crate) info: Vec<QueueInfo>,
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
                let c = |name: &'static str, k: TxField| (k, counter!(name, l.clone()));
                TxQueue {
                    shared: shared.clone(),
                    counters: vec![
                        c(TCP_TX_BYTES, |c| c.tx_bytes),
                        c(TCP_TX_RECORDS, |c| c.tx_records),
                        c(TCP_DELIVERED_RECORDS, |c| c.delivered_records),
                        c(TCP_CONNECTS, |c| c.connects),
                        c(TCP_CONNECT_FAILURES, |c| c.connect_failures),
                        c(TCP_TX_RESETS, |c| c.resets),
                        c(RR_TRANSACTIONS, |c| c.transactions),
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
                let mut counters: Vec<(RxField, Counter)> = vec![
                    (|c| c.rx_bytes, counter!(TCP_RX_BYTES, l.clone())),
                    (|c| c.rx_records, counter!(TCP_RX_RECORDS, l.clone())),
                    (|c| c.accepts, counter!(TCP_ACCEPTS, l.clone())),
                    (|c| c.resets, counter!(TCP_RX_RESETS, l.clone())),
                    (
                        |c| c.latency_unknown,
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
            senders: None,
            info: Vec::new(),
        }
    }
}

impl super::Series for TcpHandles {
    /// Copies the published counters, the last TCP_INFO sample and the per-sender books into
    /// the series (reporter thread).
    fn flush(&mut self) {
        for (q, info) in self.tx.iter().zip(&self.info) {
            q.srtt.set(info.srtt_us_max as f64 / 1e6);
            q.cwnd.set(info.cwnd_segments as f64);
            q.retransmits.absolute(info.retransmits);
        }
        for q in &self.tx {
            let c = q.shared.counters.load();
            for (field, h) in &q.counters {
                h.absolute(field(&c));
            }
            q.conns.set(c.conns_up as f64);
            for (x, g) in &q.rtt {
                g.set(quantile(&c.rtt_cells, *x) as f64 / 1e9);
            }
        }
        for q in &self.rx {
            let c = q.shared.counters.load();
            for (field, h) in &q.counters {
                h.absolute(field(&c));
            }
            q.conns.set(c.conns_open as f64);
        }
        let (process, machine) =
            crate::metrics::ctx::delta(&self.ctx_start, &crate::metrics::ctx::sample());
        for (h, v) in self.ctx.iter().zip([process, machine]) {
            if let Some(v) = v {
                h.absolute(v);
            }
        }
        if let Some(senders) = self.senders.as_mut() {
            senders.flush();
        }
    }
}
