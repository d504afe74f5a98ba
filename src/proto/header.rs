//! Encodes and decodes the 32-byte ringblast header that starts every datagram (and every GSO
//! segment). All fields are big-endian:
//!
//! | offset | size | field                                          |
//! |-------:|-----:|------------------------------------------------|
//! | 0      | 4    | magic `0x52424C53` ("RBLS")                    |
//! | 4      | 1    | version (2)                                    |
//! | 5      | 1    | flags                                          |
//! | 6      | 4    | failed sends of this flow so far, mod 2^32     |
//! | 10     | 2    | flow (flow ids are below 65536)                |
//! | 12     | 4    | epoch (random per sender run and per schedule step) |
//! | 16     | 8    | sequence number                                |
//! | 24     | 8    | send timestamp, ns since the Unix epoch (CLOCK_REALTIME) |
//!
//! A datagram shorter than 32 bytes (a 64-byte Ethernet frame over IPv4 leaves 18) carries the
//! 18-byte **compact** form instead, recognised by its own magic `0x52424C43` ("RBLC", which
//! also stands for the version) and checked as strictly (the whole magic, then the length):
//!
//! | offset | size | field                                          |
//! |-------:|-----:|------------------------------------------------|
//! | 0      | 4    | magic `0x52424C43` ("RBLC")                    |
//! | 4      | 4    | failed sends of this flow so far, mod 2^32     |
//! | 8      | 2    | flow                                           |
//! | 10     | 4    | epoch                                          |
//! | 14     | 4    | sequence number mod 2^32                       |
//!
//! It gives up the timestamp (a compact packet gives no latency sample) and the flags, and
//! carries the low 32 bits of the sequence number: the sink extends them to 64 bits next to
//! the session's highest number (or the start the sender stated), which is exact while a
//! session's numbers move by less than 2^31 between two packets it receives.
//!
//! The sender writes the whole header of every packet when it queues the send
//! ([`Header::write`], [`Header::write_compact`]). The failed-send count lets a sink tell a sequence number whose send
//! failed at the sender from one the network lost, even without a control channel: a failure
//! is known to the sender within one window of sends, long before the sink settles a gap.

use std::ops::Range;

/// Length of the header in bytes.
pub const HEADER_LEN: usize = 32;
/// First four bytes of every ringblast datagram: "RBLS".
pub(crate) const MAGIC: u32 = 0x5242_4C53;
/// Header layout version written by this build.
pub const VERSION: u8 = 2;

/// Length of the compact header (for datagrams shorter than [`HEADER_LEN`]).
pub(crate) const COMPACT_LEN: usize = 18;
/// First four bytes of a compact-header datagram: "RBLC".
pub(crate) const COMPACT_MAGIC: u32 = 0x5242_4C43;

const MAGIC_AT: Range<usize> = 0..4;
const VERSION_AT: usize = 4;
const FLAGS_AT: usize = 5;
const FAILED_AT: Range<usize> = 6..10;
const FLOW_AT: Range<usize> = 10..12;
const EPOCH_AT: Range<usize> = 12..16;
const SEQ_AT: Range<usize> = 16..24;
const TIMESTAMP_AT: Range<usize> = 24..32;

/// The decoded header fields (magic and version are implied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub flags: u8,
    /// Sends of this flow that failed before this packet was queued, modulo 2^32.
    pub failed: u32,
    /// Flow id, below 65536 (the wire has 16 bits for it; the sender never plans more).
    pub flow: u32,
    pub epoch: u32,
    pub seq: u64,
    pub timestamp_ns: u64,
}

/// Why a datagram was not accepted as a ringblast datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// Shorter than [`HEADER_LEN`].
    Short,
    /// The first four bytes are not [`MAGIC`].
    Magic,
    /// The version byte is not [`VERSION`].
    Version,
}

impl Invalid {
    #[cfg(test)]
    /// Every reason, for registering one metric series per reason up front.
    pub(crate) const ALL: [Invalid; 3] = [Invalid::Short, Invalid::Magic, Invalid::Version];

