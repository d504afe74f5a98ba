//! Reading a run's JSON Lines into what the page shows: interval, step and trial records in
//! order, the summaries and the search result. Fields are read defensively: a record type or a
//! field this reader does not know is skipped (later versions may add a schema field or new
//! metrics), and a field that is absent or null stays `None`, shown as unknown, never as 0.

use serde_json::{Map, Value};

use crate::error::Error;

/// One `"type":"interval"` line of one role.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Interval {
    /// Seconds since the run started, at the end of the interval.
    pub(crate) t: f64,
    /// The interval's length in seconds, when the record says.
    pub(crate) length: Option<f64>,
    /// Packets per second over the interval (UDP).
    pub(crate) pps: Option<f64>,
    /// Payload bits per second over the interval.
    pub(crate) bps: Option<f64>,
    /// Lost, reordered and duplicate datagrams counted at the sink in the interval (UDP sink).
    pub(crate) lost: Option<u64>,
    pub(crate) reordered: Option<u64>,
    pub(crate) duplicates: Option<u64>,
    /// Datagrams the sink's kernel dropped in the interval (its sockets' receive queues were
    /// full); part of the run's loss beside `lost`.
    pub(crate) kernel_drops: Option<u64>,
    /// TCP sender: the largest smoothed RTT (µs) and the congestion window (segments) of its
    /// connections at the interval's end, and its retransmitted segments since the start.
    pub(crate) srtt_us_max: Option<f64>,
    pub(crate) cwnd_segments: Option<f64>,
    pub(crate) retransmits: Option<u64>,
    /// TCP: records written (sender) or received (sink) since the start; the interval's
    /// records per second go into `pps`.
    pub(crate) records: Option<u64>,
}

/// One sender's latency over time: at each sink interval's end (seconds since the start), the
/// latency object of its packets within that interval (cell bounds).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SenderLatency {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, Map<String, Value>)>,
}

/// Adds a sink interval's `senders[]` latency objects to `into`.
fn add_sender_latency(into: &mut Vec<SenderLatency>, record: &Map<String, Value>) {
    // A UDP interval says its end as `elapsed_s`, a TCP one as `end_s`.
    let Some(t) = number(record, "elapsed_s").or_else(|| number(record, "end_s")) else {
        return;
    };
    let parts = record.get("senders").and_then(Value::as_array);
    for part in parts.into_iter().flatten().filter_map(Value::as_object) {
        let (Some(name), Some(latency)) = (
            text_field(part, "name"),
            part.get("latency").and_then(Value::as_object),
        ) else {
            continue;
        };
        let at = match into.iter().position(|s| s.name == name) {
            Some(at) => at,
            None => {
                into.push(SenderLatency {
                    name: name.to_string(),
                    points: Vec::new(),
                });
                into.len() - 1
            }
        };
        into[at].points.push((t, latency.clone()));
    }
}

/// One `"type":"step"` line of a stepped or ramped send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    /// The step's number (1-based), or its position when the record has none.
    pub(crate) number: u64,
    pub(crate) start_s: Option<f64>,
    pub(crate) end_s: Option<f64>,
    pub(crate) target_pps: Option<f64>,
    pub(crate) pps: Option<f64>,
    pub(crate) tx_packets: Option<u64>,
    /// The sink's verdict on this step alone.
    pub(crate) rx_packets: Option<u64>,
    pub(crate) lost: Option<u64>,
    pub(crate) reordered: Option<u64>,
    pub(crate) duplicates: Option<u64>,
    pub(crate) loss_ratio: Option<f64>,
}

/// One `"type":"trial"` line of a search.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Trial {
    pub(crate) number: u64,
    pub(crate) rate_pps: Option<f64>,
    pub(crate) achieved_pps: Option<f64>,
    pub(crate) duration_s: Option<f64>,
    pub(crate) offered: Option<u64>,
    pub(crate) lost: Option<u64>,
    pub(crate) loss_ratio: Option<f64>,
    pub(crate) sender_limited: bool,
}

/// One loss ratio's result in the `"type":"search"` line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchResult {
    pub(crate) loss_ratio: f64,
    /// The highest rate that passed (the NDR for ratio 0, a PDR otherwise).
    pub(crate) lower_pps: Option<f64>,
    pub(crate) upper_pps: Option<f64>,
    /// The upper bound is a rate the sender could not offer.
    pub(crate) sender_limited: bool,
    pub(crate) converged: Option<bool>,
}

