//! Micro-benchmarks of the per-packet work the workers really run: the sender's header write
//! (`Header::write`, as `sender::slots` calls it for every packet), and the sink's parse plus
//! `Books::record` (session lookup, sequence tracker, counters and the clock-corrected latency
//! sample, as `sink` calls them for every datagram), the sequence tracker alone, and the
//! pacer's per-batch decision, and the per-run proof a secret adds to every datagram.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ringblast::pacing::Pacer;
use ringblast::proto::header::{self, HEADER_LEN, Header};
use ringblast::proto::proof::{DataKey, Proof};
use ringblast::proto::seq::SeqTracker;
use ringblast::sink::books::{Books, Packet};
use ringblast::sink::mailbox::{Mailbox, SessionKey, ToWorker};

const BATCH: u64 = 1024;

fn header_benches(c: &mut Criterion) {
    let mut buf = [0u8; 1400];
    let mut h = Header {
        flags: 0,
        failed: 0,
        flow: 7,
        epoch: 0x1234_5678,
        seq: 0,
        timestamp_ns: 0,
    };
    // What the sender does per packet: write the whole header with a new seq and timestamp.
    c.bench_function("header/write", |b| {
        b.iter(|| {
            h.seq = h.seq.wrapping_add(1);
            h.timestamp_ns = black_box(h.seq ^ 0xABCD);
            h.write(black_box(&mut buf[..]));
        })
    });
    c.bench_function("header/parse", |b| {
        b.iter(|| header::parse(black_box(&buf[..HEADER_LEN + 100])))
    });
}

fn seq_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("seq");
    group.throughput(Throughput::Elements(BATCH));
    let mut tracker = SeqTracker::new();
    let mut next = 0u64;
    group.bench_function("observe_in_order", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                black_box(tracker.observe(black_box(next)));
                next += 1;
            }
        })
    });
    // Pairs swapped every 8 packets, a 1-packet gap every 64 and a duplicate every 128.
    let mut tracker = SeqTracker::new();
    let mut base = 0u64;
    group.bench_function("observe_reordered", |b| {
        b.iter(|| {
            for i in 0..BATCH {
                let seq = match i % 8 {
                    3 => base + i + 1,
                    4 => base + i - 1,
                    _ => base + i,
                };
                if i % 64 != 17 {
                    black_box(tracker.observe(black_box(seq)));
                }
                if i % 128 == 5 {
                    black_box(tracker.observe(black_box(seq)));
                }
            }
            base += BATCH;
        })
    });
    group.finish();
}

/// What the sink does per datagram: parse the header, then count it in its session's books.
fn books_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("sink");
    group.throughput(Throughput::Elements(BATCH));
    let mut books = Books::new(4096, 256, false);
    // The sender's clock is known (5 s behind the sink's): every datagram takes a sample.
    let clock = ToWorker::Clock {
        epoch: 0x1234_5678,
        correction: 5_000_000_000,
    };
    books.apply(clock, &Mailbox::new(1), 0);
    let source = Some(std::net::SocketAddr::from(([10, 0, 0, 1], 40_000)));
    let mut datagrams: Vec<[u8; HEADER_LEN]> = (0..8)
        .map(|flow| {
            Header {
                flags: 0,
                failed: 0,
                flow,
                epoch: 0x1234_5678,
                seq: 0,
                timestamp_ns: 1,
            }
            .to_bytes()
        })
        .collect();
    let mut seq = 0u64;
    // Every transit 40 us: the jitter's differences are all 0 (its cheapest cell).
    group.bench_function("parse_and_record_8_flows", |b| {
        b.iter(|| {
            for i in 0..BATCH {
                let d = &mut datagrams[(i % 8) as usize];
                d[16..24].copy_from_slice(&seq.to_be_bytes());
                if i % 8 == 7 {
                    seq += 1;
                }
                let Ok(h) = header::parse(black_box(&d[..])) else {
                    continue;
                };
                let _ = books.record(Packet {
                    key: SessionKey {
                        epoch: h.epoch,
                        flow: h.flow,
                    },
                    seq: h.seq,
                    failed32: h.failed,
                    bytes: 64,
                    source,
                    now_ns: i,
                    now_real_ns: h.timestamp_ns + 5_000_040_000,
                    sent_ns: h.timestamp_ns,
                    compact: false,
                    proof: Proof::Missing,
                    size_class: 0,
                    drops_behind: 0,
                });
            }
        })
    });
    // Transits spread over 40 to 90 us: consecutive packets' differences land in different
    // cells, as on a real path.
    let mut books = Books::new(4096, 256, false);
    books.apply(clock, &Mailbox::new(1), 0);
    let mut seq = 0u64;
    group.bench_function("parse_and_record_8_flows_varying_transit", |b| {
        b.iter(|| {
            for i in 0..BATCH {
                let d = &mut datagrams[(i % 8) as usize];
                d[16..24].copy_from_slice(&seq.to_be_bytes());
                if i % 8 == 7 {
                    seq += 1;
                }
                let Ok(h) = header::parse(black_box(&d[..])) else {
                    continue;
                };
                let _ = books.record(Packet {
                    key: SessionKey {
                        epoch: h.epoch,
                        flow: h.flow,
                    },
                    seq: h.seq,
                    failed32: h.failed,
                    bytes: 64,
                    source,
                    now_ns: i,
                    now_real_ns: h.timestamp_ns + 5_000_040_000 + (i * 7_919) % 50_000,
                    sent_ns: h.timestamp_ns,
                    compact: false,
                    proof: Proof::Missing,
                    size_class: 0,
                    drops_behind: 0,
                });
            }
        })
    });
    group.finish();
}

/// What a secret adds per packet (`proto::proof`): the sender's stamp and the sink's check, by
/// the run's token and by `--auth-data`'s tag, on a 64-byte and a 1400-byte datagram (the tag
/// covers the header and the length only, so its cost does not grow with the payload).
fn proof_benches(c: &mut Criterion) {
    let run = DataKey::from_secret(b"a bench's secret, 32 bytes long.").run(7);
    let mut group = c.benchmark_group("proof");
    for len in [64usize, 1400] {
        let mut d = vec![0u8; len];
        for (name, tagged) in [("token", false), ("tag", true)] {
            let flags = if tagged { 1 } else { 0 };
            Header {
                flags,
                failed: 0,
                flow: 7,
                epoch: 7,
                seq: 0,
                timestamp_ns: 0,
            }
            .write(&mut d);
            group.bench_function(format!("stamp_{name}_{len}"), |b| {
                b.iter(|| run.stamp(tagged, black_box(&mut d[..])))
            });
            group.bench_function(format!("check_{name}_{len}"), |b| {
                b.iter(|| run.admits(&Proof::read(black_box(&d[..]), Some(flags))))
            });
        }
    }
    group.finish();
}

fn pacing_benches(c: &mut Criterion) {
    let mut pacer = Pacer::new(Some(10_000_000.0), 0, 64);
    let mut now = 0u64;
    c.bench_function("pacer/allowance_commit", |b| {
        b.iter(|| {
            now += 1_000;
            let n = pacer.allowance(black_box(now));
            pacer.commit(n);
            black_box(pacer.next_due_ns())
        })
    });
}

criterion_group!(
    benches,
    header_benches,
    seq_benches,
    books_benches,
    proof_benches,
    pacing_benches
);
criterion_main!(benches);
