//! What a run tells a person, and where: human lines on stdout (stderr under `--json`), a
//! closed pipe ends quietly, a missed target and a dead destination are named, and each fails
//! the run where it should. Real sends on loopback; the receiver is a plain socket.

mod common;

use std::{
    io::{BufRead, BufReader},
    net::UdpSocket,
    process::{Command, Stdio},
    time::Duration,
};

use common::*;

/// A plain UDP socket that receives (and never reads): a destination with a listener.
fn listener() -> (UdpSocket, String) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = s.local_addr().unwrap().to_string();
    (s, addr)
}

/// An address on which nothing listens (bound, then closed).
fn nobody() -> String {
    let (s, addr) = listener();
    drop(s);
    addr
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn human_lines_go_to_stdout_and_move_to_stderr_under_json() {
    let _guard = traffic_lock();
    let (tally, to) = tally::Tally::bind("127.0.0.1:0");
    let base = [
        "send",
        "--to",
        &to,
        "--count",
        "2000",
        "--rate",
        "2kpps",
        "--control",
        "off",
    ];
    let plain = ringblast(&base);
    assert_ok(&plain);
    assert_eq!(
        tally.finish().by_len,
        [(64, 2000)].into_iter().collect(),
        "what arrived: 2000 datagrams of the default 64 bytes"
    );
    let (out, err) = (text(&plain.stdout), text(&plain.stderr));
    assert!(out.contains("placement (send)"), "{out}");
    assert!(
        out.contains("interval        queue"),
        "the column header: {out}"
    );
    assert!(out.contains("0.00-1.0"), "the time column: {out}");
    assert!(out.contains("send summary: 2000 packets"), "{out}");
    assert!(out.contains("% of the 2000pps target)"), "{out}");
    assert_eq!(err, "", "nothing on stderr without --json");

    let (tally, to) = tally::Tally::bind("127.0.0.1:0");
    let mut args = base.to_vec();
    args[2] = &to;
    args.push("--json");
    let json = ringblast(&args);
    assert_ok(&json);
    assert_eq!(
        tally.finish().datagrams(),
        2000,
        "what arrived under --json"
    );
    let (out, err) = (text(&json.stdout), text(&json.stderr));
    assert!(!out.is_empty());
    for line in out.lines() {
        common::schema::record(line);
    }
    assert!(err.contains("send summary: 2000 packets"), "{err}");
    let send = summaries(&json).send.unwrap();
    assert_eq!(u(&send, "tx_packets"), 2000);
}

#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    let _guard = traffic_lock();
    let mut child = Command::new(bin())
        .args([
            "pair",
            "--duration",
            "20s",
            "--rate",
            "5kpps",
            "--no-metrics",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Read up to the first interval line, then close the pipe, as `| head` does.
    let first = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("0.00-"))
        .expect("an interval line");
    assert!(first.contains("send q0"), "{first}");
    drop(lines);
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(141),
        "128 + SIGPIPE, as a shell shows: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "it stopped at the next write, not at the end of the run"
    );
}

