//! Latency and jitter as figures: min, mean, p50, p90, p99, p99.9 and max as values with at
//! most 1 % relative error, from log-linear cells (exact below 128 ns, then 64 cells per
//! octave, so a cell is at most 1/64 of its lower bound wide and its midpoint is within
//! 1/128 of any value in it), with the count, the sum, the minimum and the maximum kept
//! exactly beside them. A worker records into [`SharedFigures`] (plain loads and stores of
//! relaxed atomics: one writer, no read-modify-write, no lock, no allocation); the registry
//! adds them into [`FigureCells`] and reads [`Figures`] off those.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

/// Values below this are cells of their own.
const EXACT_BELOW: u64 = 128;
/// Cells per octave above [`EXACT_BELOW`].
const PER_OCTAVE: usize = 64;
/// The highest octave with cells of its own: values from 2^41 ns (about 37 minutes) are
/// counted in the last cell (the exact maximum is kept beside).
const TOP_OCTAVE: u32 = 40;
/// Cells of one histogram.
pub(crate) const FIGURE_CELLS: usize =
    EXACT_BELOW as usize + (TOP_OCTAVE as usize - 6) * PER_OCTAVE;

/// The cell of `ns`.
#[inline]
pub(crate) fn figure_cell(ns: u64) -> usize {
    if ns < EXACT_BELOW {
        return ns as usize;
    }
    let octave = 63 - ns.leading_zeros();
    if octave > TOP_OCTAVE {
        return FIGURE_CELLS - 1;
    }
    let shift = octave - 6;
    let mantissa = (ns >> shift) as usize; // 64..128
    EXACT_BELOW as usize + (octave as usize - 7) * PER_OCTAVE + (mantissa - PER_OCTAVE)
}

/// The lowest value of cell `cell` and its width.
fn cell_range(cell: usize) -> (u64, u64) {
    if cell < EXACT_BELOW as usize {
        return (cell as u64, 1);
    }
    let above = cell - EXACT_BELOW as usize;
    let octave = (above / PER_OCTAVE) as u32 + 7;
    let mantissa = (above % PER_OCTAVE + PER_OCTAVE) as u64;
    let shift = octave - 6;
    (mantissa << shift, 1 << shift)
}

/// The value a cell stands for: its midpoint (exact below 128 ns).
fn cell_value(cell: usize) -> u64 {
    let (low, width) = cell_range(cell);
    low + width / 2
}

/// One distribution's figures. Every value is within 1 % of the true one (min, mean and max
/// are exact); `samples` is never 0 (no samples: no figures).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Figures {
    /// Samples.
    pub(crate) samples: u64,
    /// Smallest, in ns.
    pub(crate) min_ns: u64,
    /// Mean, in ns (rounded down).
    pub(crate) mean_ns: u64,
    /// Median, in ns.
    pub(crate) p50_ns: u64,
    /// 90th percentile, in ns.
    pub(crate) p90_ns: u64,
    /// 99th percentile, in ns.
    pub(crate) p99_ns: u64,
    /// 99.9th percentile, in ns.
    pub(crate) p999_ns: u64,
    /// Largest, in ns.
    pub(crate) max_ns: u64,
}

/// A distribution a worker records into and the registry reads at any time (single writer).
#[derive(Debug)]
pub(crate) struct SharedFigures {
    cells: Box<[AtomicU64]>,
    count: AtomicU64,
    sum: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
}

impl Default for SharedFigures {
    fn default() -> Self {
        SharedFigures {
            cells: (0..FIGURE_CELLS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            min: AtomicU64::new(u64::MAX),
            max: AtomicU64::new(0),
        }
    }
}

impl SharedFigures {
    /// Records one sample (only its one writer calls this).
    #[inline]
    pub(crate) fn record(&self, ns: u64) {
        let cell = &self.cells[figure_cell(ns)];
        cell.store(cell.load(Relaxed) + 1, Relaxed);
        self.count.store(self.count.load(Relaxed) + 1, Relaxed);
        self.sum
            .store(self.sum.load(Relaxed).saturating_add(ns), Relaxed);
        if ns < self.min.load(Relaxed) {
            self.min.store(ns, Relaxed);
        }
        if ns > self.max.load(Relaxed) {
            self.max.store(ns, Relaxed);
        }
    }

    /// Adds what was recorded into `into`.
    pub(crate) fn add_into(&self, into: &mut FigureCells) {
        for (sum, cell) in into.cells.iter_mut().zip(self.cells.iter()) {
            *sum = sum.saturating_add(cell.load(Relaxed));
        }
        into.count = into.count.saturating_add(self.count.load(Relaxed));
        into.sum = into.sum.saturating_add(self.sum.load(Relaxed));
        into.min = into.min.min(self.min.load(Relaxed));
        into.max = into.max.max(self.max.load(Relaxed));
    }

    /// Forgets everything (only while no writer records: a slot handed back).
    pub(crate) fn clear(&self) {
        for cell in self.cells.iter() {
            cell.store(0, Relaxed);
        }
        self.count.store(0, Relaxed);
        self.sum.store(0, Relaxed);
        self.min.store(u64::MAX, Relaxed);
        self.max.store(0, Relaxed);
    }
}

/// A distribution summed from [`SharedFigures`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FigureCells {
    cells: Box<[u64]>,
    count: u64,
    sum: u64,
    min: u64,
    max: u64,
}

