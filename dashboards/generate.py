#!/usr/bin/env python3
"""Generates dashboards/ringblast.json, the Grafana overview dashboard for ringblast.

The JSON is committed; this script is the source of truth. Output is deterministic, so
`--check` can regenerate it and fail on any difference (CI runs that through
scripts/validate-deploy.sh). `--exprs` prints every PromQL expression, one per line, for
checking them against a live Prometheus. Standard library only.
"""

import argparse
import difflib
import json
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parent / "ringblast.json"
DATASOURCE = {"type": "prometheus", "uid": "${ds_prometheus}"}

# Label selectors shared by the queries.
BY_INSTANCE = 'instance=~"$instance"'
BY_WORKER = 'instance=~"$instance", node=~"$node", queue=~"$queue"'
# The sink's per-sender books: instance is the sink, sender the name the sender gave (--name).
BY_SENDER = 'instance=~"$instance", sender=~"$sender"'


def rate(metric, selector=BY_WORKER):
    return f"rate({metric}{{{selector}}}[$__rate_interval])"


def summed_rate(metric, by, selector=BY_WORKER):
    return f"sum by ({by}) ({rate(metric, selector)})"


def gauge(metric, by, agg="max", selector=BY_WORKER):
    """A gauge smoothed over the rate interval, so short spikes between refreshes still show."""
    return f"{agg} by ({by}) (max_over_time({metric}{{{selector}}}[$__rate_interval]))"


def absent_as_zero(expr):
    """Series that only appear once something goes wrong (errno labels) read as 0, not 'No data'."""
    return f"{expr} or on () vector(0)"


def target(expr, legend, ref, instant=False, fmt="time_series"):
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "format": fmt,
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
        "refId": ref,
    }


def targets(*pairs):
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(pairs)]


class Layout:
    """Places panels left to right on Grafana's 24-column grid and numbers them."""

    def __init__(self):
        self.panels = []
        self.x = 0
        self.y = 0
        self.row_height = 0

    def _next_id(self):
        return len(self.panels) + 1

    def row(self, title):
        self._newline()
        self.panels.append({
            "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
            "id": self._next_id(),
            "panels": [],
            "title": title,
            "type": "row",
        })
        self.y += 1

    def add(self, panel, width=12, height=8):
        if self.x + width > 24:
            self._newline()
        panel["gridPos"] = {"h": height, "w": width, "x": self.x, "y": self.y}
        panel["id"] = self._next_id()
        self.panels.append(panel)
        self.x += width
        self.row_height = max(self.row_height, height)

    def _newline(self):
        if self.x:
            self.y += self.row_height
        self.x = 0
        self.row_height = 0


def timeseries(title, description, unit, queries, stacked=False):
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {
            "defaults": {
                "custom": {
                    "drawStyle": "line",
                    "fillOpacity": 10,
                    "lineWidth": 1,
                    "showPoints": "never",
                    "spanNulls": False,
                    "stacking": {"group": "A", "mode": "normal" if stacked else "none"},
                },
                "min": 0,
                "unit": unit,
            },
            "overrides": [],
        },
        "options": {
            "legend": {"calcs": ["mean", "max"], "displayMode": "table", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets(*queries),
        "title": title,
        "type": "timeseries",
    }


def stat(title, description, unit, queries, thresholds):
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {
            "defaults": {
                "decimals": 0,
                "thresholds": {"mode": "absolute", "steps": thresholds},
                "unit": unit,
            },
            "overrides": [],
        },
        "options": {
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showPercentChange": False,
            "textMode": "value_and_name",
            "wideLayout": True,
        },
        "targets": [target(expr, legend, chr(ord("A") + i), instant=True) for i, (expr, legend) in enumerate(queries)],
        "title": title,
        "type": "stat",
    }


def heatmap(title, description, expr):
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {
            "calculate": False,
            "cellGap": 1,
            "color": {"exponent": 0.5, "fill": "dark-orange", "mode": "scheme", "reverse": False,
                      "scale": "exponential", "scheme": "Oranges", "steps": 64},
            "filterValues": {"le": 1e-9},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": True},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": "s"},
        },
        "targets": [target(expr, "{{le}}", "A", fmt="heatmap")],
        "title": title,
        "type": "heatmap",
    }


