//! Counters a worker owns and the reporter reads: the one counter system of both protocols.
//!
//! A worker keeps plain `u64` counters on its own stack and, once per loop iteration batch,
//! publishes them into a shared mirror of relaxed atomics with plain stores (one writer, so no
//! read-modify-write and no lock). The reporter loads the mirror for interval lines, the
//! exporter and the final summary. Counters are 64-bit and only grow. `counter_set!` defines
//! each set, UDP's here (per flow and per session) and TCP's beside its workers
//! (`sender::tcp`, `sink::tcp`), with the histogram cells of each as array fields.

/// `errno` classes kept apart in error counters (also the `errno` metric label values).
pub(crate) const ERRNO_LABELS: [&str; 7] = [
    "EAGAIN",
    "ENOBUFS",
    "ECONNREFUSED",
    "EMSGSIZE",
    "ENETUNREACH",
    "EPERM",
    "other",
];
/// Number of `errno` classes.
pub(crate) const ERRNO_CLASSES: usize = ERRNO_LABELS.len();

/// The class index of a positive `errno`.
pub(crate) fn errno_class(errno: i32) -> usize {
    match errno {
        libc::EAGAIN => 0,
        libc::ENOBUFS => 1,
        libc::ECONNREFUSED => 2,
        libc::EMSGSIZE => 3,
        libc::ENETUNREACH => 4,
        libc::EPERM => 5,
        _ => 6,
    }
}

/// Reasons a received datagram is not counted as traffic (also the `reason` label values).
pub(crate) const INVALID_LABELS: [&str; 9] = [
    "short",
    "magic",
    "version",
    "flow_id",
    "table_full",
    "unannounced",
    "source",
    "implausible",
    "auth",
];

use crate::figures::Figures;

/// Upper bounds (ns) of the latency buckets; the last cell counts everything above.
pub(crate) const LATENCY_BOUNDS_NS: [u64; 19] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
];
/// Latency cells: one per bound plus one for "above the last bound".
pub(crate) const LATENCY_CELLS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// The latency cell of a one-way delay in nanoseconds.
pub(crate) fn latency_cell(ns: u64) -> usize {
    LATENCY_BOUNDS_NS
        .iter()
        .position(|&b| ns <= b)
        .unwrap_or(LATENCY_BOUNDS_NS.len())
}

