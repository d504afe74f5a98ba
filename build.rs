//! Embeds the git commit ringblast is built from as `RINGBLAST_COMMIT` (a run's start record
//! names it): `RINGBLAST_COMMIT` from the environment when a packager sets it, else
//! `git rev-parse` of the checkout; a source tree without git has none, and the record says so.

use std::{path::Path, process::Command};

fn main() {
    println!("cargo:rerun-if-env-changed=RINGBLAST_COMMIT");
    // A new commit moves HEAD or the branch it names; watch only what exists (a missing path
    // would rerun this script on every build).
    for watched in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if Path::new(watched).exists() {
            println!("cargo:rerun-if-changed={watched}");
        }
    }
    let commit = std::env::var("RINGBLAST_COMMIT").ok().or_else(|| {
        // The checkout being built is trusted already (this script is its code): a build as
        // another user than the checkout's owner (sudo) must not lose the commit to git's
        // safe.directory check.
        let out = Command::new("git")
            .args(["-c", "safe.directory=*", "rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    });
    if let Some(commit) = commit {
        println!("cargo:rustc-env=RINGBLAST_COMMIT={commit}");
    }
}