/// Everything the page is drawn from.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) send_intervals: Vec<Interval>,
    pub(crate) sink_intervals: Vec<Interval>,
    pub(crate) steps: Vec<Step>,
    pub(crate) trials: Vec<Trial>,
    pub(crate) search: Vec<SearchResult>,
    pub(crate) send_summary: Option<Map<String, Value>>,
    pub(crate) sink_summary: Option<Map<String, Value>>,
    /// The `"type":"start"` record: what ran, where and when (the page's header).
    pub(crate) start: Option<Map<String, Value>>,
    /// Each sender's latency per sink interval, in the order senders first appear.
    pub(crate) sender_latency: Vec<SenderLatency>,
    /// `"tcp"` when any record says so.
    pub(crate) tcp: bool,
    /// Lines read (blank ones not counted) and lines of a type this reader does not know.
    pub(crate) lines: usize,
    pub(crate) unknown_lines: usize,
}

impl Run {
    /// What the start record says ran: `send udp to 10.0.0.2:9000, started 2026-…Z`.
    pub(crate) fn started(&self) -> Option<String> {
        let start = self.start.as_ref()?;
        let text = |key: &str| start.get(key).and_then(Value::as_str).unwrap_or("?");
        let whither = match text("role") {
            "sink" => "on",
            "pair" => "over",
            _ => "to",
        };
        Some(format!(
            "{} {} {whither} {}, started {}",
            text("role"),
            text("protocol"),
            text("target"),
            text("started_at")
        ))
    }

    /// What kind of run the records come from, for the title.
    pub(crate) fn kind(&self) -> &'static str {
        if !self.trials.is_empty() || !self.search.is_empty() {
            "search"
        } else if !self.steps.is_empty() {
            "stepped send"
        } else if self.has_send() && self.has_sink() {
            "pair"
        } else if self.has_send() {
            "send"
        } else {
            "sink"
        }
    }

    fn has_send(&self) -> bool {
        !self.send_intervals.is_empty() || self.send_summary.is_some()
    }

    fn has_sink(&self) -> bool {
        !self.sink_intervals.is_empty() || self.sink_summary.is_some()
    }
}

/// Reads JSON Lines; `name` is how errors name the input.
pub(crate) fn parse(text: &str, name: &str) -> Result<Run, Error> {
    let fix = "give it the stdout of a ringblast send, sink, pair or search run with --json \
               (stdout only: the text lines go to stderr)";
    let mut run = Run::default();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        run.lines += 1;
        let record: Map<String, Value> = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                return Err(Error::BadInput(format!(
                    "{name}:{}: not a JSON object; {fix}",
                    index + 1
                )));
            }
            Err(e) => {
                return Err(Error::BadInput(format!(
                    "{name}:{}: not JSON ({e}); {fix}",
                    index + 1
                )));
            }
        };
        if text_field(&record, "protocol") == Some("tcp") {
            run.tcp = true;
        }
        let role = text_field(&record, "role");
        match (text_field(&record, "type"), role) {
            (Some("interval"), Some("send")) => run.send_intervals.push(interval(&record)),
            (Some("interval"), Some("sink")) => {
                add_sender_latency(&mut run.sender_latency, &record);
                run.sink_intervals.push(interval(&record));
            }
            (Some("step"), _) => {
                let number = run.steps.len() as u64 + 1;
                run.steps.push(step(&record, number));
            }
            (Some("trial"), _) => {
                let number = run.trials.len() as u64 + 1;
                run.trials.push(trial(&record, number));
            }
            (Some("search"), _) => run.search = search_results(&record),
            (Some("start"), _) => run.start = Some(record),
            (Some("summary"), Some("send")) => run.send_summary = Some(record),
            (Some("summary"), Some("sink")) => run.sink_summary = Some(record),
            _ => run.unknown_lines += 1,
        }
    }
    if run.lines == 0 {
        return Err(Error::BadInput(format!("{name} is empty; {fix}")));
    }
    if run.lines == run.unknown_lines {
        return Err(Error::BadInput(format!(
            "{name} holds no ringblast records (type start, interval, step, summary, trial or search) \
             in its {} lines; {fix}",
            run.lines
        )));
    }
    fill_interval_times(&mut run.send_intervals);
    fill_interval_times(&mut run.sink_intervals);
    fill_record_rates(&mut run.send_intervals);
    fill_record_rates(&mut run.sink_intervals);
    Ok(run)
}

fn interval(r: &Map<String, Value>) -> Interval {
    let length = number(r, "interval_s").or_else(|| {
        let (start, end) = (number(r, "start_s")?, number(r, "end_s")?);
        Some(end - start)
    });
    Interval {
        t: number(r, "elapsed_s")
            .or_else(|| number(r, "end_s"))
            .unwrap_or(f64::NAN),
        length,
        pps: number(r, "pps"),
        bps: number(r, "bps"),
        lost: count(r, "rx_lost"),
        reordered: count(r, "rx_reordered"),
        duplicates: count(r, "rx_duplicates"),
        kernel_drops: count(r, "rx_kernel_drops"),
        srtt_us_max: number(r, "srtt_us_max"),
        cwnd_segments: number(r, "cwnd_segments"),
        retransmits: count(r, "retransmits"),
        records: count(r, "tx_records").or_else(|| count(r, "rx_records")),
    }
}

