//! What a TCP run costs in CPU when little or nothing flows, read from `/proc/PID/task/*/schedstat` between
//! two of the process's own interval lines (events, not sleeps): a sender whose sink is down
//! sleeps until its next reconnect is due (it used to poll its ring every microsecond, a full
//! core for as long as the sink was away), and a sink fed a paced stream (`--rx-wait batch`,
//! which polls only while completions keep coming) sleeps between records. Both bounds are a
//! quarter of a core, where the faults they guard against cost a whole one.

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

/// CPU seconds `p` used between its interval lines ending at 1 s and at 3 s (whatever its
/// `--interval`).
fn cpu_over_two_seconds(p: &mut Proc) -> f64 {
    p.wait_line("-   1.0] ", WAIT);
    let before = cpu_seconds(p.pid());
    p.wait_line("-   3.0] ", WAIT);
    cpu_seconds(p.pid()) - before
}

#[test]
fn a_sender_whose_sink_is_down_sleeps_between_reconnects() {
    let _lock = common::traffic_lock();
    // Nothing listens on this port: every connect is refused, and backs off to 1 s.
    let to = format!("127.0.0.1:{}", common::free_port());
    let mut args = vec!["send", "--proto", "tcp", "--to", &to, "--json"];
    args.extend_from_slice(&PACED);
    let mut tx = Proc::ringblast(None, &args);
    let cpu = cpu_over_two_seconds(&mut tx);
    let (_, _, err) = tx.finish();
    assert!(
        err.contains("connect failures"),
        "the sender never tried to connect:\n{err}"
    );
    assert!(
        cpu < 0.5,
        "a sender with every connection down used {cpu:.2} CPU-s in 2 s:\n{err}"
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
    let cpu = cpu_over_two_seconds(&mut sink);
    let tx = sender.join().unwrap();
    let rx = stop_sink(sink, 2);
    assert_eq!(tx["tx_records"], rx["rx_records"], "send {tx}\nsink {rx}");
    assert!(
        cpu < 0.5,
        "a sink fed 381 records/s used {cpu:.2} CPU-s in 2 s: it polls between records"
    );
}
