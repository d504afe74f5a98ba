//! How a [`Verdict`] is written from a sink's books and read by a sender, whatever the
//! protocol: its counts as a sink session's counters, its latency and jitter with the clock
//! they relate to, and how the verdicts of a run's parts (a rate schedule's steps) add up to
//! the run's. A sender holds no other verdict type: a remote sink's arrives as it is, and
//! `pair`'s in-process sink writes one the same way.

use super::{FlowVerdict, SizeCount, Verdict, VerdictCells, VerdictClock, VerdictJitter};
use crate::{
    latency_clock::{ClockKind, LatencyClock},
    stats::{Jitter, Latency, SessionCounters},
};

impl FlowVerdict {
    /// A sink session's counters as a verdict's (invalid counted per run, not here).
    pub(crate) fn of(c: &SessionCounters) -> FlowVerdict {
        FlowVerdict {
            rx_packets: c.packets,
            rx_bytes: c.bytes,
            rx_lost: c.lost,
            rx_reordered: c.reordered,
            rx_duplicates: c.duplicates,
            rx_invalid: 0,
            rx_kernel_drops: c.kernel_drops,
            rx_unconfirmed: c.unconfirmed,
            tx_failed: c.send_failed,
            rx_late: c.late,
        }
    }

    /// The counts as a sink session's counters (no cells).
    pub(crate) fn counters(&self) -> SessionCounters {
        SessionCounters {
            packets: self.rx_packets,
            bytes: self.rx_bytes,
            lost: self.rx_lost,
            reordered: self.rx_reordered,
            duplicates: self.rx_duplicates,
            late: self.rx_late,
            kernel_drops: self.rx_kernel_drops,
            unconfirmed: self.rx_unconfirmed,
            send_failed: self.tx_failed,
            ..SessionCounters::default()
        }
    }
}

impl VerdictCells {
    /// The latency and jitter cells of a sink's counters.
    pub(crate) fn of(c: &SessionCounters) -> VerdictCells {
        VerdictCells {
            latency: c.latency_cells,
            jitter: c.jitter_cells,
            jitter_sum_ns: c.jitter_sum_ns,
        }
    }

    fn add(&mut self, other: &VerdictCells) {
        for (into, from) in [
            (&mut self.latency, &other.latency),
            (&mut self.jitter, &other.jitter),
            (&mut self.jitter_sum_ns, &other.jitter_sum_ns),
        ] {
            for (a, b) in into.iter_mut().zip(from) {
                *a = a.saturating_add(*b);
            }
        }
    }
}

impl VerdictJitter {
    /// A run's jitter as a verdict carries it.
    pub(crate) fn of(j: &Jitter) -> VerdictJitter {
        VerdictJitter {
            samples: j.samples,
            mean_ns: j.mean_ns,
            p50_ns: j.bounds.p50_ns,
            p99_ns: j.bounds.p99_ns,
            p999_ns: j.bounds.p999_ns,
            max_ns: j.bounds.max_ns,
        }
    }
}

impl VerdictClock {
    /// A run's clock, with its packets without a sample and its clamped samples.
    pub(crate) fn of(clock: &LatencyClock, unknown: u64, clamped: u64) -> VerdictClock {
        let known = clock.kind != ClockKind::Unknown;
        VerdictClock {
            kind: clock.kind,
            offset_ns: known.then_some(clock.offset_ns),
            error_bound_ns: known.then_some(clock.error_bound_ns),
            control_rtt_ns: clock.control_rtt_ns,
            latency_unknown_packets: unknown,
            latency_clamped_packets: clamped,
            reason: (!known).then(|| clock.reason.clone()),
        }
    }
}

impl Verdict {
    /// Every count was in when the sink answered.
    pub(crate) fn complete(&self) -> bool {
        !self.incomplete
    }

    /// Its totals as a sink session's counters, with the packets that gave no latency sample,
    /// the clamped samples and the cells where the sink sent them.
    pub(crate) fn counters(&self) -> SessionCounters {
        let mut c = self.totals.counters();
        if let Some(clock) = &self.clock {
            c.latency_unknown = clock.latency_unknown_packets;
            c.latency_clamped = clock.latency_clamped_packets;
        }
        if let Some(cells) = &self.cells {
            c.latency_cells = cells.latency;
            c.jitter_cells = cells.jitter;
            c.jitter_sum_ns = cells.jitter_sum_ns;
        }
        c
    }

    /// Its one-way latency: the cells' bounds, and the figures where the sink sent them.
    pub(crate) fn latency(&self) -> Latency {
        Latency {
            p50_ns: self.latency_p50_ns,
            p99_ns: self.latency_p99_ns,
            // A sink older than protocol version 5 gives no p99.9 (0): it lies between the
            // p99 and the max, so the max is the true upper bound it can be given.
            p999_ns: match self.latency_p999_ns {
                0 => self.latency_max_ns,
                p999 => p999,
            },
            max_ns: self.latency_max_ns,
            figures: self.latency_figures.as_deref().copied(),
        }
    }

