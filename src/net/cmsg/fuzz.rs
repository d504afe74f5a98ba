//! The control-message parser under hostile input: random bytes, well-formed chains of GRO,
//! drop-counter, receive-stamp and unknown messages (whose values must come back exactly), and those chains
//! with flipped bits, bad lengths and truncations; the address parser on random names.

use rand::Rng;

use super::*;
use crate::fuzzing;

fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
    let len = CMSG_HEADER + data.len();
    let mut v = Vec::with_capacity(len + ALIGN);
    v.extend_from_slice(&len.to_ne_bytes());
    v.extend_from_slice(&level.to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(data);
    v.resize(len.div_ceil(ALIGN) * ALIGN, 0);
    v
}

/// A well-formed chain and what `parse` must read from it.
fn chain(rng: &mut impl Rng) -> (Vec<u8>, ControlInfo) {
    let mut buf = Vec::new();
    let mut want = ControlInfo::default();
    for _ in 0..rng.random_range(0..4) {
        match rng.random_range(0..4u8) {
            0 => {
                let seg: i32 = if rng.random() {
                    rng.random_range(-2..70_000)
                } else {
                    rng.random()
                };
                buf.extend(cmsg(SOL_UDP, UDP_GRO, &seg.to_ne_bytes()));
                want.gro_segment = u16::try_from(seg).ok().filter(|&s| s > 0);
            }
            1 => {
                let drops: u32 = rng.random();
                buf.extend(cmsg(
                    libc::SOL_SOCKET,
                    libc::SO_RXQ_OVFL,
                    &drops.to_ne_bytes(),
                ));
                want.drops = Some(drops);
            }
            2 => {
                // Now and then a negative or out-of-range field, which is no stamp.
                let secs: i64 = rng.random_range(-2..2_000_000_000);
                let nanos: i64 = rng.random_range(-2..1_000_000_002);
                let mut data = secs.to_ne_bytes().to_vec();
                data.extend_from_slice(&nanos.to_ne_bytes());
                buf.extend(cmsg(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, &data));
                want.stamp_ns = (secs >= 0 && (0..1_000_000_000).contains(&nanos))
                    .then(|| secs as u64 * 1_000_000_000 + nanos as u64);
            }
            _ => {
                let data: Vec<u8> = (0..rng.random_range(0..24)).map(|_| rng.random()).collect();
                // Levels no parsed message uses, so this one must be skipped.
                buf.extend(cmsg(
                    rng.random_range(300..600),
                    rng.random_range(0..300),
                    &data,
                ));
            }
        }
    }
    (buf, want)
}

#[test]
fn fuzz_cmsg_parse() {
    let mut rng = fuzzing::rng("cmsg parse", 0xc756_0001);
    let (cases, t) = (fuzzing::cases(), std::time::Instant::now());
    let mut exact = 0u64;
    for _ in 0..cases {
        let (mut buf, want) = chain(&mut rng);
        match rng.random_range(0..6u8) {
            0 => {
                buf = {
                    let n = rng.random_range(0..80);
                    fuzzing::bytes(&mut rng, n)
                }
            }
            1 if !buf.is_empty() => {
                let i = rng.random_range(0..buf.len());
                buf[i] ^= 1 << rng.random_range(0..8);
            }
            2 => buf.truncate(rng.random_range(0..=buf.len())),
            3 if buf.len() >= ALIGN => {
                let len: usize = if rng.random() {
                    rng.random::<u64>() as usize
                } else {
                    rng.random_range(0..64)
                };
                buf[..ALIGN].copy_from_slice(&len.to_ne_bytes());
            }
            _ => {
                assert_eq!(parse(&buf), want, "{buf:?}");
                exact += 1;
            }
        }
        let _ = parse(&buf);
        let name = {
            let n = rng.random_range(0..32);
            fuzzing::bytes(&mut rng, n)
        };
        if let Some(addr) = parse_source(&name) {
            let family = i32::from(u16::from_ne_bytes([name[0], name[1]]));
            assert_eq!(addr.is_ipv4(), family == libc::AF_INET);
        }
    }
    eprintln!(
        "cmsg fuzz: {cases} cases, {exact} checked exactly, {:?}",
        t.elapsed()
    );
    assert!(exact > 0);
}
