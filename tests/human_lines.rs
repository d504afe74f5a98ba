//! Golden human lines of a UDP and a TCP run (issue 38: one voice for both protocols). A sink
//! and a sender run as separate processes over loopback; every line each prints is masked
//! (numbers, durations, epochs and session ids, the host's name, runs of spaces) and the set of
//! line shapes is compared with `tests/golden/lines/`, which a person reviewed. After a
//! deliberate change, `RINGBLAST_BLESS=1 cargo test --test human_lines` rewrites the files.
//! Beside the shapes, both protocols must put the sender's summary before the sink's verdict,
//! and print interval lines under the same header with auto-scaled rates.

mod common;

use std::{collections::BTreeSet, path::PathBuf};

use common::{proc::Proc, *};

/// Units that follow a number, with or without an SI prefix.
const RATE_UNITS: [&str; 4] = ["pps", "bit/s", "rec/s", "trans/s"];

/// One word of a line as the golden files show it: 8 lowercase hex digits (an epoch, a sink
/// session) and every number read `N`, a number with a duration unit `T`.
fn mask_line(line: &str, host: &str) -> String {
    let line = line.replace(host, "HOST");
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let word_start = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
        let word_len = chars[i..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric())
            .count();
        if word_start
            && word_len == 8
            && chars[i..i + 8]
                .iter()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(c))
        {
            out.push('N');
            i += 8;
            continue;
        }
        if !c.is_ascii_digit() {
            out.push(c);
            i += 1;
            continue;
        }
        while i < chars.len() && chars[i].is_ascii_digit() {
            i += 1;
        }
        if i + 1 < chars.len() && chars[i] == '.' && chars[i + 1].is_ascii_digit() {
            i += 1;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
        }
        let letters: String = chars[i..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        if ["ns", "us", "ms", "s"].contains(&letters.as_str()) {
            out.push('T');
            i += letters.len();
        } else {
            out.push('N');
        }
    }
    let mut out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for unit in RATE_UNITS {
        for prefix in ["k", "M", "G", "T"] {
            out = out.replace(&format!("N {prefix}{unit}"), &format!("N {unit}"));
        }
    }
    out
}

/// The distinct masked shapes of `text`'s lines, without the start line (its host facts are
/// tests/start_record.rs's).
fn shapes(text: &str) -> BTreeSet<String> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    text.lines()
        .filter(|l| !l.starts_with("ringblast "))
        .map(|l| mask_line(l, host.trim()))
        .collect()
}

fn check_golden(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/lines")
        .join(format!("{name}.txt"));
    let got: String = shapes(text).into_iter().map(|l| l + "\n").collect();
    if std::env::var_os("RINGBLAST_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    let want: BTreeSet<&str> = golden.lines().collect();
    let have: BTreeSet<&str> = got.lines().collect();
    let missing: Vec<_> = want.difference(&have).collect();
    let new: Vec<_> = have.difference(&want).collect();
    assert!(
        missing.is_empty() && new.is_empty(),
        "{name}'s lines differ from {} (RINGBLAST_BLESS=1 rewrites it after a deliberate change)\nmissing: {missing:#?}\nnew: {new:#?}\nthe run printed:\n{text}",
        path.display()
    );
}

/// Runs a sink and then a sender of `proto` over loopback; returns their standard outputs.
fn run(proto: &str, send_args: &[&str]) -> (String, String) {
    let _guard = traffic_lock();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let sink = Proc::ringblast(
        None,
        &[
            "sink",
            "--listen",
            &listen,
            "--proto",
            proto,
            "--duration",
            "3s",
        ],
    );
    wait_listening(None, port.parse().unwrap());
    let mut args = vec!["send", "--to", &listen, "--proto", proto];
    args.extend_from_slice(send_args);
    let out = ringblast(&args);
    assert_ok(&out);
    let (status, sink_out, sink_err) = sink.finish();
    assert!(status.success(), "sink: {status}\n{sink_err}");
    (String::from_utf8(out.stdout).unwrap(), sink_out)
}

/// Both protocols: one header, the interval lines under it with auto-scaled rates, and the
/// sender's summary before the sink's verdict.
fn check_voice(send: &str) {
    let lines: Vec<&str> = send.lines().collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line:\n{send}"))
    };
    assert!(at("send summary:") < at("send verdict from"), "{send}");
    let header = at("interval ");
    assert!(
        lines[header].contains("rate") && lines[header].contains("bit rate"),
        "{send}"
    );
    let interval = lines[header + 1];
    assert!(
        interval.starts_with("0.00-") && interval.contains(" q0 n0 "),
        "{interval}"
    );
    assert!(
        interval.contains("bit/s") && !interval.contains("Mb/sec"),
        "{interval}"
    );
}

#[test]
fn a_udp_run_prints_the_golden_lines() {
    let (send, sink) = run("udp", &["--rate", "20kpps", "--count", "20000"]);
    check_voice(&send);
    check_golden("udp-send", &send);
    check_golden("udp-sink", &sink);
}

#[test]
fn a_tcp_run_prints_the_golden_lines() {
    let (send, sink) = run(
        "tcp",
        &["--rate", "2000pps", "--size", "1000", "--duration", "1s"],
    );
    check_voice(&send);
    check_golden("tcp-send", &send);
    check_golden("tcp-sink", &sink);
}

#[test]
fn masking_keeps_the_shape_and_hides_the_values() {
    assert_eq!(
        mask_line(
            "0.00-1.01 s     q0 n0       99.7 kpps  51.0 Mbit/s  errors: 0",
            "vm"
        ),
        "N-N s qN nN N pps N bit/s errors: N"
    );
    assert_eq!(
        mask_line(
            "sink: sender vm/1q1f from 127.0.0.1:33422: session 1 (epoch bc580bad, 1 flows)",
            "vm"
        ),
        "sink: sender HOST/NqNf from N.N:N: session N (epoch N, N flows)"
    );
    assert_eq!(
        mask_line(
            "latency p50 4.7us p99 850ns max 1.24ms; 2.000s active",
            "vm"
        ),
        "latency pN T pN T max T; T active"
    );
    // A word that is not 8 hex digits keeps its letters.
    assert_eq!(mask_line("accepted received", "vm"), "accepted received");
}