    /// Its jitter (none from a sink older than protocol version 5).
    pub(crate) fn jitter(&self) -> Jitter {
        self.jitter
            .as_deref()
            .map_or_else(Jitter::default, |j| Jitter {
                samples: j.samples,
                mean_ns: j.mean_ns,
                bounds: Latency {
                    p50_ns: j.p50_ns,
                    p99_ns: j.p99_ns,
                    p999_ns: j.p999_ns,
                    max_ns: j.max_ns,
                    figures: None,
                },
            })
            .with_figures(self.jitter_figures.as_deref().copied())
    }

    /// How its latency relates to the sender's clock (an older sink says nothing of it).
    pub(crate) fn latency_clock(&self) -> LatencyClock {
        match &self.clock {
            Some(c) if c.kind != ClockKind::Unknown => LatencyClock {
                kind: c.kind,
                offset_ns: c.offset_ns.unwrap_or(0),
                error_bound_ns: c.error_bound_ns.unwrap_or(0),
                control_rtt_ns: c.control_rtt_ns,
                reason: String::new(),
            },
            Some(c) => LatencyClock {
                control_rtt_ns: c.control_rtt_ns,
                ..LatencyClock::unknown(c.reason.clone().unwrap_or_default())
            },
            None => LatencyClock::unknown(
                "the sink's verdict does not say how its latency relates to this sender's clock",
            ),
        }
    }

    /// Sets its latency and jitter from `latency` and `jitter`.
    pub(crate) fn set_figures(&mut self, latency: &Latency, jitter: &Jitter) {
        self.latency_p50_ns = latency.p50_ns;
        self.latency_p99_ns = latency.p99_ns;
        self.latency_p999_ns = latency.p999_ns;
        self.latency_max_ns = latency.max_ns;
        self.latency_figures = latency.figures.map(Box::new);
        self.jitter = Some(Box::new(VerdictJitter::of(jitter)));
        self.jitter_figures = jitter.bounds.figures.map(Box::new);
    }

