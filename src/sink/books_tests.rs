//! Unit tests of the sink's books: every count is checked against what the test sent.

use super::*;
use crate::sink::mailbox::FromWorker;
use crate::stats::{Jitter, Latency, latency_cell};

fn key(epoch: u32, flow: u32) -> SessionKey {
    SessionKey { epoch, flow }
}

/// A send time (ns since the epoch).
const SENT: u64 = 1_700_000_000_000_000_000;

fn packet(epoch: u32, flow: u32, seq: u64, failed: u64) -> Packet {
    Packet {
        key: key(epoch, flow),
        seq,
        failed32: failed as u32,
        bytes: 64,
        source: None,
        now_ns: seq + 1,
        now_real_ns: SENT + 1_500,
        sent_ns: SENT,
        compact: false,
        proof: crate::proto::proof::Proof::Missing,
        size_class: 0,
        drops_behind: 0,
    }
}

fn closed(mailbox: &Mailbox) -> Vec<SessionCounters> {
    let mut out = Vec::new();
    while let Some(m) = mailbox.outbox.pop() {
        if let FromWorker::Closed { counters, .. } = m {
            out.push(counters);
        }
    }
    out
}

/// The sessions of `epoch` correct their latency by `correction` ns.
fn clock(b: &mut Books, mailbox: &Mailbox, epoch: u32, correction: i64) {
    b.apply(ToWorker::Clock { epoch, correction }, mailbox, 0);
}

/// A sender's goodbye (its end and failed-send total), with the wait for its tail over.
fn goodbye(b: &mut Books, mailbox: &Mailbox, key: SessionKey, end: u64, failed: u64) {
    b.apply(ToWorker::Close { key, end, failed }, mailbox, u64::MAX);
    b.retry_closes(u64::MAX, mailbox);
}

#[test]
fn a_goodbye_waits_for_datagrams_queued_while_the_sink_was_not_running() {
    // The flow's last packet was read long before the goodbye (the sink was stopped), and the
    // rest of the run still sits in the socket: it is counted when read, not lost.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(1, 1, false);
    for seq in 0..10 {
        b.record(packet(6, 0, seq, 0)).unwrap();
    }
    let arrived = 5_000_000_000;
    let close = ToWorker::Close {
        key: key(6, 0),
        end: 20,
        failed: 0,
    };
    b.apply(close, &mailbox, arrived);
    assert!(mailbox.outbox.pop().is_none(), "the tail is not in yet");
    for seq in 10..18 {
        b.record(Packet {
            now_ns: arrived + 1_000,
            ..packet(6, 0, seq, 0)
        })
        .unwrap();
    }
    b.retry_closes(arrived + 200_000_000, &mailbox);
    assert!(mailbox.outbox.pop().is_none(), "not quiet yet");
    b.retry_closes(arrived + 260_000_000, &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost), (18, 2));
}

#[test]
fn two_senders_on_flow_zero_keep_separate_books() {
    let mailbox = Mailbox::new(8);
    let mut b = Books::new(8, 4, false);
    for seq in 0..1000 {
        b.record(packet(11, 0, seq, 0)).unwrap();
        b.record(packet(22, 0, 5_000_000 + seq, 0)).unwrap();
    }
    b.sweep(None, &mailbox);
    let c = closed(&mailbox);
    assert_eq!(c.len(), 2);
    for s in c {
        assert_eq!(
            (s.packets, s.lost, s.reordered, s.duplicates),
            (1000, 0, 0, 0)
        );
    }
    assert_eq!(b.flow(0).packets, 2000);
    assert_eq!(b.live(), 0);
}

#[test]
fn each_session_keeps_its_own_latency() {
    let mailbox = Mailbox::new(8);
    let mut b = Books::new(8, 4, false);
    clock(&mut b, &mailbox, 11, 0);
    clock(&mut b, &mailbox, 22, 0);
    for seq in 0..100 {
        b.record(packet(11, 0, seq, 0)).unwrap();
        let slow = Packet {
            now_real_ns: SENT + 30_000_000,
            ..packet(22, 0, seq, 0)
        };
        b.record(slow).unwrap();
    }
    b.sweep(None, &mailbox);
    let mut bounds: Vec<u64> = closed(&mailbox)
        .iter()
        .map(|c| Latency::from_cells(&c.latency_cells).p99_ns)
        .collect();
    bounds.sort();
    assert_eq!(bounds, [2_000, 50_000_000]);
}

#[test]
fn failed_sends_in_headers_are_never_lost() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    // Sequence numbers 100..150 failed at the sender; later headers say so (with lag).
    let mut failed = 0;
    for seq in 0..3 * WINDOW {
        if (100..150).contains(&seq) {
            continue;
        }
        if seq == 160 {
            failed = 50;
        }
        if seq % 997 == 0 {
            continue; // really lost
        }
        b.record(packet(1, 0, seq, failed)).unwrap();
    }
    b.sweep(None, &mailbox);
    let s = closed(&mailbox)[0];
    let lost = (0..3 * WINDOW).filter(|s| s % 997 == 0 && *s != 0).count() as u64;
    assert_eq!(s.send_failed, 50);
    assert_eq!(s.lost, lost);
}

