//! `kernel.io_uring_disabled` set: exit 3 with one line naming the sysctl, within a second.
//!
//! The sysctl is global, so this test lives in its own test binary (cargo runs binaries one
//! at a time, so no other ringblast test of this suite runs while it is set), holds it for as
//! long as one refused start takes, and restores the old value through a guard, also when an
//! assertion fails. As root a missing or read-only sysctl fails the test; only a non-root run
//! may skip it.

mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::*;

const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";

/// Puts the sysctl back to the value it had, on drop (so on panic too).
struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(SYSCTL, &self.0) {
            eprintln!("could not restore {SYSCTL} to {}: {e}", self.0.trim());
        }
    }
}

#[test]
#[ignore = "needs root: setting /proc/sys/kernel/io_uring_disabled"]
fn io_uring_disabled_by_sysctl_exits_3_naming_the_sysctl() {
    let old = std::fs::read_to_string(SYSCTL)
        .unwrap_or_else(|e| panic!("{SYSCTL} (Linux 6.6+) is needed as root: {e}"));
    let restore = Restore(old.clone());
    std::fs::write(SYSCTL, "2").expect("set kernel.io_uring_disabled=2");
    let t0 = Instant::now();
    let out = Command::new(bin())
        .args([
            "send",
            "--to",
            "127.0.0.1:9",
            "--count",
            "10",
            "--control",
            "off",
        ])
        .output()
        .unwrap();
    let took = t0.elapsed();
    drop(restore);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    // A hang guard, not a speed test: the refusal comes at setup.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("kernel.io_uring_disabled=2") && lines[0].contains("set it to 0"),
        "{stderr}"
    );
    let now = std::fs::read_to_string(SYSCTL).unwrap();
    assert_eq!(now.trim(), old.trim(), "the guard restored the sysctl");
}