impl Default for FigureCells {
    fn default() -> Self {
        FigureCells {
            cells: vec![0; FIGURE_CELLS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl FigureCells {
    /// Adds `other`.
    pub(crate) fn add(&mut self, other: &FigureCells) {
        for (sum, cell) in self.cells.iter_mut().zip(other.cells.iter()) {
            *sum = sum.saturating_add(*cell);
        }
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The figures; `None` without samples.
    pub(crate) fn figures(&self) -> Option<Figures> {
        if self.count == 0 {
            return None;
        }
        Some(Figures {
            samples: self.count,
            min_ns: self.min,
            mean_ns: self.sum / self.count,
            p50_ns: self.quantile(0.5),
            p90_ns: self.quantile(0.9),
            p99_ns: self.quantile(0.99),
            p999_ns: self.quantile(0.999),
            max_ns: self.max,
        })
    }

    /// The value of the sample of rank ⌈q·n⌉: its cell's midpoint, within the exact extremes.
    fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.cells.iter().fold(0, |s, c| s.saturating_add(*c));
        let want = ((total as f64 * q).ceil() as u64).clamp(1, total.max(1));
        let mut seen = 0u64;
        for (cell, n) in self.cells.iter().enumerate() {
            seen = seen.saturating_add(*n);
            if seen >= want {
                // Past the top cell's start there is no bound but the maximum.
                if cell == FIGURE_CELLS - 1 {
                    return self.max;
                }
                return cell_value(cell).clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells_of(values: &[u64]) -> FigureCells {
        let shared = SharedFigures::default();
        for v in values {
            shared.record(*v);
        }
        let mut cells = FigureCells::default();
        shared.add_into(&mut cells);
        cells
    }

    #[test]
    fn every_value_lies_in_its_cell_and_the_cells_are_contiguous() {
        let mut expected_low = 0;
        for cell in 0..FIGURE_CELLS {
            let (low, width) = cell_range(cell);
            assert_eq!(low, expected_low, "cell {cell}");
            assert_eq!(figure_cell(low), cell);
            assert_eq!(figure_cell(low + width - 1), cell);
            // At most 1/64 of its lowest value wide: the midpoint is within 1 % of any value.
            assert!(
                width == 1 || width * 64 <= low,
                "cell {cell}: {low} + {width}"
            );
            expected_low = low + width;
        }
        assert_eq!(expected_low, 1 << (TOP_OCTAVE + 1));
        assert_eq!(figure_cell(u64::MAX), FIGURE_CELLS - 1);
    }

    #[test]
    fn quantiles_are_within_one_percent_of_the_exact_ones() {
        // A spread from 3 µs to 40 ms, by a fixed multiplicative step.
        let mut values: Vec<u64> = (0..20_000)
            .map(|i| (3_000.0 * 1.0005f64.powi(i)) as u64)
            .collect();
        values.reverse();
        let f = cells_of(&values).figures().unwrap();
        values.sort_unstable();
        let exact = |q: f64| values[((values.len() as f64 * q).ceil() as usize).max(1) - 1];
        for (q, got) in [
            (0.5, f.p50_ns),
            (0.9, f.p90_ns),
            (0.99, f.p99_ns),
            (0.999, f.p999_ns),
        ] {
            let want = exact(q) as f64;
            assert!(
                (got as f64 - want).abs() / want <= 0.01,
                "p{q}: {got} against {want}"
            );
        }
        assert_eq!(f.min_ns, values[0]);
        assert_eq!(f.max_ns, *values.last().unwrap());
        assert_eq!(f.samples, 20_000);
        assert_eq!(f.mean_ns, values.iter().sum::<u64>() / values.len() as u64);
    }

    #[test]
    fn no_samples_no_figures_and_extremes_are_exact() {
        assert_eq!(FigureCells::default().figures(), None);
        let f = cells_of(&[5_000_123]).figures().unwrap();
        assert_eq!(
            (f.min_ns, f.p50_ns, f.p999_ns, f.max_ns),
            (5_000_123, 5_000_123, 5_000_123, 5_000_123)
        );
        // A sample past the top cell keeps its exact maximum, and the sum saturates.
        let f = cells_of(&[u64::MAX, u64::MAX, 7]).figures().unwrap();
        assert_eq!((f.min_ns, f.max_ns, f.p99_ns), (7, u64::MAX, u64::MAX));
        assert_eq!(f.mean_ns, u64::MAX / 3);
    }

    #[test]
    fn cleared_figures_count_nothing_and_sums_add() {
        let shared = SharedFigures::default();
        shared.record(1_000);
        shared.clear();
        let mut cells = FigureCells::default();
        shared.add_into(&mut cells);
        assert_eq!(cells.figures(), None);
        let mut a = cells_of(&[10, 20]);
        a.add(&cells_of(&[30]));
        let f = a.figures().unwrap();
        assert_eq!((f.samples, f.min_ns, f.max_ns, f.mean_ns), (3, 10, 30, 20));
    }
}