/// `counter_set! { #[doc] Plain / Shared { #[doc] field:, #[doc] cells: N, ... } }` defines a
/// worker's plain counters `Plain` (a `u64` per field, a `[u64; N]` per array field), their
/// shared atomic mirror `Shared` with `publish` and `load`, and `Plain::add` for totals. With
/// `json;` first, `Plain::json` also gives the scalar fields as JSON keys named after them (the
/// arrays are histograms, reported by their owners). The one counter system of both protocols.
macro_rules! counter_set {
    (json; $(#[$m:meta])* $name:ident / $shared:ident { $($(#[$fm:meta])* $field:ident : $($n:literal)?),* $(,)? }) => {
        $crate::stats::counter_set! { $(#[$m])* $name / $shared { $($(#[$fm])* $field : $($n)?),* } }

        impl $name {
            /// The scalar counters as JSON keys named after them.
            pub(crate) fn json(&self) -> serde_json::Map<String, serde_json::Value> {
                let mut map = serde_json::Map::new();
                $($crate::stats::counter_set!(@json map, $field, self.$field $(, $n)?);)*
                map
            }
        }
    };
    ($(#[$m:meta])* $name:ident / $shared:ident { $($(#[$fm:meta])* $field:ident : $($n:literal)?),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name { $($(#[$fm])* pub $field: $crate::stats::counter_set!(@plain $($n)?)),* }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $crate::stats::counter_set!(@zero $($n)?)),* }
            }
        }

        #[doc = concat!("Shared atomic mirror of [`", stringify!($name), "`].")]
        #[derive(Debug)]
        pub(crate) struct $shared { $($field: $crate::stats::counter_set!(@atomic $($n)?)),* }

        impl Default for $shared {
            fn default() -> Self {
                $shared { $($field: $crate::stats::counter_set!(@atomic_zero $($n)?)),* }
            }
        }

        impl $shared {
            /// Stores every counter (single writer: plain relaxed stores).
            pub(crate) fn publish(&self, v: &$name) {
                $($crate::stats::counter_set!(@store self.$field, v.$field $(, $n)?);)*
            }
            /// Loads every counter.
            pub(crate) fn load(&self) -> $name {
                $name { $($field: $crate::stats::counter_set!(@load self.$field $(, $n)?)),* }
            }
        }

        impl $name {
            /// Adds `other` field by field (for totals across workers).
            pub(crate) fn add(&mut self, other: &$name) {
                $($crate::stats::counter_set!(@add self.$field, other.$field $(, $n)?);)*
            }
        }
    };
    (@plain) => { u64 };
    (@plain $n:literal) => { [u64; $n] };
    (@zero) => { 0 };
    (@zero $n:literal) => { [0; $n] };
    (@atomic) => { ::std::sync::atomic::AtomicU64 };
    (@atomic $n:literal) => { [::std::sync::atomic::AtomicU64; $n] };
    (@atomic_zero) => { ::std::sync::atomic::AtomicU64::new(0) };
    (@atomic_zero $n:literal) => { std::array::from_fn(|_| ::std::sync::atomic::AtomicU64::new(0)) };
    (@store $a:expr, $v:expr) => { $a.store($v, ::std::sync::atomic::Ordering::Relaxed) };
    (@store $a:expr, $v:expr, $n:literal) => { for (a, v) in $a.iter().zip($v.iter()) { a.store(*v, ::std::sync::atomic::Ordering::Relaxed) } };
    (@load $a:expr) => { $a.load(::std::sync::atomic::Ordering::Relaxed) };
    (@load $a:expr, $n:literal) => { std::array::from_fn(|i| $a[i].load(::std::sync::atomic::Ordering::Relaxed)) };
    (@add $a:expr, $b:expr) => { $a = $a.saturating_add($b) };
    (@add $a:expr, $b:expr, $n:literal) => { for (a, b) in $a.iter_mut().zip($b.iter()) { *a = a.saturating_add(*b) } };
    (@json $map:ident, $field:ident, $v:expr) => { $map.insert(stringify!($field).to_string(), serde_json::Value::from($v)); };
    (@json $map:ident, $field:ident, $v:expr, $n:literal) => {};
}
pub(crate) use counter_set;

counter_set! {
    /// Per-flow sender counters.
    TxFlow / SharedTxFlow {
        /// Packets (datagrams or GSO segments) the kernel accepted.
        packets:,
        /// UDP payload bytes the kernel accepted.
        bytes:,
        /// Packets whose send failed, by `errno` class.
        errors: 7,
        /// Packets the kernel accepted, by size class of the sender's mix.
        size_packets: 8,
        /// UDP payload bytes the kernel accepted, by size class of the sender's mix.
        size_bytes: 8,
    }
}

counter_set! {
    /// Per-flow sink counters (summed over the flow's sessions).
    RxFlow / SharedRxFlow {
        /// Valid packets received (segments counted individually).
        packets:,
        /// UDP payload bytes of valid packets.
        bytes:,
        /// Sequence numbers never received and not explained by kernel drops on this socket.
        lost:,
        /// Packets that arrived after a higher sequence number.
        reordered:,
        /// Extra copies of a sequence number already received.
        duplicates:,
        /// Packets later than the reorder window (already counted lost).
        late:,
    }
}

counter_set! {
    /// The sink's books of one (sender, epoch, flow) session, and sums of them per sender.
    SessionCounters / SharedSessionCounters {
        /// Valid packets received (segments counted individually).
        packets:,
        /// UDP payload bytes of valid packets.
        bytes:,
        /// Sequence numbers never received: not explained by failed sends or kernel drops.
        lost:,
        /// Packets that arrived after a higher sequence number.
        reordered:,
        /// Extra copies of a sequence number already received.
        duplicates:,
        /// Packets later than the reorder window (already counted lost).
        late:,
        /// Missing datagrams charged to the sink socket's kernel drops.
        kernel_drops:,
        /// Sequence numbers whose send failed at the sender (never counted as lost).
        send_failed:,
        /// Sent after the last packet received, by the sender's last progress report, by a
        /// sender that vanished without a goodbye: fate unknown, neither lost nor received.
        unconfirmed:,
        /// One-way latency observations per cell of [`LATENCY_BOUNDS_NS`] (corrected by the
        /// sender's clock offset; never a raw difference of two clocks).
        latency_cells: 20,
        /// Sum of the one-way latency samples per cell, in ns (for the per-sender histogram).
        latency_sum_ns: 20,
        /// Jitter: |D| of RFC 3550 section 6.4.1, the difference between the corrected
        /// transit times of two consecutive latency samples of one session, per cell of
        /// [`LATENCY_BOUNDS_NS`] (a session's first sample, and its first after a new clock
        /// correction, has no predecessor and gives none).
        jitter_cells: 20,
        /// Sum of |D| per cell, in ns.
        jitter_sum_ns: 20,
        /// Full-header packets that gave no latency sample: no clock estimate for their sender.
        latency_unknown:,
        /// Latency samples whose corrected transit came out negative (the estimate's error),
        /// taken as 0.
        latency_clamped:,
        /// Latency samples that went into no figures (`figures`): the sink queue's figure
        /// pool had no slot for their run, so their sender's figures are unknown.
        latency_unfigured:,
        /// Valid packets by the sink's size classes (`sink::sizes`; the last cell: other sizes).
        size_packets: 9,
    }
}

/// The sum of `values`, held at `u64::MAX` rather than wrapped.
pub(crate) fn saturating_sum(values: &[u64]) -> u64 {
    values.iter().fold(0, |sum, v| sum.saturating_add(*v))
}

/// A session's jitter state: the corrected transit of its latest latency sample, in ns
/// (signed: a transit the clock estimate's error made negative is kept as it is, so the
/// difference stays true), or [`NO_TRANSIT`] before its first.
pub(crate) const NO_TRANSIT: i64 = i64::MIN;

/// Counts one latency sample's jitter into `counters`: |D| = |transit − previous transit|
/// (RFC 3550 section 6.4.1: D(i,j) = (Rj − Ri) − (Sj − Si) = (Rj − Sj) − (Ri − Si)), into its
/// cell and that cell's sum, when there is a previous transit; returns the transit to keep.
/// Plain integer arithmetic: a subtraction, a cell lookup, two additions.
#[inline]
pub(crate) fn count_jitter(counters: &mut SessionCounters, previous: i64, transit: i64) -> i64 {
    if previous != NO_TRANSIT {
        let d = transit.abs_diff(previous);
        let cell = latency_cell(d);
        counters.jitter_cells[cell] += 1;
        counters.jitter_sum_ns[cell] = counters.jitter_sum_ns[cell].saturating_add(d);
    }
    transit
}

/// The upper bound (ns) of the latency cell that holds quantile `q` of `cells`: the cells'
/// resolution, `u64::MAX` for the open top cell, 0 when nothing was observed.
pub(crate) fn latency_quantile_bound(cells: &[u64; LATENCY_CELLS], q: f64) -> u64 {
    // Saturating: a verdict's cells come from the network (protocol version 10).
    let total = saturating_sum(cells);
    if total == 0 {
        return 0;
    }
    let want = ((total as f64 * q).ceil() as u64).clamp(1, total);
    let mut seen: u64 = 0;
    for (i, n) in cells.iter().enumerate() {
        seen = seen.saturating_add(*n);
        if seen >= want {
            return LATENCY_BOUNDS_NS.get(i).copied().unwrap_or(u64::MAX);
        }
    }
    u64::MAX
}

/// Latency quantiles at the cells' resolution (upper bounds of the cells that hold them), and
/// the figures where they are known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Latency {
    /// Median.
    pub(crate) p50_ns: u64,
    /// 99th percentile.
    pub(crate) p99_ns: u64,
    /// 99.9th percentile.
    pub(crate) p999_ns: u64,
    /// Maximum.
    pub(crate) max_ns: u64,
    /// The same as values (within 1 %), with more quantiles: `None` when not known.
    pub(crate) figures: Option<Figures>,
}

impl Latency {
    /// Each quantile bound the larger of the two (a true upper bound of the merged samples');
    /// no figures (quantiles of two parts do not make the whole's).
    pub(crate) fn max(&self, other: &Latency) -> Latency {
        Latency {
            p50_ns: self.p50_ns.max(other.p50_ns),
            p99_ns: self.p99_ns.max(other.p99_ns),
            p999_ns: self.p999_ns.max(other.p999_ns),
            max_ns: self.max_ns.max(other.max_ns),
            figures: None,
        }
    }

    /// The same with `figures`.
    pub(crate) fn with_figures(self, figures: Option<Figures>) -> Latency {
        Latency { figures, ..self }
    }

    /// The quantiles of `cells`.
    pub(crate) fn from_cells(cells: &[u64; LATENCY_CELLS]) -> Latency {
        Latency {
            p50_ns: latency_quantile_bound(cells, 0.5),
            p99_ns: latency_quantile_bound(cells, 0.99),
            p999_ns: latency_quantile_bound(cells, 0.999),
            max_ns: latency_quantile_bound(cells, 1.0),
            figures: None,
        }
    }
}

/// A sender's jitter (|D| of consecutive packets of a session, RFC 3550 section 6.4.1): its
/// quantiles at the cells' resolution, its mean and how many differences it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Jitter {
    /// Differences counted (0: no jitter known).
    pub(crate) samples: u64,
    /// Mean |D| in ns, rounded down (what RFC 3550's smoothed J estimates).
    pub(crate) mean_ns: u64,
    /// Quantiles as upper bounds of the cells that hold them, and the figures where known.
    pub(crate) bounds: Latency,
}

