//! Rate schedules: `--rate-steps 100kpps:10s,200kpps:10s` (constant steps) and `--ramp
//! FROM:TO:OVER` (a linear ramp), as a continuous function on the monotonic clock: the number
//! of packets due by time t is the integral of the rate up to t, so a step changes the slope of
//! that function and never jumps it (no gap and no burst at a step). The pacer takes packet `k`
//! as due when that integral reaches `k`, exactly as for a constant rate.
//!
//! For reporting, a schedule has parts: each step of `--rate-steps`, and each second of a ramp.

use std::time::Duration;

use crate::config::units::{self, Rate};

/// One segment: the rate goes linearly from `from_pps` to `to_pps` over `dur_ns`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Segment {
    start_ns: u64,
    dur_ns: u64,
    from_pps: f64,
    to_pps: f64,
    /// Packets due (as a real number) at the segment's start.
    due_before: f64,
}

impl Segment {
    fn slope(&self) -> f64 {
        (self.to_pps - self.from_pps) / (self.dur_ns as f64 / 1e9)
    }

    /// Packets due `dt` seconds into the segment.
    fn due_at(&self, dt: f64) -> f64 {
        self.due_before + self.from_pps * dt + self.slope() * dt * dt / 2.0
    }

    fn rate_at(&self, dt: f64) -> f64 {
        self.from_pps + self.slope() * dt
    }
}

/// A rate schedule, in packets per second, from the start of sending.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RateSchedule {
    segments: Vec<Segment>,
    /// Report parts: (start, end) in ns from the start.
    parts: Vec<(u64, u64)>,
}

/// A rate in a schedule must be a packet or bit rate, not `max`.
fn pps(rate: Rate, mean_payload: f64, what: &str) -> Result<f64, String> {
    match rate.packets_per_second_at(mean_payload) {
        Some(r) if r > 0.0 => Ok(r),
        _ => Err(format!(
            "{what} needs a packet or bit rate (e.g. 100kpps), not max"
        )),
    }
}

impl RateSchedule {
    fn from_segments(pieces: &[(f64, f64, u64)], parts: Vec<(u64, u64)>) -> RateSchedule {
        let mut segments = Vec::with_capacity(pieces.len());
        let (mut start_ns, mut due) = (0u64, 0.0);
        for &(from_pps, to_pps, dur_ns) in pieces {
            let s = Segment {
                start_ns,
                dur_ns,
                from_pps,
                to_pps,
                due_before: due,
            };
            due = s.due_at(dur_ns as f64 / 1e9);
            start_ns += dur_ns;
            segments.push(s);
        }
        RateSchedule { segments, parts }
    }

    /// `RATE:DURATION,...` (rates as for `--rate`; bit rates over `mean_payload` bytes).
    pub(crate) fn parse_steps(text: &str, mean_payload: f64) -> Result<RateSchedule, String> {
        let mut pieces = Vec::new();
        for item in text.split(',') {
            let Some((rate, dur)) = item.rsplit_once(':') else {
                return Err(format!(
                    "{item:?} in --rate-steps is not RATE:DURATION; e.g. --rate-steps 100kpps:10s,200kpps:10s"
                ));
            };
            let rate: Rate = rate
                .trim()
                .parse()
                .map_err(|e| format!("{e} in --rate-steps {item:?}"))?;
            let r = pps(rate, mean_payload, "every --rate-steps step")?;
            let dur = units::parse_duration(dur.trim())
                .map_err(|e| format!("{e} in --rate-steps {item:?}; e.g. 100kpps:10s"))?;
            let ns = nanos(dur);
            pieces.push((r, r, ns));
        }
        let mut parts = Vec::new();
        let mut at = 0;
        for &(_, _, ns) in &pieces {
            parts.push((at, at + ns));
            at += ns;
        }
        Ok(Self::from_segments(&pieces, parts))
    }