#[test]
fn failed_counts_beyond_two_to_the_16_follow_the_gap() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    b.record(packet(1, 0, 0, 0)).unwrap();
    // A link down for 100 000 sends: all failed, then traffic again.
    b.record(packet(1, 0, 100_001, 100_000)).unwrap();
    b.record(packet(1, 0, 100_002, 100_000)).unwrap();
    b.sweep(None, &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.send_failed), (3, 0, 100_000));
}

#[test]
fn a_long_real_loss_is_never_taken_for_failed_sends() {
    // Regression: 16-bit counts were resolved to the most failures the gap allowed, so a gap
    // of 200 000 lost packets with no failed send became 196 608 "failed sends".
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    b.record(packet(1, 0, 0, 7)).unwrap();
    b.record(packet(1, 0, 200_001, 7)).unwrap();
    b.record(packet(1, 0, 200_002, 7)).unwrap();
    b.record(packet(1, 0, 270_003, 7 + 70_000)).unwrap();
    b.sweep(None, &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!(
        (s.packets, s.lost, s.send_failed),
        (4, 200_000, 70_000),
        "{s:?}"
    );
}

#[test]
fn a_failed_send_the_headers_never_told_is_netted_by_the_goodbye_not_lost() {
    // Regression (CI, a tbf-limited run): send 98 failed after 99 was stamped, so no header
    // says so; the goodbye's total does, and it must count before the window's gaps settle.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    for seq in (0..100).filter(|s| *s != 98) {
        b.record(packet(6, 0, seq, 0)).unwrap();
    }
    goodbye(&mut b, &mailbox, key(6, 0), 100, 1);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.send_failed), (99, 0, 1), "{s:?}");
}

#[test]
fn goodbye_makes_a_dropped_tail_lost_exactly() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    b.apply(
        ToWorker::Start {
            key: key(5, 1),
            start: 0,
        },
        &mailbox,
        u64::MAX,
    );
    for seq in 3..90 {
        b.record(packet(5, 1, seq, 2)).unwrap();
    }
    // Sent 0..100, sends 0 and 1 failed (before the first packet), 90..100 dropped on the way,
    // and one more failed send (95) the sink never heard of.
    goodbye(&mut b, &mailbox, key(5, 1), 100, 3);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.send_failed), (87, 10 + 1 - 1, 3));
    b.apply(
        ToWorker::Close {
            key: key(5, 1),
            end: 100,
            failed: 3,
        },
        &mailbox,
        u64::MAX,
    );
    // A second goodbye for it is disowned once the socket was seen empty after it came.
    assert!(mailbox.outbox.pop().is_none());
    b.looked_empty(u64::MAX);
    b.retry_closes(u64::MAX, &mailbox);
    assert!(matches!(
        mailbox.outbox.pop(),
        Some(FromWorker::NotMine { .. })
    ));
}

#[test]
fn a_goodbye_before_the_first_datagram_waits_for_the_datagrams_still_in_the_socket() {
    // The worker was not running (stopped, or behind) while its sender sent everything and
    // said goodbye: the goodbye is applied before any datagram of the flow was read.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    b.apply(
        ToWorker::Close {
            key: key(8, 0),
            end: 20,
            failed: 0,
        },
        &mailbox,
        1_000,
    );
    // Not disowned while the socket was last seen empty before the goodbye came ...
    b.looked_empty(500);
    b.retry_closes(1_100, &mailbox);
    assert!(mailbox.outbox.pop().is_none());
    // ... and its datagrams, read afterwards, are its own: 9 received, and once its flow went
    // quiet the rest lost.
    for seq in 0..9 {
        b.record(packet(8, 0, seq, 0)).unwrap();
    }
    b.looked_empty(2_000);
    b.retry_closes(1_000 + 300_000_000, &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost), (9, 11));
    // A goodbye for a flow that never shows up is disowned after the next empty look.
    b.apply(
        ToWorker::Close {
            key: key(9, 0),
            end: 5,
            failed: 0,
        },
        &mailbox,
        400_000_000,
    );
    b.retry_closes(400_000_000, &mailbox);
    assert!(mailbox.outbox.pop().is_none());
    b.looked_empty(400_000_000);
    b.retry_closes(400_000_000, &mailbox);
    assert!(matches!(
        mailbox.outbox.pop(),
        Some(FromWorker::NotMine { .. })
    ));
}

#[test]
fn a_vanished_sender_leaves_an_unconfirmed_tail() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    for seq in 0..50 {
        b.record(packet(9, 0, seq, 0)).unwrap();
    }
    b.apply(
        ToWorker::Progress {
            key: key(9, 0),
            next_seq: 80,
            failed: 0,
        },
        &mailbox,
        u64::MAX,
    );
    b.sweep(Some(1_000), &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.unconfirmed), (50, 0, 30));
}

