//! Client and server end to end over 127.0.0.1 with fake books: hello, progress, verdict,
//! restarts, unreachable sinks, wrong secrets, a busy sink, garbage, silent clients and
//! connection floods.

use super::*;

#[test]
fn end_to_end_hello_progress_verdict() {
    let s = sink(Some("k"));
    let (c, ev) = client(s.server.local_addr(), Some("k"));
    let e = wait_event(&ev, |e| matches!(e, ClientEvent::Connected { .. }));
    assert!(
        matches!(e, ClientEvent::Connected { ref sink_session, reconnect: 0, .. } if sink_session == "sink-1")
    );
    let h = s.hellos.recv_timeout(WAIT).unwrap();
    assert_eq!((h.name.as_str(), h.epoch, h.reconnect), ("tx-1", 7, 0));
    assert_eq!(s.progress.recv_timeout(WAIT).unwrap().flows[0].next_seq, 10);
    let v = c.finish(goodbye(), WAIT).unwrap();
    assert_eq!(
        (
            v.sink_session.as_str(),
            v.name.as_str(),
            v.epoch,
            v.totals.rx_packets
        ),
        ("sink-1", "tx-1", 7, 10)
    );
    assert_eq!(v.sizes.len(), 1, "version 2 carries the size classes");
    assert_eq!(v.latency_p999_ns, 7, "version 5 carries the p99.9");
    assert_eq!(v.jitter.map(|j| j.samples), Some(9), "and the jitter");
    assert!(v.incomplete, "version 9 says the counts were not all in");
    assert_eq!(
        (v.totals.rx_late, v.cells.map(|c| c.latency[0])),
        (1, Some(3)),
        "version 10 carries the late packets and the cells"
    );
    assert_eq!(s.server.stats().authenticated.load(Ordering::Relaxed), 1);
    s.server.stop();
}

#[test]
fn a_search_runs_its_epochs_on_one_connection_one_hello_and_verdict_each() {
    let s = sink(Some("k"));
    let (c, ev) = client(s.server.local_addr(), Some("k"));
    wait_event(&ev, |e| matches!(e, ClientEvent::Connected { .. }));
    assert_eq!(s.hellos.recv_timeout(WAIT).unwrap().epoch, 7);
    for _ in 0..3 {
        let v = c.end_epoch(goodbye(), WAIT).unwrap();
        assert_eq!((v.epoch, v.totals.rx_packets), (7, 10));
        // Between epochs the connection idles longer than the sink's silence limit (3 × 100 ms)
        // and survives on heartbeats.
        assert!(s.hellos.recv_timeout(Duration::from_millis(500)).is_err());
        c.begin_epoch(WAIT).unwrap();
        assert_eq!(s.hellos.recv_timeout(WAIT).unwrap().epoch, 7);
    }
    let v = c.finish(goodbye(), WAIT).unwrap();
    assert_eq!(v.totals.rx_packets, 10);
    let stats = s.server.stats();
    assert_eq!(stats.accepted.load(Ordering::Relaxed), 1, "one connection");
    assert_eq!(stats.protocol_errors.load(Ordering::Relaxed), 0);
    assert_eq!(stats.timeouts.load(Ordering::Relaxed), 0);
    s.server.stop();
}

#[test]
fn older_senders_are_answered_in_their_version_without_its_later_fields() {
    use crate::control::frame::{read_frame_versioned, write_frame_as};
    for version in [1u8, 2, 3, 4, 9] {
        let s = sink(None);
        let mut raw = TcpStream::connect(s.server.local_addr()).unwrap();
        raw.set_read_timeout(Some(WAIT)).unwrap();
        let mut send = |m: Message| write_frame_as(&mut raw, &m, version).unwrap();
        send(Message::ClientHello(ClientHello {
            nonce: [1; 32],
            auth: false,
        }));
        let mut raw2 = raw.try_clone().unwrap();
        let mut next = || read_frame_versioned(&mut raw2).unwrap();
        assert_eq!(next().1, version, "ServerChallenge");
        let mut raw3 = raw.try_clone().unwrap();
        let mut send = |m: Message| write_frame_as(&mut raw3, &m, version).unwrap();
        send(Message::ClientAuth(ClientAuth { mac: None }));
        assert!(matches!(next(), (Message::AuthOk(_), v) if v == version));
        send(Message::Hello(View.hello(0)));
        assert!(matches!(next(), (Message::Welcome(_), v) if v == version));
        send(Message::Goodbye(goodbye()));
        let verdict = loop {
            match next() {
                (Message::Heartbeat(_), v) if v == version => continue,
                (Message::Verdict(v), w) if w == version => break *v,
                (m, v) => panic!("version {v} {}", m.name()),
            }
        };
        assert_eq!(verdict.totals.rx_packets, 10);
        assert_eq!(verdict.sizes.is_empty(), version < 2, "{verdict:?}");
        assert_eq!(verdict.clock.is_none(), version < 3, "{verdict:?}");
        assert_eq!(
            verdict.incomplete,
            version >= 9,
            "version {version} has a word for it from 9"
        );
        assert_eq!(
            (verdict.totals.rx_late, verdict.cells.is_none()),
            (0, true),
            "version {version}: no late packets or cells before 10"
        );
        if version < 5 {
            assert_eq!(
                (verdict.latency_p999_ns, verdict.jitter.is_none()),
                (0, true),
                "version {version}: {verdict:?}"
            );
        }
        s.server.stop();
    }
}