    /// `FROM:TO:OVER`, e.g. `10kpps:100kpps:10s`.
    pub(crate) fn parse_ramp(text: &str, mean_payload: f64) -> Result<RateSchedule, String> {
        let fields: Vec<&str> = text.split(':').map(str::trim).collect();
        let [from, to, over] = fields.as_slice() else {
            return Err(format!(
                "--ramp {text:?} is not FROM:TO:OVER; e.g. --ramp 10kpps:100kpps:10s"
            ));
        };
        let rate = |s: &str| -> Result<f64, String> {
            let r: Rate = s.parse().map_err(|e| format!("{e} in --ramp {text:?}"))?;
            pps(r, mean_payload, "--ramp")
        };
        let (from, to) = (rate(from)?, rate(to)?);
        let over = units::parse_duration(over)
            .map_err(|e| format!("{e} in --ramp {text:?}; e.g. 10kpps:100kpps:10s"))?;
        let ns = nanos(over);
        let parts = (0..ns.div_ceil(1_000_000_000))
            .map(|i| (i * 1_000_000_000, ((i + 1) * 1_000_000_000).min(ns)))
            .collect();
        Ok(Self::from_segments(&[(from, to, ns)], parts))
    }

    /// The same schedule at `factor` times the rate (one queue's share).
    pub(crate) fn scaled(&self, factor: f64) -> RateSchedule {
        let mut out = self.clone();
        for s in &mut out.segments {
            s.from_pps *= factor;
            s.to_pps *= factor;
            s.due_before *= factor;
        }
        out
    }

    /// How long the schedule runs.
    pub(crate) fn duration(&self) -> Duration {
        Duration::from_nanos(self.segments.last().map_or(0, |s| s.start_ns + s.dur_ns))
    }

    /// Report parts: (start, end) ns from the start.
    pub(crate) fn parts(&self) -> &[(u64, u64)] {
        &self.parts
    }

    /// The segment holding `elapsed_ns`, starting the search at `hint` (times only grow).
    fn segment(&self, elapsed_ns: u64, hint: &mut usize) -> Option<&Segment> {
        while let Some(s) = self.segments.get(*hint) {
            if elapsed_ns < s.start_ns + s.dur_ns {
                return Some(s);
            }
            *hint += 1;
        }
        None
    }

    /// Packets due (a real number) by `elapsed_ns`; the whole schedule's total after its end.
    pub(crate) fn due_real(&self, elapsed_ns: u64, hint: &mut usize) -> f64 {
        match self.segment(elapsed_ns, hint) {
            Some(s) => s.due_at((elapsed_ns - s.start_ns) as f64 / 1e9),
            None => self
                .segments
                .last()
                .map_or(0.0, |s| s.due_at(s.dur_ns as f64 / 1e9)),
        }
    }

    /// Packets due by `elapsed_ns`: packet 0 at the start, packet k once k are due.
    pub(crate) fn due_by(&self, elapsed_ns: u64, hint: &mut usize) -> u64 {
        (self.due_real(elapsed_ns, hint) + 1e-9).floor() as u64 + 1
    }

    /// The highest rate anywhere in the schedule (a ramp's is at one of its ends), so no
    /// more than `peak × elapsed + 1` packets are ever due.
    pub(crate) fn peak_rate(&self) -> f64 {
        self.segments
            .iter()
            .map(|s| s.from_pps.max(s.to_pps))
            .fold(0.0, f64::max)
    }

    /// The target rate at `elapsed_ns` (0 after the end).
    pub(crate) fn rate_at(&self, elapsed_ns: u64) -> f64 {
        let mut hint = 0;
        self.segment(elapsed_ns, &mut hint)
            .map_or(0.0, |s| s.rate_at((elapsed_ns - s.start_ns) as f64 / 1e9))
    }

