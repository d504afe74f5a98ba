//! Record framing for TCP: the byte stream is cut into records, each starting with a 32-byte
//! ringblast header, so a sink can count records, check their order and measure one-way latency
//! on a stream exactly as it does per datagram.
//!
//! A record header has the layout of datagram header v2, with the TCP-record flag set and the
//! failed-send field carrying the record's length (a stream send never fails per record):
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! | 0      | 4    | magic `0x52424C53` ("RBLS")                                  |
//! | 4      | 1    | version (2)                                                  |
//! | 5      | 1    | flags: [`FLAG_RECORD`] always; [`FLAG_REQUEST`], [`FLAG_RESPONSE`], [`FLAG_ACK`], [`FLAG_PROOF`] |
//! | 6      | 4    | record length in bytes, header included (32 ..= [`MAX_RECORD`]) |
//! | 10     | 2    | flow: the connection's id at its sender                     |
//! | 12     | 4    | epoch (random per sender run)                                |
//! | 16     | 8    | record sequence number, 0 for a connection's first record   |
//! | 24     | 8    | send timestamp, ns since the Unix epoch (a response echoes its request's) |
//!
//! With a secret, a connection's first record has [`FLAG_PROOF`] set and carries its sender
//! run's token (`proto::proof::DataKey::token`) in place of its sequence number, which is 0;
//! the parser gives the token apart ([`Record::proof`]) and the record's sequence as 0.
//!
//! A request (request/response pattern, [`FLAG_REQUEST`]) carries the length of the response it
//! asks for in the 4 bytes after the header, so requests are at least 36 bytes.
//!
//! [`StreamParser`] follows one connection's stream across receive buffers of any size. It
//! keeps the partial header in a fixed array and never allocates. A record out of sequence is
//! reported and counted; a bad magic, version, flag or length means the framing is lost, and the
//! caller closes the connection.

use std::ops::Range;

use super::header::MAGIC;

/// Bytes of a record header.
pub(crate) const RECORD_HEADER_LEN: usize = 32;
/// The largest record a sink accepts (and a sender may be asked to write).
pub(crate) const MAX_RECORD: usize = 1 << 20;
/// Header layout version of records (the layout of datagram header v2).
pub(crate) const RECORD_VERSION: u8 = 2;
/// Flag bit of every TCP record.
pub(crate) const FLAG_RECORD: u8 = 0x80;
/// Flag bit of a sink's response to a request (request/response pattern).
pub(crate) const FLAG_RESPONSE: u8 = 0x40;
/// Flag bit of a request: the 4 bytes after the header hold the response length.
pub(crate) const FLAG_REQUEST: u8 = 0x20;
/// Flag bit of a sink's acknowledgement on a stream: its sequence field holds how many records
/// of this connection the sink has counted so far.
pub(crate) const FLAG_ACK: u8 = 0x10;
/// Flag bit of a connection's first record when its sender has a secret: the sequence field
/// holds the sender run's token instead of 0.
pub(crate) const FLAG_PROOF: u8 = 0x08;
/// Bytes of a request's header: the record header and the response length.
pub(crate) const REQUEST_HEADER_LEN: usize = RECORD_HEADER_LEN + 4;
/// The largest response a request may ask for.
pub(crate) const MAX_RESPONSE: usize = 16 * 1024;

const VERSION_AT: usize = 4;
const FLAGS_AT: usize = 5;
const LEN_AT: Range<usize> = 6..10;
const FLOW_AT: Range<usize> = 10..12;
const EPOCH_AT: Range<usize> = 12..16;
const SEQ_AT: Range<usize> = 16..24;
const TIMESTAMP_AT: Range<usize> = 24..32;

