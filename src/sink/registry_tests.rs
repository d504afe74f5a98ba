//! Registry tests: a real `Books` plays the worker, reached only through its mailbox.

use super::*;
use crate::latency_clock::{ClockKind, NO_ESTIMATE_YET};
use crate::sink::books::{Books, LatencySample, Packet};

fn worker() -> Arc<SinkShared> {
    Arc::new(SinkShared::new(16, 64))
}

/// Plays one worker round: applies the inbox, closes what waits, publishes, as the sink loop does.
fn round(books: &mut Books, shared: &SinkShared) {
    while let Some(m) = shared.mailbox.inbox.pop() {
        books.apply(m, &shared.mailbox, u64::MAX);
    }
    books.retry_closes(u64::MAX, &shared.mailbox);
    books.publish(&shared.mailbox);
}

fn packet(epoch: u32, seq: u64) -> Packet {
    Packet {
        key: SessionKey { epoch, flow: 0 },
        seq,
        failed32: 0,
        bytes: 10,
        source: Some("10.9.0.2:4000".parse().unwrap()),
        now_ns: 1,
        now_real_ns: 1_700_000_000_000_000_000,
        sent_ns: 1_700_000_000_000_000_000,
        compact: false,
        proof: crate::proto::proof::Proof::Missing,
        size_class: 0,
        drops_behind: 0,
    }
}

#[test]
fn restarts_under_one_name_add_up_and_goodbye_gives_the_tail() {
    let shared = worker();
    let registry = Arc::new(Registry::new(vec![Arc::clone(&shared)], 8, 0));
    let mut books = Books::new(64, 16, false);
    for (run, epoch) in [(0u64, 7u32), (1, 8), (2, 9)] {
        let flows = |next| {
            vec![FlowReport {
                flow: 0,
                first_seq: 0,
                next_seq: next,
                failed: 0,
            }]
        };
        let hello = Hello {
            name: "edge-1".into(),
            epoch,
            flows: flows(0),
            elapsed_ns: 0,
            step: 0,
            clock: LatencyClock::same_clock(),
            proof: None,
            reach: None,
        };
        let (_, line) = registry.hello(None, &hello);
        assert!(
            line.contains(&format!("session {}", run + 1)) || run == 0,
            "{line}"
        );
        round(&mut books, &shared);
        for seq in 0..100 {
            books.record(packet(epoch, seq)).unwrap();
        }
        // The worker answers while the registry waits.
        let r = Arc::clone(&registry);
        let bye = std::thread::spawn(move || r.goodbye(epoch, &flows(105), Duration::from_secs(5)));
        while !bye.is_finished() {
            round(&mut books, &shared);
            std::thread::yield_now();
        }
        let verdict = bye.join().unwrap();
        assert!(verdict.complete);
        assert_eq!((verdict.totals.packets, verdict.totals.lost), (100, 5));
    }
    let rows = registry.rows(true);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].name, "edge-1");
    assert_eq!((rows[0].counters.packets, rows[0].counters.lost), (300, 15));
    assert_eq!(rows[0].sessions, 3);
}

#[test]
fn a_flow_nobody_saw_is_lost_from_its_start_and_unnamed_senders_go_by_ip_and_epoch() {
    let shared = worker();
    let registry = Arc::new(Registry::new(vec![Arc::clone(&shared)], 8, 0));
    let mut books = Books::new(64, 16, false);
    let f = |next| FlowReport {
        flow: 3,
        first_seq: 0,
        next_seq: next,
        failed: 2,
    };
    registry.hello(
        None,
        &Hello {
            name: "s".into(),
            epoch: 1,
            flows: vec![f(0)],
            elapsed_ns: 0,
            step: 0,
            clock: LatencyClock::unknown(NO_ESTIMATE_YET),
            proof: None,
            reach: None,
        },
    );
    let r = Arc::clone(&registry);
    let bye = std::thread::spawn(move || r.goodbye(1, &[f(50)], Duration::from_secs(5)));
    while !bye.is_finished() {
        round(&mut books, &shared);
        std::thread::yield_now();
    }
    let v = bye.join().unwrap();
    assert_eq!((v.totals.lost, v.totals.send_failed), (48, 2));
    books.record(packet(99, 0)).unwrap();
    // The same run's next flow from another source port is the same sender.
    books
        .record(Packet {
            key: SessionKey { epoch: 99, flow: 1 },
            source: Some("10.9.0.2:4001".parse().unwrap()),
            ..packet(99, 0)
        })
        .unwrap();
    round(&mut books, &shared);
    let rows = registry.rows(true);
    let unnamed: Vec<_> = rows.iter().filter(|r| r.name != "s").collect();
    assert_eq!(unnamed.len(), 1, "{rows:?}");
    assert_eq!(
        (unnamed[0].name.as_str(), unnamed[0].counters.packets),
        ("10.9.0.2/00000063", 2)
    );
}