def placement_table():
    expr = gauge("ringblast_worker_info", "instance, role, node, queue, cpu")
    return {
        "datasource": DATASOURCE,
        "description": "Which CPU each worker thread is pinned to, per NUMA node and queue "
                       "(from ringblast_worker_info). Compare with the NIC's queue IRQ affinity.",
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"cellHeight": "sm", "showHeader": True, "sortBy": [{"desc": False, "displayName": "instance"}]},
        "targets": [target(expr, "", "A", instant=True, fmt="table")],
        "transformations": [{"id": "organize", "options": {
            "excludeByName": {"Time": True, "Value": True},
            "indexByName": {"instance": 0, "role": 1, "node": 2, "queue": 3, "cpu": 4},
        }}],
        "title": "Worker placement",
        "type": "table",
    }


def throughput_pair(layout, what, by, legend):
    """Sender on the left, sink on the right, same breakdown and unit, so a flow reads across."""
    for direction, side in (("tx", "Sender"), ("rx", "Sink")):
        layout.add(timeseries(
            f"{side} packets/s {what}", f"Packets per second counted by the {side.lower()}, {what}.", "pps",
            [(summed_rate(f"ringblast_{direction}_packets_total", by), legend)]))
    for direction, side in (("tx", "Sender"), ("rx", "Sink")):
        layout.add(timeseries(
            f"{side} bit/s {what}", f"UDP payload bit rate counted by the {side.lower()}, {what} (no headers).",
            "bps", [(f"8 * {summed_rate(f'ringblast_{direction}_bytes_total', by)}", legend)]))