#[test]
fn a_full_table_refuses_and_idle_sessions_free_their_slot() {
    let mailbox = Mailbox::new(2);
    let mut b = Books::new(2, 8, false);
    b.record(packet(1, 0, 0, 0)).unwrap();
    b.record(packet(1, 1, 0, 0)).unwrap();
    assert_eq!(b.record(packet(1, 2, 0, 0)), Err(Refused::TableFull));
    assert_eq!(b.record(packet(1, 9, 0, 0)), Err(Refused::FlowId));
    b.sweep(Some(10), &mailbox);
    assert_eq!(closed(&mailbox).len(), 2);
    b.record(packet(1, 2, 0, 0)).unwrap();
    assert_eq!(b.live(), 1);
}

#[test]
fn many_sessions_probe_and_delete_consistently() {
    let mailbox = Mailbox::new(256);
    let mut b = Books::new(256, 65_536, false);
    for round in 0..20u32 {
        for flow in 0..200 {
            b.record(packet(round, flow, 0, 0)).unwrap();
            b.record(packet(round, flow, 1, 0)).unwrap();
        }
        for flow in (0..200).step_by(2) {
            b.apply(
                ToWorker::Close {
                    key: key(round, flow),
                    end: 2,
                    failed: 0,
                },
                &mailbox,
                u64::MAX,
            );
        }
        b.sweep(None, &mailbox);
        let c = closed(&mailbox);
        assert_eq!(c.len(), 200, "round {round}");
        assert!(c.iter().all(|s| s.packets == 2 && s.lost == 0));
        assert_eq!(b.live(), 0);
    }
}

#[test]
fn gaps_explained_by_kernel_drops_are_not_lost() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, true);
    for seq in 0..10 {
        b.record(packet(7, 1, seq, 0)).unwrap();
    }
    b.add_kernel_drops(3);
    for seq in 15..20 {
        b.record(packet(7, 1, seq, 0)).unwrap();
    }
    b.sweep(None, &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.kernel_drops), (15, 0, 5));
    assert_eq!(
        b.kernel_drops(),
        5,
        "one GRO buffer may hold several datagrams"
    );
}

#[test]
fn a_dropped_tail_is_the_kernels_even_when_the_drop_count_was_read_before_the_queue() {
    // Without GRO: the sink reads the kernel's counter (20 drops) before it has read the
    // datagrams queued ahead of those drops, which carry no drop count. The tail is the
    // kernel's, not lost.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(1, 1, false);
    b.add_kernel_drops(20);
    for seq in 0..10 {
        let queued_early = Packet {
            drops_behind: 20,
            ..packet(3, 0, seq, 0)
        };
        b.record(queued_early).unwrap();
    }
    goodbye(&mut b, &mailbox, key(3, 0), 30, 0);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.kernel_drops), (10, 0, 20));
    assert_eq!(b.kernel_drops(), 20);
}

#[test]
fn a_gap_queued_before_the_drops_is_lost_not_the_kernels() {
    // The drops the books know of came after both datagrams were queued: the gap between
    // them is not the kernel's.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(1, 1, false);
    b.record(packet(4, 0, 0, 0)).unwrap();
    b.add_kernel_drops(5);
    let early = Packet {
        drops_behind: 5,
        ..packet(4, 0, 3, 0)
    };
    b.record(early).unwrap();
    b.sweep(None, &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.kernel_drops), (2, 2, 0));
}

#[test]
fn without_gro_charges_never_exceed_the_kernel_counter() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(1, 1, false);
    b.record(packet(1, 0, 0, 0)).unwrap();
    b.add_kernel_drops(2);
    b.record(packet(1, 0, 10, 0)).unwrap();
    b.sweep(None, &mailbox);
    assert_eq!(b.kernel_drops(), 2);
    assert_eq!(closed(&mailbox)[0].lost, 7);
}

#[test]
fn duplicates_are_never_netted_against_loss() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(1, 1, false);
    for seq in [0, 0, 2] {
        b.record(packet(1, 0, seq, 0)).unwrap();
    }
    b.sweep(None, &mailbox);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.duplicates), (2, 1, 1));
}

