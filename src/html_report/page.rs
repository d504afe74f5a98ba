//! The HTML page: a header with the run's totals, then one section per view (rate against
//! target, loss per interval, steps, latency and jitter, senders, search), each drawn only when
//! the records hold its data and otherwise replaced by one line saying what is missing and why.
//! Inline CSS, inline SVG, no scripts; a Content-Security-Policy forbids every fetch.

use std::fmt::Write;

use serde_json::{Map, Value};

use super::{
    model::{Interval, Run, Step, count, number, text_field},
    svg::{Axis, BarChart, Bars, LineChart, Point, Rule, Series, bar_chart, esc, line_chart},
};

const BLUE: &str = "#2563eb";
const GREEN: &str = "#059669";
const GREY: &str = "#6b7280";
const RED: &str = "#dc2626";
const AMBER: &str = "#d97706";
const PURPLE: &str = "#7c3aed";

const STYLE: &str = "\
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1f2937;\
background:#f8fafc;margin:0}\
main{max-width:960px;margin:0 auto;padding:24px 28px 48px}\
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #e5e7eb;padding-bottom:4px}\
p.meta{color:#4b5563;margin:0 0 12px}p.note{color:#4b5563;font-size:13px;margin:4px 0}\
.unknown{color:#92400e}\
figure{margin:8px 0;background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:8px}\
svg.chart{width:100%;height:auto;display:block;font-size:11px}\
svg .grid{stroke:#eef0f3}svg .axis{stroke:#9ca3af}svg .tick{fill:#6b7280}\
svg .axis-label{fill:#374151;font-size:12px}svg .rule line{stroke-dasharray:4 3}\
svg .unknown-mark{fill:#92400e}svg circle[data-verdict=pass]{fill:#059669}\
svg circle[data-verdict=partial]{fill:#d97706}svg circle[data-verdict=fail]{fill:#dc2626}\
svg circle[data-verdict=limited]{fill:#9ca3af}\
ul.legend{list-style:none;margin:4px 0 0;padding:0;display:flex;flex-wrap:wrap;gap:14px;font-size:13px}\
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;vertical-align:-1px}\
table{border-collapse:collapse;background:#fff;font-size:13px;margin:8px 0}\
th,td{border:1px solid #e5e7eb;padding:4px 8px;text-align:right}td{white-space:nowrap}\
div.wide{overflow-x:auto}\
th{background:#f3f4f6}td:first-child,th:first-child{text-align:left}\
dl.run{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0 0 12px;font-size:13px}\
dl.run dt{color:#4b5563}dl.run dd{margin:0;word-break:break-word}\
dl.totals{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:6px 18px;margin:8px 0}\
dl.totals div{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px 10px}\
dt{color:#6b7280;font-size:12px}dd{margin:0;font-weight:600}\
footer{margin-top:40px;color:#6b7280;font-size:12px}";

/// Renders the whole page.
pub(crate) fn render(run: &Run, title: &str, source: &str) -> String {
    let mut body = String::new();
    header(&mut body, run, title, source);
    search_section(&mut body, run);
    // A search's JSON has only trials and its result; a run's views would all say "missing".
    let has_run = !run.send_intervals.is_empty()
        || !run.sink_intervals.is_empty()
        || run.send_summary.is_some()
        || run.sink_summary.is_some();
    if has_run {
        rate_section(&mut body, run);
        loss_section(&mut body, run);
        steps_section(&mut body, run);
        latency_section(&mut body, run);
        exchange_section(&mut body, run);
        tcp_section(&mut body, run);
        senders_section(&mut body, run);
    }
    let _ = write!(
        body,
        "<footer>Written by ringblast {} report from {} ({} JSON lines{}). Self-contained: no \
         scripts, no fetches.</footer>",
        env!("CARGO_PKG_VERSION"),
        esc(source),
        run.lines,
        if run.unknown_lines > 0 {
            format!(
                ", {} of a type this report does not show",
                run.unknown_lines
            )
        } else {
            String::new()
        }
    );
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"generator\" content=\"ringblast {}\">\
         <title>{}</title><style>{STYLE}</style></head>\n<body><main>{body}</main></body></html>\n",
        env!("CARGO_PKG_VERSION"),
        esc(title)
    )
}

// ---- number formatting --------------------------------------------------------------------

/// `1234567` → `1 234 567` (thin spaces).
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    out
}

/// `v` with at most `decimals` decimals, trailing zeros dropped (`2.500` → `2.5`).
fn trimmed(v: f64, decimals: usize) -> String {
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

fn si(v: f64, unit: &str) -> String {
    let (scaled, prefix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    format!("{} {prefix}{unit}", trimmed(scaled, 2))
}

fn pps(v: f64) -> String {
    si(v, "pps")
}

fn records_per_s(v: f64) -> String {
    si(v, "rec/s")
}

fn bits(v: f64) -> String {
    si(v, "bit/s")
}

fn ns(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{} s", trimmed(v / 1e9, 3)),
        a if a >= 1e6 => format!("{} ms", trimmed(v / 1e6, 3)),
        a if a >= 1e3 => format!("{} µs", trimmed(v / 1e3, 1)),
        _ => format!("{v:.0} ns"),
    }
}

fn seconds(v: f64) -> String {
    trimmed(v, 2)
}

/// Trial numbers on the axis: whole ticks only.
fn whole(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

fn plain(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        group(v.abs() as u64)
    } else {
        format!("{v:.2}")
    }
}

fn opt_count(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".into(), group)
}

/// A JSON value for a table cell: absent → "n/a" (not in this JSON), null → "unknown".
fn cell(map: &Map<String, Value>, key: &str, format: fn(f64) -> String) -> String {
    match map.get(key) {
        None => "n/a".into(),
        Some(Value::Null) => "unknown".into(),
        Some(v) => v
            .as_f64()
            .map_or_else(|| esc(&v.to_string()), |f| esc(&format(f))),
    }
}

fn percent(ratio: f64) -> String {
    format!("{} %", trimmed(ratio * 100.0, 4))
}

fn note(out: &mut String, text: &str) {
    let _ = write!(out, "<p class=\"note\">{}</p>", esc(text));
}

fn unknown(out: &mut String, text: &str) {
    let _ = write!(out, "<p class=\"note unknown\">{}</p>", esc(text));
}

fn seconds_axis() -> Axis {
    Axis {
        label: "time since start (s)".into(),
        format: seconds,
        log: false,
        whole: false,
    }
}

// ---- header -------------------------------------------------------------------------------

/// The start record's facts: what ran, the build, the host and the NIC, and the command.
fn started(out: &mut String, run: &Run, start: &Map<String, Value>) {
    let text = |v: Option<&Value>| match v {
        None => "n/a".to_string(),
        Some(Value::Null) => "unknown".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    let host = start.get("host").and_then(Value::as_object);
    let host_field = |key: &str| text(host.and_then(|h| h.get(key)));
    let nic = start.get("nic").and_then(Value::as_object);
    let nic_field = |key: &str| text(nic.and_then(|n| n.get(key)));
    let command = start
        .get("command")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "n/a".into());
    let rows = [
        ("run", run.started().unwrap_or_default()),
        (
            "ringblast",
            format!(
                "{} (commit {})",
                text(start.get("version")),
                text(start.get("commit"))
            ),
        ),
        ("command", command),
        (
            "host",
            format!(
                "{}: Linux {}, {} CPUs online ({} allowed), {}, NUMA nodes {}",
                host_field("name"),
                host_field("kernel"),
                host_field("cpus_online"),
                host_field("cpus_allowed"),
                host_field("cpu_model"),
                host_field("numa_nodes")
            ),
        ),
        (
            "NIC",
            match nic.and_then(|n| n.get("name")).and_then(Value::as_str) {
                Some(name) => format!(
                    "{name}, driver {}",
                    match nic.and_then(|n| n.get("driver")).and_then(Value::as_str) {
                        Some(d) => d.to_string(),
                        None => format!("unknown ({})", nic_field("driver_unknown_reason")),
                    }
                ),
                None => format!("unknown ({})", nic_field("unknown_reason")),
            },
        ),
    ];
    out.push_str("<dl class=\"run\">");
    for (name, value) in rows {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(name), esc(&value));
    }
    out.push_str("</dl>");
}

