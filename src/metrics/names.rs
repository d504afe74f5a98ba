//! Every metric name ringblast exports, in one place, with its help text, unit and the labels it
//! carries. Names follow Prometheus conventions: one `ringblast_` prefix, base units (bytes,
//! seconds), `_total` on counters, direction (`tx_`/`rx_`) in the name, never in a label (a
//! worker's ring and packet memory, alike in both roles, carry the role as a label instead).

/// How a metric is exposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A monotonic counter.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A histogram with explicit buckets.
    Histogram,
}

impl Kind {
    /// The type as docs/metrics.md names it.
    #[cfg(test)]
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One exported metric.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Metric {
    /// Full name as scraped.
    pub(crate) name: &'static str,
    /// Counter, gauge or histogram.
    pub(crate) kind: Kind,
    /// Label names, in order (checked against docs/metrics.md).
    #[cfg(test)]
    pub(crate) labels: &'static str,
    /// HELP text.
    pub(crate) help: &'static str,
}

macro_rules! metrics {
    ($($ident:ident = $name:literal, $kind:ident, $labels:literal, $help:literal;)*) => {
        $(#[doc = $help] pub(crate) const $ident: &str = $name;)*
        /// Every metric, for `describe` and the table in docs/metrics.md.
        pub(crate) const ALL: &[Metric] = &[$(Metric { name: $name, kind: Kind::$kind, #[cfg(test)] labels: $labels, help: $help }),*];
    };
}

metrics! {
    TX_PACKETS = "ringblast_tx_packets_total", Counter, "node,queue,flow,protocol", "Packets (datagrams or GSO segments) the kernel accepted for sending.";
    TX_BYTES = "ringblast_tx_bytes_total", Counter, "node,queue,flow,protocol", "UDP payload bytes the kernel accepted for sending.";
    TX_ERRORS = "ringblast_tx_errors_total", Counter, "node,queue,flow,protocol,errno", "Packets whose send completed with an error, by errno.";
    TX_TARGET = "ringblast_tx_target_packets_per_second", Gauge, "node,queue", "Configured pacing target of the queue in packets per second (0 = unpaced).";
    TX_PACING_LAG = "ringblast_tx_pacing_lag_seconds", Gauge, "node,queue", "How far the queue is behind its pacing schedule.";
    TX_SIZE_PACKETS = "ringblast_tx_size_packets_total", Counter, "payload", "Packets the kernel accepted for sending, by the size class of the mix (UDP payload bytes).";
    TX_SIZE_BYTES = "ringblast_tx_size_bytes_total", Counter, "payload", "UDP payload bytes the kernel accepted for sending, by size class.";
    RX_SIZE_PACKETS = "ringblast_rx_size_packets_total", Counter, "payload", "Valid packets the sink received, by its size classes (exact UDP payload lengths, its first 8; the rest as payload=\"other\").";
    RX_SIZE_BYTES = "ringblast_rx_size_bytes_total", Counter, "payload", "UDP payload bytes of valid packets the sink received, by its size classes.";
    TX_SCHEDULE_STEP = "ringblast_tx_schedule_step", Gauge, "", "The step of the rate schedule the sender is in, from 1 (a constant rate is a one-step schedule).";
    TX_SCHEDULE_STEPS = "ringblast_tx_schedule_steps", Gauge, "", "Steps in the sender's rate schedule (--rate-steps steps, seconds of a --ramp; 1 for a constant rate; a search's trials so far).";
    TX_STEP_PACKETS = "ringblast_tx_step_packets_total", Counter, "result", "Packets of the schedule steps the sink has judged, by result: sent (accepted by the kernel), received, lost, kernel_drops, duplicates, send_failed; a step adds once its verdict arrives.";
    TX_STEPS = "ringblast_tx_steps_total", Counter, "verdict", "Schedule steps ended, by whether the sink judged them (judged) or gave no complete verdict (unknown).";
    RX_PACKETS = "ringblast_rx_packets_total", Counter, "node,queue,flow,protocol", "Valid ringblast packets received (GRO segments counted one by one).";
    RX_BYTES = "ringblast_rx_bytes_total", Counter, "node,queue,flow,protocol", "UDP payload bytes of valid packets received.";
    RX_ERRORS = "ringblast_rx_errors_total", Counter, "node,queue,protocol,errno", "Receive completions that failed, by errno.";
    RX_LOST = "ringblast_rx_lost_packets_total", Counter, "node,queue,flow", "Sequence numbers never received and not explained by kernel drops.";
    RX_REORDERED = "ringblast_rx_reordered_packets_total", Counter, "node,queue,flow", "Packets that arrived after a higher sequence number (never counted as lost).";
    RX_DUPLICATES = "ringblast_rx_duplicate_packets_total", Counter, "node,queue,flow", "Extra copies of packets already received.";
    RX_INVALID = "ringblast_rx_invalid_packets_total", Counter, "node,queue,reason", "Datagrams not counted as received, by reason: not ringblast packets (short, magic, version), no session slot (flow_id, table_full, unannounced), or forged (source: not from its session's address; implausible: further ahead, or with more failed sends, than its sender could have sent).";
    RX_KERNEL_DROPS = "ringblast_rx_kernel_drops_total", Counter, "node,queue", "Datagrams the kernel dropped on the sink socket (SO_RXQ_OVFL).";
    RX_LAST_PACKET = "ringblast_rx_last_packet_timestamp_seconds", Gauge, "node,queue", "Unix time of the last valid packet (0 = none yet).";
    RX_LATENCY = "ringblast_rx_latency_seconds", Histogram, "node,queue", "One-way latency from the sender's timestamp, corrected by the sender's clock offset (offset-free samples only; packets without a clock estimate are in ringblast_rx_latency_unknown_packets_total).";
    RX_LATENCY_UNKNOWN = "ringblast_rx_latency_unknown_packets_total", Counter, "node,queue,protocol", "Valid packets (TCP: records) with a send timestamp that gave no latency sample: their sender has no clock estimate (no control channel, or none yet).";
    RX_BUFFER_RING_EMPTY = "ringblast_rx_buffer_ring_empty_total", Counter, "node,queue", "Multishot receives ended because the provided-buffer ring ran dry.";
    RX_BUFFERS_CIRCULATING = "ringblast_rx_buffers_circulating", Gauge, "node,queue", "Provided receive buffers the UDP sink keeps in circulation (about 4 MiB of received data; the rest are held back so the kernel's copies stay in cache).";
    RX_SENDER_PACKETS = "ringblast_rx_sender_packets_total", Counter, "sender", "Valid packets received from this sender (all its sessions).";
    RX_SENDER_BYTES = "ringblast_rx_sender_bytes_total", Counter, "sender", "UDP payload bytes of valid packets received from this sender.";
    RX_SENDER_LOST = "ringblast_rx_sender_lost_packets_total", Counter, "sender", "This sender's sequence numbers never received: not its failed sends, not kernel drops.";
    RX_SENDER_REORDERED = "ringblast_rx_sender_reordered_packets_total", Counter, "sender", "This sender's packets that arrived after a higher sequence number.";
    RX_SENDER_DUPLICATES = "ringblast_rx_sender_duplicate_packets_total", Counter, "sender", "Extra copies of this sender's packets.";
    RX_SENDER_KERNEL_DROPS = "ringblast_rx_sender_kernel_drops_total", Counter, "sender", "This sender's missing datagrams charged to the sink sockets' kernel drops.";
    RX_SENDER_UNCONFIRMED = "ringblast_rx_sender_unconfirmed_packets_total", Counter, "sender", "Sent after the last packet received by a sender that vanished without a goodbye: fate unknown.";
    RX_SENDER_SEND_FAILED = "ringblast_rx_sender_send_failed_packets_total", Counter, "sender", "Sequence numbers whose send failed at the sender (never counted as lost).";
    RX_SENDER_SESSIONS = "ringblast_rx_sender_sessions_total", Counter, "sender", "Sessions (sender runs, epochs) seen from this sender: a restart adds one.";
    RX_SENDER_ACTIVE = "ringblast_rx_sender_active_sessions", Gauge, "sender", "Sessions of this sender with packets still being counted.";
    RX_SENDER_LATENCY_UNKNOWN = "ringblast_rx_sender_latency_unknown_packets_total", Counter, "sender", "This sender's packets with a send timestamp that gave no latency sample (no clock estimate).";
    RX_SENDER_LATENCY = "ringblast_rx_sender_latency_seconds", Histogram, "sender", "This sender's one-way latency (UDP packets, TCP records), corrected by its clock offset, in the sink's latency cells (clock-corrected samples only; none while its clock is unknown).";
    RX_SENDER_JITTER = "ringblast_rx_sender_jitter_seconds", Histogram, "sender", "This sender's jitter: |D| of RFC 3550 section 6.4.1, the difference between the corrected transit times of two consecutive packets of one of its sessions, in arrival order (_sum / _count is the mean |D|; none while its clock is unknown).";
    RX_SENDER_CLOCK_OFFSET = "ringblast_rx_sender_clock_offset_seconds", Gauge, "sender", "The sink's clock minus this sender's (its latest run's): 0 on the same kernel, the control channel's estimate otherwise; NaN while unknown.";
    RX_SENDER_CLOCK_OFFSET_ERROR = "ringblast_rx_sender_clock_offset_error_seconds", Gauge, "sender", "Error bound of ringblast_rx_sender_clock_offset_seconds (half the control round trip, plus drift since); NaN while unknown.";
    RX_CONTROL_CONNECTIONS = "ringblast_rx_control_connections_total", Counter, "result", "Control connections to the sink, by outcome.";
    TX_CONTROL_CONNECTED = "ringblast_tx_control_connected", Gauge, "", "Whether the sender's control channel to the sink is up (1) or not (0).";
    TX_CONTROL_RECONNECTS = "ringblast_tx_control_reconnects_total", Counter, "", "Times the sender's control channel was rebuilt after it was lost.";
    TX_CONTROL_INTEGRITY = "ringblast_tx_control_integrity_failures_total", Counter, "reason", "Control connections the sender dropped because a frame from the sink failed its authentication (bad_mac), repeated (replayed) or skipped (out_of_order) a sequence number, or was cut short (truncated).";
    TX_CONTROL_RTT = "ringblast_tx_control_rtt_seconds", Gauge, "", "Smallest round trip of the sender's clock exchanges with the sink (absent until one completes).";
    RING_ENTER = "ringblast_ring_enter_calls_total", Counter, "role,node,queue", "io_uring_enter system calls.";
    RING_SQES = "ringblast_ring_sqes_submitted_total", Counter, "role,node,queue", "Submission queue entries submitted (average batch = SQEs / enter calls).";
    RING_CQES = "ringblast_ring_cqes_reaped_total", Counter, "role,node,queue", "Completion queue entries reaped.";
    RING_SQ_FULL = "ringblast_ring_sq_full_total", Counter, "role,node,queue", "Pushes that found the submission queue full.";
    RING_CQ_OVERFLOW = "ringblast_ring_cq_overflow_total", Counter, "role,node,queue", "Completions the kernel could not post because the completion queue was full.";
    RING_INFLIGHT = "ringblast_ring_inflight_ops", Gauge, "role,node,queue", "Operations submitted and not yet completed.";
    REGISTERED_BYTES = "ringblast_registered_buffer_bytes", Gauge, "node", "Packet memory registered with io_uring (fixed buffers and buffer rings), by NUMA node.";
    QUEUE_MEMORY_PAGES = "ringblast_queue_memory_pages", Gauge, "role,queue,node", "Resident pages of the queue's packet memory on each NUMA node, counted with move_pages once the queue is set up (pages not faulted in yet are not counted; no series when they could not be counted).";
    QUEUE_MEMORY_HUGEPAGES = "ringblast_queue_memory_hugepages", Gauge, "role,queue", "Whether 2 MiB hugepages back the queue's packet memory (1) or normal pages do (0, also when --hugepages fell back).";
    QUEUE_MEMORY_BOUND_NODE = "ringblast_queue_memory_bound_node", Gauge, "role,queue", "The NUMA node the queue's packet memory is bound to (mbind MPOL_BIND).";
    WORKER_INFO = "ringblast_worker_info", Gauge, "role,node,queue,cpu", "Placement of each worker (always 1).";
    RUN_INFO = "ringblast_run_info", Gauge, "role,protocol", "What this process runs (always 1).";
    TCP_TX_BYTES = "ringblast_tcp_tx_bytes_total", Counter, "node,queue,protocol", "Application bytes the kernel accepted on TCP connections.";
    TCP_TX_RECORDS = "ringblast_tcp_tx_records_total", Counter, "node,queue,protocol", "Records written completely on TCP connections.";
    TCP_DELIVERED_RECORDS = "ringblast_tcp_delivered_records_total", Counter, "node,queue,protocol", "Records the sink acknowledged having counted.";
    TCP_CONNECTS = "ringblast_tcp_connects_total", Counter, "node,queue,protocol", "TCP connections established by the sender.";
    TCP_CONNECT_FAILURES = "ringblast_tcp_connect_failures_total", Counter, "node,queue,protocol", "TCP connects that failed (refused, reset, unreachable).";
    TCP_TX_RESETS = "ringblast_tcp_tx_resets_total", Counter, "node,queue,protocol", "Sender's established TCP connections reset or broken by the peer.";
    TCP_TX_CONNS_OPEN = "ringblast_tcp_tx_connections_open", Gauge, "node,queue,protocol", "Sender's TCP connections up now.";
    TCP_RX_RESETS = "ringblast_tcp_rx_resets_total", Counter, "node,queue,protocol", "Sink's TCP connections that ended with an error (reset by the peer).";
    TCP_RX_CONNS_OPEN = "ringblast_tcp_rx_connections_open", Gauge, "node,queue,protocol", "Sink's TCP connections open now.";
    TCP_RX_BYTES = "ringblast_tcp_rx_bytes_total", Counter, "node,queue,protocol", "Bytes of complete, in-sequence records received.";
    TCP_RX_RECORDS = "ringblast_tcp_rx_records_total", Counter, "node,queue,protocol", "Complete, in-sequence records received.";
    TCP_RX_INVALID = "ringblast_tcp_rx_invalid_total", Counter, "node,queue,protocol,reason", "Invalid records or streams, by reason (sequence, magic, version, length, truncated, depth).";
    TCP_ACCEPTS = "ringblast_tcp_accepts_total", Counter, "node,queue,protocol", "TCP data connections the sink accepted (control connections on the same port are not counted).";
    TCP_SRTT = "ringblast_tcp_srtt_seconds", Gauge, "node,queue,protocol", "Largest smoothed RTT (TCP_INFO) among the sender queue's connections, as last sampled by the reporter.";
    TCP_CWND = "ringblast_tcp_cwnd_segments", Gauge, "node,queue,protocol", "Sum of the congestion windows (TCP_INFO) of the sender queue's connections, in segments.";
    TCP_RETRANSMITS = "ringblast_tcp_retransmits_total", Counter, "node,queue,protocol", "Segments the sender queue's connections retransmitted (TCP_INFO total_retrans: the open connections' as last sampled, and each closed connection's final count).";
    TCP_RX_SENDER_RECORDS = "ringblast_tcp_rx_sender_records_total", Counter, "sender,protocol", "Complete, in-sequence records received from this sender (all its runs).";
    TCP_RX_SENDER_BYTES = "ringblast_tcp_rx_sender_bytes_total", Counter, "sender,protocol", "Bytes of those records.";
    TCP_RX_SENDER_INVALID = "ringblast_tcp_rx_sender_invalid_total", Counter, "sender,protocol", "Invalid events on this sender's connections (sequence, lost framing, depth).";
    TCP_RX_SENDER_CONNS_OPEN = "ringblast_tcp_rx_sender_connections_open", Gauge, "sender,protocol", "This sender's TCP connections open at the sink now.";
    RR_TRANSACTIONS = "ringblast_rr_transactions_total", Counter, "node,queue,protocol", "Request/response round trips completed (UDP: a response matched in time; TCP: one in order).";
    RR_TIMEOUTS = "ringblast_rr_timeouts_total", Counter, "node,queue,protocol", "UDP requests whose response did not come within --response-timeout (lost on the way there or back).";
    RR_UNMATCHED = "ringblast_rr_unmatched_responses_total", Counter, "node,queue,protocol", "UDP responses that matched no waiting request (late, duplicated or forged): they change no other number.";
    RX_ANSWERS = "ringblast_rx_answers_total", Counter, "node,queue,result", "UDP requests (--pattern rr) the sink answered (result=sent) or left unanswered (result=unanswered: no response slot free, the response length out of range, or the send failed).";
    RR_RTT = "ringblast_rr_rtt_seconds", Gauge, "node,queue,protocol,quantile", "Round-trip time quantiles since the start (upper bounds of 12.5 % cells).";
    CTX_SWITCHES = "ringblast_ctx_switches_total", Counter, "scope", "Context switches during the run: this process (voluntary + involuntary) or the whole machine (/proc/stat ctxt).";
    BUILD_INFO = "ringblast_build_info", Gauge, "version", "Build of this binary (always 1).";
}

/// Latency histogram bucket bounds in seconds (1 µs … 1 s), matching `stats::LATENCY_BOUNDS_NS`.
pub(crate) fn latency_buckets() -> Vec<f64> {
    crate::stats::LATENCY_BOUNDS_NS
        .iter()
        .map(|ns| *ns as f64 / 1e9)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        for m in ALL {
            assert!(m.name.starts_with("ringblast_"), "{}", m.name);
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            // A role label only on a worker's own machinery, which both roles have alike: its
            // ring, its packet memory, its placement.
            assert!(
                !m.labels.contains("role")
                    || m.name.contains("_ring_")
                    || m.name.starts_with("ringblast_queue_memory_")
                    || m.name.ends_with("_info"),
                "{}",
                m.name
            );
        }
        assert_eq!(
            latency_buckets().len(),
            crate::stats::LATENCY_BOUNDS_NS.len()
        );
    }
}

#[cfg(test)]
mod docs {
    #[test]
    fn the_metrics_page_table_lists_every_metric() {
        let page = include_str!("../../docs/metrics.md");
        for m in super::ALL {
            let labels = if m.labels.is_empty() {
                "–".to_string()
            } else {
                m.labels.replace(',', ", ")
            };
            let row = format!("| `{}` | {} | {labels} |", m.name, m.kind.as_str());
            assert!(page.contains(&row), "docs/metrics.md lacks the row {row}");
        }
    }
}
