//! Latency as reports show it, beside how it relates to the sender's clock: the quantiles as
//! cell bounds (`null` when there were no samples; a quantile in the open top cell has no upper
//! bound and says `*_ns_at_least` instead), and the `latency_clock` object: the kind, the
//! offset and its error bound, the control round trip, the packets without a sample and the
//! samples clamped at 0, and, when unknown, why. Jitter (|D| of consecutive packets, RFC 3550
//! section 6.4.1) is shown the same way, with its mean and count, and is unknown exactly when
//! the latency is.

use serde_json::{Map, Value, json};

use crate::{
    figures::Figures,
    latency_clock::{ClockKind, LatencyClock},
    stats::{Jitter, LATENCY_BOUNDS_NS, Latency},
};

/// Latency quantiles as upper bounds of the sink's latency cells, and beside them the figures
/// (`min_ns`, `mean_ns`, `p50_ns`, `p90_ns`, `p99_ns`, `p999_ns`, `max_ns`: `null` when not
/// known); `null` without samples.
pub(super) fn latency_json(l: &Latency) -> Value {
    if l.max_ns == 0 {
        return Value::Null;
    }
    let f = l.figures;
    let mut out = Map::new();
    for (name, value) in [
        ("min_ns", f.map(|f| f.min_ns)),
        ("mean_ns", f.map(|f| f.mean_ns)),
        ("p50_ns", f.map(|f| f.p50_ns)),
        ("p90_ns", f.map(|f| f.p90_ns)),
        ("p99_ns", f.map(|f| f.p99_ns)),
        ("p999_ns", f.map(|f| f.p999_ns)),
        ("max_ns", f.map(|f| f.max_ns)),
    ] {
        out.insert(name.into(), json!(value));
    }
    let top = LATENCY_BOUNDS_NS[LATENCY_BOUNDS_NS.len() - 1];
    for (name, ns) in [
        ("p50", l.p50_ns),
        ("p99", l.p99_ns),
        ("p999", l.p999_ns),
        ("max", l.max_ns),
    ] {
        if ns > top {
            out.insert(format!("{name}_ns_at_most"), Value::Null);
            out.insert(format!("{name}_ns_at_least"), json!(top));
        } else {
            out.insert(format!("{name}_ns_at_most"), json!(ns));
        }
    }
    Value::Object(out)
}

/// A sender's latency: `null` when its clock is unknown or it gave no samples.
pub(crate) fn sender_latency_json(l: &Latency, clock: &LatencyClock) -> Value {
    if clock.kind == ClockKind::Unknown {
        Value::Null
    } else {
        latency_json(l)
    }
}

/// A sender's jitter: its quantiles as `latency_json` gives them, plus `mean_ns` and
/// `samples`; `null` when its clock is unknown or it gave no two consecutive samples.
pub(super) fn sender_jitter_json(j: &Jitter, clock: &LatencyClock) -> Value {
    if clock.kind == ClockKind::Unknown || j.samples == 0 {
        return Value::Null;
    }
    let mut v = latency_json(&j.bounds);
    v["mean_ns"] = json!(j.mean_ns);
    v["samples"] = json!(j.samples);
    v
}

/// The `latency_clock` object.
pub(crate) fn latency_clock_json(clock: &LatencyClock, unknown: u64, clamped: u64) -> Value {
    let known = clock.kind != ClockKind::Unknown;
    let mut v = json!({
        "kind": clock.kind.name(),
        "offset_ns": known.then_some(clock.offset_ns),
        "error_bound_ns": known.then_some(clock.error_bound_ns),
        "control_rtt_ns": clock.control_rtt_ns,
        "latency_unknown_packets": unknown,
        "latency_clamped_packets": clamped,
    });
    if !known {
        v["reason"] = json!(clock.reason);
    }
    v
}