#[test]
fn compact_packets_extend_their_sequence_across_a_32_bit_wrap() {
    let mailbox = Mailbox::new(8);
    let mut b = Books::new(8, 4, false);
    clock(&mut b, &mailbox, 33, 0);
    let start = (5u64 << 32) - 100;
    let compact = |seq: u64| Packet {
        seq: seq & 0xFFFF_FFFF,
        compact: true,
        size_class: 1,
        ..packet(33, 2, seq, 0)
    };
    // Full and compact packets interleave over the wrap; one compact packet is lost, one late.
    for seq in start..start + 200 {
        match seq - start {
            150 => continue,
            120 => {}
            121 => {
                b.record(compact(seq)).unwrap();
                b.record(compact(seq - 1)).unwrap();
            }
            n if n % 3 == 0 => {
                b.record(packet(33, 2, seq, 0)).unwrap();
            }
            _ => {
                b.record(compact(seq)).unwrap();
            }
        }
    }
    b.sweep(None, &mailbox);
    let c = closed(&mailbox);
    assert_eq!(c.len(), 1);
    let s = c[0];
    assert_eq!(
        (s.packets, s.lost, s.reordered, s.duplicates),
        (199, 1, 1, 0)
    );
    let full = (0..200u64)
        .filter(|n| n % 3 == 0 && *n != 120 && *n != 150)
        .count() as u64;
    assert_eq!(s.size_packets[0], full);
    assert_eq!(s.size_packets[1], 199 - full);
    assert_eq!(
        s.latency_cells.iter().sum::<u64>(),
        full,
        "compact packets carry no timestamp"
    );
}

#[test]
fn latency_is_corrected_by_its_sessions_clock_and_unknown_without_one() {
    let mailbox = Mailbox::new(8);
    let mut b = Books::new(8, 4, false);
    // The sink's clock runs 5 s ahead of the sender's; packets are 40 us in flight.
    let ahead = |flow, seq| Packet {
        now_real_ns: SENT + 5_000_000_000 + 40_000,
        ..packet(7, flow, seq, 0)
    };
    assert_eq!(b.record(ahead(0, 0)), Ok(LatencySample::Unknown));
    assert_eq!(
        b.record(Packet {
            compact: true,
            ..ahead(0, 1)
        }),
        Ok(LatencySample::NoTimestamp),
        "a compact header has no timestamp, so it is not unknown either"
    );
    clock(&mut b, &mailbox, 7, 5_000_000_000);
    let at_40us = LatencySample::Delay {
        ns: 40_000,
        cell: latency_cell(40_000),
        clamped: false,
    };
    assert_eq!(b.record(ahead(0, 2)), Ok(at_40us), "the live session");
    assert_eq!(
        b.record(ahead(1, 0)),
        Ok(at_40us),
        "a session that came later"
    );
    assert_eq!(
        b.record(ahead(2, 0).clone_with_epoch(8)),
        Ok(LatencySample::Unknown),
        "another sender run"
    );
    // An estimate 100 us too large makes the transit negative: clamped to 0, and counted.
    clock(&mut b, &mailbox, 7, 5_000_100_000);
    assert_eq!(
        b.record(ahead(0, 3)),
        Ok(LatencySample::Delay {
            ns: 0,
            cell: 0,
            clamped: true
        })
    );
    // A timestamp no clock could give does not overflow.
    let bogus = Packet {
        sent_ns: u64::MAX,
        ..ahead(0, 4)
    };
    assert!(matches!(
        b.record(bogus),
        Ok(LatencySample::Delay {
            ns: 0,
            clamped: true,
            ..
        })
    ));
    b.sweep(None, &mailbox);
    let mut c = closed(&mailbox);
    c.sort_by_key(|s| s.packets);
    let flow0 = c.iter().find(|s| s.packets == 5).unwrap();
    assert_eq!(
        (flow0.latency_unknown, flow0.latency_clamped),
        (1, 2),
        "{flow0:?}"
    );
    assert_eq!(flow0.latency_cells.iter().sum::<u64>(), 3);
    assert_eq!(flow0.latency_cells[latency_cell(40_000)], 1);
}

#[test]
fn jitter_is_d_of_consecutive_samples_per_session_and_never_without_a_clock() {
    let mailbox = Mailbox::new(8);
    let mut b = Books::new(8, 4, false);
    // Flow 0's packets 10 us apart, transits 40, 43, 41, 41 us; flow 1's interleaved, 90 and
    // 70 us: each session differences only its own.
    let at = |flow, seq: u64, transit: u64| Packet {
        sent_ns: SENT + seq * 10_000,
        now_real_ns: SENT + seq * 10_000 + transit,
        ..packet(7, flow, seq, 0)
    };
    // Unknown clock: no latency, no jitter (two unknown samples give no D either).
    b.record(at(0, 0, 40_000)).unwrap();
    b.record(at(0, 1, 43_000)).unwrap();
    clock(&mut b, &mailbox, 7, 0);
    for (flow, seq, transit) in [
        (0, 2, 40_000),
        (1, 0, 90_000),
        (0, 3, 43_000),
        (1, 1, 70_000),
        (0, 4, 41_000),
        (0, 5, 41_000),
    ] {
        b.record(at(flow, seq, transit)).unwrap();
    }
    // The same correction again changes nothing; a new one forgets the previous transit (a
    // D across it would hold the change), so the next sample gives no D.
    clock(&mut b, &mailbox, 7, 0);
    b.record(at(0, 6, 44_000)).unwrap();
    clock(&mut b, &mailbox, 7, -1_000_000);
    b.record(at(0, 7, 44_000)).unwrap();
    b.record(at(0, 8, 45_000)).unwrap();
    b.sweep(None, &mailbox);
    let c = closed(&mailbox);
    let flow = |n: u64| c.iter().find(|s| s.packets == n).unwrap();
    // Flow 0: D = 3, 2, 0, 3 us before the new correction, 1 us after it.
    let j0 = Jitter::of(flow(9));
    assert_eq!(flow(9).latency_unknown, 2);
    assert_eq!((j0.samples, j0.mean_ns), (5, 9_000 / 5), "{j0:?}");
    assert_eq!(flow(9).jitter_cells[latency_cell(3_000)], 2);
    assert_eq!(flow(9).jitter_cells[latency_cell(0)], 2, "0 and 1 us");
    // Flow 1: one D of 20 us.
    let j1 = Jitter::of(flow(2));
    assert_eq!(
        (j1.samples, j1.mean_ns, j1.bounds.max_ns),
        (1, 20_000, 20_000)
    );
    // The latency sums are the samples' own.
    let sum: u64 = flow(2).latency_sum_ns.iter().sum();
    assert_eq!(sum, 160_000);
}

