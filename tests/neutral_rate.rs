//! Rate accuracy judged by a neutral clock. A ringblast sender in one network namespace sends
//! to a plain UDP socket of the test's own in another (`common::neutral`: not ringblast; it
//! counts arrivals in 100 ms windows of its own clock). Every count is checked against the
//! kernel's as well: an nft counter on the receiving side's input hook (packets and bytes),
//! `Udp InDatagrams`/`RcvbufErrors` of the receiving namespace and `Udp OutDatagrams` of the
//! sending one.
//!
//! What is asserted: the receiver got exactly the datagrams the sender says it sent, which is
//! what the kernel passed on both sides, and the long-run rate (first arrival to last, 3 s) is
//! within 0.5 % of the target by the receiver's CLOCK_MONOTONIC, and by the kernel's receive
//! timestamps. The worst 100 ms window is printed on both clocks, not asserted, and is limited
//! by who is late, not by the pacer:
//! - by the receive time (CLOCK_MONOTONIC when `recvmsg` returned), by the receiver thread's
//!   scheduling on this 2-core host, where the sender spins on one core and the receiving
//!   stack's softirq work runs on the sender's: a wake-up delayed by a few ms moves that many
//!   ms of datagrams into the next window (±0.3–3 % in runs here, −4.7 % and +5 % while other
//!   builds loaded both cores, +37 % once);
//! - by the kernel stamp (taken as the veth hands each packet, or each GSO burst of 16, to the
//!   receiving stack, in the sender's context), by the sender's own pacing and preemption: a
//!   sender held off its core sends late and then catches up, which moves datagrams between
//!   windows but not the long-run rate (±0.06–0.3 % in runs here, ±3 % under other builds).
//!
//! The long-run rate was within ±0.011 % on the monotonic clock and ±0.003 % on the kernel's
//! stamps in every run here, loaded or not, so 0.5 % leaves a wide margin for a slower host.
//!
//! A burst of 32 at 50 kpps is judged by the kernel's stamps too: the datagrams of each pacing
//! tick arrive back to back, and the ticks stand apart.
//!
//! 1 Mpps is reachable through veth on this host only because the sender uses `--gso 16` and
//! the receiver `UDP_GRO`, so each side makes 62 500 calls a second; the kernel keeps every
//! 16-datagram GSO send whole to the receiving socket (asserted: skbs = datagrams / 16).

mod common;

use std::net::SocketAddr;

use common::{
    neutral::{Arrivals, NeutralReceiver, Timeline},
    *,
};

const PORT: u16 = 7400;
const SIZE: u64 = 64;
/// How far the long-run rate may be from the target.
const LONG_RUN_TOLERANCE: f64 = 0.005;

/// Sends `count` datagrams of `SIZE` bytes at `pps` with `gso` datagrams per send from the
/// sender namespace of a new lab to the neutral receiver in its sink namespace, checks every
/// count against the kernel's, and returns what the receiver saw.
fn paced_run(tag: &str, net: u8, pps: u64, gso: u64, count: u64) -> Arrivals {
    paced_burst_run(tag, net, pps, gso, 1, count)
}

/// [`paced_run`] with `--burst burst`.
fn paced_burst_run(tag: &str, net: u8, pps: u64, gso: u64, burst: u64, count: u64) -> Arrivals {
    let rate = format!("{pps}pps");
    let (count_arg, burst_arg) = (count.to_string(), burst.to_string());
    let shape = [
        "--rate", &rate, "--count", &count_arg, "--burst", &burst_arg,
    ];
    let (arrivals, sent) = neutral_run(tag, net, gso, count, &shape);
    assert_eq!(sent, count);
    arrivals
}

