//! Parses and prints the units people type on the command line and in config files: send rates
//! (`max`, `250kpps`, `800Mbit`), durations (`10s`, `2.5`), counts (`10k`) and byte sizes
//! (`1400`, `64KiB`). Every parser rejects negative and malformed input, and all but the byte
//! size reject zero, with a one-line [`UnitError`] that repeats the input and lists the accepted
//! forms.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const RATE_FORMS: &str = "max, a packet rate such as 250kpps, 1.5Mpps or 100000pps, \
                          or a bit rate of UDP payload such as 800Mbit, 10Gbit, 500bit or 1Gbps";
const DURATION_FORMS: &str =
    "a duration such as 10s, 500ms, 2m, 1h30m or a bare number of seconds (10, 2.5)";
const COUNT_FORMS: &str =
    "a whole number with an optional decimal multiplier, such as 1000, 10k, 2M or 1G";
const BYTE_SIZE_FORMS: &str = "a byte size such as 64, 1400, 9000, 1k (1000), 1KiB (1024) or 64KiB";

/// A bad unit value; the message names the input, what is wrong and the forms that work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnitError {
    /// The rate could not be parsed or is not positive.
    #[error("invalid rate {input:?} ({problem}): use {RATE_FORMS}")]
    Rate {
        input: String,
        problem: &'static str,
    },
    /// The duration could not be parsed or is zero.
    #[error("invalid duration {input:?} ({problem}): use {DURATION_FORMS}")]
    Duration {
        input: String,
        problem: &'static str,
    },
    /// The count could not be parsed, is zero or does not fit in 64 bits.
    #[error("invalid count {input:?} ({problem}): use {COUNT_FORMS}")]
    Count {
        input: String,
        problem: &'static str,
    },
    /// The byte size could not be parsed or does not fit in memory sizes.
    #[error("invalid byte size {input:?} ({problem}): use {BYTE_SIZE_FORMS}")]
    ByteSize {
        input: String,
        problem: &'static str,
    },
}

/// How fast a sender transmits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Rate {
    /// As fast as the ring and the kernel allow (unpaced).
    Max,
    /// Datagrams per second.
    PacketsPerSecond(f64),
    /// Bits of UDP payload per second.
    BitsPerSecond(f64),
}

impl Rate {
    /// Datagrams per second needed to reach this rate with `payload_bytes` of UDP payload per
    /// datagram; `None` for [`Rate::Max`]. A payload of 0 bytes is treated as 1 byte so the
    /// result stays finite.
    pub(crate) fn packets_per_second(&self, payload_bytes: usize) -> Option<f64> {
        self.packets_per_second_at(payload_bytes as f64)
    }

    /// As [`Rate::packets_per_second`] for a mean payload (a size mix), which may be fractional.
    pub(crate) fn packets_per_second_at(&self, payload_bytes: f64) -> Option<f64> {
        match *self {
            Rate::Max => None,
            Rate::PacketsPerSecond(pps) => Some(pps),
            Rate::BitsPerSecond(bps) => {
                let bits_per_packet = payload_bytes.max(1.0) * 8.0;
                Some(bps / bits_per_packet)
            }
        }
    }
}

/// Decimal prefixes shared by rates and counts, largest first (used when printing).
const DECIMAL_PREFIXES: [(&str, f64); 3] = [("G", 1e9), ("M", 1e6), ("k", 1e3)];

/// Maps a case-insensitive decimal prefix letter (or none) to its multiplier.
fn decimal_multiplier(prefix: &str) -> Option<u64> {
    match prefix {
        "" => Some(1),
        "k" | "K" => Some(1_000),
        "m" | "M" => Some(1_000_000),
        "g" | "G" => Some(1_000_000_000),
        _ => None,
    }
}

/// Splits `12.5Mpps` into `("12.5", "Mpps")`, allowing spaces between number and unit.
fn split_number_and_unit(text: &str) -> (&str, &str) {
    let unit_start = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(unit_start);
    (number, unit.trim_start())
}

impl FromStr for Rate {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |problem| UnitError::Rate {
            input: input.to_owned(),
            problem,
        };
        let text = input.trim();
        if text.is_empty() {
            return Err(error("empty"));
        }
        if text.eq_ignore_ascii_case("max") {
            return Ok(Rate::Max);
        }
        let (number, unit) = split_number_and_unit(text);
        let (prefix, is_packets) = if let Some(prefix) = unit.strip_suffix("pps") {
            (prefix, true)
        } else if let Some(prefix) = unit
            .strip_suffix("bit")
            .or_else(|| unit.strip_suffix("bps"))
        {
            (prefix, false)
        } else {
            return Err(error("unknown or missing unit"));
        };
        let multiplier = decimal_multiplier(prefix).ok_or_else(|| error("unknown unit prefix"))?;
        let mantissa: f64 = number.parse().map_err(|_| error("not a number"))?;
        let value = mantissa * multiplier as f64;
        if !value.is_finite() {
            return Err(error("too large"));
        }
        if value <= 0.0 || value.is_nan() {
            return Err(error("must be greater than zero"));
        }
        Ok(if is_packets {
            Rate::PacketsPerSecond(value)
        } else {
            Rate::BitsPerSecond(value)
        })
    }
}

