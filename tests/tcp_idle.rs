//! What a TCP run costs in CPU when little or nothing flows, read from `/proc/PID/task/*/schedstat` between
//! two of the process's own interval lines (events, not sleeps): a sender whose sink is down
//! sleeps until its next reconnect is due (it used to poll its ring every microsecond, a full
//! core for as long as the sink was away), and a sink fed a paced stream (`--rx-wait batch`,
//! which polls only while completions keep coming) sleeps between records. Both bounds are a
//! quarter of a core, where the faults they guard against cost a whole one. CPU time depends on
//! the machine's load, so each test also counts the process's wake-ups over the same two seconds
//! (the threads' `voluntary_ctxt_switches`, the kernel's count of each time a thread blocked): a
//! loop that spins shows as CPU, one that sleeps a microsecond at a time shows as wake-ups.

mod common;

use common::{
    proc::Proc,
    tcp::{WAIT, send, start_sink, stop_sink},
};

/// The sender's traffic in both cases: 381 records/s over 2 connections, for 4 s.
const PACED: [&str; 8] = [
    "--rate",
    "50Mbit",
    "--size",
    "16384",
    "--conns",
    "2",
    "--duration",
    "4s",
];

/// Wake-ups allowed in the 2 s of a sender whose sink is down. Measured: 500 (about 400 of the
/// worker's, whose ring wait times out every 5 ms while its connections back off, and 100 of the
/// reporter's 20 ms tick). Twice that; a thread on a 1 ms timer alone would wake 2 000 times.
const WOKE_DOWN: u64 = 1_000;
/// Wake-ups allowed in the 2 s of a sink fed 762 records: measured 990, about one per record
/// plus the reporter's tick. Twice that; a worker polling its ring on a 1 ms timer would wake
/// 2 000 times on its own.
const WOKE_PACED: u64 = 2_000;

/// CPU seconds the process's live threads have run so far: the first field of each thread's
/// `schedstat` (nanoseconds on a CPU). The workers and the reporter live for the whole run.
fn cpu_seconds(pid: u32) -> f64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let ns: u64 = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .map(|s| s.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum();
    ns as f64 / 1e9
}

/// Times the process's threads have blocked so far: the sum of each live thread's
/// `voluntary_ctxt_switches` in its `/proc/PID/task/TID/status`.
fn wakeups(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// CPU seconds and wake-ups of `p` between its interval lines ending at 1 s and at 3 s
/// (whatever its `--interval`).
fn cost_over_two_seconds(p: &mut Proc) -> (f64, u64) {
    p.wait_lines("an interval line ending at 1 s", WAIT, |seen| {
        seen.iter().any(|l| interval_end_s(l) >= 0.95)
    });
    let (cpu, woke) = (cpu_seconds(p.pid()), wakeups(p.pid()));
    p.wait_lines("an interval line ending at 3 s", WAIT, |seen| {
        seen.iter().any(|l| interval_end_s(l) >= 2.95)
    });
    (cpu_seconds(p.pid()) - cpu, wakeups(p.pid()) - woke)
}

/// The end of an interval line's span (`0.00-1.01 s  q0 n0 ...` ends at 1.01), or 0.
fn interval_end_s(line: &str) -> f64 {
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some(span), Some("s")) => span
            .split_once('-')
            .and_then(|(_, end)| end.parse().ok())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

#[test]
fn a_sender_whose_sink_is_down_sleeps_between_reconnects() {
    let _lock = common::traffic_lock();
    // Nothing listens on this port: every connect is refused, and backs off to 1 s. Without a
    // control channel (with one, a sender that finds no sink at its start gives up in 2 s).
    let to = format!("127.0.0.1:{}", common::free_port());
    let mut args = vec![
        "send",
        "--proto",
        "tcp",
        "--to",
        &to,
        "--json",
        "--control",
        "off",
    ];
    args.extend_from_slice(&PACED);
    let mut tx = Proc::ringblast(None, &args);
    let (cpu, woke) = cost_over_two_seconds(&mut tx);
    let (_, _, err) = tx.finish();
    assert!(
        err.contains("connect failures"),
        "the sender never tried to connect:\n{err}"
    );
    assert!(
        cpu < 0.5,
        "a sender with every connection down used {cpu:.2} CPU-s in 2 s:\n{err}"
    );
    eprintln!("sender, sink down: {woke} wake-ups in 2 s");
    assert!(
        woke < WOKE_DOWN,
        "a sender with every connection down woke {woke} times in 2 s:\n{err}"
    );
}

#[test]
fn a_sink_fed_a_paced_stream_sleeps_between_records() {
    let _lock = common::traffic_lock();
    let to = format!("127.0.0.1:{}", common::free_port());
    let mut sink = start_sink(None, &to);
    let sender = std::thread::spawn({
        let to = to.clone();
        move || {
            let mut args = vec!["--to", to.as_str()];
            args.extend_from_slice(&PACED);
            send(None, &args)
        }
    });
    let (cpu, woke) = cost_over_two_seconds(&mut sink);
    let tx = sender.join().unwrap();
    let rx = stop_sink(sink, 2);
    assert_eq!(tx["tx_records"], rx["rx_records"], "send {tx}\nsink {rx}");
    assert!(
        cpu < 0.5,
        "a sink fed 381 records/s used {cpu:.2} CPU-s in 2 s: it polls between records"
    );
    eprintln!("sink, 381 records/s: {woke} wake-ups in 2 s");
    assert!(
        woke < WOKE_PACED,
        "a sink fed 381 records/s woke {woke} times in 2 s: it polls between records"
    );
}
