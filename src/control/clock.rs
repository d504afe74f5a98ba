//! The sender's estimate of the sink's clock offset, NTP-style, over the control channel.
//!
//! The sender sends a probe stamped `t1` (its `CLOCK_REALTIME`); the sink answers with `t1`,
//! `t2` (its clock when the probe arrived) and `t3` (its clock when it answered); the sender
//! notes `t4` when the answer arrives. Then the offset (sink clock minus sender clock) is
//! θ = ((t2 − t1) + (t3 − t4)) / 2 and the round trip δ = (t4 − t1) − (t3 − t2). However the
//! round trip splits between the two directions, the true offset lies within δ / 2 of θ.
//!
//! [`Estimator`] keeps the exchange with the smallest bound, where a sample's bound grows with
//! its age at [`DRIFT_PPM`] (NTP's frequency tolerance), so an old sample does not pin the
//! estimate while the clocks drift apart: bound = ⌈δ / 2⌉ + age × 15 ppm.

/// How fast two clocks are assumed to drift apart at most, in parts per million (NTP's PHI).
pub(crate) const DRIFT_PPM: u64 = 15;
/// Exchanges right after a connection is made, back to back.
pub(crate) const BURST: u32 = 8;

/// One exchange's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// θ: the sink's clock minus the sender's, in ns.
    pub(crate) offset_ns: i64,
    /// δ: the round trip less the sink's time between receiving and answering, in ns.
    pub(crate) rtt_ns: u64,
}

impl Sample {
    /// The sample of one exchange; `None` when the times are inconsistent (the sender's clock
    /// stepped back between `t1` and `t4`, the sink's between `t2` and `t3`, or the sink held
    /// the probe longer than the whole round trip).
    pub(crate) fn from_times(t1: u64, t2: u64, t3: u64, t4: u64) -> Option<Sample> {
        let (t1, t2, t3, t4) = (
            i128::from(t1),
            i128::from(t2),
            i128::from(t3),
            i128::from(t4),
        );
        if t4 < t1 || t3 < t2 {
            return None;
        }
        let rtt = (t4 - t1) - (t3 - t2);
        let offset = ((t2 - t1) + (t3 - t4)).div_euclid(2);
        Some(Sample {
            offset_ns: i64::try_from(offset).ok()?,
            rtt_ns: u64::try_from(rtt).ok()?,
        })
    }

    /// The half round trip, rounded up: how far θ can be from the true offset.
    pub(crate) fn half_rtt_ns(&self) -> u64 {
        self.rtt_ns.div_ceil(2)
    }
}

/// The estimate the sender tells the sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// The sink's clock minus the sender's, in ns.
    pub(crate) offset_ns: i64,
    /// How far the true offset can be from `offset_ns` (half the round trip, plus drift since).
    pub(crate) error_bound_ns: u64,
    /// The round trip of the exchange the offset comes from, in ns.
    pub(crate) rtt_ns: u64,
}

/// The best exchange so far, and the smallest round trip seen.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Estimator {
    /// The chosen sample and the monotonic ns it was taken at.
    best: Option<(Sample, u64)>,
    min_rtt_ns: Option<u64>,
}

fn aged_bound(sample: &Sample, taken_ns: u64, now_ns: u64) -> u64 {
    let drift = now_ns.saturating_sub(taken_ns) / 1_000_000 * DRIFT_PPM;
    sample.half_rtt_ns().saturating_add(drift)
}

impl Estimator {
    /// Adds the sample taken at monotonic `now_ns`; true when it becomes the estimate.
    pub(crate) fn add(&mut self, sample: Sample, now_ns: u64) -> bool {
        self.min_rtt_ns = Some(
            self.min_rtt_ns
                .map_or(sample.rtt_ns, |m| m.min(sample.rtt_ns)),
        );
        let better = match self.best {
            None => true,
            Some((best, taken)) => sample.half_rtt_ns() <= aged_bound(&best, taken, now_ns),
        };
        if better {
            self.best = Some((sample, now_ns));
        }
        better
    }

