//! `--config FILE`: precedence defaults < file < environment < command line, and bad files.

mod common;

use std::process::Command;

use common::*;

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

fn send_summary(file: &std::path::Path, env: &[(&str, &str)], extra: &[&str]) -> serde_json::Value {
    let out = Command::new(bin())
        .args(["send", "--config"])
        .arg(file)
        // No sink answers on the control port here: without `--control off` each run would wait
        // for a hello's answer and a verdict that never come.
        .args(["--json", "--interval", "0", "--control", "off"])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_ok(&out);
    summaries(&out).send.unwrap()
}

/// Each layer's `count` and `size` are seen by a tally of the test's own, which counts every
/// datagram and its length: the file's 200 × 100 B, the environment's count over the file's
/// (300 × 100 B), and the command line's count and size over both (400 × 64 B). The rate has no
/// neutral view at these counts, so its layers are read from the summary's `target_pps`.
#[test]
fn file_beats_defaults_env_beats_file_and_flags_beat_env() {
    let _guard = traffic_lock();
    // (environment, flags, target pps, datagrams, their length)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], u64, u64, usize);
    let cases: [Case; 3] = [
        (&[], &[], 2_000, 200, 100),
        (
            &[("RINGBLAST_RATE", "3kpps"), ("RINGBLAST_COUNT", "300")],
            &[],
            3_000,
            300,
            100,
        ),
        (
            &[("RINGBLAST_RATE", "3kpps"), ("RINGBLAST_COUNT", "300")],
            &["--rate", "4kpps", "--size", "64", "--count", "400"],
            4_000,
            400,
            64,
        ),
    ];
    for (env, flags, pps, count, size) in cases {
        let (tally, to) = tally::Tally::bind("127.0.0.1:0");
        let f = config_file(&format!(
            "to = \"{to}\"\nrate = \"2kpps\"\nsize = 100\ncount = 200\n"
        ));
        let s = send_summary(f.path(), env, flags);
        let counted = tally.finish();
        let ctx = format!("env {env:?}, flags {flags:?}");
        assert_eq!(u(&s, "target_pps"), pps, "{ctx}: the rate's layer");
        assert_eq!(
            counted.by_len,
            [(size, count)].into_iter().collect(),
            "{ctx}: datagrams by length at the tally"
        );
        assert_eq!(u(&s, "tx_packets"), count, "{ctx}: the summary agrees");
    }
}

#[test]
fn bad_files_name_file_line_and_key_and_exit_2() {
    let cases = [
        (
            "to = \"127.0.0.1:9\"\nfrobnicate = 1\n",
            ":2: key `frobnicate`: unknown key",
        ),
        (
            "to = \"127.0.0.1:9\"\nrate = \"fast\"\n",
            ":2: key `rate`: invalid value 'fast'",
        ),
        (
            "to = \"127.0.0.1:9\"\n\nsize = \"huge\"\n",
            ":3: key `size`: invalid value 'huge'",
        ),
        ("json = 1\n", ":1: key `json`: expected true or false"),
        ("batch = [1, 2]\n", ":1: key `batch`: invalid value '1,2'"),
        ("to = \n", ":1: invalid TOML"),
    ];
    for (text, needle) in cases {
        let f = config_file(text);
        let out = Command::new(bin())
            .args(["send", "--config"])
            .arg(f.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        let name = f.path().display().to_string();
        assert!(
            stderr.contains(&format!("{name}{needle}")),
            "{text:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
    let out = ringblast(&["sink", "--config", "/nonexistent/ringblast.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("cannot read config file /nonexistent/ringblast.toml")
    );
}

#[test]
fn shipped_example_configs_parse() {
    let root = env!("CARGO_MANIFEST_DIR");
    for (sub, file, extra) in [
        (
            "sink",
            "deploy/config/sink.toml",
            ["--listen", "127.0.0.1:1"],
        ),
        (
            "send",
            "deploy/config/send-example.toml",
            ["--to", "127.0.0.1:1"],
        ),
    ] {
        // --help after the config: parsing must get past the file without error.
        let out = Command::new(bin())
            .args([sub, "--config", &format!("{root}/{file}")])
            .args(extra)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Two keys clap refuses together are reported at the file's line, in one line, exit 2; the
/// command line overrides a file key it clashes with.
#[test]
fn clashing_keys_name_the_file_and_both_lines() {
    let f = config_file("to = \"127.0.0.1:9\"\nduration = \"1s\"\n\ncount = 10\n");
    let out = Command::new(bin())
        .args(["send", "--config"])
        .arg(f.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "ringblast: error: {}:4: key `count` cannot be used with key `duration` (line 2); keep one of them",
            f.path().display()
        )
    );
}

/// `[send]` applies to `ringblast send` only and wins over the top level; a `[sink]` table in
/// the same file does not disturb the sender. An unknown table is refused with a hint.
#[test]
fn subcommand_tables_are_applied_and_unknown_ones_refused() {
    let _guard = traffic_lock();
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap().to_string();
    let f = config_file(&format!(
        "rate = \"5kpps\"\n[send]\nto = \"{to}\"\nrate = \"25kpps\"\ncount = 300\nsize = 80\n\
         [sink]\nlisten = \"127.0.0.1:1\"\n"
    ));
    let s = send_summary(f.path(), &[], &[]);
    assert_eq!(u(&s, "target_pps"), 25_000, "[send] over the top level");
    assert_eq!(u(&s, "tx_packets"), 300, "count from [send]");
    assert_eq!(u(&s, "tx_bytes"), 300 * 80, "size from [send]");

    let f = config_file("[senders]\nrate = \"1kpps\"\n");
    let out = Command::new(bin())
        .args(["send", "--to", "127.0.0.1:9", "--config"])
        .arg(f.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(":1: table `[senders]` is not a subcommand; put keys for one subcommand under [send], [sink] or [pair]"),
        "{stderr}"
    );
}