#[test]
fn a_clock_probe_in_a_version_2_frame_is_a_protocol_error() {
    use crate::control::frame::write_frame_as;
    let s = sink(None);
    let mut raw = TcpStream::connect(s.server.local_addr()).unwrap();
    raw.set_read_timeout(Some(WAIT)).unwrap();
    let mut reader = raw.try_clone().unwrap();
    let mut send = |m: Message| write_frame_as(&mut raw, &m, 2).unwrap();
    send(Message::ClientHello(ClientHello {
        nonce: [1; 32],
        auth: false,
    }));
    assert!(matches!(
        frame::read_frame(&mut reader),
        Ok(Message::ServerChallenge(_))
    ));
    send(Message::ClientAuth(ClientAuth { mac: None }));
    assert!(matches!(
        frame::read_frame(&mut reader),
        Ok(Message::AuthOk(_))
    ));
    send(Message::Hello(View.hello(0)));
    assert!(matches!(
        frame::read_frame(&mut reader),
        Ok(Message::Welcome(_))
    ));
    send(Message::ClockProbe(ClockProbe { t1_ns: 1 }));
    wait_log(&s.log, "unknown message type 12");
    wait_count(
        &s.server.stats(),
        |st| st.protocol_errors.load(Ordering::Relaxed),
        1,
    );
    s.server.stop();
}

#[test]
fn the_clock_exchange_estimates_this_hosts_offset_and_tells_the_sink() {
    let s = sink(None);
    let (c, ev) = client(s.server.local_addr(), None);
    let h = s.hellos.recv_timeout(WAIT).unwrap();
    assert_eq!(h.boot_id.as_deref(), crate::clock::boot_id(), "{h:?}");
    // One host, one clock: every estimate's offset is within its bound of 0.
    let first = s.clocks.recv_timeout(WAIT).unwrap();
    for e in [first, s.clocks.recv_timeout(WAIT).unwrap()] {
        assert!(e.offset_ns.unsigned_abs() <= e.error_bound_ns, "{e:?}");
        assert!(e.error_bound_ns >= e.rtt_ns.div_ceil(2), "{e:?}");
        assert!(e.error_bound_ns < 50_000_000, "{e:?}");
    }
    let e = wait_event(&ev, |e| matches!(e, ClientEvent::Clock { .. }));
    let ClientEvent::Clock {
        estimate,
        min_rtt_ns,
    } = e
    else {
        unreachable!()
    };
    assert!(min_rtt_ns <= estimate.rtt_ns, "{estimate:?} {min_rtt_ns}");
    let v = c.finish(goodbye(), WAIT).unwrap();
    assert!(v.clock.is_some(), "version 3 carries the clock: {v:?}");
    s.server.stop();
}

#[test]
fn restart_reconnects_and_new_server_gives_verdict() {
    let s1 = sink(None);
    let addr = s1.server.local_addr();
    let (c, ev) = client(addr, None);
    wait_event(&ev, |e| matches!(e, ClientEvent::Connected { .. }));
    s1.server.stop();
    wait_event(&ev, |e| matches!(e, ClientEvent::Lost { .. }));
    let s2 = sink_at(addr, "sink-2", None, |_| {});
    let e = wait_event(&ev, |e| matches!(e, ClientEvent::Connected { .. }));
    assert!(
        matches!(e, ClientEvent::Connected { reconnect: 1, ref sink_session, .. } if sink_session == "sink-2")
    );
    assert_eq!(s2.hellos.recv_timeout(WAIT).unwrap().reconnect, 1);
    assert_eq!(c.finish(goodbye(), WAIT).unwrap().sink_session, "sink-2");
}

#[test]
fn unreachable_sink_gives_never_connected_within_wait() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (c, ev) = client(addr, None);
    wait_event(&ev, |e| matches!(e, ClientEvent::Unreachable { .. }));
    let wait = Duration::from_millis(800);
    let t = Instant::now();
    let r = c.finish(goodbye(), wait);
    // A hang guard: `finish` keeps to its wait (the exact margin is timing, not logic).
    assert!(
        t.elapsed() <= wait + Duration::from_secs(1),
        "{:?}",
        t.elapsed()
    );
    assert!(
        matches!(r, Err(NoVerdict::NeverConnected(ref m)) if m.contains("cannot connect")),
        "{r:?}"
    );
    // Several retries happened, but Unreachable was reported once.
    assert!(
        ev.try_iter()
            .all(|e| !matches!(e, ClientEvent::Unreachable { .. }))
    );
}

