//! The Prometheus exporter: installed from `main` before any worker starts (it runs its own
//! HTTP thread, never on a data-path thread), with every series registered at 0 up front, the
//! cardinality checked at start-up, and counters flushed from the workers' published blocks at
//! least every 20 ms and once more after the workers stop, before the summary is printed.
//! The endpoint (`http`) serves the families and series in a stable, sorted order.

pub(crate) mod ctx;
pub(crate) mod exposition;
pub(crate) mod handles;
pub(crate) mod http;
pub(crate) mod names;
pub(crate) mod senders;
pub(crate) mod sizes;
pub(crate) mod steps;
pub(crate) mod tcp;

use std::net::SocketAddr;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

use self::names::{Kind, latency_buckets};
use crate::{
    clock,
    error::Error,
    mem::{HugePages, MemoryPlacement},
    report::QueueView,
    stats::{ERRNO_CLASSES, INVALID_LABELS},
};

/// `result` label values of `ringblast_rx_control_connections_total`.
pub(crate) const CONTROL_RESULTS: [&str; 10] = [
    "accepted",
    "authenticated",
    "auth_failed",
    "protocol_error",
    "timeout",
    "busy",
    "bad_mac",
    "replayed",
    "out_of_order",
    "truncated",
];

/// How often counters are copied into the exporter (every reporter tick): a scrape sees values
/// at most this old, which keeps `rate()` over a few seconds within a fraction of a percent.
pub(crate) const FLUSH_EVERY_NS: u64 = 20_000_000;
/// How often process metrics are collected.
const PROCESS_EVERY_NS: u64 = 1_000_000_000;
/// Latency histogram series per sink queue: buckets, `+Inf`, `_sum`, `_count`.
const LATENCY_SERIES: usize = crate::stats::LATENCY_BOUNDS_NS.len() + 3;

/// Starts the HTTP listener on `addr` and installs the global recorder.
pub(crate) fn install(addr: SocketAddr) -> Result<(), Error> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        Error::Unsupported(format!(
            "cannot serve metrics on {addr}: {e}; pick a free port with --metrics ADDR:PORT"
        ))
    })?;
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(names::RX_LATENCY.into()), &latency_buckets())
        .map_err(|e| Error::Usage(format!("latency buckets: {e}")))?
        .set_buckets_for_metric(
            Matcher::Full(names::RX_SENDER_LATENCY.into()),
            &latency_buckets(),
        )
        .map_err(|e| Error::Usage(format!("latency buckets: {e}")))?
        .set_buckets_for_metric(
            Matcher::Full(names::RX_SENDER_JITTER.into()),
            &latency_buckets(),
        )
        .map_err(|e| Error::Usage(format!("jitter buckets: {e}")))?
        .install_recorder()
        .map_err(|e| Error::Unsupported(format!("cannot start the metrics exporter: {e}")))?;
    http::spawn(listener, handle).map_err(|e| Error::io("starting the metrics threads", e))?;
    for m in names::ALL {
        match m.kind {
            Kind::Counter if m.name.ends_with("_bytes_total") => {
                describe_counter!(m.name, Unit::Bytes, m.help)
            }
            Kind::Counter => describe_counter!(m.name, m.help),
            Kind::Gauge if m.name.ends_with("_bytes") => {
                describe_gauge!(m.name, Unit::Bytes, m.help)
            }
            Kind::Gauge if m.name.ends_with("_seconds") => {
                describe_gauge!(m.name, Unit::Seconds, m.help)
            }
            Kind::Gauge => describe_gauge!(m.name, m.help),
            Kind::Histogram => describe_histogram!(m.name, Unit::Seconds, m.help),
        }
    }
    Ok(())
}

/// The shape of a run, for the series count.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shape {
    /// Flows per sender queue.
    pub(crate) tx_flows_per_queue: Vec<usize>,
    /// Sink queues.
    pub(crate) rx_queues: usize,
    /// Flows with their own series per sink queue (plus one `other`).
    pub(crate) rx_exported_flows: usize,
    /// Distinct NUMA nodes.
    pub(crate) nodes: usize,
    /// Senders a sink gives their own series (`--max-senders`, plus `other`); 0 for a sender.
    pub(crate) rx_senders: usize,
    /// Online NUMA nodes: a queue's packet memory has a page series per node it has pages on.
    pub(crate) memory_nodes: usize,
}