    #[cfg(test)]
    /// The `reason` label value used in `ringblast_rx_invalid_packets_total`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Invalid::Short => "short",
            Invalid::Magic => "magic",
            Invalid::Version => "version",
        }
    }
}

impl Header {
    /// The full 32 header bytes for this header.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut bytes = [0u8; HEADER_LEN];
        bytes[MAGIC_AT].copy_from_slice(&MAGIC.to_be_bytes());
        bytes[VERSION_AT] = VERSION;
        bytes[FLAGS_AT] = self.flags;
        bytes[FAILED_AT].copy_from_slice(&self.failed.to_be_bytes());
        debug_assert!(self.flow <= u32::from(u16::MAX), "flow id beyond 16 bits");
        bytes[FLOW_AT].copy_from_slice(&(self.flow as u16).to_be_bytes());
        bytes[EPOCH_AT].copy_from_slice(&self.epoch.to_be_bytes());
        bytes[SEQ_AT].copy_from_slice(&self.seq.to_be_bytes());
        bytes[TIMESTAMP_AT].copy_from_slice(&self.timestamp_ns.to_be_bytes());
        bytes
    }

    /// Writes every header field into the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// Precondition: `buf.len() >= HEADER_LEN` (the caller sizes datagrams to hold a header).
    /// Debug builds assert it; release builds leave a shorter buffer untouched.
    pub fn write(&self, buf: &mut [u8]) {
        debug_assert!(buf.len() >= HEADER_LEN, "buffer shorter than the header");
        if let Some(header) = buf.first_chunk_mut::<HEADER_LEN>() {
            *header = self.to_bytes();
        }
    }
}

impl Header {
    /// The 18 compact header bytes: the timestamp and flags are dropped, the sequence number
    /// keeps its low 32 bits.
    pub fn to_compact_bytes(&self) -> [u8; COMPACT_LEN] {
        let mut bytes = [0u8; COMPACT_LEN];
        bytes[0..4].copy_from_slice(&COMPACT_MAGIC.to_be_bytes());
        bytes[4..8].copy_from_slice(&self.failed.to_be_bytes());
        debug_assert!(self.flow <= u32::from(u16::MAX), "flow id beyond 16 bits");
        bytes[8..10].copy_from_slice(&(self.flow as u16).to_be_bytes());
        bytes[10..14].copy_from_slice(&self.epoch.to_be_bytes());
        bytes[14..18].copy_from_slice(&(self.seq as u32).to_be_bytes());
        bytes
    }

    /// Writes the header form that fits `buf`: the full one from [`HEADER_LEN`] bytes, the
    /// compact one below (`buf` holds at least [`COMPACT_LEN`]; a shorter one stays untouched).
    #[inline]
    pub(crate) fn write_fitting(&self, buf: &mut [u8]) {
        if buf.len() >= HEADER_LEN {
            self.write(buf);
        } else if let Some(head) = buf.first_chunk_mut::<COMPACT_LEN>() {
            *head = self.to_compact_bytes();
        }
    }
}

/// Copies `N` bytes starting at `AT` out of the header; ranges are constants, so the bounds
/// are resolved at compile time.
#[inline]
fn field<const AT: usize, const N: usize>(header: &[u8; HEADER_LEN]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&header[AT..AT + N]);
    out
}

/// Decodes the header at the start of `buf`, checking length, then magic, then version.
#[inline]
pub fn parse(buf: &[u8]) -> Result<Header, Invalid> {
    parse_full(buf)
}

/// Which header form a datagram carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// The 32-byte header: full sequence number and a timestamp.
    Full,
    /// The 18-byte compact header: `seq` holds only its low 32 bits, no timestamp (0).
    Compact,
}