#[test]
fn wrong_secret_is_refused_and_logged() {
    let s = sink(Some("right"));
    let addr = s.server.local_addr();
    // A refused client waits its longest backoff before it tries again: a minute here, so the
    // attempts are exactly the first and the one `finish` makes.
    let (c, ev) = client_backing_off(addr, Some("wrong"), Duration::from_secs(60));
    let e = wait_event(&ev, |e| matches!(e, ClientEvent::Refused { .. }));
    let want = format!("sink at {addr} refused: wrong secret (check --secret-file on both sides)");
    assert_eq!(
        e,
        ClientEvent::Refused {
            reason: want.clone()
        }
    );
    assert!(wait_log(&s.log, "refused").ends_with(": refused: wrong secret"));
    assert_eq!(s.server.stats().auth_failed.load(Ordering::Relaxed), 1);
    assert_eq!(c.finish(goodbye(), WAIT), Err(NoVerdict::Refused(want)));
    wait_count(
        &s.server.stats(),
        |s| s.auth_failed.load(Ordering::Relaxed),
        2,
    );
    assert_eq!(s.server.stats().auth_failed.load(Ordering::Relaxed), 2);
    // A sender without a secret is named in the sink's log.
    let (c, ev) = client(addr, None);
    wait_event(&ev, |e| matches!(e, ClientEvent::Refused { .. }));
    let l = wait_log(&s.log, "no credentials");
    assert!(
        l.contains("sender 127.0.0.1:")
            && l.ends_with("sent no credentials but this sink requires --secret-file"),
        "{l}"
    );
    drop(c);
}

#[test]
fn garbage_and_oversize_frames_are_dropped() {
    let s = sink(None);
    let addr = s.server.local_addr();
    for bytes in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0, 0, 0, 3, 1, 99, 0],
        &[0, 16, 0, 0, 1, 1],
    ] {
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(bytes).unwrap();
        raw.set_read_timeout(Some(WAIT)).unwrap();
        let _ = raw.read(&mut [0u8; 64]); // the server closes the connection
    }
    wait_count(
        &s.server.stats(),
        |s| s.protocol_errors.load(Ordering::Relaxed),
        3,
    );
    assert!(wait_log(&s.log, "handshake failed").contains("exceeds"));
    let (c, _) = client(addr, None);
    assert!(c.finish(goodbye(), WAIT).is_ok());
}

#[test]
fn silent_client_dropped_after_handshake_timeout() {
    let timeout = Duration::from_millis(300);
    let s = sink_at("127.0.0.1:0".parse().unwrap(), "sink-1", None, |c| {
        c.handshake_timeout = timeout
    });
    let mut raw = TcpStream::connect(s.server.local_addr()).unwrap();
    raw.set_read_timeout(Some(WAIT)).unwrap();
    let t = Instant::now();
    assert_eq!(raw.read(&mut [0u8; 16]).unwrap(), 0);
    assert!(t.elapsed() >= timeout - Duration::from_millis(20));
    assert!(wait_log(&s.log, "dropped").contains("no handshake within 300ms"));
    assert_eq!(s.server.stats().timeouts.load(Ordering::Relaxed), 1);
}

