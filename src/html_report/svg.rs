//! Hand-written inline SVG charts: a line chart over a numeric x axis and a grouped bar chart
//! over categories, with labelled axes and a legend. Every data point is its own element,
//! `<circle class="pt" data-series="ID">` or `<rect class="pt" data-series="ID">`, with a
//! `<title>` tooltip, inside `<g class="series" data-series="ID" data-points="N">`, so a browser
//! test can count the points of each series.

use std::fmt::Write;

const WIDTH: f64 = 880.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 48.0;
/// Series with more points than this get no tooltips: at that density a pixel holds many
/// points, and a day of 1 s intervals would otherwise make a page of about 70 MB.
const MAX_TIPS: usize = 2_000;

/// One axis: its label (with the unit) and how tick values are written.
pub(crate) struct Axis {
    pub(crate) label: String,
    pub(crate) format: fn(f64) -> String,
    /// Logarithmic (base 10); values must be positive.
    pub(crate) log: bool,
    /// Counts: ticks fall on whole numbers only (never 0.2 packets).
    pub(crate) whole: bool,
}

/// One point of a line series; `verdict` adds a `data-verdict` attribute (e.g. `pass`) that
/// the page's CSS colours.
pub(crate) struct Point {
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) tip: String,
    pub(crate) verdict: Option<&'static str>,
}

/// One series of a line chart.
pub(crate) struct Series {
    pub(crate) id: &'static str,
    pub(crate) label: String,
    pub(crate) color: &'static str,
    pub(crate) points: Vec<Point>,
    /// Join the points with a line (else markers only).
    pub(crate) joined: bool,
    pub(crate) dashed: bool,
}

/// A horizontal rule across a line chart (e.g. the NDR).
pub(crate) struct Rule {
    pub(crate) id: &'static str,
    pub(crate) y: f64,
    pub(crate) label: String,
    pub(crate) color: &'static str,
}

pub(crate) struct LineChart {
    pub(crate) id: &'static str,
    pub(crate) x: Axis,
    pub(crate) y: Axis,
    pub(crate) series: Vec<Series>,
    pub(crate) rules: Vec<Rule>,
}

/// One series of a bar chart: a value (or unknown) per category.
pub(crate) struct Bars {
    pub(crate) id: &'static str,
    pub(crate) label: String,
    pub(crate) color: &'static str,
    pub(crate) values: Vec<Option<(f64, String)>>,
}

pub(crate) struct BarChart {
    pub(crate) id: &'static str,
    pub(crate) categories: Vec<String>,
    pub(crate) x_label: String,
    pub(crate) y: Axis,
    pub(crate) series: Vec<Bars>,
}

/// Escapes text for HTML and SVG content and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A linear or log scale from data values to pixels.
struct Scale {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
    log: bool,
}

impl Scale {
    fn at(&self, v: f64) -> f64 {
        let (lo, hi, v) = if self.log {
            (self.lo.log10(), self.hi.log10(), v.max(self.lo).log10())
        } else {
            (self.lo, self.hi, v)
        };
        let span = if hi > lo { hi - lo } else { 1.0 };
        self.from + (v - lo) / span * (self.to - self.from)
    }
}

/// Round tick values covering `lo..=hi` (linear), whole numbers only when `whole`, and the
/// range they span.
fn linear_ticks(lo: f64, hi: f64, whole: bool) -> (f64, f64, Vec<f64>) {
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let raw = (hi - lo) / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = magnitude
        * match raw / magnitude {
            f if f <= 1.0 => 1.0,
            f if f <= 2.0 => 2.0,
            f if f <= 5.0 => 5.0,
            _ => 10.0,
        };
    let step = if whole { step.max(1.0) } else { step };
    let first = (lo / step).floor() * step;
    let last = (hi / step).ceil() * step;
    let ticks = (0..)
        .map(|i| first + f64::from(i) * step)
        .take_while(|t| *t <= last + step * 1e-9)
        .collect();
    (first, last, ticks)
}

/// Powers of ten covering `lo..=hi` (both positive).
fn log_ticks(lo: f64, hi: f64) -> (f64, f64, Vec<f64>) {
    // A value exactly on a power of ten gets the decade below, so its bar has a height.
    let first = lo.log10().floor() as i32;
    let first = if 10f64.powi(first) >= lo {
        first - 1
    } else {
        first
    };
    let last = (hi.log10().ceil() as i32).max(first + 1);
    let ticks = (first..=last).map(|e| 10f64.powi(e)).collect();
    (10f64.powi(first), 10f64.powi(last), ticks)
}