def per_sender_rows(layout):
    """The sink's books per sender (sender="NAME"; beyond --max-senders, sender="other")."""
    layout.row("Per sender (sink books, by --name)")
    by = "instance, sender"
    legend = "{{sender}} @ {{instance}}"

    def sender_rate(metric):
        return summed_rate(metric, by, BY_SENDER)

    layout.add(timeseries(
        "Received packets/s per sender", "Valid packets the sink booked for each sender, by the sender's --name. "
        "sender=\"other\" collects every sender beyond the sink's --max-senders.", "pps",
        [(sender_rate("ringblast_rx_sender_packets_total"), legend)]), width=8)
    layout.add(timeseries(
        "Received bit/s per sender", "UDP payload bit rate the sink booked for each sender (no headers).", "bps",
        [(f"8 * {sender_rate('ringblast_rx_sender_bytes_total')}", legend)]), width=8)
    lost = sender_rate("ringblast_rx_sender_lost_packets_total")
    dropped = sender_rate("ringblast_rx_sender_kernel_drops_total")
    received = sender_rate("ringblast_rx_sender_packets_total")
    layout.add(timeseries(
        "Loss ratio per sender", "The one loss figure per sender: (lost + the sink's kernel drops) / (received + "
        "lost + kernel drops); failed sends never left their host and stay apart. RingblastSenderLossAboveThreshold "
        "fires when the network's part (lost) is above 0.1 % for 5 minutes. One lossy sender points at its path; "
        "all of them at the sink.", "percentunit",
        [(f"({lost} + {dropped}) / ({received} + {lost} + {dropped})", legend)]), width=8)
    layout.add(timeseries(
        "Lost, reordered and duplicate packets/s per sender",
        "Sequence gaps (lost), late arrivals (reordered) and repeats (duplicate) per sender.", "pps",
        [(lost, f"{legend} lost"),
         (sender_rate("ringblast_rx_sender_reordered_packets_total"), f"{legend} reordered"),
         (sender_rate("ringblast_rx_sender_duplicate_packets_total"), f"{legend} duplicate")]))
    layout.add(timeseries(
        "Unconfirmed and send-failed packets/s per sender",
        "Unconfirmed: the tail of a session whose sender vanished without a goodbye (killed, host lost, control "
        "channel cut); its fate is unknown and it is not counted as lost. Send-failed: sends the sender itself "
        "reported as failed (its send errors); never counted as lost.", "pps",
        [(absent_as_zero(sender_rate("ringblast_rx_sender_unconfirmed_packets_total")), f"{legend} unconfirmed"),
         (absent_as_zero(sender_rate("ringblast_rx_sender_send_failed_packets_total")), f"{legend} send failed")]))
    latency = "ringblast_rx_sender_latency_seconds_bucket"
    jitter = "ringblast_rx_sender_jitter_seconds_bucket"
    layout.add(timeseries(
        "One-way latency per sender", "p50, p99 and p99.9 of each sender's one-way latency, interpolated from "
        "its histogram (the sink's 1-2-5 cells). Clock-corrected samples only: a sender whose clock is unknown "
        "has no line here (see its latency_unknown packets). RingblastSenderLatencyP99High fires when p99 stays "
        "above 10 ms for 5 minutes.", "s",
        [(f"histogram_quantile({q}, {summed_rate(latency, f'{by}, le', BY_SENDER)})", f"{legend} p{name}")
         for q, name in (("0.5", "50"), ("0.99", "99"), ("0.999", "99.9"))]), width=12)
    layout.add(timeseries(
        "Jitter per sender (|D| of consecutive packets)", "RFC 3550 section 6.4.1's D: the difference between the "
        "transit times of two consecutive packets of one session (one flow of one sender run), in arrival order, "
        "as a distribution: p50, p99 and p99.9 from the jitter histogram, and the mean |D| (what RFC 3550's "
        "smoothed J estimates). Clock-corrected samples only, like the latency.", "s",
        [(f"histogram_quantile({q}, {summed_rate(jitter, f'{by}, le', BY_SENDER)})", f"{legend} p{name}")
         for q, name in (("0.5", "50"), ("0.99", "99"), ("0.999", "99.9"))]
        + [(f"{sender_rate('ringblast_rx_sender_jitter_seconds_sum')} / "
            f"{sender_rate('ringblast_rx_sender_jitter_seconds_count')}", f"{legend} mean")]), width=12)
    layout.add(timeseries(
        "Active sessions per sender", "Sessions (epoch and flow) of each sender whose packets the sink is still "
        "counting; 0 once the sender said goodbye or went idle for --session-idle. A restart shows as a short "
        "overlap of the old and the new epoch.", "none",
        [(gauge("ringblast_rx_sender_active_sessions", by, selector=BY_SENDER), legend)]), width=6)
    layout.add(timeseries(
        "Sessions started per sender", "New sessions (epochs) per sender in each interval; every sender restart "
        "adds one. More than 3 in 10 minutes fires RingblastSenderRestarting. The dashboard's \"Sender sessions\" "
        "annotation marks each one.", "none",
        [(f"sum by ({by}) (increase(ringblast_rx_sender_sessions_total{{{BY_SENDER}}}[$__rate_interval]))",
          legend)]), width=6)
    layout.add(timeseries(
        "Control connections/s by result (sink)",
        "TCP control connections on the sink's data port, by result: accepted, authenticated, auth_failed "
        "(wrong secret; fires RingblastControlAuthFailures), protocol_error, timeout, busy (over --max-sessions).",
        "ops",
        [(absent_as_zero(summed_rate("ringblast_rx_control_connections_total", "instance, result", BY_INSTANCE)),
          "{{instance}} {{result}}")]), width=6)
    layout.add(timeseries(
        "Sender control channel", "1 while the sender's control connection to its sink is up (the lowest value "
        "in each interval), and reconnects per second. Down for 2 minutes fires RingblastSenderControlDown.",
        "none",
        [(gauge("ringblast_tx_control_connected", "instance", agg="min", selector=BY_INSTANCE),
          "{{instance}} connected"),
         (absent_as_zero(summed_rate("ringblast_tx_control_reconnects_total", "instance", BY_INSTANCE)),
          "{{instance}} reconnects/s")]), width=6)