#[test]
fn the_clock_list_keeps_the_latest_epochs() {
    let mailbox = Mailbox::new(8);
    let mut b = Books::new(8, 4, false);
    for epoch in 0..CLOCK_EPOCHS as u32 + 1 {
        clock(&mut b, &mailbox, 1000 + epoch, 0);
    }
    // Epoch 1000 was the oldest and gave its place; 1001 and the newest kept theirs.
    assert_eq!(b.record(packet(1000, 0, 0, 0)), Ok(LatencySample::Unknown));
    assert!(matches!(
        b.record(packet(1001, 0, 0, 0)),
        Ok(LatencySample::Delay { ns: 1_500, .. })
    ));
    let newest = 1000 + CLOCK_EPOCHS as u32;
    assert!(matches!(
        b.record(packet(newest, 0, 0, 0)),
        Ok(LatencySample::Delay { ns: 1_500, .. })
    ));
}

impl Packet {
    fn clone_with_epoch(self, epoch: u32) -> Packet {
        Packet {
            key: SessionKey {
                epoch,
                flow: self.key.flow,
            },
            ..self
        }
    }
}

fn announce(b: &mut Books, mailbox: &Mailbox, epoch: u32, since_ns: u64) {
    b.apply(
        ToWorker::Announce {
            epoch,
            since_ns,
            proof: None,
            reach: None,
        },
        mailbox,
        0,
    );
}

#[test]
fn unannounced_sessions_keep_to_their_share_and_announced_ones_find_the_reserved_slots() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 8, false).with_admission(Admission {
        max_unannounced: 2,
        refuse_unannounced_from_ns: u64::MAX,
        compact_needs_proof: false,
    });
    // A flood of forged runs takes its two slots, then finds no more.
    for epoch in 100..110 {
        let got = b.record(packet(epoch, 0, 0, 0));
        assert_eq!(got.is_ok(), epoch < 102, "epoch {epoch}");
        if let Err(why) = got {
            assert_eq!(why, Refused::TableFull);
        }
    }
    // An announced run takes the two slots the flood could not.
    announce(&mut b, &mailbox, 7, 0);
    b.record(packet(7, 0, 0, 0)).unwrap();
    b.record(packet(7, 1, 0, 0)).unwrap();
    assert_eq!(b.record(packet(7, 2, 0, 0)), Err(Refused::TableFull));
    assert_eq!(b.live(), 4);
    // An unannounced run that says hello later gives its share back.
    announce(&mut b, &mailbox, 100, 0);
    assert_eq!(b.unannounced_live, 1);
    b.sweep(Some(u64::MAX), &mailbox);
    assert_eq!((b.live(), b.unannounced_live), (0, 0));
    b.record(packet(110, 0, 0, 0)).unwrap();
    b.record(packet(111, 0, 0, 0)).unwrap();
    assert_eq!(b.record(packet(112, 0, 0, 0)), Err(Refused::TableFull));
}