/// Sends with `shape` (the rate and extent flags) and `gso` datagrams per send from the sender
/// namespace of a new lab to the neutral receiver in its sink namespace, which expects
/// `expected` datagrams; checks every count against the kernel's, and returns what the
/// receiver saw and the sender's `tx_packets`.
fn neutral_run(tag: &str, net: u8, gso: u64, expected: u64, shape: &[&str]) -> (Arrivals, u64) {
    let lab = Lab::create(tag, net);
    let to = format!("10.{net}.0.2:{PORT}");
    nft(
        &lab.rx,
        &format!(
            "table ip rbrate {{\n counter arrived {{ }}\n chain in {{\n type filter hook input priority 0; policy accept;\n udp dport {PORT} counter name arrived\n }}\n}}\n"
        ),
    );
    let addr: SocketAddr = to.parse().unwrap();
    let receiver = NeutralReceiver::start(&lab.rx, addr, SIZE as usize, expected);
    let (in_before, drops_before, out_before) = (
        snmp(&lab.rx, "Udp", "InDatagrams"),
        snmp(&lab.rx, "Udp", "RcvbufErrors"),
        snmp(&lab.tx, "Udp", "OutDatagrams"),
    );
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "send", "--json"])
        .args(["--control", "off", "--to", &to])
        .args(shape)
        .args(["--size", &SIZE.to_string(), "--gso", &gso.to_string()])
        .output()
        .unwrap();
    let arrivals = receiver.finish();
    assert_ok(&out);
    let send = summaries(&out).send.unwrap();
    let (skbs, bytes) = nft_named(&lab.rx, "ip", "rbrate", "arrived");
    let delivered = snmp(&lab.rx, "Udp", "InDatagrams") - in_before;
    let dropped = snmp(&lab.rx, "Udp", "RcvbufErrors") - drops_before;
    let sent_calls = snmp(&lab.tx, "Udp", "OutDatagrams") - out_before;

    let count = u(&send, "tx_packets");
    assert_eq!(count % gso, 0, "whole sends only: {send}");
    assert_eq!(u(&send, "tx_errors"), 0, "{send}");
    // The kernel: each skb carries one IPv4 and one UDP header (28 bytes) and `gso` datagrams.
    assert_eq!(skbs, count / gso, "skbs at the receiving side's input hook");
    assert_eq!(bytes, skbs * 28 + count * SIZE, "bytes at the input hook");
    assert_eq!(
        sent_calls,
        count / gso,
        "Udp OutDatagrams of the sender's namespace"
    );
    assert_eq!(
        delivered,
        count / gso,
        "Udp InDatagrams of the receiver's namespace"
    );
    assert_eq!(dropped, 0, "Udp RcvbufErrors of the receiver's namespace");
    // The neutral receiver: every datagram, whole, each buffer stamped.
    assert_eq!(arrivals.datagrams, count, "{arrivals:?}");
    assert_eq!(arrivals.buffers, skbs, "one receive per skb");
    assert_eq!(arrivals.malformed, 0);
    assert_eq!(arrivals.unstamped, 0);
    (arrivals, count)
}

/// Prints one clock's view of the run and checks its long-run rate.
fn judge(name: &str, clock: &str, pps: f64, t: &Timeline) {
    let rate = t.long_run_pps();
    let (at, n, dev) = t.worst_window(pps);
    let windows = t.whole_windows();
    eprintln!(
        "{name} by {clock}: {} datagrams over {:.4} s, long-run {rate:.1} pps ({:+.3} % of {pps}); {} whole 100 ms windows: worst #{at} with {n} ({:+.2} %), min {} max {}",
        t.datagrams,
        t.span_s(),
        (rate / pps - 1.0) * 100.0,
        windows.len(),
        dev * 100.0,
        windows.iter().min().unwrap(),
        windows.iter().max().unwrap(),
    );
    assert!(
        (rate / pps - 1.0).abs() <= LONG_RUN_TOLERANCE,
        "{name}: long-run rate by {clock} {rate:.1} pps is not within 0.5 % of {pps}"
    );
}

