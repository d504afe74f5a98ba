//! What the parser fuzz loops share: the case count and a seeded generator.
//!
//! Each loop runs `RINGBLAST_FUZZ_CASES` cases (100 000 by default, well under a second in a
//! debug build); the test command runs them at 10 M in release mode:
//! `RINGBLAST_FUZZ_CASES=10000000 cargo test --release --lib -- proto::fuzz sink::cmsg::fuzz config::fuzz`.

use rand::{Rng, SeedableRng, rngs::SmallRng};

/// Cases per fuzz loop.
pub fn cases() -> u64 {
    std::env::var("RINGBLAST_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// A generator with a fixed seed, so a failing case replays.
pub fn rng(seed: u64) -> SmallRng {
    SmallRng::seed_from_u64(seed)
}

/// One of `items`.
pub fn pick<'a, T: ?Sized>(rng: &mut SmallRng, items: &[&'a T]) -> &'a T {
    items[rng.random_range(0..items.len())]
}

/// `len` random bytes.
pub fn bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random()).collect()
}