#[test]
fn thousand_connect_close_then_real_client_served() {
    let s = sink(None);
    let addr = s.server.local_addr();
    let started = Instant::now();
    for _ in 0..1000 {
        drop(TcpStream::connect(addr).unwrap());
    }
    let stats = s.server.stats();
    wait_count(&stats, |s| s.accepted.load(Ordering::Relaxed), 1000);
    wait_count(
        &stats,
        |s| {
            s.protocol_errors.load(Ordering::Relaxed)
                + s.rejected_busy.load(Ordering::Relaxed)
                + s.evicted.load(Ordering::Relaxed)
        },
        1000,
    );
    // Every failed connection is one line, logged or counted in a "N more ... suppressed" line
    // once its one-second window closes: wait until all 1000 are accounted for.
    let (mut logged, mut suppressed, mut counts) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + WAIT;
    while logged + suppressed < 1000 && Instant::now() < deadline {
        for line in s.log.try_iter() {
            match line
                .strip_prefix("control: ")
                .and_then(|l| l.strip_suffix(" more connection errors suppressed"))
            {
                Some(n) => {
                    suppressed += n.parse::<u64>().unwrap();
                    counts += 1;
                }
                None => logged += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        logged + suppressed,
        1000,
        "{logged} logged, {suppressed} suppressed"
    );
    // At most 20 lines a second: the windows the flood spanned, plus the one it ended in.
    let windows = started.elapsed().as_secs() + 2;
    assert!(
        logged <= 20 * windows && counts <= windows,
        "log not rate-limited: {logged} lines and {counts} count lines in {windows} windows"
    );
    let (c, _) = client(addr, None);
    assert_eq!(c.finish(goodbye(), WAIT).unwrap().sink_session, "sink-1");
}

#[test]
fn a_busy_sink_is_retried_with_the_usual_backoff_and_named_busy() {
    let s = sink_at(
        "127.0.0.1:0".parse().unwrap(),
        "sink-1",
        Some("sixteen-byte-key"),
        |c| c.max_connections = 1,
    );
    let addr = s.server.local_addr();
    let (first, ev1) = client(addr, Some("sixteen-byte-key"));
    wait_event(&ev1, |e| matches!(e, ClientEvent::Connected { .. }));
    // The one place is held by an authenticated sender: the second is told the sink is busy,
    // never that its credentials are wrong, and retries sooner than its longest backoff.
    let (second, ev2) = client_backing_off(addr, Some("sixteen-byte-key"), Duration::from_secs(60));
    let e = wait_event(&ev2, |e| {
        matches!(e, ClientEvent::Busy { .. } | ClientEvent::Refused { .. })
    });
    let ClientEvent::Busy {
        reason, retry_in, ..
    } = e
    else {
        panic!("busy taken for a refusal: {e:?}");
    };
    assert_eq!(
        reason,
        "the sink is busy: this sink already serves 1 authenticated control connections"
    );
    assert!(retry_in < Duration::from_secs(1), "{retry_in:?}");
    assert!(wait_log(&s.log, "refused: busy").contains("already serves 1 authenticated"));
    // A sender that gives up while the sink is still busy says so.
    let (third, _) = client_backing_off(addr, Some("sixteen-byte-key"), Duration::from_secs(60));
    assert_eq!(
        third.finish(goodbye(), Duration::from_millis(600)),
        Err(NoVerdict::Busy(reason.clone()))
    );
    // Once the place is free, the retries get the second one in.
    assert!(first.finish(goodbye(), WAIT).is_ok());
    wait_event(&ev2, |e| matches!(e, ClientEvent::Connected { .. }));
    assert!(second.finish(goodbye(), WAIT).is_ok());
    assert_eq!(s.server.stats().auth_failed.load(Ordering::Relaxed), 0);
}

#[test]
fn a_sender_with_the_secret_gets_in_during_a_flood_of_silent_connections() {
    use std::sync::atomic::AtomicBool;
    let s = sink(Some("sixteen-byte-key"));
    let addr = s.server.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    // Silent connections, held open, from one address and from many: far more than the caps,
    // at well over 85 a second each.
    let floods: Vec<_> = [
        vec![[127, 0, 0, 1]],
        (2..=40).map(|n| [127, 0, 0, n]).collect(),
    ]
    .into_iter()
    .map(|from| {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            let mut made = 0u64;
            for i in 0..4000usize {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let ip: [u8; 4] = from[i % from.len()];
                let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                    .unwrap();
                sock.bind(&SocketAddr::from((ip, 0)).into()).unwrap();
                if sock.connect(&addr.into()).is_ok() {
                    made += 1;
                    held.push(sock);
                }
                if held.len() > 300 {
                    held.remove(0);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            made
        })
    })
    .collect();
    // The client connects once the flood has filled the caps and 200 of its connections were
    // evicted for others (so more than 200 were made), not after a guessed time.
    let stats = s.server.stats();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while stats.evicted.load(Ordering::Relaxed) < 200 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        stats.evicted.load(Ordering::Relaxed) >= 200,
        "the flood filled the caps"
    );
    let (c, ev) = client(addr, Some("sixteen-byte-key"));
    wait_event(&ev, |e| matches!(e, ClientEvent::Connected { .. }));
    assert_eq!(c.finish(goodbye(), WAIT).unwrap().sink_session, "sink-1");
    stop.store(true, Ordering::Relaxed);
    let made: u64 = floods.into_iter().map(|f| f.join().unwrap()).sum();
    assert!(made > 200, "{made}");
    assert_eq!(stats.authenticated.load(Ordering::Relaxed), 1);
    assert_eq!(stats.rejected_busy.load(Ordering::Relaxed), 0);
}

#[test]
fn second_bind_on_same_port_fails_clearly() {
    let s = sink(None);
    let addr = s.server.local_addr();
    let e = ControlServer::bind(ServerConfig::new(addr, "x"))
        .err()
        .unwrap();
    assert!(
        matches!(e, Error::Unsupported(ref m) if m.contains(&format!("port {} is in use", addr.port()))),
        "{e}"
    );
    assert_eq!(e.exit_code(), 3);
}