#[test]
fn with_a_secret_unannounced_datagrams_are_refused_and_a_run_refused_on_its_way_states_no_start() {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 8, false).with_admission(Admission {
        max_unannounced: 2,
        refuse_unannounced_from_ns: 0,
        compact_needs_proof: false,
    });
    assert_eq!(b.record(packet(5, 0, 0, 0)), Err(Refused::Unannounced));
    b.note_refusal(key(5, 0), 50);
    // A run that said hello before the refusal (its first send at 60 ns) states its start.
    announce(&mut b, &mailbox, 6, 60);
    b.apply(
        ToWorker::Start {
            key: key(6, 0),
            start: 0,
        },
        &mailbox,
        0,
    );
    // One whose first send came before it (at 40 ns) may have lost its head to the refusal.
    announce(&mut b, &mailbox, 5, 40);
    b.apply(
        ToWorker::Start {
            key: key(5, 0),
            start: 0,
        },
        &mailbox,
        0,
    );
    for epoch in [5, 6] {
        b.record(packet(epoch, 0, 3, 0)).unwrap();
        b.record(packet(epoch, 0, 4, 0)).unwrap();
    }
    b.sweep(None, &mailbox);
    let mut lost = Vec::new();
    while let Some(m) = mailbox.outbox.pop() {
        if let FromWorker::Closed {
            key,
            counters,
            refusals,
            ..
        } = m
        {
            lost.push((
                key.epoch,
                counters.packets,
                counters.lost,
                refusals.uncertain,
            ));
        }
    }
    lost.sort_unstable();
    assert_eq!(lost, vec![(5, 2, 0, true), (6, 2, 3, false)]);
}

#[test]
fn the_announced_list_keeps_the_latest_runs() {
    let mailbox = Mailbox::new(2);
    let mut b = Books::new(2, 4, false).with_admission(Admission {
        max_unannounced: 0,
        refuse_unannounced_from_ns: 0,
        compact_needs_proof: false,
    });
    for epoch in 0..ANNOUNCED_EPOCHS as u32 + 1 {
        announce(&mut b, &mailbox, 1000 + epoch, 0);
    }
    assert_eq!(b.record(packet(1000, 0, 0, 0)), Err(Refused::Unannounced));
    b.record(packet(1001, 0, 0, 0)).unwrap();
    b.record(packet(1000 + ANNOUNCED_EPOCHS as u32, 0, 0, 0))
        .unwrap();
}

/// Runs `seqs` of session (9, 0) through fresh books with a clock correction of 0, each
/// datagram arriving 1 µs after the last, then `forged`, then the rest; returns what `forged`
/// got and the closed session's books.
fn with_forgery(forged: Packet) -> (Result<LatencySample, Refused>, SessionCounters) {
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    clock(&mut b, &mailbox, 9, 0);
    let real = |seq: u64| Packet {
        now_ns: 1_000_000_000 + seq * 1_000,
        ..packet(9, 0, seq, 0)
    };
    for seq in 0..100 {
        b.record(real(seq)).unwrap();
    }
    let got = b.record(Packet {
        now_ns: 1_000_000_000 + 100 * 1_000,
        ..forged
    });
    for seq in 100..200 {
        b.record(real(seq)).unwrap();
    }
    goodbye(&mut b, &mailbox, key(9, 0), 200, 0);
    (got, closed(&mailbox)[0])
}

#[test]
fn a_forged_jump_is_implausible_and_changes_no_number() {
    for seq in [99 + 1_000_000_000_000, u64::MAX - 1, 99 + 30_000_000] {
        let (got, s) = with_forgery(packet(9, 0, seq, 0));
        assert_eq!(got, Err(Refused::Implausible), "jump to {seq}");
        assert_eq!(
            (s.packets, s.lost, s.bytes),
            (200, 0, 200 * 64),
            "{seq}: {s:?}"
        );
        assert_eq!(s.latency_cells.iter().sum::<u64>(), 200);
    }
}

#[test]
fn a_jump_beyond_its_paced_runs_reach_is_implausible_however_recent_its_highest() {
    // A run paced at 1 kpps per flow that started at 1 s: by 1.1 s it reached about 100 +
    // its slack's 10, so 1 000 numbers ahead is no loss, while the line's ceiling (250 M
    // datagrams/s since the highest, 1 µs ago, plus 100 ms) would have let 25 M through.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    b.apply(
        ToWorker::Announce {
            epoch: 9,
            since_ns: 0,
            proof: None,
            reach: crate::proto::reach::RunReach::new(0, 1_000.0, 1_000_000_000),
        },
        &mailbox,
        0,
    );
    let at = |seq: u64, now_ns: u64| Packet {
        now_ns,
        ..packet(9, 0, seq, 0)
    };
    for seq in 0..100 {
        b.record(at(seq, 1_000_000_000 + seq * 1_000_000)).unwrap();
    }
    assert_eq!(
        b.record(at(1_100, 1_100_000_000)),
        Err(Refused::Implausible)
    );
    assert_eq!(
        b.record(at(1_000_000, 1_100_000_000)),
        Err(Refused::Implausible)
    );
    // On its schedule, and a real gap of 5 inside its reach, it goes on.
    b.record(at(100, 1_100_000_000)).unwrap();
    b.record(at(106, 1_106_000_000)).unwrap();
    // Ten seconds on, what was beyond is within.
    b.record(at(1_100, 11_000_000_000)).unwrap();
    goodbye(&mut b, &mailbox, key(9, 0), 1_101, 0);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost), (103, 1_101 - 103), "{s:?}");
}