def tcp_rows(layout):
    """TCP runs (--proto tcp): streams, connections, invalid streams, TCP_INFO and the sink's TCP books."""
    layout.row("TCP streams (--proto tcp)")
    by = "instance, node, queue"
    legend = "{{instance}} n{{node}} q{{queue}}"
    layout.add(timeseries(
        "TCP bit/s, sent and received", "Application bytes the sender's kernel accepted and bytes of complete, "
        "in-sequence records the sink counted, per queue (no headers).", "bps",
        [(f"8 * {summed_rate('ringblast_tcp_tx_bytes_total', by)}", f"sent {legend}"),
         (f"8 * {summed_rate('ringblast_tcp_rx_bytes_total', by)}", f"received {legend}")]))
    layout.add(timeseries(
        "TCP records/s: written, counted, acknowledged", "Records written completely by the sender, records "
        "the sink counted, and records the sink acknowledged back to the sender (delivered).", "ops",
        [(summed_rate("ringblast_tcp_tx_records_total", by), f"written {legend}"),
         (summed_rate("ringblast_tcp_rx_records_total", by), f"counted {legend}"),
         (summed_rate("ringblast_tcp_delivered_records_total", by), f"delivered {legend}")]))
    layout.add(timeseries(
        "TCP connections open", "Sender connections up and sink connections open, per queue.", "none",
        [(gauge("ringblast_tcp_tx_connections_open", by), f"sender {legend}"),
         (gauge("ringblast_tcp_rx_connections_open", by), f"sink {legend}")]), width=8)
    layout.add(timeseries(
        "TCP connects, failures and resets/s", "Connections established by the sender, connects that failed, "
        "and established connections reset (sender and sink side), per second; data connections the sink "
        "accepted (control connections on the same port are not counted).", "ops",
        [(summed_rate("ringblast_tcp_connects_total", "instance"), "{{instance}} connects"),
         (summed_rate("ringblast_tcp_accepts_total", "instance"), "{{instance}} accepts"),
         (absent_as_zero(summed_rate("ringblast_tcp_connect_failures_total", "instance")), "connect failures"),
         (absent_as_zero(summed_rate("ringblast_tcp_tx_resets_total", "instance")), "sender resets"),
         (absent_as_zero(summed_rate("ringblast_tcp_rx_resets_total", "instance")), "sink resets")]), width=8)
    layout.add(timeseries(
        "TCP invalid records and streams/s by reason", "Records out of sequence (sequence) and streams whose "
        "framing was lost (magic, version, length, truncated) or that kept too many requests (depth); each "
        "lost framing closes its connection.", "ops",
        [(absent_as_zero(summed_rate("ringblast_tcp_rx_invalid_total", "instance, reason")),
          "{{instance}} {{reason}}")]), width=8)
    layout.add(timeseries(
        "TCP smoothed RTT (TCP_INFO)", "Largest srtt among each sender queue's connections, sampled by the "
        "reporter thread every 250 ms.", "s",
        [(gauge("ringblast_tcp_srtt_seconds", by), legend)]), width=8)
    layout.add(timeseries(
        "TCP congestion window (TCP_INFO)", "Sum of the congestion windows of each sender queue's connections, "
        "in segments.", "none",
        [(gauge("ringblast_tcp_cwnd_segments", by), legend)]), width=8)
    layout.add(timeseries(
        "TCP retransmitted segments/s (TCP_INFO)", "Segments each sender queue's connections retransmitted, "
        "per second (total_retrans as sampled; closed connections included).", "ops",
        [(summed_rate("ringblast_tcp_retransmits_total", by), legend)]), width=8)
    sender_legend = "{{sender}} @ {{instance}}"
    layout.add(timeseries(
        "TCP records/s per sender (sink books)", "Records the TCP sink booked for each sender, by the "
        "sender's --name (attributed by the run epoch in the record headers).", "ops",
        [(summed_rate("ringblast_tcp_rx_sender_records_total", "instance, sender", BY_SENDER), sender_legend)]),
        width=12)
    layout.add(timeseries(
        "TCP connections open per sender (sink books)", "Each sender's connections open at the TCP sink.",
        "none",
        [(gauge("ringblast_tcp_rx_sender_connections_open", "instance, sender", selector=BY_SENDER),
          sender_legend)]), width=12)