/// Writes `value` with the largest decimal prefix that still parses back to exactly `value`.
fn write_with_prefix(f: &mut fmt::Formatter<'_>, value: f64, unit: &str) -> fmt::Result {
    for (prefix, scale) in DECIMAL_PREFIXES {
        let scaled = value / scale;
        if scaled >= 1.0 && scaled * scale == value {
            return write!(f, "{scaled}{prefix}{unit}");
        }
    }
    write!(f, "{value}{unit}")
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rate::Max => f.write_str("max"),
            Rate::PacketsPerSecond(pps) => write_with_prefix(f, pps, "pps"),
            Rate::BitsPerSecond(bps) => write_with_prefix(f, bps, "bit"),
        }
    }
}

/// Parses a duration: humantime forms (`10s`, `500ms`, `2m`, `1h30m`) or a bare number of
/// seconds (`10`, `2.5`). Zero is rejected.
pub(crate) fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let error = |problem| UnitError::Duration {
        input: input.to_owned(),
        problem,
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(error("empty"));
    }
    let duration = if text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let seconds: f64 = text.parse().map_err(|_| error("not a number"))?;
        Duration::try_from_secs_f64(seconds).map_err(|_| error("too large"))?
    } else {
        humantime::parse_duration(text).map_err(|_| error("not a duration"))?
    };
    if duration.is_zero() {
        return Err(error("must be greater than zero"));
    }
    Ok(duration)
}

/// Parses `digits[.digits]` times `multiplier`, requiring a whole result that fits in `u64`.
fn scaled_whole_number(number: &str, multiplier: u64) -> Result<u64, &'static str> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() {
        return Err("not a number");
    }
    if !all_digits(whole) || !all_digits(fraction) {
        return Err("not a whole non-negative number");
    }
    let too_large = "too large";
    let whole_value: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large)?
    };
    let mut total = whole_value
        .checked_mul(u128::from(multiplier))
        .ok_or(too_large)?;
    if !fraction.is_empty() {
        let digits = u32::try_from(fraction.len()).map_err(|_| too_large)?;
        let denominator = 10u128.checked_pow(digits).ok_or(too_large)?;
        let numerator: u128 = fraction.parse().map_err(|_| too_large)?;
        let scaled = numerator
            .checked_mul(u128::from(multiplier))
            .ok_or(too_large)?;
        if scaled % denominator != 0 {
            return Err("does not give a whole number");
        }
        total = total.checked_add(scaled / denominator).ok_or(too_large)?;
    }
    u64::try_from(total).map_err(|_| too_large)
}

/// Parses a count such as `1000`, `10k`, `2M`, `1G` or `1.5M` (decimal multipliers, the
/// prefix letter in either case). Zero is rejected.
pub(crate) fn parse_count(input: &str) -> Result<u64, UnitError> {
    let error = |problem| UnitError::Count {
        input: input.to_owned(),
        problem,
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(error("empty"));
    }
    let (number, unit) = split_number_and_unit(text);
    let multiplier = decimal_multiplier(unit).ok_or_else(|| error("unknown unit"))?;
    let count = scaled_whole_number(number, multiplier).map_err(error)?;
    if count == 0 {
        return Err(error("must be greater than zero"));
    }
    Ok(count)
}