/// Plays the sink's worker loop for one refused packet: applies the inbox, tries again, and
/// notes a refusal that stands.
fn record_or_refuse(books: &mut Books, shared: &SinkShared, p: Packet) -> bool {
    let mut booked = books.record(p);
    if booked.is_err() && !shared.mailbox.inbox.is_empty() {
        round(books, shared);
        booked = books.record(p);
    }
    if booked.is_err() {
        books.note_refusal(p.key, p.now_ns);
    }
    booked.is_ok()
}

#[test]
fn refused_datagrams_of_an_announced_run_are_never_lost_and_its_verdict_counts_them() {
    use crate::sink::books::Admission;
    let shared = worker();
    let registry = Arc::new(Registry::new(vec![Arc::clone(&shared)], 8, 0));
    // Two slots, none for unannounced sessions, and those refused outright (a secret).
    let mut books = Books::new(2, 16, false).with_admission(Admission {
        max_unannounced: 0,
        refuse_unannounced_from_ns: 0,
        compact_needs_proof: false,
    });
    let flows = |next| {
        (0..3)
            .map(|flow| FlowReport {
                flow,
                first_seq: 0,
                next_seq: next,
                failed: 0,
            })
            .collect::<Vec<_>>()
    };
    // A forged datagram before the hello is refused as unannounced.
    assert!(!record_or_refuse(&mut books, &shared, packet(40, 0)));
    registry.hello(
        None,
        &Hello {
            name: "legit".into(),
            epoch: 7,
            flows: flows(0),
            elapsed_ns: 0,
            step: 0,
            clock: LatencyClock::same_clock(),
            proof: None,
            reach: None,
        },
    );
    // The hello still waits in the inbox: the worker finds it on the first refusal.
    for seq in 0..10 {
        for flow in 0..3 {
            let p = Packet {
                key: SessionKey { epoch: 7, flow },
                now_ns: 2 + seq,
                ..packet(7, seq)
            };
            // Flows 0 and 1 take the two slots; flow 2 finds none.
            assert_eq!(record_or_refuse(&mut books, &shared, p), flow < 2);
        }
    }
    let r = Arc::clone(&registry);
    let bye = std::thread::spawn(move || r.goodbye(7, &flows(10), Duration::from_secs(5)));
    while !bye.is_finished() {
        round(&mut books, &shared);
        std::thread::yield_now();
    }
    let v = bye.join().unwrap();
    assert_eq!(v.refused, 10);
    assert_eq!((v.totals.packets, v.totals.lost), (20, 0));
    // The flow that arrived but found no slot is unconfirmed, not lost.
    assert_eq!(v.totals.unconfirmed, 10);
}

#[test]
fn a_runs_clock_estimate_reaches_the_worker_and_its_verdict() {
    let shared = worker();
    let registry = Arc::new(Registry::new(vec![Arc::clone(&shared)], 8, 0));
    let mut books = Books::new(64, 16, false);
    let flows = |next| {
        vec![FlowReport {
            flow: 0,
            first_seq: 0,
            next_seq: next,
            failed: 0,
        }]
    };
    registry.hello(
        None,
        &Hello {
            name: "far".into(),
            epoch: 5,
            flows: flows(0),
            elapsed_ns: 0,
            step: 0,
            clock: LatencyClock::unknown(NO_ESTIMATE_YET),
            proof: None,
            reach: None,
        },
    );
    round(&mut books, &shared);
    // The sink's clock is 5 s behind the sender's; a packet 30 us in flight.
    let skewed = |seq| Packet {
        now_real_ns: 1_700_000_000_000_000_000 - 5_000_000_000 + 30_000,
        ..packet(5, seq)
    };
    assert_eq!(books.record(skewed(0)), Ok(LatencySample::Unknown));
    registry.clock(5, -5_000_000_000, 20_000, 40_000);
    round(&mut books, &shared);
    assert_eq!(
        books.record(skewed(1)),
        Ok(LatencySample::Delay {
            ns: 30_000,
            cell: crate::stats::latency_cell(30_000),
            clamped: false
        })
    );
    let r = Arc::clone(&registry);
    let bye = std::thread::spawn(move || r.goodbye(5, &flows(2), Duration::from_secs(5)));
    while !bye.is_finished() {
        round(&mut books, &shared);
        std::thread::yield_now();
    }
    let v = bye.join().unwrap();
    assert_eq!(
        v.clock,
        LatencyClock::corrected(-5_000_000_000, 20_000, 40_000)
    );
    assert_eq!((v.totals.latency_unknown, v.latency.p50_ns), (1, 50_000));
    let rows = registry.rows(true);
    assert_eq!(rows[0].clock.kind, ClockKind::OffsetCorrected);
    assert_eq!(rows[0].counters.latency_unknown, 1);
}