impl Jitter {
    /// Adds another part's jitter (a stepped run's steps): the counts add, the mean is weighted
    /// by them, and each quantile bound is the larger of the two (still a true upper bound).
    pub(crate) fn merge(&mut self, other: &Jitter) {
        // In u128, saturating: a verdict's counts come from the network.
        let samples = u128::from(self.samples) + u128::from(other.samples);
        let weighted = (u128::from(self.mean_ns) * u128::from(self.samples))
            .saturating_add(u128::from(other.mean_ns) * u128::from(other.samples));
        if let Some(mean) = weighted.checked_div(samples) {
            self.mean_ns = mean as u64;
        }
        self.samples = self.samples.saturating_add(other.samples);
        self.bounds = self.bounds.max(&other.bounds);
    }

    /// The same with `figures`.
    pub(crate) fn with_figures(self, figures: Option<Figures>) -> Jitter {
        Jitter {
            bounds: self.bounds.with_figures(figures),
            ..self
        }
    }

    /// The jitter of these counters.
    pub(crate) fn of(c: &SessionCounters) -> Jitter {
        let samples = saturating_sum(&c.jitter_cells);
        let sum = saturating_sum(&c.jitter_sum_ns);
        Jitter {
            samples,
            mean_ns: sum.checked_div(samples).unwrap_or(0),
            bounds: Latency::from_cells(&c.jitter_cells),
        }
    }
}