    /// The verdict of a whole run from its parts' (in order): the counts add per flow and in
    /// total, the size classes add, the clock is the latest known one (each part is a run of
    /// its own with its own estimate), and the run is incomplete if a part was. Latency and
    /// jitter come from the parts' cells added up when every part with packets sent them;
    /// otherwise each bound is the largest of the parts' (still a true upper bound). Figures
    /// (within 1 %) do not add: a run of several parts has none. One part is its own run.
    pub(crate) fn sum_of_parts(parts: &[&Verdict]) -> Verdict {
        if let [only] = parts {
            return (*only).clone();
        }
        let mut run = Verdict::default();
        let mut cells = Some(VerdictCells::default());
        let (mut latency, mut jitter) = (Latency::default(), Jitter::default());
        let (mut unknown, mut clamped) = (0u64, 0u64);
        let mut clocks = Vec::with_capacity(parts.len());
        for v in parts {
            run.totals.add(&v.totals);
            run.incomplete |= v.incomplete;
            for (flow, c) in &v.flows {
                match run.flows.iter_mut().find(|(f, _)| f == flow) {
                    Some((_, into)) => into.add(c),
                    None => run.flows.push((*flow, *c)),
                }
            }
            for c in &v.sizes {
                match run.sizes.iter_mut().find(|s| s.payload == c.payload) {
                    Some(s) => {
                        s.packets = s.packets.saturating_add(c.packets);
                        s.bytes = s.bytes.saturating_add(c.bytes);
                    }
                    None => run.sizes.push(*c),
                }
            }
            latency = latency.max(&v.latency());
            jitter.merge(&v.jitter());
            match (&mut cells, &v.cells) {
                (Some(sum), Some(c)) => sum.add(c),
                // A part without packets has no samples to miss.
                (Some(_), None) if v.totals.rx_packets == 0 => {}
                _ => cells = None,
            }
            if let Some(c) = &v.clock {
                unknown = unknown.saturating_add(c.latency_unknown_packets);
                clamped = clamped.saturating_add(c.latency_clamped_packets);
            }
            clocks.push(v.latency_clock());
        }
        run.sizes
            .sort_by_key(|c: &SizeCount| (c.payload == 0, c.payload));
        if let Some(cells) = cells {
            let counters = SessionCounters {
                latency_cells: cells.latency,
                jitter_cells: cells.jitter,
                jitter_sum_ns: cells.jitter_sum_ns,
                ..SessionCounters::default()
            };
            latency = Latency::from_cells(&cells.latency);
            jitter = Jitter::of(&counters);
            run.cells = Some(Box::new(cells));
        }
        run.set_figures(
            &Latency {
                figures: None,
                ..latency
            },
            &jitter.with_figures(None),
        );
        run.clock = Some(VerdictClock::of(
            &LatencyClock::latest(&clocks),
            unknown,
            clamped,
        ));
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{figures::Figures, stats::latency_cell};

    /// A part with `packets` packets whose latency samples all lie in `ns`'s cell.
    fn part(packets: u64, ns: u64, clock: LatencyClock) -> Verdict {
        let mut c = SessionCounters {
            packets,
            bytes: 64 * packets,
            ..SessionCounters::default()
        };
        c.latency_cells[latency_cell(ns)] = packets;
        c.jitter_cells[latency_cell(ns / 10)] = packets - 1;
        c.jitter_sum_ns[latency_cell(ns / 10)] = (packets - 1) * (ns / 10);
        let mut v = Verdict {
            totals: FlowVerdict::of(&c),
            flows: vec![(0, FlowVerdict::of(&c))],
            sizes: vec![SizeCount {
                payload: 64,
                packets,
                bytes: 64 * packets,
            }],
            clock: Some(VerdictClock::of(&clock, 1, 0)),
            cells: Some(Box::new(VerdictCells::of(&c))),
            ..Verdict::default()
        };
        let figures = Figures {
            samples: packets,
            p50_ns: ns,
            ..Figures::default()
        };
        v.set_figures(
            &Latency {
                figures: Some(figures),
                ..Latency::from_cells(&c.latency_cells)
            },
            &Jitter::of(&c),
        );
        v
    }

    #[test]
    fn one_part_is_the_run_with_its_figures() {
        let a = part(10, 4_000, LatencyClock::same_clock());
        assert_eq!(Verdict::sum_of_parts(&[&a]), a);
        assert_eq!(a.latency().figures.map(|f| f.p50_ns), Some(4_000));
    }

    #[test]
    fn parts_add_up_from_their_cells_not_from_their_largest_bounds() {
        let a = part(10, 4_000, LatencyClock::unknown("no estimate yet"));
        let mut b = part(10, 800_000, LatencyClock::corrected(-5, 40, 80));
        b.incomplete = true;
        let run = Verdict::sum_of_parts(&[&a, &b]);
        assert_eq!(run.totals.rx_packets, 20);
        assert_eq!(
            run.flows,
            vec![(
                0,
                FlowVerdict {
                    rx_packets: 20,
                    rx_bytes: 1_280,
                    ..FlowVerdict::default()
                }
            )]
        );
        assert_eq!(run.sizes[0].packets, 20);
        assert!(run.incomplete, "one part incomplete: the run is");
        // The 10th of 20 samples lies in the 2-5 us cell: the largest bound would say 1 ms.
        let latency = run.latency();
        assert_eq!((latency.p50_ns, latency.p99_ns), (5_000, 1_000_000));
        assert_eq!(latency.figures, None, "figures of parts do not add");
        assert_eq!(run.jitter().samples, 18);
        assert_eq!(run.jitter().mean_ns, (9 * 400 + 9 * 80_000) / 18);
        // The latest known clock; every part's packets without a sample.
        let clock = run.latency_clock();
        assert_eq!((clock.offset_ns, clock.error_bound_ns), (-5, 40));
        assert_eq!(run.counters().latency_unknown, 2);
    }

    #[test]
    fn a_part_without_cells_leaves_the_largest_bounds() {
        let a = part(10, 4_000, LatencyClock::same_clock());
        let mut b = part(10, 800_000, LatencyClock::same_clock());
        b.cells = None;
        let run = Verdict::sum_of_parts(&[&a, &b]);
        assert_eq!(run.cells, None);
        assert_eq!(
            run.latency().p50_ns,
            1_000_000,
            "a true upper bound, no more"
        );
        // A part with no packets misses no sample.
        let empty = Verdict::default();
        let run = Verdict::sum_of_parts(&[&a, &empty]);
        assert_eq!(run.latency().p50_ns, 5_000);
    }

    #[test]
    fn forged_cells_and_counts_saturate_instead_of_wrapping() {
        let forged = Verdict {
            totals: FlowVerdict {
                rx_packets: u64::MAX,
                ..FlowVerdict::default()
            },
            jitter: Some(Box::new(VerdictJitter {
                samples: u64::MAX,
                mean_ns: u64::MAX,
                ..VerdictJitter::default()
            })),
            cells: Some(Box::new(VerdictCells {
                latency: [u64::MAX; crate::stats::LATENCY_CELLS],
                jitter: [u64::MAX; crate::stats::LATENCY_CELLS],
                jitter_sum_ns: [u64::MAX; crate::stats::LATENCY_CELLS],
            })),
            ..Verdict::default()
        };
        let run = Verdict::sum_of_parts(&[&forged, &forged]);
        assert_eq!(run.totals.rx_packets, u64::MAX);
        assert_eq!(run.cells.as_ref().map(|c| c.latency[0]), Some(u64::MAX));
        assert_eq!(run.jitter().samples, u64::MAX);
        // Every bound is a cell's, however large the counts.
        let p50 = run.latency().p50_ns;
        assert!(crate::stats::LATENCY_BOUNDS_NS.contains(&p50), "{p50}");
    }
}