fn header(out: &mut String, run: &Run, title: &str, source: &str) {
    let _ = write!(
        out,
        "<h1>{}</h1><p class=\"meta\">{} run{}, from {}: {} interval lines (send {}, sink {}), \
         {} steps, {} trials.</p>",
        esc(title),
        run.kind(),
        if run.tcp { " over TCP" } else { "" },
        esc(source),
        run.send_intervals.len() + run.sink_intervals.len(),
        run.send_intervals.len(),
        run.sink_intervals.len(),
        run.steps.len(),
        run.trials.len()
    );
    if let Some(start) = &run.start {
        started(out, run, start);
    }
    let mut totals: Vec<(&str, String)> = Vec::new();
    if let Some(s) = &run.send_summary {
        totals.push(("duration", cell(s, "duration_s", |v| format!("{v:.3} s"))));
        totals.push((
            "target",
            match s.get("target_pps") {
                Some(Value::Null) => "unpaced (--rate max)".into(),
                _ => cell(s, "target_pps", pps),
            },
        ));
        totals.push(("achieved", cell(s, "pps", pps)));
        totals.push(("achieved (payload)", cell(s, "bps", bits)));
        totals.push(("achieved / target", cell(s, "achieved_ratio", percent)));
        if s.get("sender_limited") == Some(&Value::Bool(true)) {
            let cause = match s.get("sender_limited_cause").and_then(Value::as_str) {
                Some("cpu_wait") => "yes: its worker waited for a CPU",
                Some("cpu_busy") => "yes: its worker's CPU was busy all along",
                Some("send_completions") => "yes: it waited on its sends",
                _ => "yes (cause unknown)",
            };
            totals.push(("sender-limited", cause.into()));
        }
        totals.push(("sent packets", cell(s, "tx_packets", plain)));
        totals.push(("sent records", cell(s, "tx_records", plain)));
        totals.push(("send errors", cell(s, "tx_errors", plain)));
    }
    if let Some(s) = &run.sink_summary {
        totals.push(("received packets", cell(s, "rx_packets", plain)));
        totals.push(("received records", cell(s, "rx_records", plain)));
        totals.push(("loss (lost + kernel drops)", cell(s, "loss_ratio", percent)));
        totals.push(("lost", cell(s, "rx_lost", plain)));
        totals.push(("reordered", cell(s, "rx_reordered", plain)));
        totals.push(("duplicates", cell(s, "rx_duplicates", plain)));
        totals.push(("kernel drops", cell(s, "rx_kernel_drops", plain)));
        if s.get("sink_limited") == Some(&Value::Bool(true)) {
            totals.push((
                "sink-limited",
                "yes: its own kernel dropped datagrams".into(),
            ));
        }
    } else if let Some(sink) = run
        .send_summary
        .as_ref()
        .and_then(|s| s.get("sink"))
        .and_then(Value::as_object)
    {
        totals.push(("received (sink's verdict)", cell(sink, "rx_packets", plain)));
        totals.push((
            "loss (lost + kernel drops)",
            cell(sink, "loss_ratio", percent),
        ));
        totals.push(("lost", cell(sink, "rx_lost", plain)));
        totals.push(("kernel drops", cell(sink, "rx_kernel_drops", plain)));
        totals.push(("reordered", cell(sink, "rx_reordered", plain)));
        totals.push(("duplicates", cell(sink, "rx_duplicates", plain)));
    }
    // Show only what this run's JSON holds (a TCP run counts records, not packets).
    totals.retain(|(_, v)| v != "n/a");
    if totals.is_empty() {
        return;
    }
    out.push_str("<dl class=\"totals\">");
    for (name, value) in totals {
        let _ = write!(out, "<div><dt>{name}</dt><dd>{value}</dd></div>");
    }
    out.push_str("</dl>");
}

// ---- rate against target ------------------------------------------------------------------

/// The target rate for the interval ending at `i.t`: the step its middle falls in (the nearest
/// step when outside the schedule), or the run's constant target.
fn target_at(run: &Run, i: &Interval) -> Option<f64> {
    if run.steps.is_empty() {
        return run
            .send_summary
            .as_ref()
            .and_then(|s| number(s, "target_pps").or_else(|| number(s, "target_records_per_s")));
    }
    let mid = i.t - i.length.unwrap_or(0.0) / 2.0;
    let inside = |s: &&Step| match (s.start_s, s.end_s) {
        (Some(a), Some(b)) => a <= mid && mid < b,
        _ => false,
    };
    let step = run.steps.iter().find(inside).or_else(|| {
        if run.steps.first()?.start_s? > mid {
            run.steps.first()
        } else {
            run.steps.last()
        }
    });
    step.and_then(|s| s.target_pps)
}

/// Reads one figure of an interval line.
type Reading = fn(&Interval) -> Option<f64>;

