//! A fixed log-linear histogram of round-trip times for the request/response sender: 8 cells
//! per power of two (at most 12.5 % above the true value), kept as plain counters in the worker
//! and published like every other counter, so the hot path only increments one cell.

const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Cells: values below 8 ns exactly, then 8 per power of two up to 2^64.
pub(crate) const RTT_CELLS: usize = (SUB as usize) * (64 - SUB_BITS as usize + 1);

/// A worker's RTT cells (the `rtt_cells` of a TCP sender queue's counters).
pub(crate) type RttCells = [u64; RTT_CELLS];
// The counters' `rtt_cells: 496` is this many.
const _: () = assert!(RTT_CELLS == 496);

/// The cell of a round trip of `ns` nanoseconds.
#[inline]
pub(crate) fn rtt_cell(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros(); // >= SUB_BITS
    let mantissa = (ns >> (exp - SUB_BITS)) & (SUB - 1);
    ((exp - SUB_BITS + 1) as u64 * SUB + mantissa) as usize
}

/// The largest value that falls into `cell`.
pub(crate) fn cell_upper(cell: usize) -> u64 {
    let cell = cell as u64;
    if cell < SUB {
        return cell;
    }
    let exp = cell / SUB - 1 + u64::from(SUB_BITS);
    let mantissa = cell % SUB;
    let low = (SUB + mantissa) << (exp - u64::from(SUB_BITS));
    low.saturating_add((1u64 << (exp - u64::from(SUB_BITS))) - 1)
}

/// The upper bound of the cell that holds quantile `q`; 0 when nothing was observed.
pub(crate) fn quantile(cells: &RttCells, q: f64) -> u64 {
    let total: u64 = cells.iter().sum();
    if total == 0 {
        return 0;
    }
    let want = ((total as f64 * q).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, n) in cells.iter().enumerate() {
        seen += n;
        if seen >= want {
            return cell_upper(i);
        }
    }
    u64::MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lies_in_its_cell_within_an_eighth() {
        for v in (0..5000u64).chain([1 << 20, 123_456_789, u64::MAX / 3, u64::MAX]) {
            let c = rtt_cell(v);
            assert!(c < RTT_CELLS, "{v}");
            let hi = cell_upper(c);
            assert!(hi >= v, "{v} above its cell's bound {hi}");
            assert!(hi - v <= v / 8 + 1, "{v} bound {hi}");
            if c > 0 {
                assert!(cell_upper(c - 1) < v, "{v} also fits cell {}", c - 1);
            }
        }
    }

    #[test]
    fn quantiles_come_from_the_cells() {
        let mut cells: RttCells = [0; RTT_CELLS];
        for v in [10_000u64; 98].iter().chain(&[1_000_000, 2_000_000]) {
            cells[rtt_cell(*v)] += 1;
        }
        assert!((10_000..=11_250).contains(&quantile(&cells, 0.5)));
        assert!((1_000_000..=1_125_000).contains(&quantile(&cells, 0.99)));
        assert_eq!(quantile(&[0; RTT_CELLS], 0.5), 0);
    }
}