def schedule_rows(layout):
    """The sender's rate schedule (--rate-steps, --ramp; a constant rate is one step) and the sink's
    verdict of each step, so a staircase or a ramp reads as target, achieved and per-step results."""
    layout.row("Schedule and steps (sender)")
    achieved = summed_rate("ringblast_tx_packets_total", "instance")
    wanted = gauge("ringblast_tx_target_packets_per_second", "instance", agg="sum")
    layout.add(timeseries(
        "Schedule: target vs achieved packets/s",
        "The target follows the schedule (each step of --rate-steps, the slope of a --ramp); achieved is what "
        "the kernel accepted. A step the sender cannot hold shows as achieved below the target. Under "
        "`ringblast search --metrics` each trial is a one-step run at its trial rate.", "pps",
        [(f"{wanted} > 0", "{{instance}} target"), (achieved, "{{instance}} achieved")]), width=10)
    layout.add(timeseries(
        "Schedule step", "The step each sender is in, out of its schedule's steps (1 of 1 for a constant rate).",
        "none",
        [(gauge("ringblast_tx_schedule_step", "instance", selector=BY_INSTANCE), "{{instance}} step"),
         (gauge("ringblast_tx_schedule_steps", "instance", selector=BY_INSTANCE), "{{instance}} steps")]),
        width=6)
    results = timeseries(
        "Step results (sink verdict per step)",
        "Each judged step adds its packets once its verdict arrives: sent (accepted by the kernel), received, "
        "lost, kernel_drops, duplicates and send_failed (the sender could not offer them; never loss). Each "
        "step is its own session epoch at the sink, so these are exact per step.", "short",
        [(f"sum by (instance, result) (increase(ringblast_tx_step_packets_total{{{BY_INSTANCE}}}"
          "[$__rate_interval]))", "{{instance}} {{result}}")])
    results["fieldConfig"]["defaults"]["custom"]["drawStyle"] = "bars"
    results["fieldConfig"]["defaults"]["custom"]["fillOpacity"] = 60
    layout.add(results, width=8)
    layout.add(stat(
        "Steps judged and unknown",
        "Steps the sink gave a complete verdict for by the end of the range, and steps without one (their loss "
        "is unknown, never 0).",
        "short",
        [(f"sum by (verdict) (max_over_time(ringblast_tx_steps_total{{{BY_INSTANCE}}}[$__range]))", "{{verdict}}")],
        [{"color": "text", "value": None}]), width=24, height=4)


def size_class_rows(layout):
    """Packets per size class (--size mixes such as imix): the sender's classes of its mix next to
    the sink's classes by exact payload length, so a mix reads class by class at both ends."""
    layout.row("Size classes")
    by = "instance, payload"
    legend = "{{instance}} {{payload}} B"
    layout.add(timeseries(
        "Sender packets/s by size class", "Packets the kernel accepted, by the payload length of each class "
        "of the sender's --size mix (one class without a mix).", "pps",
        [(summed_rate("ringblast_tx_size_packets_total", by, BY_INSTANCE), legend)]))
    layout.add(timeseries(
        "Sink packets/s by size class", "Valid packets the sink received, by exact payload length (its first "
        "8 lengths; the rest as payload=\"other\"). Equal to the sender's classes when nothing is lost.", "pps",
        [(summed_rate("ringblast_rx_size_packets_total", by, BY_INSTANCE), legend)]))