/// A cell bound for people: `<=20us`, `>1s` for the open top cell, `-` when nothing was seen.
pub(crate) fn bound_text(ns: u64) -> String {
    match ns {
        0 => "-".into(),
        n if n > LATENCY_BOUNDS_NS[LATENCY_BOUNDS_NS.len() - 1] => ">1s".into(),
        n if n >= 1_000_000_000 => format!("<={}s", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("<={}ms", n / 1_000_000),
        n => format!("<={}us", n / 1_000),
    }
}

/// `latency p50 <=50us p99 <=100us p99.9 <=200us max <=1ms, jitter mean 812ns p50 <=1us
/// p99 <=5us p99.9 <=10us max <=20us (clock offset +5.002s ±120us corrected)` (`jitter -`
/// without two consecutive samples), or `latency unknown (no clock estimate: ...)`, which
/// leaves the jitter unknown too.
///
/// Where the figures are known they replace the bounds: `latency min 4.99ms mean 5.07ms p50
/// 5.06ms p90 5.21ms p99 5.35ms p99.9 5.90ms max 6.12ms, jitter mean 12.3us p50 9.1us ...`.
pub(super) fn latency_text(l: &Latency, j: &Jitter, clock: &LatencyClock) -> String {
    if clock.kind == ClockKind::Unknown {
        return format!("latency unknown {}", clock.text());
    }
    let latency = quantiles_text(l);
    let jitter = if j.samples == 0 {
        "-".to_string()
    } else if let Some(f) = j.bounds.figures {
        figures_text(&f)
    } else {
        format!(
            "mean {} p50 {} p99 {} p99.9 {} max {}",
            ns_text(j.mean_ns),
            bound_text(j.bounds.p50_ns),
            bound_text(j.bounds.p99_ns),
            bound_text(j.bounds.p999_ns),
            bound_text(j.bounds.max_ns)
        )
    };
    format!("latency {latency}, jitter {jitter} {}", clock.text())
}

/// A TCP sender's latency (a record stream has no jitter): `latency p50 <=50us p99 <=100us
/// p99.9 <=200us max <=1ms (clock ...)`, the figures where known, or `latency unknown (...)`
/// when its clock is unknown or it gave no sample.
pub(crate) fn latency_only_text(l: &Latency, clock: &LatencyClock) -> String {
    if clock.kind == ClockKind::Unknown {
        format!("latency unknown {}", clock.text())
    } else if l.max_ns == 0 {
        format!("latency unknown (no corrected samples) {}", clock.text())
    } else {
        format!("latency {} {}", quantiles_text(l), clock.text())
    }
}

/// The quantiles as their figures where known, else as cell bounds.
fn quantiles_text(l: &Latency) -> String {
    match l.figures {
        Some(f) => figures_text(&f),
        None => format!(
            "p50 {} p99 {} p99.9 {} max {}",
            bound_text(l.p50_ns),
            bound_text(l.p99_ns),
            bound_text(l.p999_ns),
            bound_text(l.max_ns),
        ),
    }
}

/// `min 4.99ms mean 5.07ms p50 5.06ms p90 5.21ms p99 5.35ms p99.9 5.90ms max 6.12ms`.
fn figures_text(f: &Figures) -> String {
    format!(
        "min {} mean {} p50 {} p90 {} p99 {} p99.9 {} max {}",
        ns_text(f.min_ns),
        ns_text(f.mean_ns),
        ns_text(f.p50_ns),
        ns_text(f.p90_ns),
        ns_text(f.p99_ns),
        ns_text(f.p999_ns),
        ns_text(f.max_ns)
    )
}

/// An exact duration for people: `812ns`, `45.2us`, `3.10ms`, `1.250s`.
fn ns_text(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.3}s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2}ms", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1}us", n as f64 / 1e3),
        n => format!("{n}ns"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{LATENCY_CELLS, latency_cell};

    #[test]
    fn a_tcp_senders_latency_line_says_unknown_without_a_clock_or_a_sample() {
        let same = LatencyClock::same_clock();
        assert!(
            latency_only_text(&Latency::default(), &same)
                .starts_with("latency unknown (no corrected samples) ")
        );
        let unknown = LatencyClock::unknown("no clock estimate: x");
        let mut cells = [0; LATENCY_CELLS];
        cells[latency_cell(1_500)] = 3;
        let l = Latency::from_cells(&cells);
        assert!(latency_only_text(&l, &unknown).starts_with("latency unknown ("));
        let text = latency_only_text(&l, &same);
        assert!(
            text.starts_with("latency p50 <=2us p99 <=2us p99.9 <=2us max <=2us "),
            "{text}"
        );
        assert!(!text.contains("jitter"), "{text}");
    }

    #[test]
    fn the_open_top_cell_is_a_lower_bound_never_a_sentinel() {
        let mut cells = [0; LATENCY_CELLS];
        cells[latency_cell(1_500)] = 98;
        cells[latency_cell(30_000)] = 1;
        cells[latency_cell(5_000_000_000)] = 1;
        let v = latency_json(&Latency::from_cells(&cells));
        assert_eq!(
            v,
            json!({"p50_ns_at_most": 2000, "p99_ns_at_most": 50000,
                "p999_ns_at_most": null, "p999_ns_at_least": 1_000_000_000u64,
                "max_ns_at_most": null, "max_ns_at_least": 1_000_000_000u64,
                "min_ns": null, "mean_ns": null, "p50_ns": null, "p90_ns": null,
                "p99_ns": null, "p999_ns": null, "max_ns": null})
        );
        assert!(!v.to_string().contains("18446744073709551615"));
        cells = [0; LATENCY_CELLS];
        cells[LATENCY_CELLS - 1] = 3;
        let v = latency_json(&Latency::from_cells(&cells));
        assert_eq!(v["p50_ns_at_most"], Value::Null);
        assert_eq!(v["p50_ns_at_least"], json!(1_000_000_000u64));
        assert_eq!(latency_json(&Latency::default()), Value::Null, "no samples");
    }

    #[test]
    fn known_figures_are_values_beside_the_bounds_and_replace_them_in_lines() {
        let mut cells = [0; LATENCY_CELLS];
        cells[latency_cell(5_100_000)] = 100;
        let f = Figures {
            samples: 100,
            min_ns: 5_000_000,
            mean_ns: 5_070_000,
            p50_ns: 5_060_000,
            p90_ns: 5_210_000,
            p99_ns: 5_350_000,
            p999_ns: 5_900_000,
            max_ns: 6_120_000,
        };
        let l = Latency::from_cells(&cells).with_figures(Some(f));
        let v = latency_json(&l);
        assert_eq!(
            (&v["p50_ns"], &v["p90_ns"], &v["min_ns"], &v["max_ns"]),
            (
                &json!(5_060_000),
                &json!(5_210_000),
                &json!(5_000_000),
                &json!(6_120_000)
            )
        );
        assert_eq!(v["p50_ns_at_most"], json!(10_000_000), "the bounds stay");
        let j = Jitter {
            samples: 99,
            mean_ns: 12_300,
            bounds: Latency::from_cells(&cells),
        }
        .with_figures(Some(Figures { samples: 99, ..f }));
        assert_eq!(
            latency_text(&l, &j, &LatencyClock::same_clock()),
            "latency min 5.00ms mean 5.07ms p50 5.06ms p90 5.21ms p99 5.35ms p99.9 5.90ms max 6.12ms, jitter min 5.00ms mean 5.07ms p50 5.06ms p90 5.21ms p99 5.35ms p99.9 5.90ms max 6.12ms (same clock)"
        );
    }

    #[test]
    fn an_unknown_clock_nulls_the_latency_and_says_why() {
        let mut cells = [0; LATENCY_CELLS];
        cells[0] = 5;
        let l = Latency::from_cells(&cells);
        let unknown = LatencyClock::default();
        assert_eq!(sender_latency_json(&l, &unknown), Value::Null);
        let v = latency_clock_json(&unknown, 7, 0);
        assert_eq!(v["kind"], "unknown");
        assert_eq!(
            (&v["offset_ns"], &v["error_bound_ns"]),
            (&Value::Null, &Value::Null)
        );
        assert_eq!(v["latency_unknown_packets"], 7);
        assert!(v["reason"].as_str().unwrap().contains("--control off"));
        assert!(
            latency_text(&l, &Jitter::default(), &unknown)
                .starts_with("latency unknown (no clock estimate")
        );
        let c = LatencyClock::corrected(-5_000_000_000, 60_000, 120_000);
        let v = latency_clock_json(&c, 0, 1);
        assert_eq!(
            v,
            json!({"kind": "offset_corrected", "offset_ns": -5_000_000_000i64,
                "error_bound_ns": 60000, "control_rtt_ns": 120000,
                "latency_unknown_packets": 0, "latency_clamped_packets": 1})
        );
        assert_eq!(
            latency_text(&l, &Jitter::default(), &c),
            "latency p50 <=1us p99 <=1us p99.9 <=1us max <=1us, jitter - (clock offset -5.000s ±60us corrected)"
        );
        assert_eq!(sender_latency_json(&l, &c)["max_ns_at_most"], 1000);
    }

    #[test]
    fn jitter_is_shown_only_where_the_latency_is() {
        let mut counters = crate::stats::SessionCounters::default();
        counters.jitter_cells[latency_cell(800)] = 3;
        counters.jitter_sum_ns[latency_cell(800)] = 2_400;
        counters.jitter_cells[latency_cell(4_000)] = 1;
        counters.jitter_sum_ns[latency_cell(4_000)] = 4_000;
        let j = Jitter::of(&counters);
        let same = LatencyClock::same_clock();
        assert_eq!(
            sender_jitter_json(&j, &same),
            json!({"p50_ns_at_most": 1000, "p99_ns_at_most": 5000, "p999_ns_at_most": 5000,
                "max_ns_at_most": 5000, "mean_ns": 1600, "samples": 4, "min_ns": null,
                "p50_ns": null, "p90_ns": null, "p99_ns": null, "p999_ns": null,
                "max_ns": null})
        );
        assert_eq!(
            sender_jitter_json(&j, &LatencyClock::default()),
            Value::Null
        );
        assert_eq!(sender_jitter_json(&Jitter::default(), &same), Value::Null);
        let mut cells = [0; LATENCY_CELLS];
        cells[latency_cell(40_000)] = 4;
        let text = latency_text(&Latency::from_cells(&cells), &j, &same);
        assert_eq!(
            text,
            "latency p50 <=50us p99 <=50us p99.9 <=50us max <=50us, jitter mean 1.6us p50 <=1us p99 <=5us p99.9 <=5us max <=5us (same clock)"
        );
    }
}