fn y_scale(axis: &Axis, values: impl Iterator<Item = f64>) -> (Scale, Vec<f64>) {
    let values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    let (lo, hi, ticks) = if axis.log {
        let positive = values.iter().copied().filter(|v| *v > 0.0);
        let lo = positive.clone().fold(f64::INFINITY, f64::min);
        let hi = positive.fold(0.0, f64::max);
        if lo.is_finite() {
            log_ticks(lo, hi)
        } else {
            log_ticks(1.0, 10.0)
        }
    } else {
        let hi = values.iter().copied().fold(0.0, f64::max);
        let lo = values.iter().copied().fold(0.0, f64::min);
        linear_ticks(lo, if hi > lo { hi * 1.05 } else { lo + 1.0 }, axis.whole)
    };
    let scale = Scale {
        lo,
        hi,
        from: HEIGHT - BOTTOM,
        to: TOP,
        log: axis.log,
    };
    (scale, ticks)
}

fn open_svg(out: &mut String, id: &str, label: &str) {
    let _ = write!(
        out,
        "<svg class=\"chart\" id=\"{id}\" role=\"img\" aria-label=\"{}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         xmlns=\"http://www.w3.org/2000/svg\">",
        esc(label)
    );
}

fn y_axis(out: &mut String, axis: &Axis, scale: &Scale, ticks: &[f64]) {
    for &t in ticks {
        let y = scale.at(t);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"tick\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            esc(&(axis.format)(t))
        );
    }
    let mid = (TOP + HEIGHT - BOTTOM) / 2.0;
    let _ = write!(
        out,
        "<text class=\"axis-label\" transform=\"translate(14 {mid:.1}) rotate(-90)\" \
         text-anchor=\"middle\">{}</text>",
        esc(&axis.label)
    );
}

fn x_label(out: &mut String, label: &str) {
    let _ = write!(
        out,
        "<text class=\"axis-label\" x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <line class=\"axis\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>",
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 8.0,
        esc(label),
        WIDTH - RIGHT,
        HEIGHT - BOTTOM,
        HEIGHT - BOTTOM
    );
}

fn legend<'a>(entries: impl Iterator<Item = (&'a str, &'a str, &'a str)>) -> String {
    let mut out = String::from("<ul class=\"legend\">");
    for (id, label, color) in entries {
        let _ = write!(
            out,
            "<li data-series=\"{id}\"><span class=\"swatch\" style=\"background:{color}\"></span>{}</li>",
            esc(label)
        );
    }
    out.push_str("</ul>");
    out
}

fn marker_radius(points: usize) -> f64 {
    match points {
        0..=200 => 3.0,
        201..=1000 => 2.0,
        _ => 1.2,
    }
}

