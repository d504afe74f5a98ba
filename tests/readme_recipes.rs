//! The README's recipes run as written (issue 38 item 7): the command lines are read from
//! README.md's `sh` blocks, not copied here, and run in a private network namespace. Only what
//! a test cannot do as written changes: every duration becomes `RINGBLAST_RECIPE_SECONDS`
//! seconds (1 unless set), `sink-host` is the namespace's loopback, `/etc/ringblast` is a
//! temporary directory, and a background `&` is a process the test starts and stops. The
//! observer is the namespace's kernel: its `Udp` counters must hold every packet the recipes'
//! senders, verdicts, sink summary and per-sender series report.
//!
//! The soak recipe (Docker Compose and Grafana) cannot run as written here (no Docker engine);
//! its compose file runs under podman in the test command's deploy smoke instead.

mod common;

use std::{
    process::{Command, Output},
    time::{Duration, Instant},
};

use common::{Netns, UdpSnmp, bin, is_root, proc::Proc, schema, scrape_local, spawn_in_netns};
use serde_json::Value;

/// The command lines of the first `sh` block under README.md's heading `### {heading}`,
/// without their comments.
fn recipe(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split(&format!("### {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("README.md has no recipe headed {heading:?}"));
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("the recipe {heading:?} has no sh block"));
    block
        .lines()
        .map(|l| match l.find(" #") {
            Some(at) => l[..at].trim(),
            None => l.trim(),
        })
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// How long each of the recipes' durations runs here.
fn seconds() -> String {
    std::env::var("RINGBLAST_RECIPE_SECONDS").unwrap_or_else(|_| "1".into())
}

/// `line` as the test runs it: durations short, the sink host and the secret's directory here.
fn adapted(line: &str, etc: &str) -> String {
    let secs = format!("{}s", seconds());
    let mut words: Vec<String> = Vec::new();
    let mut after_duration = false;
    for word in line.split_whitespace() {
        let word = word
            .replace("sink-host:", "127.0.0.1:")
            .replace("/etc/ringblast", etc);
        let word = if after_duration {
            secs.clone()
        } else if word.contains(':') && word.contains("pps:") {
            // --rate-steps RATE:DURATION,...: each step's duration.
            word.split(',')
                .map(|step| match step.split_once(':') {
                    Some((rate, _)) => format!("{rate}:{secs}"),
                    None => step.to_string(),
                })
                .collect::<Vec<_>>()
                .join(",")
        } else {
            word
        };
        after_duration = word == "--duration";
        words.push(word);
    }
    words.join(" ")
}

/// A recipe's ringblast command as arguments (without `ringblast` and a trailing `&`).
fn ringblast_args(line: &str) -> Vec<String> {
    let line = line.trim_end_matches('&').trim();
    let rest = line
        .strip_prefix("ringblast ")
        .unwrap_or_else(|| panic!("not a ringblast command: {line}"));
    rest.split_whitespace().map(String::from).collect()
}

/// The port of a sink's `--listen ADDR:PORT`.
fn listen_port(args: &[String]) -> u16 {
    args.iter()
        .skip_while(|a| *a != "--listen")
        .nth(1)
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no --listen ADDR:PORT in {args:?}"))
}

/// Runs `ringblast ARGS` in `ns` to its end.
fn run_in(ns: &str, args: &[String]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, bin()])
        .args(args)
        .output()
        .expect("run ringblast")
}

/// A shell line of a recipe (mkdir, the secret), run in `ns`.
fn shell_in(ns: &str, line: &str) {
    let status = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-ec", line])
        .status()
        .expect("run sh");
    assert!(status.success(), "{line}");
}

