//! Traffic shapes over real rings: `--burst N` holds its long-run rate and leaves N packets per
//! pacing tick; bad shapes exit 2 with one line naming the fix.

mod common;

use common::*;

#[test]
fn a_burst_of_32_holds_its_rate_and_leaves_back_to_back() {
    let _guard = traffic_lock();
    let out = ringblast(&[
        "pair",
        "--rate",
        "50kpps",
        "--burst",
        "32",
        "--duration",
        "5s",
        "--json",
        "--no-metrics",
        "--interval",
        "1s",
    ]);
    assert_ok(&out);
    let s = summaries(&out);
    let (send, sink) = (s.send.unwrap(), s.sink.unwrap());
    assert_exact(&send, &sink);
    let seconds = send["duration_s"].as_f64().unwrap();
    let achieved = u(&send, "tx_packets") as f64 / seconds;
    assert!(
        (achieved / 50_000.0 - 1.0).abs() <= 0.005,
        "{achieved} pps against 50000: {send}"
    );
    assert_eq!(u(&send, "burst"), 32);
    // Evenly spaced packets at 50 kpps leave one per io_uring_enter; bursts leave many.
    let per_enter = u(&send, "ring_sqes_submitted") as f64 / u(&send, "ring_enter_calls") as f64;
    assert!(per_enter >= 4.0, "{per_enter} sends per enter: {send}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let live = stderr
        .lines()
        .filter(|l| l.contains("send q0") && l.ends_with("burst 32"));
    assert!(live.count() >= 3, "live lines show the burst:\n{stderr}");
}

#[test]
fn a_counted_burst_run_sends_exactly_its_count() {
    let _guard = traffic_lock();
    let (send, sink, _) = pair(&["--rate", "20kpps", "--burst", "32", "--count", "1000"]);
    assert_exact(&send, &sink);
    assert_eq!(u(&send, "tx_packets"), 1000, "{send}");
}

#[test]
fn bad_shapes_exit_2_with_one_line() {
    let to = "127.0.0.1:9";
    for (args, needle) in [
        (vec!["--burst", "0"], "--burst 0 is out of range"),
        (vec!["--burst", "6", "--gso", "4"], "use a multiple of 4"),
        (vec!["--burst", "200"], "use --window 200 or more"),
    ] {
        let mut all = vec!["send", "--to", to, "--count", "1", "--control", "off"];
        all.extend(args.iter().copied());
        let out = ringblast(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
