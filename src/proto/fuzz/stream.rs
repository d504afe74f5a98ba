//! The TCP record stream parser under hostile input: streams of valid records (plain records,
//! requests with their response length, payloads that hold a copy of a record header) fed in
//! chunks split at random points, and the same streams with flipped bits, truncations, random
//! garbage, wrong versions and flags, and zero, short and huge length fields.
//!
//! Each stream is checked against [`expected`], a whole-buffer reading of the format written
//! from the layout in [`crate::proto::record`]: the parser yields exactly its records, in order,
//! whatever the chunking; a framing error is the one the bytes call for, raised by the chunk
//! that holds the byte deciding it (so a length beyond [`MAX_RECORD`] is refused when the
//! header's last byte arrives, before a payload byte is taken); an end of stream inside a record
//! is truncated, as the sink counts it. The parser keeps its state in fixed arrays (it is
//! `Copy`, so it holds nothing on the heap), and a valid stream's headers re-encode to exactly
//! the bytes they came from.

use std::ops::Range;

use rand::{Rng, rngs::SmallRng};

use crate::fuzzing;
use crate::proto::header::MAGIC;
use crate::proto::record::{
    Broken, FLAG_PROOF, FLAG_RECORD, FLAG_REQUEST, MAX_RECORD, MAX_RESPONSE, RECORD_HEADER_LEN,
    RECORD_VERSION, REQUEST_HEADER_LEN, Record, RecordHeader, StreamParser,
};

/// How a stream ends: cleanly between records, or broken, with the offset of the byte that
/// decides it (the stream's length for a truncation, which only the end of stream reveals).
type End = Result<(), (Broken, usize)>;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes([
        b[at],
        b[at + 1],
        b[at + 2],
        b[at + 3],
        b[at + 4],
        b[at + 5],
        b[at + 6],
        b[at + 7],
    ])
}

/// The records of `s` and how it ends, read from the whole buffer at once: magic (known from a
/// record's 4th byte), then version and record flag, then length (32 ..= `MAX_RECORD`, and at
/// least 36 for a request; known from the header's last byte), then a request's response length
/// (32 ..= `MAX_RESPONSE`, known from its 36th byte).
fn expected(s: &[u8], records: &mut Vec<Record>) -> End {
    records.clear();
    let (mut at, mut expect_seq) = (0usize, 0u64);
    loop {
        let rest = &s[at..];
        if rest.is_empty() {
            return Ok(());
        }
        let truncated = Err((Broken::Truncated, s.len()));
        if rest.len() < 4 {
            return truncated;
        }
        if rest[..4] != MAGIC.to_be_bytes() {
            return Err((Broken::Magic, at + 3));
        }
        if rest.len() < RECORD_HEADER_LEN {
            return truncated;
        }
        let header_end = at + RECORD_HEADER_LEN - 1;
        if rest[4] != RECORD_VERSION || rest[5] & FLAG_RECORD == 0 {
            return Err((Broken::Version, header_end));
        }
        let len = be32(rest, 6);
        let request = rest[5] & FLAG_REQUEST != 0;
        let least = if request {
            REQUEST_HEADER_LEN
        } else {
            RECORD_HEADER_LEN
        };
        if (len as usize) < least || len as usize > MAX_RECORD {
            return Err((Broken::Length, header_end));
        }
        let mut response_len = 0;
        if request {
            if rest.len() < REQUEST_HEADER_LEN {
                return truncated;
            }
            response_len = be32(rest, RECORD_HEADER_LEN);
            if !(RECORD_HEADER_LEN..=MAX_RESPONSE).contains(&(response_len as usize)) {
                return Err((Broken::Length, at + REQUEST_HEADER_LEN - 1));
            }
        }
        if rest.len() < len as usize {
            return truncated;
        }
        let flags = rest[5] & !FLAG_RECORD;
        // A proof record carries its token in the sequence field, and counts as sequence 0.
        let proof = (flags & FLAG_PROOF != 0).then(|| be64(rest, 16));
        let seq = if proof.is_some() { 0 } else { be64(rest, 16) };
        records.push(Record {
            header: RecordHeader {
                len,
                flags: flags & !FLAG_PROOF,
                flow: u16::from_be_bytes([rest[10], rest[11]]),
                epoch: be32(rest, 12),
                seq,
                timestamp_ns: be64(rest, 24),
            },
            response_len,
            in_sequence: seq == expect_seq,
            proof,
        });
        expect_seq = seq.wrapping_add(1);
        at += len as usize;
    }
}

/// A record length: mostly short, sometimes up to 64 KiB, rarely exactly the cap.
fn record_len(rng: &mut SmallRng, least: usize) -> usize {
    match rng.random_range(0..1u32 << 16) {
        0 => MAX_RECORD,
        n if n < 256 => rng.random_range(least..=1 << 16),
        _ => least + rng.random_range(0..=48),
    }
}