/// One record's header fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    /// Record bytes, header included.
    pub(crate) len: u32,
    /// [`FLAG_RESPONSE`], [`FLAG_REQUEST`] or 0 (the record flag is implied).
    pub(crate) flags: u8,
    /// Connection id at the sender (16 bits on the wire).
    pub(crate) flow: u16,
    /// Sender epoch.
    pub(crate) epoch: u32,
    /// Record sequence number on this connection.
    pub(crate) seq: u64,
    /// Send timestamp (CLOCK_REALTIME ns).
    pub(crate) timestamp_ns: u64,
}

impl RecordHeader {
    /// Writes the header into the first [`RECORD_HEADER_LEN`] bytes of `buf`; a shorter `buf`
    /// is left untouched (callers size records to at least a header).
    #[inline]
    pub(crate) fn write(&self, buf: &mut [u8]) {
        let Some(h) = buf.first_chunk_mut::<RECORD_HEADER_LEN>() else {
            return;
        };
        h[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        h[VERSION_AT] = RECORD_VERSION;
        h[FLAGS_AT] = FLAG_RECORD | self.flags;
        h[LEN_AT].copy_from_slice(&self.len.to_be_bytes());
        h[FLOW_AT].copy_from_slice(&self.flow.to_be_bytes());
        h[EPOCH_AT].copy_from_slice(&self.epoch.to_be_bytes());
        h[SEQ_AT].copy_from_slice(&self.seq.to_be_bytes());
        h[TIMESTAMP_AT].copy_from_slice(&self.timestamp_ns.to_be_bytes());
    }

    /// Decodes a complete header, checking magic, version, flag and length in that order.
    pub(crate) fn parse(h: &[u8; RECORD_HEADER_LEN]) -> Result<RecordHeader, Broken> {
        if h[0..4] != MAGIC.to_be_bytes() {
            return Err(Broken::Magic);
        }
        if h[VERSION_AT] != RECORD_VERSION || h[FLAGS_AT] & FLAG_RECORD == 0 {
            return Err(Broken::Version);
        }
        let len = u32::from_be_bytes(be(h, LEN_AT));
        if (len as usize) < RECORD_HEADER_LEN || len as usize > MAX_RECORD {
            return Err(Broken::Length);
        }
        Ok(RecordHeader {
            len,
            flags: h[FLAGS_AT] & !FLAG_RECORD,
            flow: u16::from_be_bytes(be(h, FLOW_AT)),
            epoch: u32::from_be_bytes(be(h, EPOCH_AT)),
            seq: u64::from_be_bytes(be(h, SEQ_AT)),
            timestamp_ns: u64::from_be_bytes(be(h, TIMESTAMP_AT)),
        })
    }
}

fn be<const N: usize>(h: &[u8; RECORD_HEADER_LEN], at: Range<usize>) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&h[at]);
    out
}

/// Why a stream lost its framing (the `reason` of an invalid count; the connection is closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broken {
    /// A record did not start with the ringblast magic (garbage, or another protocol).
    Magic,
    /// The version byte or the record flag is wrong.
    Version,
    /// The length field is below the header size or above [`MAX_RECORD`].
    Length,
    /// The stream ended inside a record.
    Truncated,
}

impl Broken {
    #[cfg(test)]
    /// Index into per-reason counters (`ALL` order).
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A record that ended in the bytes just fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Its header.
    pub(crate) header: RecordHeader,
    /// The response length a request asks for (0 for other records).
    pub(crate) response_len: u32,
    /// Its sequence number was the one expected on this connection.
    pub(crate) in_sequence: bool,
    /// The token it carried in place of its sequence number ([`FLAG_PROOF`]).
    pub(crate) proof: Option<u64>,
}

/// One connection's framing state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamParser {
    head: [u8; REQUEST_HEADER_LEN],
    have: usize,
    /// Header bytes of the current record: 32, or 36 for a request.
    want: usize,
    response_len: u32,
    current: RecordHeader,
    /// Payload bytes of the current record still to come (0 while reading a header).
    rest: u32,
    expect_seq: u64,
    /// The current record's token ([`FLAG_PROOF`]).
    proof: Option<u64>,
}