counter_set! {
    /// Per-worker engine and role counters.
    WorkerCounters / SharedWorkerCounters {
        /// `io_uring_enter` calls.
        enter_calls:,
        /// SQEs submitted.
        sqes_submitted:,
        /// CQEs reaped.
        cqes_reaped:,
        /// Pushes that found the SQ full.
        sq_full:,
        /// Kernel CQ overflow count.
        cq_overflow:,
        /// Operations in flight (a gauge).
        inflight:,
        /// Sender: nanoseconds behind the pacing schedule (a gauge).
        pacing_lag_ns:,
        /// Sender: the pacing target now in packets per second × 1000 (a gauge; follows a
        /// rate schedule).
        target_milli_pps:,
        /// Sender: zero-copy notifications that report a copy.
        zc_copied:,
        /// Sink: invalid datagrams by reason ([`INVALID_LABELS`]).
        invalid: 9,
        /// Sink: datagrams the kernel dropped on this socket (`SO_RXQ_OVFL`).
        kernel_drops:,
        /// Sink: multishot receives ended because the buffer ring ran dry.
        buffer_ring_empty:,
        /// Sink: multishot receives re-armed.
        rearms:,
        /// Sink: provided buffers in circulation, the rest held back (a gauge).
        buffers_circulating:,
        /// Sink: failed receive completions by `errno` class.
        rx_errors: 7,
        /// Sink: Unix time (ns) of the last valid packet (a gauge).
        last_packet_unix_ns:,
        /// Sink: latency observations per cell.
        latency_cells: 20,
        /// Sink: sum of latency per cell in ns.
        latency_sum_ns: 20,
        /// Sink: full-header packets without a latency sample (no clock estimate).
        latency_unknown:,
        /// Sink: latency samples whose negative corrected transit was taken as 0.
        latency_clamped:,
        /// Sink: requests (`--pattern rr`) answered.
        answered:,
        /// Sink: counted requests left unanswered by this sink (no response slot free, the
        /// response length out of range, or the send failed).
        unanswered:,
    }
}

