//! `--start-at` (issue 39 item 2): runs launched apart start together. Two senders are launched
//! 1.5 s apart with one `--start-at`; a plain UDP socket of the test's own, knowing nothing of
//! ringblast, notes when each sender's first datagram arrives. They arrive within 5 ms of each
//! other and 0–20 ms after the agreed time. A time in the past, or more than a day ahead, is
//! refused with one line and exit 2.

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
    Proc::ringblast(
        None,
        &[
            "send",
            "--to",
            to,
            "--control",
            "off",
            "--start-at",
            at,
            "--rate",
            "10kpps",
            "--count",
            "100",
            "--interval",
            "0",
        ],
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

#[test]
fn a_start_in_the_past_or_more_than_a_day_ahead_is_refused() {
    let past =
        humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(60)).to_string();
    for (at, says) in [
        (past.as_str(), "in the past"),
        ("+25h", "more than a day ahead"),
    ] {
        let out = common::ringblast(&[
            "send",
            "--to",
            "127.0.0.1:9",
            "--control",
            "off",
            "--start-at",
            at,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{at}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(says) && err.contains("--start-at"),
            "{at}: {err}"
        );
    }
}