/// Appends one valid record to `s` and what the parser must yield for it to `sent`.
fn push_record(rng: &mut SmallRng, s: &mut Vec<u8>, sent: &mut Vec<Record>, seq: u64) {
    let flags = rng.random::<u8>() & !FLAG_RECORD;
    let request = flags & FLAG_REQUEST != 0;
    let len = record_len(
        rng,
        if request {
            REQUEST_HEADER_LEN
        } else {
            RECORD_HEADER_LEN
        },
    );
    let header = RecordHeader {
        len: len as u32,
        flags,
        flow: rng.random(),
        epoch: rng.random(),
        seq,
        timestamp_ns: rng.random(),
    };
    let response_len = if request {
        rng.random_range(RECORD_HEADER_LEN as u32..=MAX_RESPONSE as u32)
    } else {
        0
    };
    let at = s.len();
    s.resize(at + len, rng.random());
    header.write(&mut s[at..]);
    if request {
        s[at + RECORD_HEADER_LEN..at + REQUEST_HEADER_LEN]
            .copy_from_slice(&response_len.to_be_bytes());
    }
    // A payload that looks like a record must still be skipped as payload.
    if len >= 2 * REQUEST_HEADER_LEN && rng.random_ratio(1, 8) {
        s.copy_within(at..at + RECORD_HEADER_LEN, at + REQUEST_HEADER_LEN);
    }
    let proof = (flags & FLAG_PROOF != 0).then_some(seq);
    let header = RecordHeader {
        flags: flags & !FLAG_PROOF,
        seq: if proof.is_some() { 0 } else { seq },
        ..header
    };
    let in_sequence = sent.last().map_or(header.seq == 0, |r| {
        header.seq == r.header.seq.wrapping_add(1)
    });
    sent.push(Record {
        header,
        response_len,
        in_sequence,
        proof,
    });
}

/// A stream of up to four valid records, mostly numbered in sequence from 0.
fn valid_stream(rng: &mut SmallRng, s: &mut Vec<u8>, sent: &mut Vec<Record>) {
    s.clear();
    sent.clear();
    let mut seq = 0u64;
    for _ in 0..rng.random_range(0..=4) {
        seq = match rng.random_range(0..8u8) {
            0 => rng.random(),
            1 => seq.wrapping_sub(1),
            _ => seq,
        };
        push_record(rng, s, sent, seq);
        seq = seq.wrapping_add(1);
    }
}

/// A stream for a failure message: its length and first bytes (a record may be 1 MiB).
fn show(s: &[u8]) -> String {
    format!("{} bytes {:02x?}", s.len(), &s[..s.len().min(96)])
}

/// Where record `i` of `sent` starts in its stream.
fn offset_of(sent: &[Record], i: usize) -> usize {
    sent[..i].iter().map(|r| r.header.len as usize).sum()
}

/// Damages a valid stream of the records `sent`; `true` when the length field of one of them
/// was set beyond [`MAX_RECORD`].
fn mutate(rng: &mut SmallRng, s: &mut Vec<u8>, sent: &[Record]) -> bool {
    let record = (!sent.is_empty()).then(|| {
        let i = rng.random_range(0..sent.len());
        offset_of(sent, i)
    });
    match (rng.random_range(0..8u8), record) {
        (0, _) if !s.is_empty() => {
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..s.len());
                s[i] ^= 1 << rng.random_range(0..8);
            }
        }
        (1, _) => s.truncate(rng.random_range(0..=s.len())),
        // Random garbage, bare or behind the magic, alone or after the valid records.
        (2, _) => {
            if rng.random() {
                s.clear();
            }
            if rng.random() {
                s.extend_from_slice(&MAGIC.to_be_bytes());
            }
            let n = rng.random_range(0..=2 * REQUEST_HEADER_LEN);
            s.extend((0..n).map(|_| rng.random::<u8>()));
        }
        (3, Some(at)) => s[at + 4] = rng.random(),
        (4, Some(at)) => s[at + 5] &= !FLAG_RECORD,
        // Zero, short, boundary and huge length fields.
        (5, Some(at)) => {
            let len: u32 = match rng.random_range(0..8u8) {
                0 => rng.random_range(0..RECORD_HEADER_LEN as u32),
                1 => rng.random_range(RECORD_HEADER_LEN as u32..=REQUEST_HEADER_LEN as u32),
                2 => MAX_RECORD as u32,
                3 => MAX_RECORD as u32 + 1,
                4 => u32::MAX,
                5 => rng.random_range(MAX_RECORD as u32 + 1..=u32::MAX),
                _ => rng.random(),
            };
            s[at + 6..at + 10].copy_from_slice(&len.to_be_bytes());
            return len as usize > MAX_RECORD;
        }
        // A record turned into a request, or a request's response length set anywhere.
        (6, Some(at)) => {
            s[at + 5] |= FLAG_REQUEST;
            let response: u32 = match rng.random_range(0..6u8) {
                0 => rng.random_range(0..RECORD_HEADER_LEN as u32),
                1 => RECORD_HEADER_LEN as u32,
                2 => MAX_RESPONSE as u32,
                3 => MAX_RESPONSE as u32 + 1,
                4 => u32::MAX,
                _ => rng.random(),
            };
            let field = at + RECORD_HEADER_LEN..at + REQUEST_HEADER_LEN;
            if let Some(word) = s.get_mut(field) {
                word.copy_from_slice(&response.to_be_bytes());
            }
        }
        _ => {}
    }
    false
}