def build_panels():
    layout = Layout()

    layout.row("Throughput")
    throughput_pair(layout, "per node", "instance, node", "{{instance}} node {{node}}")
    throughput_pair(layout, "per queue", "instance, node, queue", "{{instance}} n{{node}} q{{queue}}")
    layout.add(timeseries(
        "Sent vs received packets/s per flow", "Each flow's send rate next to its receive rate.", "pps",
        [(summed_rate("ringblast_tx_packets_total", "flow"), "sent {{flow}}"),
         (summed_rate("ringblast_rx_packets_total", "flow"), "received {{flow}}")]))
    layout.add(timeseries(
        "Sent vs received bit/s per flow", "Each flow's payload bit rate, sent next to received.", "bps",
        [(f"8 * {summed_rate('ringblast_tx_bytes_total', 'flow')}", "sent {{flow}}"),
         (f"8 * {summed_rate('ringblast_rx_bytes_total', 'flow')}", "received {{flow}}")]))

    layout.row("Delivery quality (sink)")
    layout.add(timeseries(
        "Lost, reordered, duplicate and invalid packets/s",
        "Sequence gaps (lost), late arrivals (reordered), repeats (duplicate) and packets whose header "
        "failed validation (invalid, by reason).", "pps",
        [(summed_rate("ringblast_rx_lost_packets_total", "instance"), "{{instance}} lost"),
         (summed_rate("ringblast_rx_reordered_packets_total", "instance"), "{{instance}} reordered"),
         (summed_rate("ringblast_rx_duplicate_packets_total", "instance"), "{{instance}} duplicate"),
         (summed_rate("ringblast_rx_invalid_packets_total", "instance, reason"), "{{instance}} invalid {{reason}}")]))
    lost = summed_rate("ringblast_rx_lost_packets_total", "instance")
    dropped = summed_rate("ringblast_rx_kernel_drops_total", "instance")
    received = summed_rate("ringblast_rx_packets_total", "instance")
    layout.add(timeseries(
        "Loss ratio", "The one loss figure: (lost + the sink's kernel drops) / (received + lost + kernel drops), "
        "as the verdict's headline. The RingblastLossAboveThreshold alert fires when the network's part (lost) is "
        "above 0.1 %.",
        "percentunit", [(f"({lost} + {dropped}) / ({received} + {lost} + {dropped})", "{{instance}}")]))

    per_sender_rows(layout)
    schedule_rows(layout)
    size_class_rows(layout)

    layout.row("Kernel drops and errors")
    layout.add(timeseries(
        "Kernel socket drops/s (sink)",
        "Datagrams the kernel dropped before the sink read them (socket receive queue overflow). "
        "Raise the socket buffer or add queues.", "pps",
        [(absent_as_zero(summed_rate("ringblast_rx_kernel_drops_total", "instance, node")), "{{instance}} node {{node}}")]),
        width=8)
    layout.add(timeseries(
        "Send errors/s by errno", "Failed send completions. ENOBUFS/EAGAIN mean the qdisc or NIC queue is full; "
        "ECONNREFUSED means nothing listens at the sink address.", "pps",
        [(absent_as_zero(summed_rate("ringblast_tx_errors_total", "instance, errno")), "{{instance}} {{errno}}")]),
        width=8)
    layout.add(timeseries(
        "Receive errors/s by errno", "Failed receive completions.", "pps",
        [(absent_as_zero(summed_rate("ringblast_rx_errors_total", "instance, errno")), "{{instance}} {{errno}}")]),
        width=8)

    layout.row("Pacing (sender)")
    achieved = summed_rate("ringblast_tx_packets_total", "instance")
    wanted = gauge("ringblast_tx_target_packets_per_second", "instance", agg="sum")
    layout.add(timeseries(
        "Achieved vs target packets/s", "Target is the configured pacing rate summed over workers "
        "(0 = unpaced, shown as no target line).", "pps",
        [(achieved, "{{instance}} achieved"), (f"{wanted} > 0", "{{instance}} target")]), width=8)
    layout.add(timeseries(
        "Achieved / target", "Below 95 % for 5 minutes fires RingblastRateBelowTarget.", "percentunit",
        [(f"{achieved} / ({wanted} > 0)", "{{instance}}")]), width=8)
    layout.add(timeseries(
        "Pacing lag", "How far each worker's pacer is behind schedule. Growing lag means the sender "
        "itself is saturated (CPU, ring depth or NIC).", "s",
        [(gauge("ringblast_tx_pacing_lag_seconds", "instance, node, queue"), "{{instance}} n{{node}} q{{queue}}")]),
        width=8)

    layout.row("io_uring health")
    ring_by = "instance, role, node, queue"
    ring_legend = "{{instance}} {{role}} n{{node}} q{{queue}}"
    layout.add(timeseries(
        "Average submit batch (SQEs per io_uring_enter)",
        "rate(sqes_submitted) / rate(enter_calls). Small batches mean one syscall per few packets.", "none",
        [(f"{summed_rate('ringblast_ring_sqes_submitted_total', ring_by)} / "
          f"{summed_rate('ringblast_ring_enter_calls_total', ring_by)}", ring_legend)]))
    layout.add(timeseries(
        "CQ overflow and SQ full events/s",
        "CQ overflow: completions the kernel could not post (the worker fell behind reaping); any increase "
        "fires RingblastCqOverflowIncreasing. SQ full: pushes that found the submission queue full.", "ops",
        [(summed_rate("ringblast_ring_cq_overflow_total", ring_by), f"overflow {ring_legend}"),
         (summed_rate("ringblast_ring_sq_full_total", ring_by), f"sq full {ring_legend}")]))
    layout.add(timeseries(
        "Receive buffer ring empty events/s (sink)",
        "Multishot receives that ended because every provided buffer was in use. Add buffers or reap faster.",
        "ops", [(summed_rate("ringblast_rx_buffer_ring_empty_total", "instance, node, queue"),
                 "{{instance}} n{{node}} q{{queue}}")]))
    layout.add(timeseries(
        "Receive buffers in circulation (sink)",
        "Provided buffers the UDP sink hands the kernel: about 4 MiB of received data, so the whole ring "
        "for single datagrams and fewer when GRO fills each buffer. The rest are held back to keep the "
        "kernel's copies in cache.",
        "none", [(gauge("ringblast_rx_buffers_circulating", "instance, node, queue"),
                  "{{instance}} n{{node}} q{{queue}}")]))
    layout.add(timeseries(
        "In-flight operations", "Submitted but not yet completed operations per ring (peak per interval).",
        "none", [(gauge("ringblast_ring_inflight_ops", ring_by), ring_legend)]))

    layout.row("Latency and placement")
    latency_bucket = "ringblast_rx_latency_seconds_bucket"
    layout.add(heatmap(
        "One-way latency heatmap", "From the send timestamp in each packet header to its receipt. "
        "Meaningful only when sender and sink clocks are synchronised (or on one host).",
        summed_rate(latency_bucket, "le")))
    layout.add(timeseries(
        "One-way latency quantiles", "p50, p99 and p99.9 interpolated from the latency histogram buckets.", "s",
        [(f"histogram_quantile({q}, {summed_rate(latency_bucket, 'instance, le')})", f"{{{{instance}}}} p{name}")
         for q, name in (("0.5", "50"), ("0.99", "99"), ("0.999", "99.9"))]))
    layout.add(placement_table(), width=24)

    layout.row("Process")
    layout.add(timeseries(
        "CPU used (cores)", "CPU seconds per second of each ringblast process.", "none",
        [(summed_rate("process_cpu_seconds_total", "instance", BY_INSTANCE), "{{instance}}")]), width=8)
    layout.add(timeseries(
        "Resident memory", "Resident set size of each ringblast process.", "bytes",
        [(gauge("process_resident_memory_bytes", "instance", selector=BY_INSTANCE), "{{instance}}")]), width=8)
    layout.add(timeseries(
        "Registered (pinned) buffer memory", "Bytes registered with io_uring per NUMA node; counts against "
        "RLIMIT_MEMLOCK unless the process holds CAP_IPC_LOCK.", "bytes",
        [(gauge("ringblast_registered_buffer_bytes", "instance, node",
                selector='instance=~"$instance", node=~"$node"'), "{{instance}} node {{node}}")]), width=8)

    tcp_rows(layout)

    layout.row("Soak accounting (whole time range)")
    def total(metric):
        return f'sum(increase({metric}{{{BY_INSTANCE}}}[$__range]))'
    sent, got, gaps, kdrops = (total(m) for m in (
        "ringblast_tx_packets_total", "ringblast_rx_packets_total", "ringblast_rx_lost_packets_total",
        "ringblast_rx_kernel_drops_total"))
    layout.add(stat(
        "Sent, received, lost and dropped by the kernel over the range",
        "Totals over the dashboard's whole time range for the selected instances (select the sender and the "
        "sink together). Every sent packet is received, lost in the network, or dropped by the sink's kernel.",
        "short",
        [(sent, "sent"), (got, "received"), (gaps, "lost (sequence gaps)"), (kdrops, "kernel drops")],
        [{"color": "text", "value": None}]), width=16, height=6)
    layout.add(stat(
        "Unaccounted packets (sent − received − lost − kernel drops)",
        "Should stay near 0 next to rate × scrape interval: the difference comes from scrape timing (sender "
        "and sink are scraped at different instants, and increase() extrapolates each to the range edges), "
        "not from packets in flight; it is exact once the range ends after the sender stopped. A growing positive "
        "value means packets vanished without the sink seeing a gap (e.g. the tail of a flow: see the "
        "unconfirmed panel in the per-sender row for senders that vanished without a goodbye); a negative "
        "one means received includes repeats, or a counter reset inside the range.", "short",
        [(f"{sent} - {got} - {gaps} - {kdrops}", "unaccounted")],
        [{"color": "green", "value": None}, {"color": "orange", "value": 1000}]), width=8, height=6)
    return layout.panels


