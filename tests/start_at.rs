//! `--start-at` (issue 39 item 2): runs launched apart start together. Two senders are launched
//! 1.5 s apart with one `--start-at`; a plain UDP socket of the test's own, knowing nothing of
//! ringblast, notes when each sender's first datagram arrives. They arrive within 5 ms of each
//! other and 0–20 ms after the agreed time. A ringblast sink says when each sender's first
//! datagram came and how far apart they came: three senders, two given one time and the third
//! 300 ms later, are each reported 0–20 ms after their own time, and the spread 300 ms give or
//! take 20; a TCP sink says the same of its senders' first records. A search's first trial
//! starts on its time. A time in the past, or more than a day ahead, is refused with one line
//! and exit 2.

mod common;

use common::proc::Proc;

use std::{
    collections::BTreeMap,
    io::ErrorKind,
    net::{SocketAddr, UdpSocket},
    time::{Duration, SystemTime},
};

/// When each source's first datagram arrived, read until `sources` have sent or `until`.
fn first_arrivals(
    socket: &UdpSocket,
    sources: usize,
    until: SystemTime,
) -> BTreeMap<SocketAddr, SystemTime> {
    let mut first = BTreeMap::new();
    let mut buf = [0u8; 2048];
    while first.len() < sources && SystemTime::now() < until {
        match socket.recv_from(&mut buf) {
            Ok((_, from)) => {
                first.entry(from).or_insert_with(SystemTime::now);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
    first
}

fn send_at(to: &str, at: &str) -> Proc {
    send_named(to, at, &["--control", "off"])
}

fn send_named(to: &str, at: &str, how: &[&str]) -> Proc {
    let mut args = vec!["send", "--to", to, "--start-at", at];
    args.extend_from_slice(how);
    Proc::ringblast(
        None,
        &[
            args.as_slice(),
            &["--rate", "10kpps", "--count", "100", "--interval", "0"],
        ]
        .concat(),
    )
}

#[test]
fn two_senders_launched_apart_start_together_at_the_agreed_time() {
    let _lock = common::traffic_lock();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let to = socket.local_addr().unwrap().to_string();
    // The time as the senders read it: to the millisecond.
    let at =
        humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_secs(3)).to_string();
    let agreed = humantime::parse_rfc3339(&at).unwrap();
    let first = send_at(&to, &at);
    std::thread::sleep(Duration::from_millis(1500));
    let second = send_at(&to, &at);
    let arrivals = first_arrivals(&socket, 2, agreed + Duration::from_secs(5));
    for sender in [first, second] {
        let (status, _, err) = sender.finish();
        assert!(status.success(), "a sender failed: {status}\n{err}");
    }
    assert_eq!(
        arrivals.len(),
        2,
        "both senders' datagrams arrived: {arrivals:?}"
    );
    let times: Vec<SystemTime> = arrivals.values().copied().collect();
    let (a, b) = (times[0], times[1]);
    let apart = a.duration_since(b).unwrap_or_else(|e| e.duration());
    let afters: Vec<_> = times.iter().map(|t| t.duration_since(agreed)).collect();
    eprintln!("first datagrams {apart:?} apart; after {at}: {afters:?}");
    assert!(
        apart <= Duration::from_millis(5),
        "first datagrams {apart:?} apart"
    );
    for t in times {
        let after = t
            .duration_since(agreed)
            .unwrap_or_else(|e| panic!("a first datagram came {:?} before {at}", e.duration()));
        assert!(
            after <= Duration::from_millis(20),
            "a first datagram came {after:?} after {at}"
        );
    }
}

/// Three senders into one sink of `proto`: two given one time and launched 1 s apart, the third
/// given a time 300 ms later. The sink says each one's first datagram (record) came 0-20 ms
/// after its own time, and their spread is 300 ms give or take 20.
fn the_sink_says_how_far_apart_its_senders_started(proto: &str) {
    let _lock = common::traffic_lock();
    let (count_key, first_key, what) = match proto {
        "tcp" => ("rx_records", "first_record_at", "records"),
        _ => ("rx_packets", "first_packet_at", "datagrams"),
    };
    let port = common::free_port();
    let to = format!("127.0.0.1:{port}");
    let mut sink = Proc::ringblast(
        None,
        &[
            "sink",
            "--proto",
            proto,
            "--listen",
            &to,
            "--json",
            "--interval",
            "0",
        ],
    );
    match proto {
        "tcp" => common::wait_listening(None, port),
        _ => common::wait_bound(None, port),
    }
    let at = |ms: u64| {
        let t = SystemTime::now() + Duration::from_millis(ms);
        humantime::format_rfc3339_millis(t).to_string()
    };
    let (together, later) = (at(3000), at(3300));
    let sender = |name, when| {
        send_named(
            &to,
            when,
            &["--proto", proto, "--size", "1000", "--name", name],
        )
    };
    let a = sender("tx-a", &together);
    std::thread::sleep(Duration::from_millis(1000));
    let b = sender("tx-b", &together);
    let c = sender("tx-c", &later);
    for sender in [a, b, c] {
        let (status, _, err) = sender.finish();
        assert!(status.success(), "a sender failed: {status}\n{err}");
    }
    sink.wait_line("sender tx-c", Duration::from_secs(5));
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "the sink failed: {status}\n{err}");
    let summary = common::last_summary(&out, "sink");
    for (name, agreed) in [("tx-a", &together), ("tx-b", &together), ("tx-c", &later)] {
        let row = summary["senders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no row for {name}: {summary}"));
        assert_eq!(row[count_key], 100, "{row}");
        let came = humantime::parse_rfc3339(row[first_key].as_str().unwrap()).unwrap();
        let after = came
            .duration_since(humantime::parse_rfc3339(agreed).unwrap())
            .unwrap_or_else(|e| panic!("{name} came {:?} before {agreed}", e.duration()));
        assert!(
            after <= Duration::from_millis(20),
            "{name} came {after:?} after {agreed}"
        );
    }
    let spread = &summary["start_spread"];
    assert_eq!(
        (spread["senders"].as_u64(), spread["last"].as_str()),
        (Some(3), Some("tx-c")),
        "{spread}"
    );
    assert!(
        ["tx-a", "tx-b"].contains(&spread["first"].as_str().unwrap()),
        "{spread}"
    );
    let ms = spread["spread_ms"].as_f64().unwrap();
    assert!((280.0..=320.0).contains(&ms), "{spread}");
    let line = format!("the first {what} of 3 senders arrived within");
    assert!(err.contains(&line), "{err}");
}