/// A sender run with no hello: `n` datagrams of `epoch` from its own address.
fn unannounced(books: &mut Books, epoch: u32, n: u64) {
    for seq in 0..n {
        let source = format!("10.9.{}.{}:4000", epoch >> 8 & 0xff, epoch & 0xff);
        books
            .record(Packet {
                source: Some(source.parse().unwrap()),
                ..packet(epoch, seq)
            })
            .unwrap();
    }
}

fn hello_of(name: &str, epoch: u32) -> Hello {
    Hello {
        name: name.into(),
        epoch,
        flows: vec![],
        elapsed_ns: 0,
        step: 0,
        clock: LatencyClock::same_clock(),
        proof: None,
        reach: None,
    }
}

#[test]
fn max_senders_holds_in_one_pass_and_an_announced_sender_is_named_first() {
    let shared = worker();
    let registry = Registry::new(vec![Arc::clone(&shared)], 4, 0);
    let mut books = Books::new(64, 16, false);
    for epoch in 1..=10 {
        unannounced(&mut books, epoch, 5);
    }
    round(&mut books, &shared);
    let rows = registry.rows(true);
    // Four senders and `other`, however many runs one pass sees.
    assert_eq!(rows.len(), 5, "{rows:?}");
    let total: u64 = rows.iter().map(|r| r.counters.packets).sum();
    assert_eq!(total, 50);
    let other = rows.iter().find(|r| r.name == "other").unwrap();
    assert_eq!(other.counters.packets, 30);

    // A sender that says hello now gets its name: an unannounced one is folded into `other`.
    let (_, line) = registry.hello(None, &hello_of("edge-1", 99));
    assert!(line.contains("sender edge-1 "), "{line}");
    round(&mut books, &shared);
    books.record(packet(99, 0)).unwrap();
    round(&mut books, &shared);
    let rows = registry.rows(true);
    assert_eq!(rows.len(), 5, "{rows:?}");
    let edge = rows.iter().find(|r| r.name == "edge-1").unwrap();
    assert_eq!(edge.counters.packets, 1);
    let other = rows.iter().find(|r| r.name == "other").unwrap();
    assert_eq!(other.counters.packets, 35, "{rows:?}");
    assert_eq!(rows.iter().map(|r| r.counters.packets).sum::<u64>(), 51);
}

#[test]
fn idle_runs_without_a_hello_are_pruned_into_their_totals() {
    let shared = worker();
    let registry = Registry::new(vec![Arc::clone(&shared)], 4, 0);
    let mut books = Books::new(64, 16, false);
    for round_no in 0..50u32 {
        for epoch in round_no * 20..round_no * 20 + 20 {
            unannounced(&mut books, epoch + 1, 3);
        }
        books.sweep(Some(u64::MAX), &shared.mailbox);
        round(&mut books, &shared);
        let _ = registry.rows(false);
    }
    let rows = registry.rows(true);
    assert_eq!(rows.len(), 5, "{rows:?}");
    assert_eq!(rows.iter().map(|r| r.counters.packets).sum::<u64>(), 3_000);
    assert_eq!(rows.iter().map(|r| r.sessions).sum::<u64>(), 1_000);
    // Nothing of the 1 000 runs is kept but their sums.
    let inner = registry.lock();
    assert!(
        inner.books.runs.is_empty(),
        "{} epochs kept",
        inner.books.runs.len()
    );
    assert!(inner.books.senders.values().all(|b| b.epochs.is_empty()));
}