impl Default for StreamParser {
    fn default() -> Self {
        StreamParser {
            head: [0; REQUEST_HEADER_LEN],
            have: 0,
            want: RECORD_HEADER_LEN,
            response_len: 0,
            current: RecordHeader::default(),
            rest: 0,
            expect_seq: 0,
            proof: None,
        }
    }
}

impl StreamParser {
    /// A parser at the start of a connection.
    pub(crate) fn new() -> StreamParser {
        StreamParser::default()
    }

    /// Feeds the next bytes of the stream, calling `on_record` for every record they complete.
    /// Stops at the first framing error, which the caller treats as the connection's end.
    #[inline]
    pub(crate) fn feed(
        &mut self,
        mut data: &[u8],
        mut on_record: impl FnMut(Record),
    ) -> Result<(), Broken> {
        while !data.is_empty() {
            if self.have < self.want.max(RECORD_HEADER_LEN) {
                let want = self.want.max(RECORD_HEADER_LEN);
                let take = (want - self.have).min(data.len());
                self.head[self.have..self.have + take].copy_from_slice(&data[..take]);
                self.have += take;
                data = &data[take..];
                // A wrong magic is known from the first four bytes, so garbage is caught early.
                if self.have >= 4 && self.head[0..4] != MAGIC.to_be_bytes() {
                    return Err(Broken::Magic);
                }
                if self.have < want {
                    return Ok(());
                }
                if want == RECORD_HEADER_LEN {
                    let Some(h) = self.head.first_chunk::<RECORD_HEADER_LEN>() else {
                        return Err(Broken::Length);
                    };
                    self.current = RecordHeader::parse(h)?;
                    self.proof = None;
                    if self.current.flags & FLAG_PROOF != 0 {
                        self.proof = Some(self.current.seq);
                        self.current.seq = 0;
                        self.current.flags &= !FLAG_PROOF;
                    }
                    if self.current.flags & FLAG_REQUEST != 0 {
                        if (self.current.len as usize) < REQUEST_HEADER_LEN {
                            return Err(Broken::Length);
                        }
                        self.want = REQUEST_HEADER_LEN;
                        continue;
                    }
                    self.response_len = 0;
                } else {
                    let mut word = [0u8; 4];
                    word.copy_from_slice(&self.head[RECORD_HEADER_LEN..REQUEST_HEADER_LEN]);
                    self.response_len = u32::from_be_bytes(word);
                    if (self.response_len as usize) < RECORD_HEADER_LEN
                        || self.response_len as usize > MAX_RESPONSE
                    {
                        return Err(Broken::Length);
                    }
                }
                self.rest = self.current.len - want as u32;
            } else {
                let take = (self.rest as usize).min(data.len());
                self.rest -= take as u32;
                data = &data[take..];
            }
            if self.rest == 0 {
                let in_sequence = self.current.seq == self.expect_seq;
                self.expect_seq = self.current.seq.wrapping_add(1);
                self.have = 0;
                self.want = RECORD_HEADER_LEN;
                on_record(Record {
                    header: self.current,
                    response_len: self.response_len,
                    in_sequence,
                    proof: self.proof,
                });
            }
        }
        Ok(())
    }

    /// Whether the stream is between records (an end of stream here is clean).
    pub(crate) fn at_boundary(&self) -> bool {
        self.have == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, len: u32) -> Vec<u8> {
        let mut r = vec![0xA5; len as usize];
        RecordHeader {
            len,
            flags: 0,
            flow: 3,
            epoch: 9,
            seq,
            timestamp_ns: seq.wrapping_add(1_000),
        }
        .write(&mut r);
        r
    }

    #[test]
    fn header_round_trips() {
        let r = record(u64::MAX, 4096);
        let h = RecordHeader::parse(r.first_chunk().unwrap()).unwrap();
        assert_eq!((h.len, h.flow, h.epoch, h.seq), (4096, 3, 9, u64::MAX));
        assert_eq!(h.flags, 0);
    }