impl WorkerCounters {
    /// Copies the engine's counters in; `inflight` is the caller's own count.
    pub(crate) fn set_ring(
        &mut self,
        ring: &crate::ring::RingCounters,
        cq_overflow: u32,
        inflight: u64,
    ) {
        self.enter_calls = ring.enter_calls;
        self.sqes_submitted = ring.sqes_submitted;
        self.cqes_reaped = ring.cqes_reaped;
        self.sq_full = ring.sq_full;
        self.cq_overflow = u64::from(cq_overflow);
        self.inflight = inflight;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_and_load_round_trip() {
        let shared = SharedTxFlow::default();
        let mut errors = [0; ERRNO_CLASSES];
        errors[errno_class(libc::ENOBUFS)] = 2;
        let local = TxFlow {
            packets: 5,
            errors,
            ..TxFlow::default()
        };
        shared.publish(&local);
        assert_eq!(shared.load(), local);
        let mut total = local;
        total.add(&local);
        assert_eq!(total.packets, 10);
        assert_eq!(total.errors[1], 4);
    }

    #[test]
    fn latency_quantiles_are_cell_bounds() {
        let mut cells = [0; LATENCY_CELLS];
        assert_eq!(Latency::from_cells(&cells), Latency::default());
        cells[latency_cell(1_500)] = 98;
        cells[latency_cell(30_000)] = 1;
        cells[latency_cell(5_000_000_000)] = 1;
        let l = Latency::from_cells(&cells);
        assert_eq!((l.p50_ns, l.p99_ns, l.max_ns), (2_000, 50_000, u64::MAX));
        // 1000 samples: p99.9 is the 999th, p99 the 990th.
        let mut cells = [0; LATENCY_CELLS];
        cells[latency_cell(1_500)] = 990;
        cells[latency_cell(8_000)] = 9;
        cells[latency_cell(150_000)] = 1;
        let l = Latency::from_cells(&cells);
        assert_eq!(
            (l.p50_ns, l.p99_ns, l.p999_ns, l.max_ns),
            (2_000, 2_000, 10_000, 200_000)
        );
    }

    /// RFC 3550 section 6.4.1 on a hand-built sequence: send times S, receive times R (the
    /// receiver's clock 5 s ahead, corrected), D(i-1,i) = (Ri - Ri-1) - (Si - Si-1).
    #[test]
    fn jitter_is_rfc3550_d_of_consecutive_transits() {
        let correction: i64 = 5_000_000_000;
        let sent: [i64; 6] = [0, 20_000, 40_000, 60_000, 80_000, 100_000];
        let received: [i64; 6] = [
            5_000_050_000, // transit 50 us
            5_000_072_000, // 52 us: |D| 2 us
            5_000_089_000, // 49 us: |D| 3 us
            5_000_109_000, // 49 us: |D| 0
            5_000_330_000, // 250 us: |D| 201 us (a queue built up)
            5_000_150_000, // 50 us: |D| 200 us
        ];
        let mut c = SessionCounters::default();
        let mut previous = NO_TRANSIT;
        let mut expected = Vec::new();
        for i in 0..sent.len() {
            let transit = received[i] - sent[i] - correction;
            previous = count_jitter(&mut c, previous, transit);
            if i > 0 {
                let d = (received[i] - received[i - 1]) - (sent[i] - sent[i - 1]);
                expected.push(d.unsigned_abs());
            }
        }
        assert_eq!(expected, [2_000, 3_000, 0, 201_000, 200_000]);
        let mut cells = [0; LATENCY_CELLS];
        let mut sums = [0; LATENCY_CELLS];
        for d in &expected {
            cells[latency_cell(*d)] += 1;
            sums[latency_cell(*d)] += d;
        }
        assert_eq!((c.jitter_cells, c.jitter_sum_ns), (cells, sums));
        let j = Jitter::of(&c);
        assert_eq!((j.samples, j.mean_ns), (5, 406_000 / 5));
        assert_eq!(
            (j.bounds.p50_ns, j.bounds.max_ns),
            (5_000, 500_000),
            "the median |D| 3 us is in the 2-5 us cell"
        );
        // A constant clock offset cancels in D: the same sequence uncorrected gives the same.
        let mut raw = SessionCounters::default();
        let mut previous = NO_TRANSIT;
        for i in 0..sent.len() {
            previous = count_jitter(&mut raw, previous, received[i] - sent[i]);
        }
        assert_eq!(raw.jitter_cells, c.jitter_cells);
        // A transit made negative by the estimate's error is kept signed: D stays true.
        let mut neg = SessionCounters::default();
        let previous = count_jitter(&mut neg, NO_TRANSIT, -3_000);
        count_jitter(&mut neg, previous, 4_000);
        assert_eq!(Jitter::of(&neg).mean_ns, 7_000);
        assert_eq!(Jitter::of(&SessionCounters::default()), Jitter::default());
    }

    #[test]
    fn latency_cells_cover_range() {
        assert_eq!(latency_cell(0), 0);
        assert_eq!(latency_cell(1_000), 0);
        assert_eq!(latency_cell(1_001), 1);
        assert_eq!(latency_cell(u64::MAX), LATENCY_CELLS - 1);
        assert_eq!(LATENCY_CELLS, 20);
        assert_eq!(errno_class(libc::EIO), ERRNO_CLASSES - 1);
    }
}