SESSIONS_ANNOTATION = (f"sum by (instance, sender) (changes(ringblast_rx_sender_sessions_total{{{BY_SENDER}}}[1m]))"
                       " > 0")


def sessions_annotation():
    """A marker wherever a sink saw a sender start a session (first start or restart)."""
    return {
        "datasource": DATASOURCE,
        "enable": True,
        "expr": SESSIONS_ANNOTATION,
        "hide": False,
        "iconColor": "orange",
        "name": "Sender sessions",
        "step": "1m",
        "tagKeys": "sender,instance",
        "target": {"expr": SESSIONS_ANNOTATION, "refId": "Anno"},
        "textFormat": "sink {{instance}} saw sender {{sender}} start a new session (restart or first start)",
        "titleFormat": "sender {{sender}} session",
        "useValueForTime": False,
    }


def query_variable(name, label, query):
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": query,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 3,
        "type": "query",
    }


def build_dashboard():
    variables = [
        {
            "current": {},
            "hide": 0,
            "includeAll": False,
            "label": "Data source",
            "multi": False,
            "name": "ds_prometheus",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "skipUrlSync": False,
            "type": "datasource",
        },
        query_variable("instance", "Instance", "label_values(ringblast_build_info, instance)"),
        query_variable("node", "NUMA node", 'label_values(ringblast_worker_info{instance=~"$instance"}, node)'),
        query_variable("queue", "Queue",
                       'label_values(ringblast_worker_info{instance=~"$instance", node=~"$node"}, queue)'),
        query_variable("sender", "Sender",
                       'label_values(ringblast_rx_sender_packets_total{instance=~"$instance"}, sender)'),
    ]
    return {
        "__requires": [
            {"id": "grafana", "name": "Grafana", "type": "grafana", "version": "11.6.0"},
            {"id": "prometheus", "name": "Prometheus", "type": "datasource", "version": "1.0.0"},
            {"id": "heatmap", "name": "Heatmap", "type": "panel", "version": ""},
            {"id": "stat", "name": "Stat", "type": "panel", "version": ""},
            {"id": "table", "name": "Table", "type": "panel", "version": ""},
            {"id": "timeseries", "name": "Time series", "type": "panel", "version": ""},
        ],
        "annotations": {"list": [{
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        }, sessions_annotation()]},
        "description": "ringblast io_uring UDP sender and sink: throughput, loss, per-sender books, kernel "
                       "drops, pacing, ring health, latency, placement and soak accounting.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "panels": build_panels(),
        "refresh": "30s",
        "schemaVersion": 41,
        "tags": ["ringblast", "io_uring", "udp"],
        "templating": {"list": variables},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": "ringblast overview",
        "uid": "ringblast-overview",
        "version": 1,
        "weekStart": "",
    }


def render():
    return json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n"


def expressions(dashboard):
    for panel in dashboard["panels"]:
        for query in panel.get("targets", []):
            yield query["expr"]


def annotation_expressions(dashboard):
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield annotation["expr"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail if the committed JSON differs from the generated")
    mode.add_argument("--exprs", action="store_true", help="print every panel's PromQL expression, one per line")
    mode.add_argument("--annotation-exprs", action="store_true",
                      help="print every annotation's PromQL expression, one per line")
    args = parser.parse_args()

    text = render()
    if args.exprs or args.annotation_exprs:
        for expr in (expressions if args.exprs else annotation_expressions)(json.loads(text)):
            print(expr)
        return 0
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current == text:
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), text.splitlines(keepends=True),
            fromfile=f"{OUTPUT.name} (committed)", tofile=f"{OUTPUT.name} (generated)"))
        print(f"{OUTPUT} is stale: run python3 dashboards/generate.py and commit the result", file=sys.stderr)
        return 1
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