#[test]
fn a_compact_jump_of_two_to_the_31_is_implausible() {
    let (got, s) = with_forgery(Packet {
        compact: true,
        ..packet(9, 0, 99 + (1 << 31) - 1, 0)
    });
    assert_eq!(got, Err(Refused::Implausible));
    assert_eq!((s.packets, s.lost), (200, 0), "{s:?}");
}

#[test]
fn a_failed_count_bump_beyond_what_its_numbers_could_fail_is_implausible() {
    // One ahead of the highest, carrying the count minus one: 2^32 - 1 failures in one step.
    let (got, s) = with_forgery(packet(9, 0, 100, u64::from(u32::MAX)));
    assert_eq!(got, Err(Refused::Implausible));
    assert_eq!((s.packets, s.lost, s.send_failed), (200, 0, 0), "{s:?}");
}

#[test]
fn a_datagram_from_another_source_is_refused() {
    let other: SocketAddr = "127.0.0.99:7000".parse().unwrap();
    let (got, s) = with_forgery(Packet {
        source: Some(other),
        ..packet(9, 0, 150, 0)
    });
    assert_eq!(got, Err(Refused::Source));
    assert_eq!((s.packets, s.lost, s.duplicates), (200, 0, 0), "{s:?}");
}

#[test]
fn a_duplicate_gives_no_latency_sample_and_no_bytes() {
    // A replayed copy of number 50 whose send time says 100 s earlier, and one saying 1 ns.
    for sent_ns in [SENT - 100_000_000_000, 1] {
        let (got, s) = with_forgery(Packet {
            sent_ns,
            ..packet(9, 0, 50, 0)
        });
        assert_eq!(got, Ok(LatencySample::Duplicate));
        assert_eq!((s.packets, s.duplicates, s.bytes), (200, 1, 200 * 64));
        assert_eq!(s.latency_cells.iter().sum::<u64>(), 200);
        assert_eq!(Latency::from_cells(&s.latency_cells).max_ns, 2_000);
        assert_eq!(Jitter::of(&s).bounds.max_ns, 1_000, "{s:?}");
    }
}

#[test]
fn a_real_outage_is_loss_however_long() {
    // 10 s without a datagram at 1 Mpps: 10 M numbers missing, all plausible and all lost.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    b.record(packet(3, 0, 0, 0)).unwrap();
    b.record(Packet {
        now_ns: 10_000_000_001,
        ..packet(3, 0, 10_000_001, 0)
    })
    .unwrap();
    goodbye(&mut b, &mailbox, key(3, 0), 10_000_002, 0);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost), (2, 10_000_000), "{s:?}");
}

#[test]
fn a_jump_the_kernel_dropped_in_a_burst_is_loss_not_implausible() {
    // The sink read a backlog: 40 M numbers missing 1 µs apart, but its socket dropped them.
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    b.record(packet(3, 0, 0, 0)).unwrap();
    b.add_kernel_drops(40_000_000);
    b.record(Packet {
        now_ns: 1_001,
        ..packet(3, 0, 40_000_001, 0)
    })
    .unwrap();
    goodbye(&mut b, &mailbox, key(3, 0), 40_000_002, 0);
    let s = closed(&mailbox)[0];
    assert_eq!(
        (s.packets, s.kernel_drops, s.lost),
        (2, 40_000_000, 0),
        "{s:?}"
    );
}

/// A compact datagram of run 8, flow 0, number `seq`, its numbers masked with `run`'s token when
/// given, as the sink parses it.
fn compact_of(seq: u64, masked: Option<&crate::proto::proof::RunProof>) -> Packet {
    let mut d = [0u8; 18];
    crate::proto::header::Header {
        flags: 0,
        failed: 0,
        flow: 0,
        epoch: 8,
        seq,
        timestamp_ns: 0,
    }
    .write_fitting(&mut d);
    if let Some(run) = masked {
        run.stamp(false, &mut d);
    }
    let (h, _) = crate::proto::header::parse_any(&d).unwrap();
    Packet {
        compact: true,
        seq: h.seq,
        failed32: h.failed,
        ..packet(8, 0, seq, 0)
    }
}

/// `p` carrying `proof`'s token.
fn proven(p: Packet, proof: &crate::proto::proof::RunProof) -> Packet {
    let mut d = [0u8; 64];
    crate::proto::header::Header {
        flags: 0,
        failed: p.failed32,
        flow: p.key.flow,
        epoch: p.key.epoch,
        seq: p.seq,
        timestamp_ns: p.sent_ns,
    }
    .write(&mut d);
    proof.stamp(false, &mut d);
    Packet {
        proof: crate::proto::proof::Proof::read(&d, Some(0)),
        ..p
    }
}

