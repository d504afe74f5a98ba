//! What the parser fuzz loops share: the case count and a generator seeded per run.
//!
//! Each loop runs `RINGBLAST_FUZZ_CASES` cases (100 000 by default, for the plain and the
//! debug-build `cargo test`); the test command runs them at 10 M in release mode:
//! `RINGBLAST_FUZZ_CASES=10000000 cargo test --release --lib -- proto::fuzz net::cmsg::fuzz cli::fuzz`
//! (the config-file loop runs a tenth of the count, `cli/fuzz.rs` says why).
//!
//! The run's seed is `RINGBLAST_FUZZ_SEED` when set, else a fresh random one, so every run
//! explores new inputs. Each loop mixes its own constant into it (loops draw different inputs)
//! and prints `fuzz NAME: seed S (replay with RINGBLAST_FUZZ_SEED=S)` before its first case, so
//! a failing run, panics included, shows the seed that replays it (a loop's inputs do not depend
//! on the case count).

use std::sync::OnceLock;

use rand::{Rng, SeedableRng, rngs::SmallRng};

/// Cases per fuzz loop.
pub(crate) fn cases() -> u64 {
    std::env::var("RINGBLAST_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// This run's seed: `RINGBLAST_FUZZ_SEED`, or one drawn once per test process.
fn run_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| match std::env::var("RINGBLAST_FUZZ_SEED") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            panic!("RINGBLAST_FUZZ_SEED={v:?} is not a decimal u64; unset it or give the seed a failing run printed")
        }),
        Err(_) => rand::rng().random(),
    })
}

/// The generator of the loop `name`: the run's seed mixed with the loop's own `constant`.
/// Prints the seed first, so that a failure can be replayed.
pub(crate) fn rng(name: &str, constant: u64) -> SmallRng {
    let seed = run_seed();
    eprintln!("fuzz {name}: seed {seed} (replay with RINGBLAST_FUZZ_SEED={seed})");
    SmallRng::seed_from_u64(seed ^ constant)
}

/// One of `items`.
pub(crate) fn pick<'a, T: ?Sized>(rng: &mut SmallRng, items: &[&'a T]) -> &'a T {
    items[rng.random_range(0..items.len())]
}

/// `len` random bytes.
pub(crate) fn bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.random()).collect()
}