/// Both clocks' views. The kernel stamps are CLOCK_REALTIME: judged only if that clock kept
/// pace with CLOCK_MONOTONIC during the run (within 1 ms), else said and left out.
fn judge_both(name: &str, pps: f64, a: &Arrivals) {
    judge(name, "the receiver's monotonic clock", pps, &a.received);
    if a.realtime_moved_ns.abs() < 1_000_000 {
        judge(name, "the kernel's receive stamps", pps, &a.stamped);
    } else {
        eprintln!(
            "{name}: CLOCK_REALTIME moved {} ns against CLOCK_MONOTONIC during the run; the kernel's stamps are not judged",
            a.realtime_moved_ns
        );
    }
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn at_100kpps_a_neutral_receiver_counts_the_target_rate() {
    let _guard = traffic_lock();
    let arrivals = paced_run("nra", 240, 100_000, 1, 300_000);
    judge_both("100 kpps", 100_000.0, &arrivals);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn at_1mpps_with_gso_16_a_neutral_receiver_counts_the_target_rate() {
    let _guard = traffic_lock();
    let arrivals = paced_run("nrb", 241, 1_000_000, 16, 3_000_000);
    judge_both("1 Mpps --gso 16", 1_000_000.0, &arrivals);
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn a_burst_of_32_arrives_back_to_back_at_a_neutral_receiver() {
    let _guard = traffic_lock();
    // 50 kpps in bursts of 32: one burst every 640 µs.
    let arrivals = paced_burst_run("nrc", 242, 50_000, 1, 32, 160_000);
    judge_both("50 kpps --burst 32", 50_000.0, &arrivals);
    let runs = arrivals.back_to_back_runs(std::time::Duration::from_micros(200));
    let mut sizes = std::collections::BTreeMap::<u64, u64>::new();
    for r in &runs {
        *sizes.entry(*r).or_default() += 1;
    }
    eprintln!("50 kpps --burst 32: runs by size {sizes:?}");
    // Each tick's 32 sends go in one io_uring_enter and reach the receiving stack within a few
    // µs of each other; ticks are 640 µs apart, so a 200 µs gap separates them. A sender held
    // off its core sends late and then catches up in whole bursts (runs of 64 or more here: 9
    // of 4 987 runs in the measured run). A run that is not a whole number of bursts means a
    // burst was split; only a preemption inside the one enter could do that, so allow 1 %.
    let whole = runs.iter().filter(|r| *r % 32 == 0).count();
    let exact = runs.iter().filter(|r| **r == 32).count();
    assert!(
        whole * 100 >= runs.len() * 99,
        "{} of {} runs are not whole bursts: {sizes:?}",
        runs.len() - whole,
        runs.len()
    );
    // At least 95 % of ticks stand alone (99.8 % in the measured run; catch-ups on a loaded
    // host merge some).
    assert!(
        exact * 100 >= runs.len() * 95,
        "only {exact} of {} runs are one burst of 32: {sizes:?}",
        runs.len()
    );
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn each_rate_step_holds_its_rate_at_a_neutral_receiver() {
    let _guard = traffic_lock();
    let (arrivals, sent) = neutral_run(
        "nrd",
        243,
        1,
        120_000,
        &["--rate-steps", "20kpps:1s,60kpps:1s,40kpps:1s"],
    );
    // Each step's rate by the receiver's clock: its whole 100 ms windows but the first and the
    // last, which may hold part of a neighbouring step (the sender switches on its own clock,
    // a few ms from the receiver's window edges). 1 %, as for each step of a schedule.
    let windows = arrivals.received.whole_windows();
    assert!(
        windows.len() >= 29,
        "{} windows: {arrivals:?}",
        windows.len()
    );
    for (step, pps) in [20_000.0, 60_000.0, 40_000.0].iter().enumerate() {
        let inner = &windows[step * 10 + 1..step * 10 + 9];
        let rate = inner.iter().sum::<u64>() as f64 / (inner.len() as f64 * 0.1);
        eprintln!(
            "step {step}: {rate:.0} pps by the receiver's clock against {pps} ({:+.3} %), windows {inner:?}",
            (rate / pps - 1.0) * 100.0
        );
        assert!(
            (rate / pps - 1.0).abs() <= 0.01,
            "step {step}: {rate:.0} pps against {pps}: {inner:?}"
        );
    }
    // The schedule's integral, within the 1 % a step's end may cut short.
    assert!((118_800..=120_000).contains(&sent), "{sent}");
}