/// Series this run exports, process metrics excluded.
pub(crate) fn series_count(shape: &Shape) -> usize {
    let ring = 6;
    let tx: usize = shape
        .tx_flows_per_queue
        .iter()
        .map(|flows| flows * (2 + ERRNO_CLASSES) + ring + 3)
        .sum();
    // The sender's control round trip.
    let tx_control = usize::from(!shape.tx_flows_per_queue.is_empty());
    // Schedule step, steps, step results and step verdicts.
    let schedule = if shape.tx_flows_per_queue.is_empty() {
        0
    } else {
        2 + steps::STEP_RESULTS.len() + 2 + 2 * crate::sender::mix::MAX_CLASSES
    };
    let rx_per_queue = (shape.rx_exported_flows + 1) * 5
        + INVALID_LABELS.len()
        + 3
        + ERRNO_CLASSES
        + LATENCY_SERIES
        + ring
        + 2;
    // Counters and gauges, then the latency and jitter histograms.
    let per_sender = 13 + 2 * LATENCY_SERIES;
    // The sink's size classes and `other`, packets and bytes.
    let rx_sizes = if shape.rx_queues > 0 {
        2 * (crate::sink::sizes::CLASSES + 1)
    } else {
        0
    };
    let control = if shape.rx_queues > 0 {
        CONTROL_RESULTS.len()
    } else {
        2
    };
    // Per queue of either role: bound node, hugepages, and resident pages per node.
    let memory = (shape.tx_flows_per_queue.len() + shape.rx_queues) * (2 + shape.memory_nodes);
    tx + tx_control
        + schedule
        + memory
        + rx_sizes
        + shape.rx_queues * rx_per_queue
        + shape.rx_senders * per_sender
        + control
        + shape.nodes
        + 3
}

/// Refuses a run whose series count is above `limit`, naming the product that drives it.
pub(crate) fn check_cardinality(shape: &Shape, limit: usize) -> Result<usize, Error> {
    let n = series_count(shape);
    if n > limit {
        let flows: usize = shape.tx_flows_per_queue.iter().sum();
        return Err(Error::Usage(format!(
            "the exporter would publish {n} series ({} sender queues × {flows} flows, {} sink queues × {} exported flows), above --max-series {limit}; lower --flows or --metrics-flows, or raise --max-series",
            shape.tx_flows_per_queue.len(),
            shape.rx_queues,
            shape.rx_exported_flows
        )));
    }
    Ok(n)
}