#[test]
fn a_proven_run_counts_only_datagrams_with_its_proof_and_a_forged_first_binds_nothing() {
    use crate::proto::proof::DataKey;
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    let key_ = DataKey::from_secret(b"0123456789abcdef");
    let run = key_.run(8);
    b.apply(
        ToWorker::Announce {
            epoch: 8,
            since_ns: 0,
            proof: Some(run),
            reach: None,
        },
        &mailbox,
        0,
    );
    let from = |port: u16, p: Packet| Packet {
        source: Some(SocketAddr::from(([10, 0, 0, 1], port))),
        ..p
    };
    // A forgery that arrives first, from elsewhere, with no proof or another run's: it opens
    // no session, so it binds none to its address.
    assert_eq!(b.record(from(9, packet(8, 0, 5, 0))), Err(Refused::Auth));
    assert_eq!(
        b.record(from(9, proven(packet(8, 0, 5, 0), &key_.run(9)))),
        Err(Refused::Auth)
    );
    assert_eq!(b.live(), 0);
    for seq in 0..10 {
        b.record(from(1, proven(packet(8, 0, seq, 0), &run)))
            .unwrap();
    }
    // Unproven and wrongly proven full headers of the run are refused; the run's own proof
    // from another address is still refused for its source.
    assert_eq!(b.record(from(1, packet(8, 0, 10, 0))), Err(Refused::Auth));
    assert_eq!(
        b.record(from(2, proven(packet(8, 0, 10, 0), &run))),
        Err(Refused::Source)
    );
    // A compact header counts with its numbers unmasked by the token; one written without the
    // token decodes to a number far from the run's, which moves nothing.
    let compact = |seq: u64, masked: bool| compact_of(seq, masked.then_some(&run));
    b.record(from(1, compact(10, true))).unwrap();
    assert!(b.record(from(1, compact(11, false))).is_err());
    goodbye(&mut b, &mailbox, key(8, 0), 11, 0);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.lost, s.duplicates, s.late), (11, 0, 0, 0));
}

#[test]
fn a_session_opened_before_its_hello_is_proven_from_the_hello_on() {
    use crate::proto::proof::DataKey;
    let mailbox = Mailbox::new(4);
    let mut b = Books::new(4, 4, false);
    let run = DataKey::from_secret(b"0123456789abcdef").run(8);
    // In a sink's start-up grace, a run's datagrams open its session before its hello.
    b.record(packet(8, 0, 0, 0)).unwrap();
    b.apply(
        ToWorker::Announce {
            epoch: 8,
            since_ns: 0,
            proof: Some(run),
            reach: None,
        },
        &mailbox,
        0,
    );
    assert_eq!(b.record(packet(8, 0, 1, 0)), Err(Refused::Auth));
    b.record(proven(packet(8, 0, 1, 0), &run)).unwrap();
}

#[test]
fn a_run_not_announced_opens_no_session_while_announcements_wait_to_be_applied() {
    let mut b = Books::new(1, 4, false);
    b.set_announcements_waiting(true);
    assert!(matches!(
        b.record(packet(3, 0, 0, 0)),
        Err(Refused::Unannounced)
    ));
    b.set_announcements_waiting(false);
    b.record(packet(3, 0, 0, 0)).unwrap();
    b.set_announcements_waiting(true);
    b.record(packet(3, 0, 1, 0))
        .expect("an open session is not held back");
}

#[test]
fn a_sink_with_a_secret_reads_no_compact_header_before_its_runs_hello() {
    use crate::proto::proof::DataKey;
    let mailbox = Mailbox::new(4);
    // In its start-up grace (unannounced runs still admitted), with a secret.
    let mut b = Books::new(4, 4, false).with_admission(Admission {
        max_unannounced: 2,
        refuse_unannounced_from_ns: u64::MAX,
        compact_needs_proof: true,
    });
    let run = DataKey::from_secret(b"0123456789abcdef").run(8);
    // The run's compact datagrams, masked with its proof, arriving before its hello (its
    // control connection was refused at first): read raw they would be garbage numbers (a
    // stop-41 CI run booked 205 failed sends for a sender that had none), so they open nothing.
    let masked = |seq: u64| compact_of(seq, Some(&run));
    for seq in 0..3 {
        assert_eq!(b.record(masked(seq)), Err(Refused::Unannounced));
    }
    assert_eq!(b.live(), 0);
    // A session that full headers opened in the grace reads no compact header either ...
    b.record(packet(9, 0, 0, 0)).unwrap();
    let raw = Packet {
        compact: true,
        ..packet(9, 0, 1, 0)
    };
    assert_eq!(b.record(raw), Err(Refused::Unannounced));
    // ... and once the hello told the proof, the compact headers count, unmasked.
    b.apply(
        ToWorker::Announce {
            epoch: 8,
            since_ns: 0,
            proof: Some(run),
            reach: None,
        },
        &mailbox,
        0,
    );
    for seq in 3..6 {
        b.record(masked(seq)).unwrap();
    }
    goodbye(&mut b, &mailbox, key(8, 0), 6, 0);
    let s = closed(&mailbox)[0];
    assert_eq!((s.packets, s.send_failed, s.duplicates), (3, 0, 0));
}