/// TCP intervals count records since the start: each one's rate is its gain over its length.
fn fill_record_rates(intervals: &mut [Interval]) {
    let mut before = 0;
    for i in intervals {
        let Some(records) = i.records else { continue };
        if i.pps.is_none()
            && let Some(length) = i.length.filter(|l| *l > 0.0)
        {
            i.pps = Some(records.saturating_sub(before) as f64 / length);
        }
        before = records;
    }
}

/// Intervals without a time get the previous one's plus its length (or plus one).
fn fill_interval_times(intervals: &mut [Interval]) {
    let mut last = 0.0;
    for i in intervals {
        if !i.t.is_finite() {
            i.t = last + i.length.unwrap_or(1.0);
        }
        last = i.t;
    }
}

fn step(r: &Map<String, Value>, position: u64) -> Step {
    let sink = r.get("sink").and_then(Value::as_object);
    let from_sink = |key: &str| sink.and_then(|s| count(s, key));
    Step {
        number: count(r, "step").unwrap_or(position),
        start_s: number(r, "start_s"),
        end_s: number(r, "end_s"),
        target_pps: number(r, "target_pps"),
        pps: number(r, "pps"),
        tx_packets: count(r, "tx_packets"),
        rx_packets: from_sink("rx_packets"),
        lost: count(r, "loss").or_else(|| from_sink("rx_lost")),
        reordered: from_sink("rx_reordered"),
        duplicates: from_sink("rx_duplicates"),
        loss_ratio: number(r, "loss_ratio"),
    }
}

fn trial(r: &Map<String, Value>, position: u64) -> Trial {
    Trial {
        number: count(r, "trial").unwrap_or(position),
        rate_pps: number(r, "rate_pps"),
        achieved_pps: number(r, "achieved_pps"),
        duration_s: number(r, "duration_s"),
        offered: count(r, "offered"),
        lost: count(r, "lost"),
        loss_ratio: number(r, "loss_ratio"),
        sender_limited: r
            .get("sender_limited")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

fn search_results(r: &Map<String, Value>) -> Vec<SearchResult> {
    let Some(results) = r.get("results").and_then(Value::as_array) else {
        return Vec::new();
    };
    results
        .iter()
        .filter_map(Value::as_object)
        .filter_map(|o| {
            Some(SearchResult {
                loss_ratio: number(o, "loss_ratio")?,
                lower_pps: number(o, "lower_pps"),
                upper_pps: number(o, "upper_pps"),
                sender_limited: o
                    .get("sender_limited")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                converged: o.get("converged").and_then(Value::as_bool),
            })
        })
        .collect()
}

pub(crate) fn text_field<'a>(r: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    r.get(key).and_then(Value::as_str)
}

/// A finite number, or `None` when absent, null or not a number.
pub(crate) fn number(r: &Map<String, Value>, key: &str) -> Option<f64> {
    r.get(key).and_then(Value::as_f64).filter(|v| v.is_finite())
}

/// A non-negative integer counter, or `None` when absent, null or not one.
pub(crate) fn count(r: &Map<String, Value>, key: &str) -> Option<u64> {
    r.get(key).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_foreign_input_are_one_line_errors_with_exit_4() {
        for (text, says) in [
            ("", "is empty"),
            ("\n  \n", "is empty"),
            ("send summary: 3 packets\n", "not JSON"),
            ("[1,2]\n", "not a JSON object"),
            (
                "{\"type\":\"other\"}\n{\"a\":1}\n",
                "holds no ringblast records",
            ),
        ] {
            let err = parse(text, "run.jsonl").unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(says), "{text:?}: {msg}");
            assert!(msg.contains("--json"), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
            assert_eq!(err.exit_code(), 4);
        }
    }

    #[test]
    fn unknown_fields_and_records_are_skipped_and_nulls_stay_unknown() {
        let text = r#"{"schema":2,"type":"interval","role":"sink","elapsed_s":1.0,"pps":5,"rx_lost":null,"rx_reordered":2}
{"type":"future","role":"send"}
{"type":"interval","role":"send","pps":7}
"#;
        let run = parse(text, "x").unwrap();
        assert_eq!(run.sink_intervals.len(), 1);
        assert_eq!(run.sink_intervals[0].lost, None);
        assert_eq!(run.sink_intervals[0].reordered, Some(2));
        assert_eq!(
            run.send_intervals[0].t, 1.0,
            "no time: one second per interval"
        );
        assert_eq!(run.unknown_lines, 1);
    }
}