/// Feeds `s` to a fresh parser in chunks of random sizes (all at once, or up to 1, 4 or 40
/// bytes, with occasional long and empty chunks) and ends the stream as the sink does.
/// Returns how it ended and the byte range of the chunk that broke it (empty at the end).
fn feed_in_chunks(
    rng: &mut SmallRng,
    s: &[u8],
    got: &mut Vec<Record>,
) -> (Result<(), Broken>, Range<usize>) {
    got.clear();
    let mut parser = StreamParser::new();
    let most = [s.len().max(1), 1, 4, 40][rng.random_range(0..4)];
    let mut at = 0;
    while at < s.len() {
        let take = match rng.random_range(0..16u8) {
            0 => 0,
            1..=3 => rng.random_range(1..=s.len() - at),
            _ => rng.random_range(1..=most),
        };
        let end = (at + take).min(s.len());
        if let Err(why) = parser.feed(&s[at..end], |r| got.push(r)) {
            return (Err(why), at..end);
        }
        at = end;
    }
    let end = if parser.at_boundary() {
        Ok(())
    } else {
        Err(Broken::Truncated)
    };
    (end, s.len()..s.len())
}

#[test]
fn fuzz_record_stream() {
    let mut rng = fuzzing::rng("record stream", 0x5eca_0001);
    let (cases, t) = (fuzzing::cases(), std::time::Instant::now());
    let (mut s, mut sent, mut want, mut got) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Clean ends, then refusals as magic, version, length, truncated; then lengths beyond the
    // cap refused, and records yielded.
    let mut seen = [0u64; 5];
    let (mut over_cap, mut records) = (0u64, 0u64);
    for _ in 0..cases {
        valid_stream(&mut rng, &mut s, &mut sent);
        let damaged = rng.random_ratio(3, 4);
        let beyond_cap = damaged && mutate(&mut rng, &mut s, &sent);
        let end = expected(&s, &mut want);
        if !damaged {
            assert_eq!(
                (&want, end),
                (&sent, Ok(())),
                "the reading of a valid stream"
            );
        }
        let (got_end, chunk) = feed_in_chunks(&mut rng, &s, &mut got);
        assert_eq!(got, want, "records of {}", show(&s));
        records += got.len() as u64;
        match (end, got_end) {
            (Ok(()), Ok(())) => seen[0] += 1,
            (Err((why, decided_at)), Err(got_why)) => {
                assert_eq!(got_why, why, "stream {}", show(&s));
                if why == Broken::Truncated {
                    assert!(chunk.is_empty(), "truncation is known at the end of stream");
                } else {
                    assert!(
                        chunk.contains(&decided_at),
                        "{why:?} decided at byte {decided_at} but raised by chunk {chunk:?}"
                    );
                }
                seen[1 + why.index()] += 1;
            }
            (end, got_end) => panic!("stream {}: expected {end:?}, parser {got_end:?}", show(&s)),
        }
        if beyond_cap && end.is_err_and(|(why, _)| why == Broken::Length) {
            over_cap += 1;
        }
        // Every record yielded re-encodes to exactly the bytes it came from (a proof record
        // with its flag and token back in place).
        let mut at = 0;
        for r in &got {
            let mut h = [0u8; RECORD_HEADER_LEN];
            let header = match r.proof {
                Some(token) => RecordHeader {
                    flags: r.header.flags | FLAG_PROOF,
                    seq: token,
                    ..r.header
                },
                None => r.header,
            };
            header.write(&mut h);
            assert_eq!(h[..], s[at..at + RECORD_HEADER_LEN], "{r:?}");
            if r.header.flags & FLAG_REQUEST != 0 {
                assert_eq!(be32(&s, at + RECORD_HEADER_LEN), r.response_len, "{r:?}");
            }
            at += r.header.len as usize;
        }
        if end.is_ok() {
            assert_eq!(at, s.len(), "a clean stream is all records");
        }
    }
    eprintln!(
        "record stream fuzz: {cases} cases, {records} records yielded; {} clean ends, broken by magic {}, version {}, length {} ({over_cap} beyond the cap), truncated {}; {:?}",
        seen[0],
        seen[1],
        seen[2],
        seen[3],
        seen[4],
        t.elapsed()
    );
    assert!(
        seen.iter().all(|&n| n > 0),
        "every outcome occurs: {seen:?}"
    );
    assert!(over_cap > 0, "lengths beyond the cap were tried");
}

/// The parser's state is fixed-size: it cannot allocate for a length field, whatever it says.
#[test]
fn stream_parser_holds_nothing_on_the_heap() {
    fn copy<T: Copy>() {}
    copy::<StreamParser>();
    assert!(std::mem::size_of::<StreamParser>() <= 128);
}