#[test]
fn nothing_listening_is_named_once_and_fails_the_run() {
    let _guard = traffic_lock();
    let to = nobody();
    let out = ringblast(&[
        "send",
        "--to",
        &to,
        "--count",
        "3000",
        "--rate",
        "2kpps",
        "--control",
        "off",
        "--json",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("ECONNREFUSED: nothing is listening at"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains(&to), "{err}");
    assert!(
        err.lines().last().unwrap().starts_with(&format!(
            "ringblast: error: the run failed: nothing was listening at {to}"
        )),
        "{err}"
    );
    let send = summaries(&out).send.unwrap();
    let refused = u(&send["tx_errors_by_errno"], "ECONNREFUSED");
    assert!(refused > 0, "{send}");
    assert!(
        err.contains(&format!("errors: {refused} (ECONNREFUSED {refused})"))
            || err.contains(&format!("{refused} (ECONNREFUSED {refused}) errors")),
        "the errno breakdown in text: {err}"
    );
}

#[test]
fn a_missed_target_is_said_and_fails_only_with_min_rate_ratio() {
    let _guard = traffic_lock();
    let (_rx, to) = listener();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "send",
            "--to",
            &to,
            "--rate",
            "50Mpps",
            "--duration",
            "1s",
            "--control",
            "off",
        ];
        args.extend_from_slice(extra);
        ringblast(&args)
    };
    let out = run(&[]);
    assert_ok(&out);
    let stdout = text(&out.stdout);
    let warning = stdout
        .lines()
        .find(|l| l.starts_with("send: warning: sender-limited:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(warning.contains("of 50000000pps"), "{warning}");
    assert!(stdout.contains("of the 50000000pps target)"), "{stdout}");

    let out = run(&["--min-rate-ratio", "0.9", "--json"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("below --min-rate-ratio 0.9"), "{err}");
    let send = summaries(&out).send.unwrap();
    let ratio = send["achieved_ratio"].as_f64().unwrap();
    assert!(ratio < 0.9, "{send}");
    assert!(u(&send, "tx_packets") > 0, "{send}");

    let bad = ringblast(&["send", "--to", &to, "--min-rate-ratio", "1.5"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("is not a ratio in (0, 1]"));
}

/// The CPU the placement printed for queue 0.
fn q0_cpu(text: &str) -> u32 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("q0 -> cpu "))
        .unwrap_or_else(|| panic!("no placement in {text}"));
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// The CPUs the kernel lets thread `comm` of process `pid` run on: its `Cpus_allowed_list`
/// (the neutral view of the worker's `sched_setaffinity`, whatever the plan printed).
fn thread_cpus(pid: u32, comm: &str) -> String {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let status = tasks
        .flatten()
        .find(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == comm))
        .map(|t| std::fs::read_to_string(t.path().join("status")).unwrap())
        .unwrap_or_else(|| panic!("process {pid} has no thread {comm}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// Starts `role` with `args` (under `--json`, so the plan is on stderr), waits until its workers
/// were released, and returns the plan's CPU for q0 and the CPUs the kernel allows its q0 thread.
fn planned_and_pinned(role: &str, args: &[&str]) -> (u32, String, String) {
    let mut all = vec![role];
    all.extend_from_slice(args);
    all.push("--json");
    let mut p = common::proc::Proc::ringblast(None, &all);
    let plan = p.wait_line("q0 -> cpu ", Duration::from_secs(10));
    let released = p.wait_line("startup: workers released", Duration::from_secs(10));
    let allowed = thread_cpus(p.pid(), &format!("{role}-q0"));
    p.interrupt();
    let (status, _, err) = p.finish();
    assert!(status.success(), "{err}");
    (q0_cpu(&plan), allowed, format!("{plan}\n{released}\n{err}"))
}

#[test]
fn separate_sink_and_sender_processes_take_cpus_from_opposite_ends() {
    let _guard = traffic_lock();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let highest: u32 = online
        .trim()
        .rsplit([',', '-'])
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let to = format!("127.0.0.1:{}", free_port());
    let (sink_cpu, sink_allowed, sink_err) =
        planned_and_pinned("sink", &["--listen", &to, "--duration", "20s"]);
    let (_socket, destination) = listener();
    let (send_cpu, send_allowed, send_err) = planned_and_pinned(
        "send",
        &[
            "--to",
            &destination,
            "--rate",
            "1kpps",
            "--duration",
            "20s",
            "--control",
            "off",
        ],
    );
    assert_eq!(sink_cpu, highest, "{sink_err}");
    assert!(
        sink_err.contains("a sink takes CPUs from the top"),
        "{sink_err}"
    );
    assert!(
        send_err.contains("a sender takes CPUs from the bottom"),
        "{send_err}"
    );
    // The kernel's word: each q0 thread may run on exactly the CPU its plan printed.
    assert_eq!(sink_allowed, sink_cpu.to_string(), "{sink_err}");
    assert_eq!(send_allowed, send_cpu.to_string(), "{send_err}");
    if highest > 0 {
        assert_ne!(sink_cpu, send_cpu, "{sink_err}\n{send_err}");
    }
}

#[test]
fn frame_sizes_convert_for_ipv4_and_ipv6_and_the_wire_rate_is_shown() {
    let _guard = traffic_lock();
    for (bind, payload) in [("127.0.0.1:0", 1472), ("[::1]:0", 1452)] {
        let (tally, to) = tally::Tally::bind(bind);
        let out = ringblast(&[
            "send",
            "--to",
            &to,
            "--frame-size",
            "1518",
            "--count",
            "1500",
            "--rate",
            "1kpps",
            "--control",
            "off",
            "--json",
            "--wire-rate",
        ]);
        assert_ok(&out);
        assert_eq!(
            tally.finish().by_len,
            [(payload, 1500)].into_iter().collect(),
            "{to}: a 1518-byte frame's payload, counted where it arrived"
        );
        let send = summaries(&out).send.unwrap();
        assert_eq!(u(&send, "size"), payload as u64, "{to}: {send}");
        assert_eq!(u(&send, "tx_bytes"), 1500 * payload as u64, "{send}");
        let err = text(&out.stderr);
        assert!(
            err.contains("Mbit/s L1"),
            "the L1 rate in live lines: {err}"
        );
    }
    let (_rx4, to4) = listener();
    let small = ringblast(&["send", "--to", &to4, "--frame-size", "63"]);
    assert_eq!(small.status.code(), Some(2));
    let err = text(&small.stderr);
    assert!(
        err.contains("leaves 17 bytes of UDP payload over IPv4")
            && err.contains("the smallest frame ringblast sends is 64 bytes"),
        "{err}"
    );
    let both = ringblast(&["send", "--to", &to4, "--frame-size", "128", "--size", "100"]);
    assert_eq!(both.status.code(), Some(2), "--frame-size and --size clash");
}

/// The interval records of a `--json` run's stdout, and its last summary.
fn intervals_and_summary(stdout: &[u8]) -> (Vec<serde_json::Value>, serde_json::Value) {
    let lines: Vec<serde_json::Value> = text(stdout).lines().map(common::schema::record).collect();
    let summary = lines
        .iter()
        .rfind(|l| l["type"] == "summary")
        .cloned()
        .unwrap_or_else(|| panic!("no summary: {lines:?}"));
    let intervals = lines
        .into_iter()
        .filter(|l| l["type"] == "interval")
        .collect();
    (intervals, summary)
}

#[test]
fn every_interval_is_printed_and_the_intervals_add_up_to_the_summary() {
    let _guard = traffic_lock();
    // A 1.5 s run ends within its second interval: that one is printed, partial, with its real
    // length, and the packets of all of them are what the summary and a plain socket counted.
    for run in 0..4 {
        let (tally, to) = tally::Tally::bind("127.0.0.1:0");
        let out = ringblast(&[
            "send",
            "--to",
            &to,
            "--rate",
            "20kpps",
            "--duration",
            "1500ms",
            "--control",
            "off",
            "--json",
        ]);
        assert_ok(&out);
        let arrived = tally.finish().datagrams();
        let (intervals, summary) = intervals_and_summary(&out.stdout);
        assert!(intervals.len() >= 2, "run {run}: {intervals:?}");
        let sum: u64 = intervals.iter().map(|i| u(i, "tx_packets")).sum();
        assert_eq!(sum, u(&summary, "tx_packets"), "run {run}: {intervals:?}");
        assert_eq!(sum, arrived, "run {run}: what a plain socket received");
        let last = intervals.last().unwrap();
        let seconds = last["interval_s"].as_f64().unwrap();
        assert!(
            seconds > 0.0 && seconds < 1.0,
            "run {run}: the last is partial: {last}"
        );
        let covered: f64 = intervals
            .iter()
            .map(|i| i["interval_s"].as_f64().unwrap())
            .sum();
        let end = last["elapsed_s"].as_f64().unwrap();
        assert!(
            (covered - end).abs() < 0.01,
            "run {run}: the intervals tile the run: {intervals:?}"
        );
    }
    // The sink's side, UDP: its intervals add up to its summary, and to what the sender sent.
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let sink = Command::new(bin())
        .args(["sink", "--listen", &listen, "--json", "--duration", "3s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_bound(None, port.parse().unwrap());
    let send = ringblast(&[
        "send", "--to", &listen, "--rate", "20kpps", "--count", "25000",
    ]);
    assert_ok(&send);
    let sink = sink.wait_with_output().unwrap();
    assert_ok(&sink);
    let (intervals, summary) = intervals_and_summary(&sink.stdout);
    let sum: u64 = intervals.iter().map(|i| u(i, "rx_packets")).sum();
    assert_eq!(sum, u(&summary, "rx_packets"), "{intervals:?}");
    assert_eq!(sum, 25_000, "{summary}");
    // TCP's interval records carry counters since the start: the last one is the summary.
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let sink = Command::new(bin())
        .args([
            "sink",
            "--proto",
            "tcp",
            "--listen",
            &listen,
            "--json",
            "--duration",
            "3s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(None, port.parse().unwrap());
    let send = ringblast(&[
        "send",
        "--proto",
        "tcp",
        "--to",
        &listen,
        "--rate",
        "1kpps",
        "--duration",
        "1500ms",
        "--size",
        "1000",
        "--json",
    ]);
    assert_ok(&send);
    let (intervals, summary) = intervals_and_summary(&send.stdout);
    let last = intervals
        .last()
        .unwrap_or_else(|| panic!("no TCP interval"));
    assert!(intervals.len() >= 2, "{intervals:?}");
    for key in ["tx_records", "tx_bytes", "delivered_records"] {
        assert_eq!(last[key], summary[key], "{key}: {last} / {summary}");
    }
    let sink = sink.wait_with_output().unwrap();
    assert_ok(&sink);
    let (intervals, summary) = intervals_and_summary(&sink.stdout);
    let last = intervals
        .last()
        .unwrap_or_else(|| panic!("no TCP sink interval"));
    for key in ["rx_records", "rx_bytes"] {
        assert_eq!(last[key], summary[key], "{key}: {last} / {summary}");
    }
    assert!(u(&summary, "rx_records") > 0, "{summary}");
}

#[test]
fn the_start_plan_says_where_each_stamp_comes_from() {
    let _guard = traffic_lock();
    let send_line = "stamps: a datagram's send time is the sender's clock when its batch is submitted (user space); its lag to the kernel's software transmit stamp is sampled every 1 ms per queue";
    for (arrival, line, json) in [
        (
            "kernel",
            "stamps: a datagram's arrival is the kernel's software receive stamp (SO_TIMESTAMPNS)",
            "kernel_receive_stamp",
        ),
        (
            "read",
            "stamps: a datagram's arrival is the sink's read (--arrival read)",
            "sink_read",
        ),
    ] {
        let out = ringblast(&[
            "pair",
            "--count",
            "1000",
            "--rate",
            "10kpps",
            "--arrival",
            arrival,
            "--json",
        ]);
        assert_ok(&out);
        let err = text(&out.stderr);
        assert!(err.contains(send_line), "{err}");
        assert!(err.contains(line), "{err}");
        let sums = summaries(&out);
        assert_eq!(sums.sink.unwrap()["stamps"]["arrival"], json);
        let send = sums.send.unwrap();
        assert_eq!(send["stamps"]["send"], "sender_batch_submit");
        assert_eq!(send["stamps"]["transmit_lag"], "kernel_transmit_stamp");
    }
    let out = ringblast(&["pair", "--proto", "tcp", "--count", "1000", "--json"]);
    assert_ok(&out);
    let err = text(&out.stderr);
    assert!(
        err.contains("stamps: a TCP record's send time is the sender's clock when its write is submitted, its arrival the sink's read of its last byte"),
        "{err}"
    );
    assert_eq!(
        summaries(&out).sink.unwrap()["stamps"]["arrival"],
        "sink_read"
    );
}
