//! Rates as people read them, the same in every human line of every protocol: three significant
//! digits under an SI prefix (`99.7 kpps`, `1.19 Mpps`, `51.2 Mbit/s`, `31.4 krec/s`), as
//! iperf3 prints bit rates. Counts stay exact in the lines beside them, and JSON keeps every
//! rate as a plain number.

/// SI prefixes, one per power of 1000.
const PREFIXES: [&str; 5] = ["", "k", "M", "G", "T"];

/// `value` per second with `unit` (`pps`, `rec/s`, `trans/s`) under an SI prefix: `99.7 kpps`;
/// a value below 1000 is a whole number (`512 pps`, `0 pps`).
pub(crate) fn per_second(value: f64, unit: &str) -> String {
    let value = if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    };
    let mut scaled = value;
    let mut prefix = 0;
    // Scale on the rounded value, so 999.96 k reads 1.00 M and never 1000 k.
    while prefix + 1 < PREFIXES.len() && scaled >= 999.5 {
        scaled /= 1000.0;
        prefix += 1;
    }
    let digits = match (prefix, scaled) {
        (0, _) => 0,
        (_, s) if s >= 99.95 => 0,
        (_, s) if s >= 9.995 => 1,
        _ => 2,
    };
    format!("{scaled:.digits$} {}{unit}", PREFIXES[prefix])
}

/// Bits per second under an SI prefix: `51.2 Mbit/s`, `0 bit/s`.
pub(crate) fn bit_rate(bps: f64) -> String {
    per_second(bps, "bit/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_digits_under_a_prefix() {
        assert_eq!(per_second(0.0, "pps"), "0 pps");
        assert_eq!(per_second(5.4, "pps"), "5 pps");
        assert_eq!(per_second(999.0, "pps"), "999 pps");
        assert_eq!(per_second(99_688.0, "pps"), "99.7 kpps");
        assert_eq!(per_second(1_190_240.0, "pps"), "1.19 Mpps");
        assert_eq!(per_second(31_420.0, "rec/s"), "31.4 krec/s");
        assert_eq!(bit_rate(4_000_000.0), "4.00 Mbit/s");
        assert_eq!(bit_rate(571_315_200.0), "571 Mbit/s");
        assert_eq!(bit_rate(35.9e9), "35.9 Gbit/s");
    }

    #[test]
    fn rounding_never_reads_a_thousand_under_a_prefix() {
        assert_eq!(per_second(999.7, "pps"), "1.00 kpps");
        assert_eq!(per_second(999_960.0, "pps"), "1.00 Mpps");
        assert_eq!(per_second(99_960.0, "pps"), "100 kpps");
        assert_eq!(per_second(9_996.0, "pps"), "10.0 kpps");
    }

    #[test]
    fn nothing_odd_reads_as_a_rate() {
        assert_eq!(per_second(f64::NAN, "pps"), "0 pps");
        assert_eq!(per_second(-3.0, "pps"), "0 pps");
        assert_eq!(bit_rate(2e15), "2000 Tbit/s");
    }
}