#[test]
fn a_udp_sink_says_when_each_senders_first_datagram_came_and_how_far_apart() {
    the_sink_says_how_far_apart_its_senders_started("udp");
}

#[test]
fn a_tcp_sink_says_when_each_senders_first_record_came_and_how_far_apart() {
    the_sink_says_how_far_apart_its_senders_started("tcp");
}

#[test]
fn a_search_sets_up_and_starts_its_first_trial_on_the_time() {
    let _lock = common::traffic_lock();
    let port = common::free_port();
    let to = format!("127.0.0.1:{port}");
    let sink = Proc::ringblast(
        None,
        &["sink", "--listen", &to, "--json", "--interval", "0"],
    );
    common::wait_bound(None, port);
    let at =
        humantime::format_rfc3339_millis(SystemTime::now() + Duration::from_secs(2)).to_string();
    let search = Proc::ringblast(
        None,
        &[
            "search",
            "--to",
            &to,
            "--start-at",
            &at,
            "--json",
            "--min-rate",
            "1kpps",
            "--max-rate",
            "2kpps",
            "--trial",
            "100ms",
            "--final-trial",
            "200ms",
            "--max-time",
            "20s",
        ],
    );
    let (status, out, err) = search.finish();
    assert!(
        err.contains("waiting") && err.contains(&at),
        "the search says it waits: {err}"
    );
    assert!(
        out.lines().any(|l| l.contains("\"type\":\"search\"")),
        "{status}: {out}\n{err}"
    );
    sink.interrupt();
    let (_, out, _) = sink.finish();
    let summary = common::last_summary(&out, "sink");
    let first = summary["senders"][0]["first_packet_at"].as_str().unwrap();
    let after = humantime::parse_rfc3339(first)
        .unwrap()
        .duration_since(humantime::parse_rfc3339(&at).unwrap())
        .unwrap_or_else(|e| panic!("the first trial came {:?} before {at}", e.duration()));
    assert!(
        after <= Duration::from_millis(20),
        "the first trial came {after:?} after {at}"
    );
}

#[test]
fn a_start_in_the_past_or_more_than_a_day_ahead_is_refused() {
    let past =
        humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(60)).to_string();
    for command in [
        &["send", "--to", "127.0.0.1:9", "--control", "off"][..],
        &["search", "--to", "127.0.0.1:9"][..],
    ] {
        for (at, says) in [
            (past.as_str(), "in the past"),
            ("+25h", "more than a day ahead"),
        ] {
            let out = common::ringblast(&[command, &["--start-at", at]].concat());
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command:?} {at}: {err}");
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            assert!(
                err.contains(says) && err.contains("--start-at"),
                "{command:?} {at}: {err}"
            );
        }
    }
}