/// Decodes either header form: the magic says which; each is then checked for its length (and
/// the full one for its version). Anything shorter than the compact form is [`Invalid::Short`],
/// anything longer with neither magic [`Invalid::Magic`].
#[inline]
pub(crate) fn parse_any(buf: &[u8]) -> Result<(Header, Form), Invalid> {
    let Some(head) = buf.first_chunk::<COMPACT_LEN>() else {
        return Err(Invalid::Short);
    };
    let magic = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if magic == COMPACT_MAGIC {
        let be32 =
            |at: usize| u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        return Ok((
            Header {
                flags: 0,
                failed: be32(4),
                flow: u32::from(u16::from_be_bytes([head[8], head[9]])),
                epoch: be32(10),
                seq: u64::from(be32(14)),
                timestamp_ns: 0,
            },
            Form::Compact,
        ));
    }
    if magic != MAGIC {
        return Err(Invalid::Magic);
    }
    parse_full(buf).map(|h| (h, Form::Full))
}

/// The 64-bit sequence number whose low 32 bits are `low`, nearest to `reference` (the
/// session's highest number so far, or its stated start).
pub(crate) fn extend_seq(reference: u64, low: u32) -> u64 {
    const SPAN: u64 = 1 << 32;
    let candidate = (reference & !(SPAN - 1)) | u64::from(low);
    if candidate.saturating_add(SPAN / 2) < reference {
        candidate.saturating_add(SPAN)
    } else if candidate > reference.saturating_add(SPAN / 2) && candidate >= SPAN {
        candidate - SPAN
    } else {
        candidate
    }
}