/// The number before `what` in the first line of `text` that starts with `prefix`.
fn count_in(text: &str, prefix: &str, what: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"));
    let at = line
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {line}"));
    line[..at]
        .split_whitespace()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count before {what:?} in {line}"))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_success(line: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{line}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The summary and steps of a `--json` sender.
fn json_records(out: &Output) -> Vec<Value> {
    stdout(out).lines().filter_map(schema::parsed).collect()
}

#[test]
#[ignore = "needs root: runs the recipes in a network namespace"]
fn the_precise_rate_recipe_runs_as_written_and_the_kernel_counts_what_it_reports() {
    assert!(is_root(), "run as root");
    let _lock = common::traffic_lock();
    let lines = recipe("A precise-rate source");
    assert!(lines.len() >= 3, "{lines:?}");
    let ns = Netns::create("readme1");
    let before = UdpSnmp::read(&ns.0);
    let sink_line = &lines[0];
    assert!(
        sink_line.ends_with('&'),
        "the recipe's sink runs in the background"
    );
    let sink_args = ringblast_args(&adapted(sink_line, "/nonexistent"));
    let port = listen_port(&sink_args);
    let args: Vec<&str> = sink_args.iter().map(String::as_str).collect();
    let sink = Proc::ringblast(Some(&ns.0), &args);
    common::wait_listening(Some(&ns.0), port);

    let (mut sent, mut verdict_received) = (0u64, 0u64);
    for line in &lines[1..] {
        let args = ringblast_args(&adapted(line, "/nonexistent"));
        let out = run_in(&ns.0, &args);
        assert_success(line, &out);
        if args.iter().any(|a| a == "--json") {
            let records = json_records(&out);
            let summary = records
                .iter()
                .rfind(|v| v["type"] == "summary")
                .expect("a summary record");
            sent += summary["tx_packets"].as_u64().unwrap();
            verdict_received += summary["sink"]["rx_packets"].as_u64().unwrap();
            let steps: Vec<&Value> = records.iter().filter(|v| v["type"] == "step").collect();
            assert_eq!(steps.len(), 3, "one record per step of --rate-steps");
            for step in steps {
                let s = &step["sink"];
                let accounted = s["rx_packets"].as_u64().unwrap()
                    + s["rx_kernel_drops"].as_u64().unwrap()
                    + s["rx_lost"].as_u64().unwrap();
                assert_eq!(accounted, step["tx_packets"].as_u64().unwrap(), "{step}");
            }
        } else {
            let text = stdout(&out);
            sent += count_in(&text, "send summary:", " packets");
            verdict_received += count_in(&text, "send verdict", " packets received");
        }
    }
    let kernel = UdpSnmp::read(&ns.0).since(before);
    sink.interrupt();
    let (status, sink_out, _) = sink.finish();
    assert!(status.success(), "sink: {status:?}\n{sink_out}");
    let sink_counted = count_in(&sink_out, "sink summary:", " packets");
    assert_eq!(
        kernel.out_datagrams, sent,
        "the senders' summaries against OutDatagrams"
    );
    assert_eq!(
        kernel.in_datagrams, sink_counted,
        "the sink's summary against InDatagrams"
    );
    assert_eq!(
        verdict_received, sink_counted,
        "the verdicts add up to the sink's summary"
    );
    assert_eq!(
        sent,
        sink_counted + kernel.rcvbuf_errors,
        "every datagram sent was counted or dropped by the sink's socket"
    );
    let interval_line = |l: &&str| {
        let first = l.split_whitespace().next().unwrap_or("");
        first.starts_with(|c: char| c.is_ascii_digit()) && first.contains('-')
    };
    assert_eq!(
        sink_out.lines().find(interval_line),
        None,
        "the recipe's sink prints no interval lines (--interval 0):\n{sink_out}"
    );
}

#[test]
#[ignore = "needs root: runs the recipes in a network namespace"]
fn the_pairs_recipe_runs_as_written_and_each_senders_books_add_up_to_the_kernels_count() {
    assert!(is_root(), "run as root");
    let _lock = common::traffic_lock();
    let lines = recipe("Sender/sink pairs across hosts");
    let ns = Netns::create("readme3");
    let dir = tempfile::tempdir().unwrap();
    let etc = dir
        .path()
        .join("etc-ringblast")
        .to_str()
        .unwrap()
        .to_string();
    let (setup, commands): (Vec<&String>, Vec<&String>) =
        lines.iter().partition(|l| !l.starts_with("ringblast "));
    for line in setup {
        shell_in(&ns.0, &adapted(line, &etc));
    }
    let secret = std::fs::metadata(format!("{etc}/secret")).expect("the recipe wrote the secret");
    assert!(secret.len() > 32, "a base64 secret of 32 random bytes");
    let (sink_line, senders) = commands.split_first().expect("a sink and senders");
    let sink_args = ringblast_args(&adapted(sink_line, &etc));
    assert!(sink_args[0] == "sink", "{sink_line}");
    let metrics_port: u16 = sink_args
        .iter()
        .skip_while(|a| *a != "--metrics")
        .nth(1)
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .expect("the recipe's sink serves metrics");
    let before = UdpSnmp::read(&ns.0);
    let args: Vec<&str> = sink_args.iter().map(String::as_str).collect();
    let sink = Proc::ringblast(Some(&ns.0), &args);
    common::wait_listening(Some(&ns.0), listen_port(&sink_args));
    common::wait_listening(Some(&ns.0), metrics_port);

    let runs: Vec<_> = senders
        .iter()
        .map(|line| {
            let args = ringblast_args(&adapted(line, &etc));
            let ns = ns.0.clone();
            (
                (*line).clone(),
                args.clone(),
                std::thread::spawn(move || run_in(&ns, &args)),
            )
        })
        .collect();
    let mut by_name: Vec<(String, u64)> = Vec::new();
    for (line, args, run) in runs {
        let out = run.join().unwrap();
        assert_success(&line, &out);
        let name = args
            .iter()
            .skip_while(|a| *a != "--name")
            .nth(1)
            .expect("each sender has a --name")
            .clone();
        let received = if args.iter().any(|a| a == "--json") {
            let records = json_records(&out);
            let summary = records
                .iter()
                .rfind(|v| v["type"] == "summary")
                .expect("a summary record");
            summary["sink"]["rx_packets"].as_u64().unwrap()
        } else {
            count_in(&stdout(&out), "send verdict", " packets received")
        };
        assert!(received > 0, "{name}: its verdict counts its packets");
        by_name.push((name, received));
    }
    let kernel = UdpSnmp::read(&ns.0).since(before);
    let verdicts: u64 = by_name.iter().map(|(_, n)| n).sum();
    assert_eq!(
        verdicts, kernel.in_datagrams,
        "the verdicts against InDatagrams"
    );
    assert_eq!(
        kernel.out_datagrams,
        kernel.in_datagrams + kernel.rcvbuf_errors,
        "nothing else was sent"
    );

    // The per-sender series reach the same counts once the sink's reporter has flushed them.
    let until = Instant::now() + Duration::from_secs(10);
    let series = loop {
        let text = spawn_in_netns(&ns.0, move || scrape_local(metrics_port))
            .join()
            .unwrap();
        let values: Vec<u64> = by_name
            .iter()
            .map(|(name, _)| {
                let series = format!("ringblast_rx_sender_packets_total{{sender=\"{name}\"}} ");
                text.lines()
                    .find_map(|l| l.strip_prefix(&series))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .map_or(0, |v| v as u64)
            })
            .collect();
        if values.iter().zip(&by_name).all(|(v, (_, n))| v == n) || Instant::now() > until {
            break values;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let expected: Vec<u64> = by_name.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        series, expected,
        "per-sender series against each verdict ({by_name:?})"
    );

    sink.interrupt();
    let (status, sink_out, _) = sink.finish();
    assert!(status.success(), "sink: {status:?}\n{sink_out}");
    for (name, received) in &by_name {
        let line = format!("sender {name}:");
        assert_eq!(
            count_in(&sink_out, &line, " packets"),
            *received,
            "the sink's line for {name}"
        );
    }
}
