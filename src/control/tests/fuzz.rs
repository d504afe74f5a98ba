//! The decoder fuzz loop: random and structured (mutated valid frames) inputs.
//!
//! Runs `RINGBLAST_FUZZ_CASES` cases (200 000 by default, about a second in debug); the full
//! run is `RINGBLAST_FUZZ_CASES=10000000 cargo test --release --lib control::tests::fuzz`. The
//! seed changes per run and is printed ([`crate::fuzzing::rng`]).

use rand::Rng;

use super::*;
use crate::fuzzing;

fn fuzz_cases() -> u64 {
    std::env::var("RINGBLAST_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
}

/// One fuzz input: random bytes, or a valid frame with mutated bytes, length or type.
fn fuzz_input(rng: &mut impl Rng, frames: &[Vec<u8>]) -> Vec<u8> {
    let base = &frames[rng.random_range(0..frames.len())];
    let mut b = base.clone();
    match rng.random_range(0..8u8) {
        0 => (0..rng.random_range(0..40)).map(|_| rng.random()).collect(),
        1 => {
            let i = rng.random_range(0..b.len());
            b[i] = rng.random();
            b
        }
        2 => {
            for _ in 0..rng.random_range(1..8) {
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
            }
            b
        }
        3 => {
            let len: u32 = if rng.random() {
                rng.random()
            } else {
                rng.random_range(0..b.len() as u32 + 8)
            };
            b[..4].copy_from_slice(&len.to_be_bytes());
            b
        }
        4 => {
            b[5] = rng.random_range(0..16);
            b
        }
        5 => {
            b.truncate(rng.random_range(0..b.len()));
            b
        }
        6 => {
            // Splice a JSON-ish token into the payload and fix the length.
            const TOK: [&[u8]; 8] = [
                b"null",
                b"-1",
                b"1e999",
                b"\"\\u0000\"",
                b"[",
                b"}",
                b"\"x\":1,",
                b"18446744073709551616",
            ];
            let i = rng.random_range(6..=b.len());
            b.splice(i..i, TOK[rng.random_range(0..TOK.len())].iter().copied());
            let len = (b.len() - 4) as u32;
            b[..4].copy_from_slice(&len.to_be_bytes());
            b
        }
        _ => {
            b.extend_from_slice(&frames[rng.random_range(0..frames.len())]);
            b
        }
    }
}

/// `decode` plus validation never panics, and whatever it accepts is valid and re-encodes.
#[test]
fn fuzz_decode() {
    let frames: Vec<Vec<u8>> = samples().iter().map(|m| encode(m).unwrap()).collect();
    let mut rng = fuzzing::rng("control decode", 0x5eed_0001);
    let (cases, t) = (fuzz_cases(), Instant::now());
    let mut accepted = 0u64;
    for i in 0..cases {
        let input = fuzz_input(&mut rng, &frames);
        if let Ok((m, used)) = decode(&input) {
            accepted += 1;
            assert!(used <= input.len());
            assert!(m.validate().is_ok());
            if let Ok(again) = encode(&m) {
                assert!(decode(&again).is_ok(), "re-encoded {m:?} does not decode");
            }
        }
        if i % 64 == 0 {
            let mut r = frame::FrameReader::new();
            let _ = r.poll(&mut std::io::Cursor::new(&input));
        }
    }
    eprintln!(
        "fuzz: {cases} cases, {accepted} accepted, {:?}",
        t.elapsed()
    );
    assert!(accepted > 0 && accepted < cases);
}
