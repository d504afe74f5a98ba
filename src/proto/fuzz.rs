//! The header parser under hostile input: random bytes of every short length, valid headers
//! with flipped bits, wrong magic or version, and truncations. Whatever `parse` accepts is at
//! least a header long and re-encodes to exactly the bytes it came from.

use rand::Rng;

use super::header::{HEADER_LEN, Header, Invalid, MAGIC, VERSION, parse};
use crate::fuzzing;

fn valid(rng: &mut impl Rng) -> Vec<u8> {
    let h = Header {
        flags: rng.random(),
        failed: rng.random(),
        flow: u32::from(rng.random::<u16>()),
        epoch: rng.random(),
        seq: rng.random(),
        timestamp_ns: rng.random(),
    };
    let mut b = h.to_bytes().to_vec();
    b.extend((0..rng.random_range(0..40)).map(|_| rng.random::<u8>()));
    b
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
            1 => {
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..b.len());
                    b[i] ^= 1 << rng.random_range(0..8);
                }
            }
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