    #[test]
    fn every_split_of_a_stream_yields_the_same_records() {
        let stream: Vec<u8> = (0..5).flat_map(|s| record(s, 32 + 17 * s as u32)).collect();
        for chunk in 1..=stream.len() {
            let mut p = StreamParser::new();
            let mut seen = Vec::new();
            for piece in stream.chunks(chunk) {
                p.feed(piece, |r| seen.push((r.header.seq, r.in_sequence)))
                    .unwrap();
            }
            assert!(p.at_boundary());
            assert_eq!(
                seen,
                (0..5).map(|s| (s, true)).collect::<Vec<_>>(),
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn a_request_carries_its_response_length_across_any_split() {
        let mut r = vec![0u8; 40];
        RecordHeader {
            len: 40,
            flags: FLAG_REQUEST,
            ..RecordHeader::default()
        }
        .write(&mut r);
        r[32..36].copy_from_slice(&100u32.to_be_bytes());
        let stream: Vec<u8> = [r.clone(), record(1, 33)].concat();
        for chunk in 1..=stream.len() {
            let mut p = StreamParser::new();
            let mut seen = Vec::new();
            for piece in stream.chunks(chunk) {
                p.feed(piece, |rec| seen.push((rec.response_len, rec.in_sequence)))
                    .unwrap();
            }
            assert_eq!(seen, vec![(100, true), (0, true)], "chunk {chunk}");
        }
        r[32..36].copy_from_slice(&(MAX_RESPONSE as u32 + 1).to_be_bytes());
        assert_eq!(StreamParser::new().feed(&r, |_| {}), Err(Broken::Length));
    }

    #[test]
    fn a_first_record_gives_its_token_apart_and_counts_as_sequence_0() {
        let mut first = record(0xfeed_f00d, 40);
        first[5] |= FLAG_PROOF;
        let stream: Vec<u8> = [first.clone(), record(1, 40)].concat();
        let mut seen = Vec::new();
        StreamParser::new()
            .feed(&stream, |r| {
                seen.push((r.header.seq, r.header.flags, r.in_sequence, r.proof));
            })
            .unwrap();
        assert_eq!(
            seen,
            vec![(0, 0, true, Some(0xfeed_f00d)), (1, 0, true, None)]
        );
        // Later in a stream a proof record is out of sequence.
        let stream: Vec<u8> = [record(0, 40), first].concat();
        let mut seen = Vec::new();
        StreamParser::new()
            .feed(&stream, |r| seen.push(r.in_sequence))
            .unwrap();
        assert_eq!(seen, vec![true, false]);
    }

    #[test]
    fn out_of_sequence_is_reported_and_followed() {
        let stream: Vec<u8> = [0, 2, 3, 3].iter().flat_map(|&s| record(s, 40)).collect();
        let mut p = StreamParser::new();
        let mut seen = Vec::new();
        p.feed(&stream, |r| seen.push(r.in_sequence)).unwrap();
        assert_eq!(seen, vec![true, false, true, false]);
    }

    #[test]
    fn broken_framing_is_named() {
        let mut p = StreamParser::new();
        assert_eq!(p.feed(b"GET / HTTP/1.1\r\n", |_| {}), Err(Broken::Magic));
        let mut bad_len = record(0, 64);
        bad_len[6..10].copy_from_slice(&(MAX_RECORD as u32 + 1).to_be_bytes());
        assert_eq!(
            StreamParser::new().feed(&bad_len, |_| {}),
            Err(Broken::Length)
        );
        bad_len[6..10].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(
            StreamParser::new().feed(&bad_len, |_| {}),
            Err(Broken::Length)
        );
        let mut bad_version = record(0, 64);
        bad_version[4] = 9;
        assert_eq!(
            StreamParser::new().feed(&bad_version, |_| {}),
            Err(Broken::Version)
        );
        let mut p = StreamParser::new();
        p.feed(&record(0, 64)[..50], |_| {}).unwrap();
        assert!(!p.at_boundary());
    }
}
