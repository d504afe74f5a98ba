//! Puts the Prometheus text the exporter renders into a stable order. The exporter keeps its
//! metrics in hash maps, so families and series come out in a different order on every scrape;
//! this sorts families by name and series by their labels, comparing digit runs as numbers
//! (`flow="2"` before `flow="10"`), so that `curl | diff` shows only changed values. The lines of
//! one histogram series (its buckets, `_sum`, `_count`) stay together and in the exporter's
//! order, which keeps the buckets ascending by `le`.

use std::cmp::Ordering;

/// One family: its `# HELP` / `# TYPE` lines and its series, each series one or more lines.
struct Family<'a> {
    name: &'a str,
    comments: Vec<&'a str>,
    series: Vec<(String, Vec<&'a str>)>,
}

/// The metric name of a sample line, and its labels without `le` (the key of its series).
fn sample_key(line: &str) -> (&str, String) {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    let labels = match line[name_end..].strip_prefix('{') {
        Some(rest) => {
            let close = label_end(rest);
            split_labels(&rest[..close])
                .into_iter()
                .filter(|l| !l.starts_with("le="))
                .collect::<Vec<_>>()
                .join(",")
        }
        None => String::new(),
    };
    (name, labels)
}

/// The index of the `}` that closes a label set, skipping quoted values (which may hold `}`).
fn label_end(s: &str) -> usize {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return i,
            _ => {}
        }
    }
    s.len()
}

/// `a="x",b="y,z"` into its pairs, splitting only on commas outside quotes.
fn split_labels(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Orders strings with digit runs compared as numbers: `q2` < `q10`, `flow="9"` < `flow="other"`.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let na = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let nb = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (da, db) = (trim_zeros(&a[..na]), trim_zeros(&b[..nb]));
                let ord = da
                    .len()
                    .cmp(&db.len())
                    .then_with(|| da.cmp(db))
                    .then(na.cmp(&nb));
                if ord != Ordering::Equal {
                    return ord;
                }
                (a, b) = (&a[na..], &b[nb..]);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&c| c == b'0').count();
    &digits[zeros.min(digits.len().saturating_sub(1))..]
}

/// Returns `text` (Prometheus text format) with families sorted by name and the series of each
/// family sorted by labels. Blank lines separate the families, as the exporter writes them.
pub(crate) fn sorted(text: &str) -> String {
    let mut families: Vec<Family<'_>> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# ") {
            let name = rest.split(' ').nth(1).unwrap_or_default();
            match families.last_mut() {
                Some(f) if f.name == name => f.comments.push(line),
                _ => families.push(Family {
                    name,
                    comments: vec![line],
                    series: Vec::new(),
                }),
            }
            continue;
        }
        let (name, labels) = sample_key(line);
        let family = match families.last_mut() {
            Some(f) if name.starts_with(f.name) => f,
            _ => {
                families.push(Family {
                    name,
                    comments: Vec::new(),
                    series: Vec::new(),
                });
                families.last_mut().expect("just pushed")
            }
        };
        match family.series.last_mut() {
            Some((key, lines)) if *key == labels => lines.push(line),
            _ => family.series.push((labels, vec![line])),
        }
    }
    families.sort_by(|a, b| a.name.cmp(b.name));
    let mut out = String::with_capacity(text.len());
    for family in &mut families {
        family.series.sort_by(|a, b| natural_cmp(&a.0, &b.0));
        for line in family
            .comments
            .iter()
            .chain(family.series.iter().flat_map(|s| &s.1))
        {
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "\
# HELP z_total Zed.
# TYPE z_total counter
z_total{flow=\"10\"} 1
z_total{flow=\"other\"} 2
z_total{flow=\"2\"} 3

# HELP a_seconds Latency.
# TYPE a_seconds histogram
a_seconds_bucket{queue=\"1\",le=\"0.5\"} 1
a_seconds_bucket{queue=\"1\",le=\"+Inf\"} 2
a_seconds_sum{queue=\"1\"} 0.7
a_seconds_count{queue=\"1\"} 2
a_seconds_bucket{queue=\"0\",le=\"0.5\"} 0
a_seconds_bucket{queue=\"0\",le=\"+Inf\"} 0
a_seconds_sum{queue=\"0\"} 0
a_seconds_count{queue=\"0\"} 0

# TYPE m_info gauge
m_info{v=\"a,b}\"} 1
m_info 1
";

    #[test]
    fn families_by_name_series_by_labels_histograms_kept_whole() {
        assert_eq!(
            sorted(SCRAPE),
            "\
# HELP a_seconds Latency.
# TYPE a_seconds histogram
a_seconds_bucket{queue=\"0\",le=\"0.5\"} 0
a_seconds_bucket{queue=\"0\",le=\"+Inf\"} 0
a_seconds_sum{queue=\"0\"} 0
a_seconds_count{queue=\"0\"} 0
a_seconds_bucket{queue=\"1\",le=\"0.5\"} 1
a_seconds_bucket{queue=\"1\",le=\"+Inf\"} 2
a_seconds_sum{queue=\"1\"} 0.7
a_seconds_count{queue=\"1\"} 2

# TYPE m_info gauge
m_info 1
m_info{v=\"a,b}\"} 1

# HELP z_total Zed.
# TYPE z_total counter
z_total{flow=\"2\"} 3
z_total{flow=\"10\"} 1
z_total{flow=\"other\"} 2

"
        );
    }

    #[test]
    fn sorting_is_idempotent_and_independent_of_input_order() {
        let once = sorted(SCRAPE);
        assert_eq!(sorted(&once), once);
        let reversed: Vec<&str> = SCRAPE.split("\n\n").collect();
        let reversed = reversed.into_iter().rev().collect::<Vec<_>>().join("\n\n");
        assert_eq!(sorted(&reversed), once);
    }

    #[test]
    fn natural_order_compares_numbers_as_numbers() {
        let mut v = ["q10", "q2", "q1", "other", "q02", "a"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["a", "other", "q1", "q2", "q02", "q10"]);
        assert_eq!(split_labels("a=\"x\",b=\"y,z\""), ["a=\"x\"", "b=\"y,z\""]);
    }
}