/// Parses a byte size: a plain number of bytes, decimal `k`/`M`/`G` (optionally followed by `B`)
/// or binary `KiB`/`MiB`/`GiB`, all case-insensitive. Zero is accepted; callers enforce their
/// own minimum (for a datagram, the header length).
pub(crate) fn parse_byte_size(input: &str) -> Result<usize, UnitError> {
    let error = |problem| UnitError::ByteSize {
        input: input.to_owned(),
        problem,
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(error("empty"));
    }
    let (number, unit) = split_number_and_unit(text);
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return Err(error("unknown unit")),
    };
    let bytes = scaled_whole_number(number, multiplier).map_err(error)?;
    usize::try_from(bytes).map_err(|_| error("too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pps(text: &str) -> f64 {
        match text.parse::<Rate>() {
            Ok(Rate::PacketsPerSecond(value)) => value,
            other => panic!("{text} parsed as {other:?}"),
        }
    }

    fn bps(text: &str) -> f64 {
        match text.parse::<Rate>() {
            Ok(Rate::BitsPerSecond(value)) => value,
            other => panic!("{text} parsed as {other:?}"),
        }
    }

    #[test]
    fn packet_rates_use_decimal_prefixes_in_either_case() {
        assert_eq!(pps("250kpps"), 250.0 * 1e3);
        assert_eq!(pps("250Kpps"), 250.0 * 1e3);
        assert_eq!(pps("1.5Mpps"), 1.5 * 1e6);
        assert_eq!(pps("1.5mpps"), 1.5 * 1e6);
        assert_eq!(pps("100000pps"), 100_000.0);
        assert_eq!(pps("1Gpps"), 1e9);
        assert_eq!(pps(" 3 kpps "), 3e3);
        assert!("10kPPS".parse::<Rate>().is_err(), "suffix is lower case");
    }

    #[test]
    fn bit_rates_accept_bit_and_bps_spellings() {
        assert_eq!(bps("800Mbit"), 800e6);
        assert_eq!(bps("10Gbit"), 10e9);
        assert_eq!(bps("1.5kbit"), 1500.0);
        assert_eq!(bps("500bit"), 500.0);
        assert_eq!(bps("800Mbps"), bps("800Mbit"));
        assert_eq!(bps("10Gbps"), bps("10Gbit"));
        assert_eq!(bps("500bps"), bps("500bit"));
    }

    #[test]
    fn max_is_case_insensitive() {
        assert_eq!("max".parse::<Rate>(), Ok(Rate::Max));
        assert_eq!("MAX".parse::<Rate>(), Ok(Rate::Max));
    }

    #[test]
    fn bad_rates_are_rejected_with_the_accepted_forms() {
        for bad in [
            "",
            "0pps",
            "0Mbit",
            "-5kpps",
            "NaNpps",
            "nan",
            "inf",
            "10",
            "10kbitz",
            "10Tpps",
            "1.2.3pps",
            "pps",
            "1e400Gpps",
        ] {
            let message = match bad.parse::<Rate>() {
                Err(e) => e.to_string(),
                Ok(rate) => panic!("{bad:?} parsed as {rate:?}"),
            };
            assert!(message.contains(&format!("{bad:?}")), "{message}");
            assert!(
                message.contains("250kpps") && message.contains("800Mbit"),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn display_round_trips() {
        let samples = [
            Rate::Max,
            Rate::PacketsPerSecond(250e3),
            Rate::PacketsPerSecond(1.5e6),
            Rate::PacketsPerSecond(1.5),
            Rate::PacketsPerSecond(123_456.789),
            Rate::PacketsPerSecond(1.0 / 3.0),
            Rate::BitsPerSecond(800e6),
            Rate::BitsPerSecond(1500.0),
            Rate::BitsPerSecond(7.25e9),
            Rate::BitsPerSecond(1e20),
        ];
        for rate in samples {
            let text = rate.to_string();
            assert_eq!(text.parse::<Rate>(), Ok(rate), "{text}");
        }
        assert_eq!(Rate::PacketsPerSecond(250e3).to_string(), "250kpps");
        assert_eq!(Rate::BitsPerSecond(10e9).to_string(), "10Gbit");
    }

    #[test]
    fn bit_rate_converts_to_packets_using_payload_bits() {
        let rate: Rate = "800Mbit".parse().expect("valid rate");
        let payload = 1000;
        let per_second = rate.packets_per_second(payload).expect("paced");
        assert_eq!(per_second, 800e6 / (payload as f64 * 8.0));
        assert_eq!(Rate::Max.packets_per_second(payload), None);
        assert_eq!(
            Rate::PacketsPerSecond(42.0).packets_per_second(payload),
            Some(42.0)
        );
        let zero_payload = Rate::BitsPerSecond(80.0).packets_per_second(0);
        assert!(zero_payload.is_some_and(f64::is_finite));
    }

    #[test]
    fn durations_accept_humantime_and_bare_seconds() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        for bad in [
            "",
            "0",
            "0s",
            "0.0",
            "-1",
            "abc",
            "10 parsecs",
            "1e999",
            ".",
        ] {
            let message = parse_duration(bad).expect_err(bad).to_string();
            assert!(message.contains("1h30m"), "{message}");
        }
    }

    #[test]
    fn counts_accept_decimal_multipliers() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("10k"), Ok(10 * 1000));
        assert_eq!(parse_count("2M"), Ok(2 * 1_000_000));
        assert_eq!(parse_count("1G"), Ok(1_000_000_000));
        assert_eq!(parse_count("1.5M"), Ok(1_500_000));
        assert_eq!(parse_count("18446744073709551615"), Ok(u64::MAX));
        for bad in [
            "",
            "0",
            "0k",
            "-3",
            "1.5",
            "1.0001k",
            "abc",
            "10x",
            "18446744073709551616",
            "99999999999G",
        ] {
            let message = parse_count(bad).expect_err(bad).to_string();
            assert!(message.contains("10k"), "{message}");
        }
    }

    #[test]
    fn byte_sizes_accept_decimal_and_binary_units() {
        assert_eq!(parse_byte_size("64"), Ok(64));
        assert_eq!(parse_byte_size("1400"), Ok(1400));
        assert_eq!(parse_byte_size("9000"), Ok(9000));
        assert_eq!(parse_byte_size("1k"), Ok(1000));
        assert_eq!(parse_byte_size("1KiB"), Ok(1024));
        assert_eq!(parse_byte_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_byte_size("1.5kib"), Ok(1536));
        assert_eq!(parse_byte_size("2MiB"), Ok(2 << 20));
        for bad in ["", "abc", "12 parsecs", "-1", "1.0001k", "0.5"] {
            let message = parse_byte_size(bad).expect_err(bad).to_string();
            assert!(message.contains("64KiB"), "{message}");
        }
    }
}