fn rate_section(out: &mut String, run: &Run) {
    out.push_str("<section id=\"rate\"><h2>Achieved rate against the target</h2>");
    let all = run.send_intervals.iter().chain(&run.sink_intervals);
    if all.clone().next().is_none() {
        unknown(
            out,
            "No interval records: the run wrote only its summary (--interval 0) or is a search \
             (its trials are below).",
        );
        out.push_str("</section>");
        return;
    }
    let in_pps = all.clone().all(|i| i.pps.is_some());
    let (value, format, unit): (Reading, fn(f64) -> String, &str) = if in_pps && run.tcp {
        (|i| i.pps, records_per_s, "records per second")
    } else if in_pps {
        (|i| i.pps, pps, "packets per second")
    } else {
        (|i| i.bps, bits, "payload bits per second")
    };
    let line = |id, label: &str, color, intervals: &[Interval], what: &str| Series {
        id,
        label: label.into(),
        color,
        points: intervals
            .iter()
            .filter_map(|i| {
                let v = value(i)?;
                Some(Point {
                    x: i.t,
                    y: v,
                    tip: format!("{what} at {:.3} s: {}", i.t, format(v)),
                    verdict: None,
                })
            })
            .collect(),
        joined: true,
        dashed: false,
    };
    let mut series = Vec::new();
    let mut targets = 0;
    if !run.send_intervals.is_empty() {
        if in_pps {
            let points: Vec<Point> = run
                .send_intervals
                .iter()
                .filter_map(|i| {
                    let v = target_at(run, i)?;
                    Some(Point {
                        x: i.t,
                        y: v,
                        tip: format!("target at {:.3} s: {}", i.t, format(v)),
                        verdict: None,
                    })
                })
                .collect();
            targets = points.len();
            if !points.is_empty() {
                series.push(Series {
                    id: "target",
                    label: "target".into(),
                    color: GREY,
                    points,
                    joined: true,
                    dashed: true,
                });
            }
        }
        series.push(line(
            "sent",
            "sent (sender)",
            BLUE,
            &run.send_intervals,
            "sent",
        ));
    }
    if !run.sink_intervals.is_empty() {
        series.push(line(
            "received",
            "received (sink)",
            GREEN,
            &run.sink_intervals,
            "received",
        ));
    }
    out.push_str(&line_chart(&LineChart {
        id: "rate-chart",
        x: seconds_axis(),
        y: Axis {
            label: format!("rate ({unit})"),
            format,
            log: false,
            whole: false,
        },
        series,
        rules: Vec::new(),
    }));
    if targets == 0 {
        unknown(
            out,
            if run.send_intervals.is_empty() {
                "target: unknown; a sink does not know its senders' targets (see the senders' \
                 own reports)"
            } else if !in_pps {
                "target: unknown in bit/s; this run's intervals give no packet rate"
            } else {
                "target: unknown; the run was unpaced (--rate max) or its JSON carries no \
                 target_pps"
            },
        );
    }
    note(
        out,
        "One point per interval line, at the interval's end; sent is counted at the sender, \
         received at the sink.",
    );
    out.push_str("</section>");
}

// ---- loss per interval --------------------------------------------------------------------

fn loss_section(out: &mut String, run: &Run) {
    out.push_str("<section id=\"loss\"><h2>Loss, reorder and duplicates per interval</h2>");
    let sink = &run.sink_intervals;
    let any = |f: fn(&Interval) -> Option<u64>| sink.iter().any(|i| f(i).is_some());
    if sink.is_empty()
        || !(any(|i| i.lost)
            || any(|i| i.kernel_drops)
            || any(|i| i.reordered)
            || any(|i| i.duplicates))
    {
        unknown(
            out,
            if sink.is_empty() {
                "No sink interval records: the sink keeps these books; its own JSON (or a pair \
                 run) has them. The sink's verdict for the whole run is in the totals above."
            } else {
                "The sink's interval records carry no loss, reorder or duplicate counts (a TCP \
                 stream delivers in order, without loss, at this layer)."
            },
        );
        out.push_str("</section>");
        return;
    }
    let counts = |id, label: &str, color, f: fn(&Interval) -> Option<u64>| Series {
        id,
        label: label.into(),
        color,
        points: sink
            .iter()
            .filter_map(|i| {
                let v = f(i)?;
                Some(Point {
                    x: i.t,
                    y: v as f64,
                    tip: format!(
                        "{label} in the interval ending at {:.3} s: {}",
                        i.t,
                        group(v)
                    ),
                    verdict: None,
                })
            })
            .collect(),
        joined: true,
        dashed: false,
    };
    out.push_str(&line_chart(&LineChart {
        id: "loss-chart",
        x: seconds_axis(),
        y: Axis {
            label: "packets in the interval".into(),
            format: plain,
            log: false,
            whole: true,
        },
        series: vec![
            counts("lost", "lost", RED, |i| i.lost),
            counts("kernel-drops", "kernel drops", GREY, |i| i.kernel_drops),
            counts("reordered", "reordered", AMBER, |i| i.reordered),
            counts("duplicates", "duplicates", PURPLE, |i| i.duplicates),
        ],
        rules: Vec::new(),
    }));
    note(
        out,
        "Counted at the sink, per interval line. The run's loss is lost plus kernel drops, as \
         in every headline: lost are sequence gaps on the way (a gap is counted lost until its \
         packets arrive late), kernel drops the datagrams the sink's own kernel dropped because \
         its receive queues were full.",
    );
    out.push_str("</section>");
}

// ---- steps --------------------------------------------------------------------------------

fn steps_section(out: &mut String, run: &Run) {
    if run.steps.is_empty() {
        return;
    }
    out.push_str("<section id=\"steps\"><h2>Per step: rate and the sink's verdict</h2>");
    let categories: Vec<String> = run
        .steps
        .iter()
        .map(|s| format!("step {}", s.number))
        .collect();
    let bars =
        |id, label: &str, color, f: &dyn Fn(&Step) -> Option<f64>, fmt: fn(f64) -> String| Bars {
            id,
            label: label.into(),
            color,
            values: run
                .steps
                .iter()
                .map(|s| f(s).map(|v| (v, format!("step {} {label}: {}", s.number, fmt(v)))))
                .collect(),
        };
    out.push_str(&bar_chart(&BarChart {
        id: "steps-rate-chart",
        categories: categories.clone(),
        x_label: "step".into(),
        y: Axis {
            label: "rate (packets per second)".into(),
            format: pps,
            log: false,
            whole: false,
        },
        series: vec![
            bars("step_target", "target", GREY, &|s| s.target_pps, pps),
            bars("step_achieved", "achieved", BLUE, &|s| s.pps, pps),
        ],
    }));
    let as_f64 = |v: Option<u64>| v.map(|v| v as f64);
    out.push_str(&bar_chart(&BarChart {
        id: "steps-loss-chart",
        categories,
        x_label: "step".into(),
        y: Axis {
            label: "packets in the step".into(),
            format: plain,
            log: false,
            whole: true,
        },
        series: vec![
            bars("step_lost", "lost", RED, &|s| as_f64(s.lost), plain),
            bars(
                "step_reordered",
                "reordered",
                AMBER,
                &|s| as_f64(s.reordered),
                plain,
            ),
            bars(
                "step_duplicates",
                "duplicates",
                PURPLE,
                &|s| as_f64(s.duplicates),
                plain,
            ),
        ],
    }));
    out.push_str(
        "<table class=\"steps\"><thead><tr><th>step</th><th>from (s)</th><th>to (s)</th>\
         <th>target</th><th>achieved</th><th>sent</th><th>received</th><th>lost</th>\
         <th>loss</th><th>reordered</th><th>duplicates</th></tr></thead><tbody>",
    );
    let opt = |v: Option<f64>, f: fn(f64) -> String| v.map_or_else(|| "unknown".into(), f);
    for s in &run.steps {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            s.number,
            opt(s.start_s, seconds),
            opt(s.end_s, seconds),
            opt(s.target_pps, pps),
            opt(s.pps, pps),
            opt_count(s.tx_packets),
            opt_count(s.rx_packets),
            opt_count(s.lost),
            opt(s.loss_ratio, percent),
            opt_count(s.reordered),
            opt_count(s.duplicates),
        );
    }
    out.push_str("</tbody></table>");
    note(
        out,
        "Each step's verdict is the sink's count for that step alone; a \"?\" in a chart is a \
         value this run's JSON does not hold.",
    );
    out.push_str("</section>");
}