    /// The estimate at monotonic `now_ns`, if any exchange completed.
    pub(crate) fn estimate(&self, now_ns: u64) -> Option<Estimate> {
        self.best.map(|(s, taken)| Estimate {
            offset_ns: s.offset_ns,
            error_bound_ns: aged_bound(&s, taken, now_ns),
            rtt_ns: s.rtt_ns,
        })
    }

    /// The smallest round trip of any exchange, in ns.
    pub(crate) fn min_rtt_ns(&self) -> Option<u64> {
        self.min_rtt_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_700_000_000 * S;

    /// An exchange with the sink `offset` ns ahead, `out` and `back` ns on the way, `hold` ns
    /// at the sink.
    fn exchange(offset: i64, out: u64, hold: u64, back: u64) -> Sample {
        let t1 = T0;
        let t2 = (t1 + out).checked_add_signed(offset).unwrap();
        let t3 = t2 + hold;
        let t4 = t1 + out + hold + back;
        Sample::from_times(t1, t2, t3, t4).unwrap()
    }

    #[test]
    fn symmetric_delays_give_the_offset_exactly() {
        for offset in [0, 5 * S as i64, -5 * S as i64, 123_456_789] {
            let s = exchange(offset, 40_000, 7_000, 40_000);
            assert_eq!(
                s,
                Sample {
                    offset_ns: offset,
                    rtt_ns: 80_000
                }
            );
        }
    }

    #[test]
    fn asymmetric_delays_stay_within_half_the_round_trip() {
        for (out, back) in [(10_000, 90_000), (90_000, 10_000), (1, 999_999), (0, 0)] {
            for offset in [5 * S as i64, -5 * S as i64, 0] {
                let s = exchange(offset, out, 3_000, back);
                assert_eq!(s.rtt_ns, out + back);
                let err = (s.offset_ns - offset).unsigned_abs();
                assert!(err <= s.half_rtt_ns(), "{s:?} for {offset}, {out}/{back}");
                // The error is exactly half the asymmetry.
                assert_eq!(err, out.abs_diff(back) / 2, "{s:?}");
            }
        }
    }

    #[test]
    fn inconsistent_times_give_no_sample() {
        assert_eq!(Sample::from_times(10, 5, 4, 20), None, "t3 before t2");
        assert_eq!(Sample::from_times(10, 5, 6, 9), None, "t4 before t1");
        assert_eq!(
            Sample::from_times(10, 0, 100, 20),
            None,
            "held longer than the trip"
        );
        assert!(
            Sample::from_times(0, u64::MAX, u64::MAX, 0).is_none(),
            "offset overflows i64"
        );
    }

    #[test]
    fn the_smallest_round_trip_wins_and_old_samples_age() {
        let mut e = Estimator::default();
        assert_eq!(e.estimate(0), None);
        assert!(e.add(exchange(S as i64, 50_000, 0, 50_000), 0));
        assert!(
            !e.add(exchange(S as i64 + 40_000, 90_000, 0, 20_000), 1),
            "larger trip"
        );
        assert!(
            e.add(exchange(S as i64 + 1_000, 10_000, 0, 12_000), 2),
            "smaller trip"
        );
        assert!(!e.add(exchange(S as i64, 60_000, 0, 60_000), 3));
        let est = e.estimate(3).unwrap();
        assert_eq!((est.offset_ns, est.rtt_ns), (S as i64, 22_000));
        assert_eq!(est.error_bound_ns, 11_000);
        assert_eq!(e.min_rtt_ns(), Some(22_000));
        // 100 s later the chosen sample's bound has grown by 1.5 ms of drift, so a fresh
        // sample with a larger trip but a smaller bound replaces it.
        let later = 2 + 100 * S;
        assert_eq!(
            e.estimate(later).unwrap().error_bound_ns,
            11_000 + 1_500_000
        );
        assert!(e.add(exchange(S as i64 + 7, 200_000, 0, 200_000), later));
        let est = e.estimate(later).unwrap();
        assert_eq!((est.offset_ns, est.error_bound_ns), (S as i64 + 7, 200_000));
        assert_eq!(e.min_rtt_ns(), Some(22_000), "the smallest trip ever seen");
    }
}