/// A line chart in a `<figure>` with its legend.
pub(crate) fn line_chart(chart: &LineChart) -> String {
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.x));
    let x_lo = xs.clone().fold(f64::INFINITY, f64::min);
    let x_hi = xs.fold(f64::NEG_INFINITY, f64::max);
    let (x_lo, x_hi) = if x_lo.is_finite() {
        (x_lo.min(0.0), x_hi)
    } else {
        (0.0, 1.0)
    };
    let (x_lo, x_hi, x_ticks) = linear_ticks(x_lo, x_hi, chart.x.whole);
    let x = Scale {
        lo: x_lo,
        hi: x_hi,
        from: LEFT,
        to: WIDTH - RIGHT,
        log: false,
    };
    let ys = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.y))
        .chain(chart.rules.iter().map(|r| r.y));
    let (y, y_ticks) = y_scale(&chart.y, ys);

    let mut out = String::from("<figure>");
    open_svg(&mut out, chart.id, &chart.y.label);
    y_axis(&mut out, &chart.y, &y, &y_ticks);
    for &t in &x_ticks {
        let px = x.at(t);
        let _ = write!(
            out,
            "<text class=\"tick\" x=\"{px:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            HEIGHT - BOTTOM + 16.0,
            esc(&(chart.x.format)(t))
        );
    }
    x_label(&mut out, &chart.x.label);
    for (k, rule) in chart.rules.iter().enumerate() {
        let py = y.at(rule.y);
        // Labels of rules at (nearly) the same rate stack upwards instead of overlapping.
        let _ = write!(
            out,
            "<g class=\"rule\" data-rule=\"{}\"><line x1=\"{LEFT}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\" \
             stroke=\"{}\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{}\">{}</text></g>",
            rule.id,
            WIDTH - RIGHT,
            rule.color,
            WIDTH - RIGHT - 4.0,
            py - 5.0 - 14.0 * k as f64,
            rule.color,
            esc(&rule.label)
        );
    }
    for s in &chart.series {
        let _ = write!(
            out,
            "<g class=\"series\" data-series=\"{}\" data-points=\"{}\" fill=\"{}\">",
            s.id,
            s.points.len(),
            s.color
        );
        if s.joined && s.points.len() > 1 {
            let path: Vec<String> = s
                .points
                .iter()
                .map(|p| format!("{:.1},{:.1}", x.at(p.x), y.at(p.y)))
                .collect();
            let _ = write!(
                out,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{} points=\"{}\"/>",
                s.color,
                if s.dashed {
                    " stroke-dasharray=\"6 4\""
                } else {
                    ""
                },
                path.join(" ")
            );
        }
        let r = marker_radius(s.points.len());
        let tips = s.points.len() <= MAX_TIPS;
        for p in &s.points {
            let _ = write!(
                out,
                "<circle class=\"pt\" data-series=\"{}\"{} cx=\"{:.1}\" cy=\"{:.1}\" r=\"{r}\"",
                s.id,
                p.verdict
                    .map(|v| format!(" data-verdict=\"{v}\""))
                    .unwrap_or_default(),
                x.at(p.x),
                y.at(p.y),
            );
            if tips {
                let _ = write!(out, "><title>{}</title></circle>", esc(&p.tip));
            } else {
                out.push_str("/>");
            }
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out.push_str(&legend(
        chart
            .series
            .iter()
            .map(|s| (s.id, s.label.as_str(), s.color)),
    ));
    out.push_str("</figure>");
    out
}

/// A grouped bar chart in a `<figure>` with its legend; an unknown value draws no bar and is
/// written "unknown" in its place.
pub(crate) fn bar_chart(chart: &BarChart) -> String {
    let values = chart
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten().map(|(v, _)| *v));
    let (y, y_ticks) = y_scale(&chart.y, values);
    let groups = chart.categories.len().max(1) as f64;
    let group = (WIDTH - LEFT - RIGHT) / groups;
    let bar = group * 0.8 / chart.series.len().max(1) as f64;
    let base = HEIGHT - BOTTOM;

    let mut out = String::from("<figure>");
    open_svg(&mut out, chart.id, &chart.y.label);
    y_axis(&mut out, &chart.y, &y, &y_ticks);
    for (i, category) in chart.categories.iter().enumerate() {
        let cx = LEFT + group * (i as f64 + 0.5);
        let _ = write!(
            out,
            "<text class=\"tick\" x=\"{cx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            base + 16.0,
            esc(category)
        );
    }
    x_label(&mut out, &chart.x_label);
    for (k, s) in chart.series.iter().enumerate() {
        let known = s.values.iter().flatten().count();
        let _ = write!(
            out,
            "<g class=\"series\" data-series=\"{}\" data-points=\"{known}\">",
            s.id
        );
        for (i, value) in s.values.iter().enumerate() {
            let bx = LEFT + group * (i as f64 + 0.1) + bar * k as f64;
            match value {
                Some((v, tip)) => {
                    let top = y.at(*v).min(base);
                    let _ = write!(
                        out,
                        "<rect class=\"pt\" data-series=\"{}\" x=\"{bx:.1}\" y=\"{top:.1}\" width=\"{:.1}\" \
                         height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                        s.id,
                        (bar - 1.0).max(1.0),
                        base - top,
                        s.color,
                        esc(tip)
                    );
                }
                None => {
                    let _ = write!(
                        out,
                        "<text class=\"unknown-mark\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">?</text>",
                        bx + bar / 2.0,
                        base - 4.0
                    );
                }
            }
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out.push_str(&legend(
        chart
            .series
            .iter()
            .map(|s| (s.id, s.label.as_str(), s.color)),
    ));
    out.push_str("</figure>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        let (lo, hi, ticks) = linear_ticks(0.0, 52_500.0, false);
        assert_eq!((lo, hi), (0.0, 60_000.0));
        assert_eq!(ticks, [0.0, 20_000.0, 40_000.0, 60_000.0]);
        // Counts of 0 to 1.05: ticks 0, 0.2, ... unless they are whole.
        let (_, _, ticks) = linear_ticks(0.0, 1.05, false);
        assert!(ticks.iter().any(|t| t.fract() != 0.0), "{ticks:?}");
        let (lo, hi, ticks) = linear_ticks(0.0, 1.05, true);
        assert_eq!((lo, hi, ticks), (0.0, 2.0, vec![0.0, 1.0, 2.0]));
        let (lo, hi, ticks) = log_ticks(1858.0, 4_771_839.0);
        assert_eq!((lo, hi), (1_000.0, 10_000_000.0));
        assert_eq!(ticks.len(), 5);
    }

    #[test]
    fn every_point_is_one_counted_element_and_text_is_escaped() {
        let chart = LineChart {
            id: "c",
            x: Axis {
                label: "time (s)".into(),
                format: |v| format!("{v}"),
                log: false,
                whole: false,
            },
            y: Axis {
                label: "rate (pps)".into(),
                format: |v| format!("{v}"),
                log: false,
                whole: false,
            },
            series: vec![Series {
                id: "sent",
                label: "sent <a&b>".into(),
                color: "#000",
                points: (0..7)
                    .map(|i| Point {
                        x: f64::from(i),
                        y: 0.0,
                        tip: "t".into(),
                        verdict: None,
                    })
                    .collect(),
                joined: true,
                dashed: false,
            }],
            rules: Vec::new(),
        };
        let svg = line_chart(&chart);
        assert_eq!(svg.matches("class=\"pt\" data-series=\"sent\"").count(), 7);
        assert!(svg.contains("data-points=\"7\""));
        assert!(svg.contains("sent &lt;a&amp;b&gt;"));
        assert!(!svg.contains("NaN"), "{svg}");
    }
}