    /// When packet index `k` is due, in ns from the start; `None` beyond the schedule.
    pub(crate) fn time_of(&self, k: u64) -> Option<u64> {
        if k == 0 {
            return Some(0);
        }
        let want = k as f64;
        let s = self
            .segments
            .iter()
            .find(|s| s.due_at(s.dur_ns as f64 / 1e9) + 1e-9 >= want)?;
        let need = (want - s.due_before).max(0.0);
        let a = s.slope();
        let dt = if a.abs() < 1e-12 {
            need / s.from_pps
        } else {
            (-s.from_pps + (s.from_pps * s.from_pps + 2.0 * a * need).max(0.0).sqrt()) / a
        };
        Some(s.start_ns + ((dt * 1e9).ceil().max(0.0) as u64).min(s.dur_ns))
    }

    /// The mean target rate over `start..end` ns.
    pub(crate) fn mean_rate(&self, start: u64, end: u64) -> f64 {
        let (mut h0, mut h1) = (0, 0);
        let due = self.due_real(end, &mut h1) - self.due_real(start, &mut h0);
        due / ((end - start) as f64 / 1e9).max(1e-9)
    }
}

/// `units::parse_duration` refuses 0, so every part lasts.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_continuous_and_exact() {
        let s = RateSchedule::parse_steps("100kpps:1s,200kpps:2s", 64.0).unwrap();
        assert_eq!(s.duration(), Duration::from_secs(3));
        let mut h = 0;
        assert_eq!(s.due_by(0, &mut h), 1);
        assert_eq!(s.due_by(1_000_000_000, &mut h), 100_001);
        assert_eq!(s.due_by(2_000_000_000, &mut h), 300_001);
        assert_eq!(s.due_by(3_000_000_000, &mut h), 500_001);
        assert_eq!(s.time_of(100_000), Some(1_000_000_000));
        assert_eq!(s.time_of(100_200), Some(1_001_000_000));
        assert_eq!(s.time_of(600_000), None);
        assert_eq!(s.rate_at(1_500_000_000), 200_000.0);
        assert_eq!(s.peak_rate(), 200_000.0);
        assert_eq!(
            s.parts(),
            &[(0, 1_000_000_000), (1_000_000_000, 3_000_000_000)]
        );
        // Around the step neither a gap nor a burst: one packet per 10 µs, then per 5 µs.
        let mut h = 0;
        let before = s.due_by(999_990_000, &mut h);
        let after = s.due_by(1_000_010_000, &mut h);
        assert_eq!(after - before, 3, "1 at 100 kpps + 2 at 200 kpps");
        let q = s.scaled(0.5);
        assert_eq!(q.due_by(3_000_000_000, &mut 0), 250_001);
    }

    #[test]
    fn a_ramp_integrates_linearly() {
        let s = RateSchedule::parse_ramp("0pps:100kpps:10s", 64.0);
        assert!(s.is_err(), "0pps is not a rate");
        let s = RateSchedule::parse_ramp("10kpps:110kpps:10s", 64.0).unwrap();
        let mut h = 0;
        // Mean 60 kpps over 10 s.
        assert_eq!(s.due_by(10_000_000_000, &mut h), 600_001);
        assert_eq!(s.rate_at(5_000_000_000), 60_000.0);
        assert_eq!(s.parts().len(), 10);
        let t = s.time_of(300_000).unwrap();
        assert_eq!(s.due_by(t, &mut 0), 300_001);
        assert!(s.due_by(t - 1, &mut 0) <= 300_000);
        assert!((s.mean_rate(0, 1_000_000_000) - 15_000.0).abs() < 1e-6);
    }

    #[test]
    fn bad_schedules_name_the_fix() {
        for (text, needle) in [
            ("100kpps", "RATE:DURATION"),
            ("max:10s", "not max"),
            ("100kpps:0s", "greater than zero"),
            ("fast:10s", "in --rate-steps"),
            ("100kpps:ten", "e.g. 100kpps:10s"),
        ] {
            let e = RateSchedule::parse_steps(text, 64.0).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
        let e = RateSchedule::parse_ramp("1kpps:2kpps", 64.0).unwrap_err();
        assert!(e.contains("FROM:TO:OVER"), "{e}");
    }
}