// ---- latency and jitter -------------------------------------------------------------------

/// The quantiles a CDF is drawn through: the figure's stem (before `_ns`), its label and the
/// fraction of samples at or below it.
const CDF_POINTS: [(&str, &str, f64); 6] = [
    ("min", "min", 0.0),
    ("p50", "p50", 0.5),
    ("p90", "p90", 0.9),
    ("p99", "p99", 0.99),
    ("p999", "p99.9", 0.999),
    ("max", "max", 1.0),
];

/// The figures a table lists, in order: the CDF's and the mean.
const TABLE_FIGURES: [(&str, &str); 7] = [
    ("min", "min"),
    ("mean", "mean"),
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p999", "p99.9"),
    ("max", "max"),
];

/// Senders drawn as series of their own (the tables list them all).
const SENDER_SERIES: usize = 6;
const SENDER_COLORS: [&str; SENDER_SERIES] = [BLUE, GREEN, AMBER, PURPLE, RED, "#0891b2"];
const LATENCY_IDS: [&str; SENDER_SERIES] = [
    "latency-1",
    "latency-2",
    "latency-3",
    "latency-4",
    "latency-5",
    "latency-6",
];
const JITTER_IDS: [&str; SENDER_SERIES] = [
    "jitter-1", "jitter-2", "jitter-3", "jitter-4", "jitter-5", "jitter-6",
];

/// A fraction on the CDF's y axis: its nines (0.9 is 1, 0.99 is 2, 0.999 is 3), so the tail
/// gets as much room as the body; the maximum sits one step above 99.9 %.
fn nines(q: f64) -> f64 {
    if q >= 1.0 { 4.0 } else { -(1.0 - q).log10() }
}

/// The CDF's y ticks: whole nines.
fn nines_label(v: f64) -> String {
    match v {
        0.0 => "0 %",
        1.0 => "90 %",
        2.0 => "99 %",
        3.0 => "99.9 %",
        4.0 => "max",
        _ => "",
    }
    .to_string()
}

/// The CDF's x axis holds log10 of nanoseconds; its ticks are whole decades.
fn decade_ns(v: f64) -> String {
    if v.fract() == 0.0 {
        ns(10f64.powf(v))
    } else {
        String::new()
    }
}

/// A figure of a latency or jitter object: the value (`p50_ns`), or else its histogram
/// bucket's upper bound (`p50_ns_at_most`, marked `false`); `None` when neither is known.
fn figure(object: &Map<String, Value>, stem: &str) -> Option<(f64, bool)> {
    if let Some(v) = object.get(&format!("{stem}_ns")).and_then(Value::as_f64) {
        return Some((v, true));
    }
    object
        .get(&format!("{stem}_ns_at_most"))
        .and_then(Value::as_f64)
        .map(|v| (v, false))
}

fn figure_text(f: Option<(f64, bool)>) -> String {
    match f {
        Some((v, true)) => ns(v),
        Some((v, false)) => format!("≤ {}", ns(v)),
        None => "unknown".into(),
    }
}

/// One CDF series through `object`'s figures (x: the figure, y: the fraction at or below
/// it); none with fewer than two known figures.
fn cdf_series(
    (id, color): (&'static str, &'static str),
    label: &str,
    what: &str,
    object: &Map<String, Value>,
) -> Option<Series> {
    let points: Vec<Point> = CDF_POINTS
        .iter()
        .filter_map(|(stem, name, q)| {
            let f = figure(object, stem)?;
            Some(Point {
                x: f.0.max(1.0).log10(),
                y: nines(*q),
                tip: format!("{label}: {what} {name} {}", figure_text(Some(f))),
                verdict: None,
            })
        })
        .collect();
    (points.len() >= 2).then(|| Series {
        id,
        label: label.into(),
        color,
        points,
        joined: true,
        dashed: false,
    })
}

/// The per-sender rows of the page: the sink's books of each sender, or a lone sender's
/// summary's sink verdict.
fn sender_rows(run: &Run) -> Vec<(String, &Map<String, Value>)> {
    let mut rows = Vec::new();
    if let Some(senders) = run
        .sink_summary
        .as_ref()
        .and_then(|s| s.get("senders"))
        .and_then(Value::as_array)
    {
        for s in senders.iter().filter_map(Value::as_object) {
            let name = text_field(s, "name").unwrap_or("unnamed").to_string();
            rows.push((name, s));
        }
    } else if let Some(send) = &run.send_summary
        && let Some(sink) = send.get("sink").and_then(Value::as_object)
    {
        let name = text_field(send, "name").unwrap_or("this sender");
        rows.push((format!("{name} (the sink's verdict)"), sink));
    }
    rows
}

