//! How a sink's one-way latency of one sender run relates to that sender's clock: the same
//! clock (the same kernel, so one `CLOCK_REALTIME`: offset 0 exactly), a clock whose offset
//! the control channel estimated (each sample is corrected by it, within its error bound), or
//! unknown (no control channel, or no estimate yet): then no latency sample is taken at all,
//! since a raw difference of two clocks would report their offset as latency.

use serde::{Deserialize, Serialize};

/// Which of the three a sender run's latency is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClockKind {
    /// The sender runs on the sink's kernel: offset 0, error 0.
    SameClock,
    /// The offset was estimated over the control channel and is taken off every sample.
    OffsetCorrected,
    /// No estimate: no latency samples.
    Unknown,
}

impl ClockKind {
    /// The name in JSON (`same_clock`, `offset_corrected`, `unknown`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            ClockKind::SameClock => "same_clock",
            ClockKind::OffsetCorrected => "offset_corrected",
            ClockKind::Unknown => "unknown",
        }
    }
}

/// Why a sender run that never said hello has no clock estimate.
pub(crate) const NO_CONTROL: &str =
    "no clock estimate: no control channel from this sender; --control off, or it never connected";
/// Why a sender run that said hello has no clock estimate yet.
pub(crate) const NO_ESTIMATE_YET: &str =
    "no clock estimate yet: no clock exchange with this sender has completed";

/// What a sink knows of one sender run's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LatencyClock {
    /// Same clock, corrected, or unknown.
    pub(crate) kind: ClockKind,
    /// The sink's clock minus the sender's, in ns (0 unless corrected).
    pub(crate) offset_ns: i64,
    /// How far the true offset can be from `offset_ns`, in ns (0 unless corrected).
    pub(crate) error_bound_ns: u64,
    /// The round trip of the control exchange the offset comes from (on the same clock: the
    /// smallest round trip the sender reported), if one completed.
    pub(crate) control_rtt_ns: Option<u64>,
    /// Why it is unknown (empty otherwise).
    pub(crate) reason: String,
}

impl Default for LatencyClock {
    fn default() -> LatencyClock {
        LatencyClock::unknown(NO_CONTROL)
    }
}

impl LatencyClock {
    /// Unknown, because of `reason`.
    pub(crate) fn unknown(reason: impl Into<String>) -> LatencyClock {
        LatencyClock {
            kind: ClockKind::Unknown,
            offset_ns: 0,
            error_bound_ns: 0,
            control_rtt_ns: None,
            reason: reason.into(),
        }
    }

    /// The sink's own clock.
    pub(crate) fn same_clock() -> LatencyClock {
        LatencyClock {
            kind: ClockKind::SameClock,
            reason: String::new(),
            ..LatencyClock::unknown("")
        }
    }

    /// An estimated offset.
    pub(crate) fn corrected(offset_ns: i64, error_bound_ns: u64, rtt_ns: u64) -> LatencyClock {
        LatencyClock {
            kind: ClockKind::OffsetCorrected,
            offset_ns,
            error_bound_ns,
            control_rtt_ns: Some(rtt_ns),
            reason: String::new(),
        }
    }

    /// The clock of a run that just said hello: `fresh`, unless the run already has a known
    /// clock from an earlier connection (a reconnect keeps its estimate).
    pub(crate) fn at_hello(current: Option<&LatencyClock>, fresh: LatencyClock) -> LatencyClock {
        match current {
            Some(c) if c.kind != ClockKind::Unknown && fresh.kind == ClockKind::Unknown => {
                c.clone()
            }
            _ => fresh,
        }
    }

    /// Takes the sender's estimate: a run on the same clock keeps offset 0 and notes only the
    /// smallest round trip. Returns whether the correction changed.
    pub(crate) fn estimated(&mut self, offset_ns: i64, error_bound_ns: u64, rtt_ns: u64) -> bool {
        if self.kind == ClockKind::SameClock {
            self.control_rtt_ns = Some(self.control_rtt_ns.map_or(rtt_ns, |r| r.min(rtt_ns)));
            return false;
        }
        let before = self.correction_ns();
        *self = LatencyClock::corrected(offset_ns, error_bound_ns, rtt_ns);
        before != Some(offset_ns)
    }

