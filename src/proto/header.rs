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
//! | 12     | 4    | epoch (random per sender run)                  |
//! | 16     | 8    | sequence number                                |
//! | 24     | 8    | send timestamp, ns since the Unix epoch (CLOCK_REALTIME) |
//!
//! The sender writes the whole header of every packet when it queues the send
//! ([`Header::write`]). The failed-send count lets a sink tell a sequence number whose send
//! failed at the sender from one the network lost, even without a control channel: a failure
//! is known to the sender within one window of sends, long before the sink settles a gap.

use std::ops::Range;

/// Length of the header in bytes.
pub const HEADER_LEN: usize = 32;
/// First four bytes of every ringblast datagram: "RBLS".
pub const MAGIC: u32 = 0x5242_4C53;
/// Header layout version written by this build.
pub const VERSION: u8 = 2;

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
    /// Every reason, for registering one metric series per reason up front.
    pub const ALL: [Invalid; 3] = [Invalid::Short, Invalid::Magic, Invalid::Version];

    /// The `reason` label value used in `ringblast_rx_invalid_packets_total`.
    pub fn label(&self) -> &'static str {
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
