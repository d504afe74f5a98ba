//! The header parsers under hostile input: random bytes of every short length, valid full and
//! compact headers with flipped bits, wrong magic or version, truncations, and either magic
//! spliced onto random bytes. Whatever `parse` or `parse_any` accepts is at least its header
//! long and re-encodes to exactly the bytes it came from; every refusal names what is wrong
//! with the bytes. The TCP record stream parser has its own loop ([`stream`]).

mod stream;

use rand::{Rng, rngs::SmallRng};

use super::header::{
    COMPACT_LEN, COMPACT_MAGIC, Form, HEADER_LEN, Header, Invalid, MAGIC, VERSION, parse, parse_any,
};
use crate::fuzzing;

fn header(rng: &mut impl Rng) -> Header {
    Header {
        flags: rng.random(),
        failed: rng.random(),
        flow: u32::from(rng.random::<u16>()),
        epoch: rng.random(),
        seq: rng.random(),
        timestamp_ns: rng.random(),
    }
}

/// A full header followed by up to 39 payload bytes.
fn valid(rng: &mut impl Rng) -> Vec<u8> {
    let mut b = header(rng).to_bytes().to_vec();
    b.extend((0..rng.random_range(0..40)).map(|_| rng.random::<u8>()));
    b
}

/// A compact header followed by up to 39 payload bytes (a datagram of 18 to 56 bytes).
fn valid_compact(rng: &mut impl Rng) -> Vec<u8> {
    let mut b = header(rng).to_compact_bytes().to_vec();
    b.extend((0..rng.random_range(0..40)).map(|_| rng.random::<u8>()));
    b
}

fn flip_bits(rng: &mut impl Rng, b: &mut [u8]) {
    for _ in 0..rng.random_range(1..4) {
        let i = rng.random_range(0..b.len());
        b[i] ^= 1 << rng.random_range(0..8);
    }
}

#[test]
fn fuzz_header_parse() {
    let mut rng = fuzzing::rng("header parse", 0x4ead_0001);
    let (cases, t) = (fuzzing::cases(), std::time::Instant::now());
    let mut accepted = 0u64;
    for _ in 0..cases {
        let mut b = valid(&mut rng);
        match rng.random_range(0..6u8) {
            0 => {
                b = {
                    let n = rng.random_range(0..72);
                    fuzzing::bytes(&mut rng, n)
                }
            }
            1 => flip_bits(&mut rng, &mut b),
            2 => b.truncate(rng.random_range(0..=HEADER_LEN)),
            3 => b[4] = rng.random(),
            4 => b[..4].copy_from_slice(&(MAGIC ^ (1 << rng.random_range(0..32))).to_be_bytes()),
            _ => {}
        }
        match parse(&b) {
            Ok(h) => {
                accepted += 1;
                assert!(b.len() >= HEADER_LEN);
                assert_eq!(h.to_bytes()[..], b[..HEADER_LEN], "{h:?}");
            }
            Err(Invalid::Short) => assert!(b.len() < HEADER_LEN),
            Err(Invalid::Magic) => assert_ne!(b[..4], MAGIC.to_be_bytes()),
            Err(Invalid::Version) => assert_ne!(b[4], VERSION),
        }
    }
    eprintln!(
        "header fuzz: {cases} cases, {accepted} accepted, {:?}",
        t.elapsed()
    );
    assert!(accepted > 0 && accepted < cases);
}

/// One input for `parse_any`.
fn any_input(rng: &mut SmallRng) -> Vec<u8> {
    let mut b = if rng.random() {
        valid(rng)
    } else {
        valid_compact(rng)
    };
    match rng.random_range(0..9u8) {
        // Random bytes of every length up to past the full header.
        0 => {
            let n = rng.random_range(0..=HEADER_LEN + 8);
            b = fuzzing::bytes(rng, n);
        }
        1 | 2 => flip_bits(rng, &mut b),
        3 => b.truncate(rng.random_range(0..=b.len())),
        4 => b[4] = rng.random(),
        // One magic bit wrong: bit 4 of the last byte turns either form's magic into the
        // other's ("RBLS" and "RBLC" differ only there).
        5 => b[rng.random_range(0..4)] ^= 1 << rng.random_range(0..8),
        // Either magic spliced onto random bytes of any length.
        6 => {
            let magic = if rng.random() { COMPACT_MAGIC } else { MAGIC };
            let n = rng.random_range(0..=HEADER_LEN + 8);
            b = magic.to_be_bytes().to_vec();
            b.extend(fuzzing::bytes(rng, n));
        }
        _ => {}
    }
    b
}

/// What `parse_any` must say about `b`, from the bytes alone: the magic picks the form, then
/// each form's length (and the full form's version) is checked.
fn expected_any(b: &[u8]) -> Result<Form, Invalid> {
    if b.len() < COMPACT_LEN {
        return Err(Invalid::Short);
    }
    match u32::from_be_bytes([b[0], b[1], b[2], b[3]]) {
        COMPACT_MAGIC => Ok(Form::Compact),
        MAGIC if b.len() < HEADER_LEN => Err(Invalid::Short),
        MAGIC if b[4] != VERSION => Err(Invalid::Version),
        MAGIC => Ok(Form::Full),
        _ => Err(Invalid::Magic),
    }
}

#[test]
fn fuzz_header_parse_any() {
    let mut rng = fuzzing::rng("header parse_any", 0x4ead_0002);
    let (cases, t) = (fuzzing::cases(), std::time::Instant::now());
    // Accepted full, accepted compact, then refused as short, magic, version.
    let mut seen = [0u64; 5];
    for _ in 0..cases {
        let b = any_input(&mut rng);
        let got = parse_any(&b);
        assert_eq!(
            got.map(|(_, form)| form),
            expected_any(&b),
            "input {b:02x?}"
        );
        match got {
            Ok((h, Form::Full)) => {
                seen[0] += 1;
                assert!(b.len() >= HEADER_LEN);
                assert_eq!(h.to_bytes()[..], b[..HEADER_LEN], "{h:?}");
                assert_eq!(parse(&b), Ok(h), "both parsers agree on a full header");
            }
            Ok((h, Form::Compact)) => {
                seen[1] += 1;
                // The compact form carries no flags or timestamp and 32 sequence bits; the
                // rest re-encodes to exactly the 18 bytes it came from.
                assert!(b.len() >= COMPACT_LEN);
                assert_eq!((h.flags, h.timestamp_ns), (0, 0), "{h:?}");
                assert!(h.seq <= u64::from(u32::MAX), "{h:?}");
                assert!(h.flow <= u32::from(u16::MAX), "{h:?}");
                assert_eq!(h.to_compact_bytes()[..], b[..COMPACT_LEN], "{h:?}");
                assert_eq!(
                    parse(&b).ok(),
                    None,
                    "the full parser refuses a compact header"
                );
            }
            Err(Invalid::Short) => seen[2] += 1,
            Err(Invalid::Magic) => seen[3] += 1,
            Err(Invalid::Version) => seen[4] += 1,
        }
    }
    eprintln!(
        "header parse_any fuzz: {cases} cases, {} full and {} compact accepted, {} short, {} magic, {} version refused, {:?}",
        seen[0],
        seen[1],
        seen[2],
        seen[3],
        seen[4],
        t.elapsed()
    );
    assert!(
        seen.iter().all(|&n| n > 0),
        "every outcome occurs: {seen:?}"
    );
}