/// Sets the info gauges and the registered memory per node.
pub(crate) fn set_info(roles: &[&str], registered_bytes_by_node: &[(u32, u64)]) {
    gauge!(names::BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for role in roles {
        gauge!(names::RUN_INFO, "role" => role.to_string(), "protocol" => "udp").set(1.0);
    }
    for (node, bytes) in registered_bytes_by_node {
        gauge!(names::REGISTERED_BYTES, "node" => node.to_string()).set(*bytes as f64);
    }
}

/// Copies the control server's counters into `ringblast_rx_control_connections_total`.
pub(crate) fn set_control_connections(stats: &crate::control::server::ServerStats) {
    use std::sync::atomic::Ordering::Relaxed;
    for (result, value) in [
        ("accepted", &stats.accepted),
        ("authenticated", &stats.authenticated),
        ("auth_failed", &stats.auth_failed),
        ("protocol_error", &stats.protocol_errors),
        ("timeout", &stats.timeouts),
        ("busy", &stats.rejected_busy),
        ("evicted", &stats.evicted),
        ("bad_mac", &stats.bad_mac),
        ("replayed", &stats.replayed),
        ("out_of_order", &stats.out_of_order),
        ("truncated", &stats.truncated),
    ] {
        metrics::counter!(names::RX_CONTROL_CONNECTIONS, "result" => result)
            .absolute(value.load(Relaxed));
    }
}

/// Sets the packet memory gauges of `role`'s queues once, from what each measured at set-up:
/// the bound node, whether hugepages back it, and its resident pages per node (none when they
/// could not be counted: unknown is no number).
pub(crate) fn set_memory(role: &str, queues: &[QueueView], memory: &[MemoryPlacement]) {
    // The bound node goes last: a scrape that shows it shows the queue's other gauges set (a
    // gauge reads 0 between its registration and its first set).
    for (q, m) in queues.iter().zip(memory) {
        let (role, queue) = (role.to_string(), q.queue.to_string());
        for (node, pages) in m.pages.iter().flat_map(|p| &p.by_node) {
            gauge!(names::QUEUE_MEMORY_PAGES, "role" => role.clone(), "queue" => queue.clone(),
                "node" => node.to_string())
            .set(*pages as f64);
        }
        let huge = f64::from(u8::from(m.hugepages == HugePages::Used));
        gauge!(names::QUEUE_MEMORY_HUGEPAGES, "role" => role.clone(), "queue" => queue.clone())
            .set(huge);
        gauge!(names::QUEUE_MEMORY_BOUND_NODE, "role" => role.clone(), "queue" => queue.clone())
            .set(f64::from(m.bound_node));
    }
}

/// A run's registered series, set from what its workers publish: UDP's [`handles::Handles`]
/// or TCP's [`tcp::TcpHandles`].
pub(crate) trait Series {
    /// Copies the published values into the series (reporter thread).
    fn flush(&mut self);
}

/// The live exporter side of a run, for both protocols: its series plus the one flush cadence
/// (every 20 ms, and once more at the end) and the process metrics (every second).
pub(crate) struct Exporter<S: Series> {
    series: S,
    process: metrics_process::Collector,
    last_flush: u64,
    last_process: u64,
}

impl<S: Series> Exporter<S> {
    /// Wraps registered series; collects process metrics too.
    pub(crate) fn new(series: S) -> Exporter<S> {
        let process = metrics_process::Collector::default();
        process.describe();
        process.collect();
        let mut exporter = Exporter {
            series,
            process,
            last_flush: 0,
            last_process: clock::monotonic_ns(),
        };
        exporter.series.flush();
        exporter
    }

    /// The series, for what the reporter samples itself (TCP_INFO).
    pub(crate) fn series_mut(&mut self) -> &mut S {
        &mut self.series
    }

    /// Flushes when 20 ms have passed, or always when `force` (the final flush).
    pub(crate) fn tick(&mut self, force: bool) {
        let now = clock::monotonic_ns();
        if force || now - self.last_flush >= FLUSH_EVERY_NS {
            self.series.flush();
            self.last_flush = now;
        }
        if force || now - self.last_process >= PROCESS_EVERY_NS {
            self.process.collect();
            self.last_process = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cardinality_is_refused_above_the_limit_with_the_product_named() {
        let shape = Shape {
            tx_flows_per_queue: vec![4, 4],
            rx_queues: 2,
            rx_exported_flows: 16,
            nodes: 1,
            rx_senders: 65,
            memory_nodes: 1,
        };
        let n = check_cardinality(&shape, 10_000).unwrap();
        // Counted by hand from the series each part publishes (a histogram is its 19 bounds,
        // +Inf, _sum and _count: 22 series):
        let tx = 2 * (4 * (2 + 7) + 6 + 3); // per queue: flows × (packets, bytes, 7 errno), ring 6, 3
        let tx_control = 1;
        let schedule = 2 + 6 + 2 + 2 * 8; // step, steps, 6 step results, 2 verdicts, 8 classes × 2
        let memory = (2 + 2) * (2 + 1); // 4 queues × (node, hugepages, pages on 1 node)
        let rx_sizes = 2 * (8 + 1); // 8 size classes and `other`, packets and bytes
        let rx = 2 * ((16 + 1) * 5 + 9 + 3 + 7 + 22 + 6 + 2); // per sink queue
        let senders = 65 * (13 + 2 * 22); // 13 series, a latency and a jitter histogram
        let control = 10; // CONTROL_RESULTS
        let nodes_and_info = 1 + 3;
        assert_eq!(
            n,
            tx + tx_control
                + schedule
                + memory
                + rx_sizes
                + rx
                + senders
                + control
                + nodes_and_info,
            "4134 series"
        );
        assert_eq!(n, 4134);
        let err = check_cardinality(&shape, 10).unwrap_err().to_string();
        assert!(err.contains("2 sender queues × 8 flows"), "{err}");
        assert!(err.contains("--max-series 10"), "{err}");
    }
}