/// A CDF of `what` (`latency` or `jitter`) per sender, with the whole run's where the JSON
/// has one, and a table of every figure; `false` when no object holds two figures.
fn cdf_view(
    out: &mut String,
    (id, what): (&'static str, &str),
    whole: Option<&Map<String, Value>>,
    senders: &[(String, &Map<String, Value>)],
    ids: &[&'static str; SENDER_SERIES],
) -> bool {
    let mut columns: Vec<(String, &Map<String, Value>)> = Vec::new();
    let mut series = Vec::new();
    if let Some(whole) = whole {
        series.extend(cdf_series((id, GREY), "all senders", what, whole));
        columns.push(("all senders".into(), whole));
    }
    for (i, (name, entry)) in senders.iter().enumerate() {
        let Some(object) = entry.get(what).and_then(Value::as_object) else {
            continue;
        };
        if i < SENDER_SERIES {
            series.extend(cdf_series((ids[i], SENDER_COLORS[i]), name, what, object));
        }
        columns.push((name.clone(), object));
    }
    if series.is_empty() {
        return false;
    }
    let chart_id = if what == "latency" {
        "latency-cdf"
    } else {
        "jitter-cdf"
    };
    out.push_str(&line_chart(&LineChart {
        id: chart_id,
        x: Axis {
            label: format!("{what} (log scale)"),
            format: decade_ns,
            log: false,
            whole: true,
        },
        y: Axis {
            label: "share at or below".into(),
            format: nines_label,
            log: false,
            whole: true,
        },
        series,
        rules: Vec::new(),
    }));
    let _ = write!(out, "<table class=\"figures\"><thead><tr><th>{what}</th>");
    for (name, _) in &columns {
        let _ = write!(out, "<th>{}</th>", esc(name));
    }
    out.push_str("</tr></thead><tbody>");
    for (stem, label) in TABLE_FIGURES {
        let _ = write!(out, "<tr><td>{label}</td>");
        for (_, object) in &columns {
            let _ = write!(out, "<td>{}</td>", figure_text(figure(object, stem)));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    true
}

/// A TCP sink's summary keeps its latency bounds at the top (`latency_p50_ns_le`): they are
/// gathered into a latency object of `_ns_at_most` figures.
fn tcp_latency(summary: &Map<String, Value>) -> Option<Map<String, Value>> {
    let figures: Map<String, Value> = summary
        .iter()
        .filter_map(|(key, v)| {
            let stem = key.strip_prefix("latency_")?.strip_suffix("_ns_le")?;
            Some((format!("{stem}_ns_at_most"), v.clone()))
        })
        .collect();
    (!figures.is_empty()).then_some(figures)
}

/// The latency object the page shows: the sink's over all senders, else the sink's verdict
/// carried in a sender's summary. Returns it with where it came from.
fn run_latency(run: &Run) -> Option<(Map<String, Value>, &'static str)> {
    let sink = run.sink_summary.as_ref();
    if let Some(l) = sink
        .and_then(|s| s.get("latency"))
        .and_then(Value::as_object)
    {
        return Some((l.clone(), "the sink's summary, all senders"));
    }
    if let Some(l) = sink.and_then(tcp_latency) {
        return Some((l, "the TCP sink's summary (histogram bucket bounds)"));
    }
    run.send_summary
        .as_ref()
        .and_then(|s| s.get("sink"))
        .and_then(Value::as_object)
        .and_then(|s| s.get("latency"))
        .and_then(Value::as_object)
        .map(|l| {
            (
                l.clone(),
                "the sink's verdict in the sender's summary (histogram bucket bounds)",
            )
        })
}

fn latency_section(out: &mut String, run: &Run) {
    out.push_str("<section id=\"latency\"><h2>Latency and jitter</h2>");
    let senders = sender_rows(run);
    let whole = run_latency(run);
    let drawn = cdf_view(
        out,
        ("latency", "latency"),
        whole.as_ref().map(|(l, _)| l),
        &senders,
        &LATENCY_IDS,
    );
    if drawn {
        let from = whole
            .as_ref()
            .map_or("each sender's books", |(_, from)| from);
        let count = whole
            .as_ref()
            .and_then(|(l, _)| count(l, "count"))
            .map(|c| format!(" over {} samples", group(c)))
            .unwrap_or_default();
        note(
            out,
            &format!(
                "One-way latency as a CDF (y: the share of packets at or below x, spaced by \
                 nines so the tail shows), per sender and, from {from}{count}, for all of them. \
                 A value with ≤ is a histogram bucket's upper bound."
            ),
        );
    } else {
        unknown(
            out,
            "latency: unknown; no summary in this JSON carries two latency figures (the run \
             ended before its summary, no packet carried a usable timestamp, or the sender's \
             clock was never estimated).",
        );
    }
    latency_over_time(out, run);
    if !cdf_view(out, ("jitter", "jitter"), None, &senders, &JITTER_IDS) {
        unknown(
            out,
            "jitter: unknown; no sender's books in this JSON carry jitter (a UDP sink's summary \
             and a sender's verdict do; a TCP stream has none).",
        );
    } else {
        note(
            out,
            "Jitter is |D| of RFC 3550 (the change in one-way transit between consecutive \
             packets of a session), per sender.",
        );
    }
    out.push_str("</section>");
}

const LATENCY_TIME_IDS: [&str; SENDER_SERIES] = [
    "latency-time-1",
    "latency-time-2",
    "latency-time-3",
    "latency-time-4",
    "latency-time-5",
    "latency-time-6",
];
const LATENCY_TIME_P99_IDS: [&str; SENDER_SERIES] = [
    "latency-time-p99-1",
    "latency-time-p99-2",
    "latency-time-p99-3",
    "latency-time-p99-4",
    "latency-time-p99-5",
    "latency-time-p99-6",
];

/// Each sender's p50 and p99 per sink interval, on decades of ns; unknown where the sink's
/// intervals carry no sender's latency.
fn latency_over_time(out: &mut String, run: &Run) {
    let mut series = Vec::new();
    for (i, sender) in run.sender_latency.iter().take(SENDER_SERIES).enumerate() {
        for (stem, ids, dashed) in [
            ("p50", &LATENCY_TIME_IDS, false),
            ("p99", &LATENCY_TIME_P99_IDS, true),
        ] {
            let points = sender
                .points
                .iter()
                .filter_map(|(t, latency)| {
                    let (v, exact) = figure(latency, stem)?;
                    (v > 0.0).then(|| Point {
                        x: *t,
                        y: v.log10(),
                        tip: format!(
                            "{}: {stem} {}{} at {} s",
                            sender.name,
                            if exact { "" } else { "≤" },
                            ns(v),
                            seconds(*t)
                        ),
                        verdict: None,
                    })
                })
                .collect();
            series.push(Series {
                id: ids[i],
                label: format!("{} {stem}", sender.name),
                color: SENDER_COLORS[i],
                points,
                joined: true,
                dashed,
            });
        }
    }
    if series.iter().all(|s| s.points.is_empty()) {
        unknown(
            out,
            "latency over time: unknown; no sink interval in this JSON carries a sender's \
             latency (a sink without --json, no packet or record with a usable timestamp, or \
             JSON from an older ringblast).",
        );
        return;
    }
    out.push_str(&line_chart(&LineChart {
        id: "latency-time-chart",
        x: seconds_axis(),
        y: Axis {
            label: "latency in the interval (log scale)".into(),
            format: decade_ns,
            log: false,
            whole: true,
        },
        series,
        rules: Vec::new(),
    }));
    note(
        out,
        "Each sender's latency over time: the p50 (solid) and p99 (dashed) of its packets \
         (records over TCP) within each sink interval, as the upper bounds (≤) of the sink's \
         latency cells (1, 2 and 5 per decade); an interval keeps only the cells, so these are \
         bounds, not figures.",
    );
}

// ---- senders ------------------------------------------------------------------------------

/// A sender's latency figure in its table row.
fn latency_cell(entry: &Map<String, Value>, stem: &str) -> String {
    match entry.get("latency").map(Value::as_object) {
        None => "n/a".into(),
        Some(None) => "unknown".into(),
        Some(Some(latency)) => figure_text(figure(latency, stem)),
    }
}

/// A sender's jitter in its table row: p50 and p99.
fn jitter_cell(entry: &Map<String, Value>) -> String {
    match entry.get("jitter").and_then(Value::as_object) {
        Some(j) => format!(
            "p50 {}<br>p99 {}",
            figure_text(figure(j, "p50")),
            figure_text(figure(j, "p99"))
        ),
        None if entry.contains_key("jitter") => "unknown".into(),
        None => "n/a".into(),
    }
}

fn senders_section(out: &mut String, run: &Run) {
    out.push_str("<section id=\"senders\"><h2>Per sender</h2>");
    let rows = sender_rows(run);
    if rows.is_empty() {
        unknown(
            out,
            "No per-sender books in this JSON: they are in the sink's summary (or, for one \
             sender, in its summary's sink object); the run may have ended without one.",
        );
        out.push_str("</section>");
        return;
    }
    if run.tcp {
        tcp_sender_rows(out, &rows);
        out.push_str("</section>");
        return;
    }
    out.push_str(
        "<div class=\"wide\"><table class=\"senders\"><thead><tr><th>sender</th><th>received</th><th>rate</th>\
         <th>lost</th><th>reordered</th><th>duplicates</th><th>kernel drops</th><th>late</th>\
         <th>latency p50</th><th>p99</th><th>max</th><th>jitter</th><th>clock</th></tr></thead><tbody>",
    );
    for (name, s) in &rows {
        let received = if s.contains_key("rx_packets") {
            cell(s, "rx_packets", plain)
        } else {
            cell(s, "rx_records", plain)
        };
        let clock = s
            .get("latency_clock")
            .and_then(Value::as_object)
            .and_then(|c| text_field(c, "kind"))
            .unwrap_or("n/a");
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{received}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(name),
            cell(s, "pps", pps),
            cell(s, "rx_lost", plain),
            cell(s, "rx_reordered", plain),
            cell(s, "rx_duplicates", plain),
            cell(s, "rx_kernel_drops", plain),
            cell(s, "rx_late", plain),
            latency_cell(s, "p50"),
            latency_cell(s, "p99"),
            latency_cell(s, "max"),
            jitter_cell(s),
            esc(clock),
        );
    }
    out.push_str("</tbody></table></div>");
    note(
        out,
        "n/a: not in this run's JSON; unknown: the run could not measure it. Latency with ≤ is a \
         histogram bucket's upper bound.",
    );
    out.push_str("</section>");
}

/// A TCP sink's books per sender: records, bytes, invalid events, runs, connections, latency
/// (cell bounds), clock.
fn tcp_sender_rows(out: &mut String, rows: &[(String, &Map<String, Value>)]) {
    out.push_str(
        "<div class=\"wide\"><table class=\"senders\"><thead><tr><th>sender</th>\
         <th>records</th><th>bytes</th><th>invalid</th><th>runs</th><th>connections closed</th>\
         <th>open</th><th>latency p50</th><th>latency p99</th><th>clock</th></tr></thead><tbody>",
    );
    for (name, s) in rows {
        let clock = s
            .get("latency_clock")
            .and_then(Value::as_object)
            .and_then(|c| text_field(c, "kind"))
            .unwrap_or("n/a");
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(name),
            cell(s, "rx_records", plain),
            cell(s, "rx_bytes", plain),
            cell(s, "rx_invalid", plain),
            cell(s, "sessions", plain),
            cell(s, "conns_closed", plain),
            cell(s, "conns_open", plain),
            latency_cell(s, "p50"),
            latency_cell(s, "p99"),
            esc(clock),
        );
    }
    out.push_str("</tbody></table></div>");
    note(
        out,
        "The TCP sink's books: complete, in-sequence records and their bytes, invalid events on \
         the sender's connections, its runs (epochs), its connections and its records' latency \
         (≤: a latency cell's upper bound). n/a: not in this run's JSON; unknown: the run \
         could not measure it.",
    );
}

/// A TCP sender's own figures: the summary's counts and TCP_INFO, and its connections' largest
/// smoothed RTT and their retransmits per interval.
fn tcp_section(out: &mut String, run: &Run) {
    if !run.tcp {
        return;
    }
    out.push_str("<section id=\"tcp\"><h2>TCP</h2>");
    let tcp_intervals: Vec<&Interval> = run
        .send_intervals
        .iter()
        .filter(|i| i.srtt_us_max.is_some() || i.retransmits.is_some())
        .collect();
    if tcp_intervals.is_empty() {
        unknown(
            out,
            "TCP over time: unknown; no sender interval in this JSON carries TCP_INFO (a sink's \
             JSON alone, or a run shorter than one interval).",
        );
    } else {
        let srtt = tcp_intervals
            .iter()
            .filter_map(|i| {
                let v = i.srtt_us_max?;
                Some(Point {
                    x: i.t,
                    y: v,
                    tip: format!("largest smoothed RTT at {} s: {v} µs", seconds(i.t)),
                    verdict: None,
                })
            })
            .collect();
        out.push_str(&line_chart(&LineChart {
            id: "tcp-rtt-chart",
            x: seconds_axis(),
            y: Axis {
                label: "largest smoothed RTT (µs)".into(),
                format: plain,
                log: false,
                whole: false,
            },
            series: vec![Series {
                id: "srtt-max",
                label: "largest srtt of the sender's connections".into(),
                color: BLUE,
                points: srtt,
                joined: true,
                dashed: false,
            }],
            rules: Vec::new(),
        }));
        let mut before = 0;
        let retransmits = tcp_intervals
            .iter()
            .filter_map(|i| {
                let total = i.retransmits?;
                let within = total.saturating_sub(before);
                before = total;
                Some(Point {
                    x: i.t,
                    y: within as f64,
                    tip: format!(
                        "retransmitted segments in the interval ending at {} s: {within}",
                        seconds(i.t)
                    ),
                    verdict: None,
                })
            })
            .collect();
        out.push_str(&line_chart(&LineChart {
            id: "tcp-retransmits-chart",
            x: seconds_axis(),
            y: Axis {
                label: "segments in the interval".into(),
                format: plain,
                log: false,
                whole: true,
            },
            series: vec![Series {
                id: "retransmits",
                label: "retransmitted segments".into(),
                color: RED,
                points: retransmits,
                joined: true,
                dashed: false,
            }],
            rules: Vec::new(),
        }));
        note(
            out,
            "From TCP_INFO of the sender's connections at each interval's end: the largest \
             smoothed RTT among them, and the segments they retransmitted within the interval.",
        );
    }
    let (send, sink) = (run.send_summary.as_ref(), run.sink_summary.as_ref());
    let row = |m: Option<&Map<String, Value>>, key: &str, f: fn(f64) -> String| {
        m.map_or_else(|| "n/a".to_string(), |m| cell(m, key, f))
    };
    let rows: [(&str, String); 14] = [
        ("records written (sender)", row(send, "tx_records", plain)),
        (
            "records delivered (acknowledged)",
            row(send, "delivered_records", plain),
        ),
        ("records received (sink)", row(sink, "rx_records", plain)),
        ("records per second", row(send, "records_per_s", plain)),
        (
            "target records per second",
            row(send, "target_records_per_s", plain),
        ),
        ("connects", row(send, "connects", plain)),
        ("reconnects", row(send, "reconnects", plain)),
        ("resets", row(send, "resets", plain)),
        ("connect failures", row(send, "connect_failures", plain)),
        ("retransmitted segments", row(send, "retransmits", plain)),
        ("largest smoothed RTT (µs)", row(send, "srtt_us_max", plain)),
        (
            "congestion window (segments)",
            row(send, "cwnd_segments", plain),
        ),
        ("connections accepted (sink)", row(sink, "accepts", plain)),
        ("invalid events (sink)", row(sink, "rx_invalid", plain)),
    ];
    out.push_str("<table class=\"tcp\"><tbody>");
    for (label, value) in rows {
        let _ = write!(out, "<tr><td>{label}</td><td>{value}</td></tr>");
    }
    out.push_str("</tbody></table>");
    note(
        out,
        "The sender's and the sink's summaries; n/a: that side's summary is not in this JSON.",
    );
    out.push_str("</section>");
}

/// A UDP request/response run's own figures (the send summary's `rr`); nothing for a stream.
fn exchange_section(out: &mut String, run: &Run) {
    let Some(rr) = run
        .send_summary
        .as_ref()
        .and_then(|s| s.get("rr"))
        .and_then(Value::as_object)
    else {
        return;
    };
    out.push_str("<section id=\"rr\"><h2>Requests and responses</h2><table><tbody>");
    let rows: [(&str, String); 7] = [
        ("transactions", cell(rr, "transactions", plain)),
        (
            "transactions per second",
            cell(rr, "transactions_per_s", plain),
        ),
        ("timed out", cell(rr, "timeouts", plain)),
        (
            "of them lost on the way to the sink",
            cell(rr, "lost_requests", plain),
        ),
        (
            "of them without an answer",
            cell(rr, "lost_responses", plain),
        ),
        (
            "unmatched responses",
            cell(rr, "unmatched_responses", plain),
        ),
        (
            "context switches per transaction (process, machine)",
            format!(
                "{}, {}",
                cell(rr, "ctx_switches_per_transaction", plain),
                cell(rr, "machine_ctx_switches_per_transaction", plain)
            ),
        ),
    ];
    for (label, value) in rows {
        let _ = write!(out, "<tr><td>{label}</td><td>{value}</td></tr>");
    }
    match rr.get("rtt").and_then(Value::as_object) {
        Some(rtt) => {
            for (stem, label) in [
                ("min", "round trip min"),
                ("mean", "mean"),
                ("p50", "p50"),
                ("p99", "p99"),
                ("p999", "p99.9"),
                ("max", "max"),
            ] {
                let _ = write!(
                    out,
                    "<tr><td>{label}</td><td>{}</td></tr>",
                    cell(rtt, &format!("{stem}_ns"), ns)
                );
            }
            out.push_str("</tbody></table>");
        }
        None => {
            out.push_str("</tbody></table>");
            unknown(out, "round trip: unknown (no transaction completed)");
        }
    }
    note(
        out,
        "Round trips are taken on the sender's clock from each request's queueing to its \
         response. Requests the sink never counted were lost on the way to it; the other \
         timeouts had no answer in time.",
    );
    out.push_str("</section>");
}

// ---- search -------------------------------------------------------------------------------

fn ratio_name(ratio: f64) -> String {
    if ratio == 0.0 {
        "NDR".into()
    } else {
        format!("PDR (loss ≤ {})", percent(ratio))
    }
}

fn search_section(out: &mut String, run: &Run) {
    if run.trials.is_empty() && run.search.is_empty() {
        return;
    }
    out.push_str("<section id=\"search\"><h2>Search: the trial ladder, NDR and PDR</h2>");
    let max_ratio = run.search.iter().map(|r| r.loss_ratio).fold(0.0, f64::max);
    let points: Vec<Point> = run
        .trials
        .iter()
        .filter_map(|t| {
            let rate = t.rate_pps?;
            let loss = t.loss_ratio;
            let class = match loss {
                // Short of its rate: no pass and no failure, whatever it lost.
                _ if t.sender_limited => "limited",
                Some(0.0) => "pass",
                Some(l) if l <= max_ratio => "partial",
                _ => "fail",
            };
            Some(Point {
                x: t.number as f64,
                y: rate,
                tip: format!(
                    "trial {} at {} for {}: lost {} of {} (loss {}){}",
                    t.number,
                    pps(rate),
                    t.duration_s.map_or("unknown".into(), |d| format!("{d} s")),
                    opt_count(t.lost),
                    opt_count(t.offered),
                    loss.map_or("unknown".into(), percent),
                    if t.sender_limited {
                        "; sender-limited: it offered less than its rate, so it passes nothing"
                    } else {
                        ""
                    }
                ),
                verdict: Some(class),
            })
        })
        .collect();
    let mut rules = Vec::new();
    for r in &run.search {
        if let Some(lower) = r.lower_pps {
            let ndr = r.loss_ratio == 0.0;
            rules.push(Rule {
                id: if ndr { "ndr" } else { "pdr" },
                y: lower,
                label: format!("{} {}", ratio_name(r.loss_ratio), pps(lower)),
                color: if ndr { GREEN } else { AMBER },
            });
        }
    }
    if !points.is_empty() {
        out.push_str(&line_chart(&LineChart {
            id: "trials-chart",
            x: Axis {
                label: "trial".into(),
                format: whole,
                log: false,
                whole: true,
            },
            y: Axis {
                label: "offered rate (packets per second)".into(),
                format: pps,
                log: false,
                whole: false,
            },
            series: vec![Series {
                id: "trial_rate",
                label: "trial rate (green: no loss, amber: within the PDR's loss, red: above, grey: sender-limited)"
                    .into(),
                color: BLUE,
                points,
                joined: true,
                dashed: false,
            }],
            rules,
        }));
    }
    let _ = write!(
        out,
        "<table class=\"results\"><thead><tr><th>result</th><th>rate</th><th>bound above</th>\
         <th>converged</th></tr></thead><tbody>"
    );
    for r in &run.search {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&ratio_name(r.loss_ratio)),
            r.lower_pps
                .map_or_else(|| "not found (every trial lost more)".into(), pps),
            match (r.upper_pps, r.sender_limited) {
                (Some(u), true) => format!("{} (the sender could not offer it)", pps(u)),
                (u, _) => u.map_or_else(|| "unknown".into(), pps),
            },
            r.converged
                .map_or("unknown", |c| if c { "yes" } else { "no" })
        );
    }
    if run.search.is_empty() {
        out.push_str(
            "<tr><td colspan=\"4\" class=\"unknown\">unknown: no \"search\" line (the search \
             did not finish)</td></tr>",
        );
    }
    out.push_str("</tbody></table>");
    out.push_str(
        "<table class=\"trials\"><thead><tr><th>trial</th><th>rate</th><th>achieved</th>\
         <th>length</th><th>offered</th><th>lost</th><th>loss</th><th>sender</th></tr></thead><tbody>",
    );
    for t in &run.trials {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            t.number,
            t.rate_pps.map_or_else(|| "unknown".into(), pps),
            t.achieved_pps.map_or_else(|| "unknown".into(), pps),
            t.duration_s
                .map_or_else(|| "unknown".into(), |d| format!("{d} s")),
            opt_count(t.offered),
            opt_count(t.lost),
            t.loss_ratio.map_or_else(|| "unknown".into(), percent),
            if t.sender_limited {
                "sender-limited"
            } else {
                "offered its rate"
            },
        );
    }
    out.push_str("</tbody></table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::html_report::model::parse;

    fn page(jsonl: &str) -> String {
        render(&parse(jsonl, "run.jsonl").unwrap(), "t", "run.jsonl")
    }

    #[test]
    fn latency_and_jitter_are_cdfs_per_sender_and_unknown_when_absent() {
        let with = page(
            r#"{"type":"summary","role":"sink","latency":{"count":11,"min_ns":500,"p50_ns":1000,"p99_ns":9000,"max_ns":20000,"mean_ns":1500},"senders":[{"name":"a","rx_packets":5,"latency":{"min_ns":500,"p50_ns":900,"p99_ns":null,"p99_ns_at_most":10000,"max_ns":20000},"jitter":{"min_ns":0,"p50_ns":120,"p99_ns":800,"max_ns":4000}},{"name":"b","rx_packets":6}]}"#,
        );
        let points = |id: &str| {
            with.matches(&format!("class=\"pt\" data-series=\"{id}\""))
                .count()
        };
        assert_eq!(points("latency"), 4, "all senders: min, p50, p99, max");
        assert_eq!(points("latency-1"), 4, "sender a, its p99 a bucket bound");
        assert_eq!(points("jitter-1"), 4, "{with}");
        assert_eq!(
            points("latency-2") + points("jitter-2"),
            0,
            "b has no figures"
        );
        assert!(
            with.contains("<tr><td>p99</td><td>9 µs</td><td>≤ 10 µs</td></tr>"),
            "{with}"
        );
        assert!(
            with.contains("<tr><td>mean</td><td>1.5 µs</td><td>unknown</td></tr>"),
            "{with}"
        );
        assert!(with.contains("p50 120 ns<br>p99 800 ns"), "a's row: {with}");
        assert!(!with.contains("jitter: unknown"), "{with}");
        // Fractions are spaced by nines and latency by decades: whole ticks only.
        assert!(
            with.contains(">99.9 %<") && with.contains(">10 µs<"),
            "{with}"
        );
        let without = page(r#"{"type":"summary","role":"sink","latency":{"p50_ns":1000}}"#);
        assert!(
            without.contains("latency: unknown"),
            "one figure draws no CDF"
        );
        assert!(without.contains("jitter: unknown"));
        assert!(without.contains("latency over time: unknown"));
    }

    #[test]
    fn a_request_response_run_shows_its_transactions_and_round_trips() {
        let rr = page(
            r#"{"type":"summary","role":"send","sink":{"rx_packets":9},"rr":{"transactions":8,"transactions_per_s":4,"timeouts":1,"lost_requests":1,"lost_responses":0,"unmatched_responses":0,"ctx_switches_per_transaction":null,"machine_ctx_switches_per_transaction":2.5,"rtt":{"min_ns":20000,"mean_ns":30000,"p50_ns":29000,"p99_ns":50000,"p999_ns":60000,"max_ns":70000}}}"#,
        );
        assert!(rr.contains("id=\"rr\""), "{rr}");
        assert!(rr.contains("<td>round trip min</td><td>20 µs</td>"), "{rr}");
        assert!(rr.contains("<td>of them lost on the way to the sink</td><td>1</td>"));
        assert!(rr.contains("<td>unknown, 2.50</td>"), "{rr}");
        let none = page(
            r#"{"type":"summary","role":"send","rr":{"transactions":0,"timeouts":3,"lost_requests":null,"rtt":null}}"#,
        );
        assert!(none.contains("round trip: unknown"), "{none}");
        assert!(none.contains("without an answer</td><td>n/a"), "{none}");
        let stream = page(r#"{"type":"summary","role":"send","sink":{"rx_packets":9}}"#);
        assert!(!stream.contains("id=\"rr\""));
    }

    #[test]
    fn a_sender_alone_shows_the_sinks_verdict_as_its_row_and_a_search_only_its_ladder() {
        let send = page(
            r#"{"type":"summary","role":"send","target_pps":1000,"sink":{"rx_packets":9,"rx_lost":1,"latency":{"p99_ns_at_most":2000000}}}"#,
        );
        assert!(
            send.contains("this sender (the sink&#39;s verdict)"),
            "{send}"
        );
        assert!(send.contains("≤ 2 ms"), "{send}");
        let search = page(
            r#"{"type":"trial","trial":1,"rate_pps":100,"loss_ratio":0.0}
{"type":"search","results":[{"loss_ratio":0.0,"lower_pps":100,"upper_pps":null,"converged":false}]}"#,
        );
        assert!(search.contains("data-rule=\"ndr\""));
        assert!(!search.contains("id=\"rate\""), "no empty run views");
        assert!(search.contains("NDR</td><td>100 pps</td><td>unknown</td><td>no"));
    }

    /// A trial that offered less than its rate lost nothing of what it did offer, yet it is
    /// drawn and listed as sender-limited, never as a pass, and a bound it set says so.
    #[test]
    fn a_sender_limited_trial_is_marked_and_never_drawn_as_a_pass() {
        let search = page(
            r#"{"type":"trial","trial":1,"rate_pps":400000,"achieved_pps":65000,"loss_ratio":0.0,"sender_limited":true}
{"type":"trial","trial":2,"rate_pps":60000,"achieved_pps":60000,"loss_ratio":0.0,"sender_limited":false}
{"type":"search","reason":"sender_limited","results":[{"loss_ratio":0.0,"lower_pps":60000,"upper_pps":400000,"converged":true,"sender_limited":true}]}"#,
        );
        assert_eq!(
            search.matches("data-verdict=\"limited\"").count(),
            1,
            "{search}"
        );
        assert_eq!(
            search.matches("data-verdict=\"pass\"").count(),
            1,
            "{search}"
        );
        assert!(search.contains("<td>sender-limited</td>"), "{search}");
        assert!(
            search.contains("(the sender could not offer it)"),
            "{search}"
        );
    }
}
