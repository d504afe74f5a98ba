//! The unit parsers and the config-file loader under hostile input: strings built from the
//! pieces real values are made of (digits, signs, exponents, every unit, huge numbers, stray
//! Unicode), random bytes, and small TOML files mixing real keys, wrong types, bad units and
//! broken syntax. Nothing panics; what is accepted is positive and finite (a byte size may be
//! zero); what is refused is a usage error (exit 2) that names the file.

use std::ffi::OsString;

use rand::{Rng, rngs::SmallRng};

use super::file::settings;
use crate::config::units::{Rate, parse_byte_size, parse_count, parse_duration};
use crate::fuzzing::{self, pick};

const UNIT_PIECES: &[&str] = &[
    "0",
    "1",
    "7",
    "9",
    "10",
    "250",
    "1400",
    ".",
    "-",
    "+",
    "e",
    "E",
    "e9",
    " ",
    "_",
    ",",
    "pps",
    "kpps",
    "Mpps",
    "Gpps",
    "bit",
    "kbit",
    "Mbit",
    "Gbit",
    "bps",
    "Gbps",
    "ms",
    "s",
    "m",
    "h",
    "us",
    "ns",
    "d",
    "k",
    "K",
    "M",
    "G",
    "T",
    "KiB",
    "MiB",
    "GiB",
    "max",
    "MAX",
    "µ",
    "é",
    "\u{0}",
    "18446744073709551616",
    "1e309",
    "NaN",
    "inf",
    "0x10",
    "1h30m",
    "2.5",
];

fn unit_input(rng: &mut SmallRng) -> String {
    if rng.random_range(0..8) == 0 {
        let b = {
            let n = rng.random_range(0..12);
            fuzzing::bytes(rng, n)
        };
        return String::from_utf8_lossy(&b).into_owned();
    }
    (0..rng.random_range(0..5))
        .map(|_| pick(rng, UNIT_PIECES))
        .collect()
}

#[test]
fn fuzz_unit_parsers() {
    let mut rng = fuzzing::rng("unit parsers", 0x0417_0001);
    let (cases, t) = (fuzzing::cases(), std::time::Instant::now());
    let mut accepted = 0u64;
    for _ in 0..cases {
        let s = unit_input(&mut rng);
        if let Ok(d) = parse_duration(&s) {
            assert!(!d.is_zero(), "{s:?}");
            accepted += 1;
        }
        if let Ok(c) = parse_count(&s) {
            assert!(c > 0, "{s:?}");
            accepted += 1;
        }
        if let Ok(b) = parse_byte_size(&s) {
            // Zero is a valid byte size (callers enforce their minimum): it must read as zero.
            let nonzero_digit = s.chars().any(|c| ('1'..='9').contains(&c));
            assert!(b > 0 || !nonzero_digit, "{s:?} read as 0");
            accepted += 1;
        }
        if let Ok(r) = s.parse::<Rate>() {
            accepted += 1;
            let pps = r.packets_per_second(rng.random_range(0..70_000));
            assert!(
                pps.is_none_or(|p| p.is_finite() && p > 0.0),
                "{s:?}: {pps:?}"
            );
            assert!(r.to_string().parse::<Rate>().is_ok(), "{s:?} prints as {r}");
        }
    }
    eprintln!(
        "units fuzz: {cases} cases, {accepted} accepted, {:?}",
        t.elapsed()
    );
    assert!(accepted > 0);
}

const KEYS: &[&str] = &[
    "to",
    "rate",
    "size",
    "count",
    "duration",
    "flows",
    "json",
    "cpus",
    "queues",
    "gso",
    "listen",
    "rx_wait",
    "rx-wait",
    "no_gro",
    "max_flows",
    "hugepages",
    "config",
    "help",
    "send_op",
    "frobs",
    "",
    "a.b",
    "\"q\"",
    "share_port",
    "steer",
];
const VALUES: &[&str] = &[
    "\"127.0.0.1:9\"",
    "\"250kpps\"",
    "1200",
    "8.5",
    "true",
    "false",
    "[0, 1]",
    "[true]",
    "{ a = 1 }",
    "\"10furlongs\"",
    "-1",
    "1e999",
    "\"\"",
    "\"spin\"",
    "\"max\"",
    "0x10",
    "'lit'",
    "1979-05-27",
    "nan",
    "inf",
    "\"1s\"",
    "[\"0-1\"]",
    "9223372036854775808",
];
const NOISE: &[&str] = &[
    "\n", " ", "=", "#c\n", "[", "]", "\"", ",", "[t]\n", "\u{0}", "é",
];

fn toml_input(rng: &mut SmallRng) -> String {
    let mut s = String::new();
    for _ in 0..rng.random_range(0..4) {
        match rng.random_range(0..8u8) {
            0 => s.push_str(pick(rng, NOISE)),
            1 => s.push_str(&unit_input(rng)),
            2 => {
                s.push_str(pick(rng, KEYS));
                s.push_str(" = \"");
                s.push_str(&unit_input(rng));
                s.push_str("\"\n");
            }
            _ => {
                s.push_str(pick(rng, KEYS));
                s.push_str(" = ");
                s.push_str(pick(rng, VALUES));
                s.push('\n');
            }
        }
    }
    s
}

/// Runs a tenth of the other loops' cases (1 M in the test command): a case parses a whole TOML
/// document and resolves it against clap's command, about 18 µs, a hundred header parses, and
/// the file is the operator's own input, not the network's. At 10 M this one loop took 182 s,
/// the test command's slowest step after the build.
#[test]
fn fuzz_config_file() {
    let mut rng = fuzzing::rng("config file", 0xc0f1_0001);
    let (cases, t) = (fuzzing::cases() / 10, std::time::Instant::now());
    let cli: Vec<OsString> = vec!["--rate".into(), "1kpps".into()];
    let mut accepted = 0u64;
    for _ in 0..cases {
        let text = toml_input(&mut rng);
        let sub = pick(&mut rng, &["send", "sink", "pair"]);
        let args = if rng.random() { &cli[..] } else { &[] };
        match settings(sub, &text, "f.toml", args) {
            Ok(out) => {
                accepted += 1;
                for a in out {
                    assert!(a.to_string_lossy().starts_with("--"), "{text:?}: {a:?}");
                }
            }
            Err(e) => {
                assert_eq!(e.exit_code(), crate::error::EXIT_USAGE, "{text:?}: {e}");
                assert!(e.to_string().starts_with("f.toml:"), "{text:?}: {e}");
            }
        }
    }
    eprintln!(
        "config fuzz: {cases} cases, {accepted} accepted, {:?}",
        t.elapsed()
    );
    assert!(accepted > 0 && accepted < cases);
}