    /// The clock of a sender with several runs: its latest run's with a known clock (its
    /// samples are the ones that carry the latest correction), else its latest run's.
    pub(crate) fn latest<'a>(runs: impl IntoIterator<Item = &'a LatencyClock>) -> LatencyClock {
        let runs: Vec<&LatencyClock> = runs.into_iter().collect();
        runs.iter()
            .rev()
            .find(|c| c.kind != ClockKind::Unknown)
            .or(runs.last())
            .map_or_else(LatencyClock::default, |c| (*c).clone())
    }

    /// What to take off each sample (sink clock minus sender clock), unless unknown.
    pub(crate) fn correction_ns(&self) -> Option<i64> {
        (self.kind != ClockKind::Unknown).then_some(self.offset_ns)
    }

    /// Words for people after a latency text: `(clock offset +5.002s ±120us corrected)`,
    /// `(same clock)`, or the reason it is unknown.
    pub(crate) fn text(&self) -> String {
        match self.kind {
            ClockKind::SameClock => "(same clock)".into(),
            ClockKind::OffsetCorrected => format!(
                "(clock offset {}{} ±{} corrected)",
                if self.offset_ns < 0 { "-" } else { "+" },
                span_text(self.offset_ns.unsigned_abs()),
                span_text(self.error_bound_ns)
            ),
            ClockKind::Unknown => format!("({})", self.reason),
        }
    }
}

/// A clock difference for people: `850ns`, `120us`, `3.25ms`, `5.002s`.
fn span_text(ns: u64) -> String {
    match ns {
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}us", n / 1_000),
        n if n < 1_000_000_000 => format!("{:.2}ms", n as f64 / 1e6),
        n => format!("{:.3}s", n as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconnect_keeps_its_estimate_and_the_same_clock_keeps_offset_0() {
        let est = LatencyClock::corrected(7, 3, 6);
        let again = LatencyClock::at_hello(Some(&est), LatencyClock::unknown(NO_ESTIMATE_YET));
        assert_eq!(again, est);
        let same = LatencyClock::at_hello(Some(&est), LatencyClock::same_clock());
        assert_eq!(same.kind, ClockKind::SameClock);
        let mut same = LatencyClock::same_clock();
        assert!(!same.estimated(5_000, 10, 20));
        assert!(!same.estimated(5_000, 15, 30));
        assert_eq!((same.offset_ns, same.control_rtt_ns), (0, Some(20)));
        let mut u = LatencyClock::unknown(NO_ESTIMATE_YET);
        assert!(u.estimated(5_000, 10, 20));
        assert!(
            !u.estimated(5_000, 8, 16),
            "a tighter bound, the same correction"
        );
        assert_eq!(u, LatencyClock::corrected(5_000, 8, 16));
        let runs = [est.clone(), LatencyClock::unknown("later")];
        assert_eq!(LatencyClock::latest(runs.iter()), est);
        assert_eq!(LatencyClock::latest([].iter()), LatencyClock::default());
    }

    #[test]
    fn texts_say_the_offset_its_bound_or_why_not() {
        assert_eq!(
            LatencyClock::corrected(5_002_000_000, 120_000, 240_000).text(),
            "(clock offset +5.002s ±120us corrected)"
        );
        assert_eq!(
            LatencyClock::corrected(-3_250_000, 800, 1_600).text(),
            "(clock offset -3.25ms ±800ns corrected)"
        );
        assert_eq!(LatencyClock::same_clock().text(), "(same clock)");
        assert_eq!(LatencyClock::same_clock().correction_ns(), Some(0));
        let u = LatencyClock::default();
        assert_eq!(u.correction_ns(), None);
        assert!(u.text().contains("--control off"), "{}", u.text());
        assert_eq!(
            serde_json::to_string(&ClockKind::OffsetCorrected).unwrap(),
            "\"offset_corrected\""
        );
    }
}