#[inline]
fn parse_full(buf: &[u8]) -> Result<Header, Invalid> {
    let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
        return Err(Invalid::Short);
    };
    if u32::from_be_bytes(field::<{ MAGIC_AT.start }, 4>(header)) != MAGIC {
        return Err(Invalid::Magic);
    }
    if header[VERSION_AT] != VERSION {
        return Err(Invalid::Version);
    }
    Ok(Header {
        flags: header[FLAGS_AT],
        failed: u32::from_be_bytes(field::<{ FAILED_AT.start }, 4>(header)),
        flow: u32::from(u16::from_be_bytes(field::<{ FLOW_AT.start }, 2>(header))),
        epoch: u32::from_be_bytes(field::<{ EPOCH_AT.start }, 4>(header)),
        seq: u64::from_be_bytes(field::<{ SEQ_AT.start }, 8>(header)),
        timestamp_ns: u64::from_be_bytes(field::<{ TIMESTAMP_AT.start }, 8>(header)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small deterministic generator so the property loop needs no extra crate.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn sample() -> Header {
        Header {
            flags: 0xA5,
            failed: 0xFEDC_BA98,
            flow: 0x0304,
            epoch: 0xDEAD_BEEF,
            seq: 0x1122_3344_5566_7788,
            timestamp_ns: 1_700_000_000_123_456_789,
        }
    }

    #[test]
    fn write_then_parse_round_trips() {
        let mut buf = [0xFFu8; 64];
        sample().write(&mut buf);
        assert_eq!(parse(&buf), Ok(sample()));
        assert_eq!(
            &buf[HEADER_LEN..],
            &[0xFFu8; 64 - HEADER_LEN],
            "payload untouched"
        );
    }

    #[test]
    fn layout_is_big_endian_at_documented_offsets() {
        let bytes = sample().to_bytes();
        assert_eq!(&bytes[0..4], b"RBLS");
        assert_eq!(bytes[4], VERSION);
        assert_eq!(bytes[5], sample().flags);
        assert_eq!(&bytes[6..10], &[0xFE, 0xDC, 0xBA, 0x98]);
        assert_eq!(&bytes[10..12], &[0x03, 0x04]);
        assert_eq!(&bytes[12..16], &sample().epoch.to_be_bytes());
        assert_eq!(&bytes[16..24], &sample().seq.to_be_bytes());
        assert_eq!(&bytes[24..32], &sample().timestamp_ns.to_be_bytes());
    }

    #[test]
    fn short_buffers_are_rejected_before_anything_else() {
        let bytes = sample().to_bytes();
        for len in 0..HEADER_LEN {
            assert_eq!(parse(&bytes[..len]), Err(Invalid::Short), "len {len}");
        }
        assert_eq!(
            parse(&[0u8; 3]),
            Err(Invalid::Short),
            "short wins over magic"
        );
    }

    #[test]
    fn wrong_magic_is_rejected_before_version() {
        let mut bytes = sample().to_bytes();
        bytes[0] ^= 0x01;
        bytes[VERSION_AT] = 9;
        assert_eq!(parse(&bytes), Err(Invalid::Magic));
    }

    #[test]
    fn wrong_version_is_rejected() {
        let mut bytes = sample().to_bytes();
        bytes[VERSION_AT] = VERSION + 1;
        assert_eq!(parse(&bytes), Err(Invalid::Version));
    }

    #[test]
    fn labels_are_distinct_metric_values() {
        let labels: Vec<_> = Invalid::ALL.iter().map(Invalid::label).collect();
        assert_eq!(labels, ["short", "magic", "version"]);
    }

    #[test]
    fn compact_form_round_trips_and_is_checked() {
        let mut buf = [0u8; 18];
        sample().write_fitting(&mut buf);
        assert_eq!(&buf[0..4], b"RBLC");
        let (h, form) = parse_any(&buf).unwrap();
        assert_eq!(form, Form::Compact);
        let want = Header {
            flags: 0,
            seq: sample().seq & 0xFFFF_FFFF,
            timestamp_ns: 0,
            ..sample()
        };
        assert_eq!(h, want);
        assert_eq!(parse_any(&buf[..17]), Err(Invalid::Short));
        // The full parser refuses it; a flipped magic bit is refused by both.
        assert_eq!(
            parse(&[buf.as_slice(), &[0; 14]].concat()),
            Err(Invalid::Magic)
        );
        buf[3] ^= 0x01;
        assert_eq!(parse_any(&buf), Err(Invalid::Magic));
        // A full header in a 32-byte buffer parses as full; a 31-byte RBLS datagram is short.
        let full = sample().to_bytes();
        assert_eq!(parse_any(&full), Ok((sample(), Form::Full)));
        assert_eq!(parse_any(&full[..31]), Err(Invalid::Short));
    }

    #[test]
    fn sequence_numbers_extend_next_to_the_reference() {
        assert_eq!(extend_seq(0, 5), 5);
        assert_eq!(extend_seq(100, 90), 90);
        assert_eq!(
            extend_seq(0, 0xFFFF_EC78),
            0xFFFF_EC78,
            "a first number with no stated start: every 32-bit value is itself"
        );
        let r = (7u64 << 32) + 0xFFFF_FFF0;
        assert_eq!(
            extend_seq(r, 0x10),
            (8u64 << 32) + 0x10,
            "forward over a wrap"
        );
        assert_eq!(
            extend_seq((8u64 << 32) + 2, 0xFFFF_FFFE),
            (7u64 << 32) + 0xFFFF_FFFE
        );
        assert_eq!(extend_seq(4_294_967_000, 4_294_967_100), 4_294_967_100);
        assert_eq!(
            extend_seq(u64::MAX, 0),
            u64::MAX,
            "saturates at the top, never overflows"
        );
        let mut rng = XorShift(7);
        for _ in 0..10_000 {
            let reference = rng.next() >> 1;
            let seq = reference.wrapping_add(rng.next() % (1 << 31)) & (u64::MAX >> 1);
            if seq >= reference {
                assert_eq!(extend_seq(reference, seq as u32), seq);
            }
        }
    }

    #[test]
    fn random_headers_round_trip() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut buf = vec![0u8; 1500];
        for _ in 0..10_000 {
            let header = Header {
                flags: rng.next() as u8,
                failed: rng.next() as u32,
                flow: u32::from(rng.next() as u16),
                epoch: rng.next() as u32,
                seq: rng.next(),
                timestamp_ns: rng.next(),
            };
            let len = HEADER_LEN + (rng.next() % 1000) as usize;
            header.write(&mut buf[..len]);
            assert_eq!(parse(&buf[..len]), Ok(header));
        }
    }
}
