//! Golden `--help` of `ringblast` and of each subcommand: what a user reads first is reviewed as
//! a diff of `tests/golden/help/`, never changed by accident. After a deliberate change,
//! `RINGBLAST_BLESS=1 cargo test --test help` rewrites the files. The observer is the binary's
//! own output, compared with text a person reviewed; `RINGBLAST_*` variables are cleared, since
//! `--help` shows their values.

mod common;

use std::{path::PathBuf, process::Command};

const COMMANDS: [&str; 8] = [
    "", "send", "sink", "pair", "search", "topo", "report", "generate",
];

fn help(command: &str) -> String {
    let mut run = Command::new(common::bin());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RINGBLAST_") {
            run.env_remove(key);
        }
    }
    if !command.is_empty() {
        run.arg(command);
    }
    let out = run.arg("--help").output().unwrap();
    assert!(out.status.success(), "{command} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_help_reads_as_its_golden_file() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/help");
    let bless = std::env::var_os("RINGBLAST_BLESS").is_some();
    let mut differ = Vec::new();
    for command in COMMANDS {
        let name = if command.is_empty() {
            "ringblast"
        } else {
            command
        };
        let path = dir.join(format!("{name}.txt"));
        let text = help(command);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let golden = std::fs::read_to_string(&path).unwrap_or_default();
        if golden != text {
            let line = golden
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(golden.lines().count().min(text.lines().count()));
            differ.push(format!(
                "{name} --help differs from {} at line {}: {:?} became {:?}",
                path.display(),
                line + 1,
                golden.lines().nth(line).unwrap_or(""),
                text.lines().nth(line).unwrap_or("")
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{}\n(after a deliberate change: RINGBLAST_BLESS=1 cargo test --test help)",
        differ.join("\n")
    );
}

/// Every option of a command sits under a heading, but `--config`, `--help` and `--version`.
#[test]
fn every_option_is_under_a_heading() {
    for command in &COMMANDS[1..5] {
        let text = help(command);
        let section = text.split("\nOptions:\n").nth(1).unwrap();
        // The section ends at the first heading: an unindented line ending with a colon.
        let options: Vec<&str> = section
            .lines()
            .take_while(|l| l.starts_with(' ') || l.is_empty())
            .filter(|l| l.len() - l.trim_start().len() < 10)
            .filter(|l| l.trim_start().starts_with('-'))
            .filter_map(|l| l.rsplit("--").next()?.split([' ', '<']).next())
            .collect();
        assert!(
            options.contains(&"help")
                && options
                    .iter()
                    .all(|o| ["config", "help", "version"].contains(o)),
            "{command}: options under no heading: {options:?}"
        );
    }
}