#[test]
fn pruned_spans_stay_disjoint_and_bounded() {
    let mut spans = Vec::new();
    reports::add_span(&mut spans, (10, 20));
    reports::add_span(&mut spans, (30, 40));
    reports::add_span(&mut spans, (15, 32));
    assert_eq!(spans, vec![(10, 40)]);
    for i in 0..(PRUNED_SPANS as u64 + 10) {
        reports::add_span(&mut spans, (100 + i * 10, 105 + i * 10));
    }
    assert_eq!(spans.len(), PRUNED_SPANS);
    assert!(
        spans.windows(2).all(|w| w[0].1 < w[1].0),
        "sorted and disjoint"
    );
}

/// Says hello for `epoch` as `name`, records `delays` (ns, one packet each) and says goodbye;
/// returns the verdict.
fn run_with_delays(
    registry: &Arc<Registry>,
    books: &mut Books,
    shared: &SinkShared,
    name: &str,
    epoch: u32,
    delays: &[u64],
) -> RunTally {
    let flows = |next| {
        vec![FlowReport {
            flow: 0,
            first_seq: 0,
            next_seq: next,
            failed: 0,
        }]
    };
    let hello = Hello {
        name: name.into(),
        epoch,
        flows: flows(0),
        elapsed_ns: 0,
        step: 0,
        clock: LatencyClock::same_clock(),
        proof: None,
        reach: None,
    };
    registry.hello(None, &hello);
    round(books, shared);
    for (seq, delay) in delays.iter().enumerate() {
        let mut p = packet(epoch, seq as u64);
        p.now_real_ns = p.sent_ns + delay;
        books.record(p).unwrap();
    }
    let r = Arc::clone(registry);
    let n = delays.len() as u64;
    let bye = std::thread::spawn(move || r.goodbye(epoch, &flows(n), Duration::from_secs(5)));
    while !bye.is_finished() {
        round(books, shared);
        std::thread::yield_now();
    }
    bye.join().unwrap()
}

#[test]
fn each_run_gets_its_own_figures_and_its_sender_the_sum_of_them() {
    let shared = Arc::new(SinkShared::new(16, 64).with_figure_slots(4));
    let registry = Arc::new(Registry::new(vec![Arc::clone(&shared)], 8, 0));
    let mut books = Books::new(64, 16, false).with_figures(Arc::clone(&shared.figures));
    let slow: Vec<u64> = (0..100).map(|i| 5_000_000 + i * 10_000).collect();
    let v = run_with_delays(&registry, &mut books, &shared, "edge-1", 7, &slow);
    let f = v.latency.figures.expect("a run's latency figures");
    assert_eq!((f.samples, f.min_ns, f.max_ns), (100, 5_000_000, 5_990_000));
    // The 50th of 100 is 5.49 ms, within 1 %; the jitter is 10 µs every time.
    assert!(f.p50_ns.abs_diff(5_490_000) * 100 <= 5_490_000, "{f:?}");
    let j = v.jitter.bounds.figures.expect("jitter figures");
    assert_eq!((j.samples, j.min_ns, j.max_ns), (99, 10_000, 10_000));
    // The next run of the same sender has figures of its own; the sender's sum both.
    let fast: Vec<u64> = (0..100).map(|i| 1_000 + i).collect();
    let v = run_with_delays(&registry, &mut books, &shared, "edge-1", 8, &fast);
    let f = v.latency.figures.unwrap();
    assert_eq!((f.min_ns, f.max_ns), (1_000, 1_099));
    let rows = registry.rows(true);
    let all = rows[0].figures.latency.unwrap();
    assert_eq!(
        (all.samples, all.min_ns, all.max_ns),
        (200, 1_000, 5_990_000)
    );
}

#[test]
fn a_run_that_found_no_figure_slot_has_unknown_figures_never_those_of_a_part() {
    // No slot at all: every sample goes into no figures.
    let shared = Arc::new(SinkShared::new(16, 64).with_figure_slots(0));
    let registry = Arc::new(Registry::new(vec![Arc::clone(&shared)], 8, 0));
    let mut books = Books::new(64, 16, false).with_figures(Arc::clone(&shared.figures));
    let v = run_with_delays(&registry, &mut books, &shared, "edge-1", 7, &[5_000; 10]);
    assert_eq!(v.totals.latency_unfigured, 10);
    assert_eq!(v.latency.figures, None);
    assert!(v.latency.p50_ns > 0, "the bounds are still known");
    assert_eq!(registry.rows(true)[0].figures.latency, None);
}
