//! Framing of control messages over any byte stream.
//!
//! A frame is `[u32 BE length of the rest][u8 version][u8 message type][JSON payload]`.
//! Version 2 adds the sink's size classes to the Verdict; version 3 the clock exchange (its
//! message types are unknown in a frame of an older version), the sender's boot id and the
//! Verdict's clock. A sender speaks version 3; a sink reads versions 1 to 3 and answers each
//! connection in the version its ClientHello came in, so an older sender gets the Verdict it
//! can read.
//! Version 4 seals every frame after the handshake when a secret is set ([`super::seal`]): the
//! payload is followed by the seal, and the length covers it. A sink with a secret refuses an
//! older sender, whose frames carry no seal.
//! Version 5 adds the Verdict's latency p99.9 and jitter (an older sender gets neither).
//! Version 6 puts the ClientHello's version and credentials flag under both handshake MACs
//! ([`super::auth`]), so a secret needs version 6 on both sides; without a secret nothing else
//! changes.
//! The length is checked against [`MAX_FRAME`] before anything is allocated. [`decode`] is the
//! one pure parser; [`read_frame`] (blocking, for the handshake) and [`FrameReader`] (resumable
//! across read timeouts, for the long-lived loops) both feed it. Read timeouts are whatever the
//! caller set on the socket; one surfaces as [`FrameError::Timeout`].

use std::io::{self, Read, Write};

use thiserror::Error;

use super::msg::{Message, kind_name, last_kind};
use super::seal::{Breach, DirectionKey, SEAL_LEN};

/// Largest value of the length field (version + type + payload), in bytes.
pub(crate) const MAX_FRAME: usize = 256 * 1024;
/// The protocol version this build speaks (and a sender writes).
pub(crate) const VERSION: u8 = 10;
/// The oldest version this build still reads and answers.
pub(crate) const OLDEST_VERSION: u8 = 1;
const HEADER: usize = 4;

/// Why a frame could not be read.
#[derive(Debug, Error)]
pub(crate) enum FrameError {
    /// The length field exceeds [`MAX_FRAME`].
    #[error("frame of {len} bytes exceeds the {max}-byte cap")]
    Oversize {
        /// Announced length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The length field is too small to hold the version and type bytes.
    #[error("frame length {0} is too short for a header")]
    Runt(usize),
    /// The version byte is not one this build reads.
    #[error(
        "unknown protocol version {0} (this build speaks versions {OLDEST_VERSION} to {VERSION}; upgrade the older side)"
    )]
    UnknownVersion(u8),
    /// The message type byte is not one this build knows.
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// Fewer bytes than the frame needs.
    #[error("truncated frame: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the whole frame needs (or at least the header).
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The payload is not valid JSON for its type.
    #[error("malformed {kind} payload: {detail}")]
    Malformed {
        /// Message name.
        kind: &'static str,
        /// The parser's complaint.
        detail: String,
    },
    /// The payload parsed but breaks a cap or character set.
    #[error("invalid {kind}: {detail}")]
    Invalid {
        /// Message name.
        kind: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A sealed frame failed its check.
    #[error("{}", breach_text(*.0))]
    Breach(Breach),
    /// The read timed out.
    #[error("timed out waiting for the peer")]
    Timeout,
    /// The peer closed the stream between frames.
    #[error("connection closed by peer")]
    Closed,
    /// Any other I/O error.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

fn breach_text(b: Breach) -> &'static str {
    match b {
        Breach::BadMac => {
            "a frame failed its authentication (changed on the way, or not written with this connection's key)"
        }
        Breach::Replayed => "a frame was replayed (its sequence number was already used)",
        Breach::OutOfOrder => "a frame is out of order (one was dropped or two were swapped)",
    }
}

impl FrameError {
    /// The label a connection ended by this error is counted under when it is an integrity
    /// failure (a breached seal, or a frame cut short); `None` for anything else.
    pub(crate) fn integrity_label(&self) -> Option<&'static str> {
        match self {
            FrameError::Breach(b) => Some(b.label()),
            FrameError::Truncated { .. } => Some("truncated"),
            _ => None,
        }
    }
}

#[cfg(test)]
/// Encodes `msg` as one frame of this build's version.
pub(crate) fn encode(msg: &Message) -> io::Result<Vec<u8>> {
    encode_as(msg, VERSION)
}

/// Encodes `msg` as one frame of protocol `version`.
pub(crate) fn encode_as(msg: &Message, version: u8) -> io::Result<Vec<u8>> {
    encode_with(msg, version, None)
}

/// Encodes `msg` as one frame of protocol `version`, sealed with `key` if given.
pub(crate) fn encode_with(
    msg: &Message,
    version: u8,
    key: Option<&mut DirectionKey>,
) -> io::Result<Vec<u8>> {
    let payload = msg.to_json();
    let seal = if key.is_some() { SEAL_LEN } else { 0 };
    let len = payload.len() + 2 + seal;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} frame of {len} bytes exceeds the {MAX_FRAME}-byte cap",
                msg.name()
            ),
        ));
    }
    let mut out = Vec::with_capacity(HEADER + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.push(version);
    out.push(msg.kind());
    out.extend_from_slice(&payload);
    if let Some(key) = key {
        key.seal(version, msg.kind(), &payload, &mut out);
    }
    Ok(out)
}

/// Writes `msg` as one frame (one `write_all`, then a flush).
pub(crate) fn write_frame<W: Write + ?Sized>(w: &mut W, msg: &Message) -> io::Result<()> {
    write_frame_as(w, msg, VERSION)
}

/// Writes `msg` as one frame of protocol `version` (a sink answering an older sender).
pub(crate) fn write_frame_as<W: Write + ?Sized>(
    w: &mut W,
    msg: &Message,
    version: u8,
) -> io::Result<()> {
    w.write_all(&encode_as(msg, version)?)?;
    w.flush()
}

/// Decodes the frame at the start of `bytes`: the message and the bytes it used.
///
/// Errors come in stream order: a short header is `Truncated`, then the length is checked
/// (`Oversize`, `Runt`), then the version and type bytes as soon as they are present, then
/// `Truncated` if the payload is incomplete, then the JSON and the message's caps.
pub(crate) fn decode(bytes: &[u8]) -> Result<(Message, usize), FrameError> {
    decode_with(bytes, None)
}

/// [`decode`] for a frame sealed with `key` if given: the seal is checked (after the frame is
/// complete, before its payload is parsed).
pub(crate) fn decode_with(
    bytes: &[u8],
    key: Option<&mut DirectionKey>,
) -> Result<(Message, usize), FrameError> {
    let have = bytes.len();
    let Some(head) = bytes.first_chunk::<HEADER>() else {
        return Err(FrameError::Truncated { need: HEADER, have });
    };
    let len = u32::from_be_bytes(*head) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::Oversize {
            len,
            max: MAX_FRAME,
        });
    }
    if len < 2 {
        return Err(FrameError::Runt(len));
    }
    if let Some(&v) = bytes.get(HEADER)
        && !(OLDEST_VERSION..=VERSION).contains(&v)
    {
        return Err(FrameError::UnknownVersion(v));
    }
    if let Some(&k) = bytes.get(HEADER + 1)
        && !(1..=last_kind(bytes[HEADER])).contains(&k)
    {
        return Err(FrameError::UnknownType(k));
    }
    let total = HEADER + len;
    if have < total {
        return Err(FrameError::Truncated { need: total, have });
    }
    let (version, kind) = (bytes[HEADER], bytes[HEADER + 1]);
    let body = &bytes[HEADER + 2..total];
    let payload = match key {
        Some(key) => key.open(version, kind, body).map_err(FrameError::Breach)?,
        None => body,
    };
    let msg = match Message::from_json(kind, payload) {
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            return Err(FrameError::Malformed {
                kind: kind_name(kind),
                detail: e.to_string(),
            });
        }
        None => return Err(FrameError::UnknownType(kind)),
    };
    msg.validate().map_err(|detail| FrameError::Invalid {
        kind: msg.name(),
        detail,
    })?;
    Ok((msg, total))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Fills `buf[at..]`; `need` is the whole frame's size for the Truncated error.
fn fill<R: Read + ?Sized>(
    r: &mut R,
    buf: &mut [u8],
    mut at: usize,
    need: usize,
) -> Result<(), FrameError> {
    while at < buf.len() {
        match r.read(&mut buf[at..]) {
            Ok(0) if at == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Truncated { need, have: at }),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Err(FrameError::Timeout),
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    Ok(())
}

/// Reads exactly one frame, blocking up to the stream's read timeout per read.
///
/// A timeout part-way through a frame leaves the stream out of step; callers treat every
/// error as fatal for the connection (use [`FrameReader`] to survive timeouts).
pub(crate) fn read_frame<R: Read + ?Sized>(r: &mut R) -> Result<Message, FrameError> {
    read_frame_versioned(r).map(|(m, _)| m)
}

/// [`read_frame`], also returning the frame's protocol version.
pub(crate) fn read_frame_versioned<R: Read + ?Sized>(
    r: &mut R,
) -> Result<(Message, u8), FrameError> {
    let mut head = [0u8; HEADER + 2];
    fill(r, &mut head[..HEADER], 0, HEADER)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::Oversize {
            len,
            max: MAX_FRAME,
        });
    }
    if len < 2 {
        return Err(FrameError::Runt(len));
    }
    fill(r, &mut head, HEADER, HEADER + len)?;
    // Version and type are checked before the payload buffer is allocated.
    match decode(&head) {
        Ok(_) | Err(FrameError::Truncated { .. }) => {}
        Err(e) => return Err(e),
    }
    let mut buf = vec![0u8; HEADER + len];
    buf[..HEADER + 2].copy_from_slice(&head);
    fill(r, &mut buf, HEADER + 2, HEADER + len)?;
    decode(&buf).map(|(m, _)| (m, buf[HEADER]))
}

/// Accumulates bytes across reads so a read timeout never loses part of a frame; opens each
/// frame with its key when it has one.
#[derive(Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    key: Option<DirectionKey>,
}

impl FrameReader {
    #[cfg(test)]
    /// An empty reader of plain frames.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// An empty reader of frames sealed with `key` (plain if `None`).
    pub(crate) fn opening(key: Option<DirectionKey>) -> Self {
        FrameReader {
            buf: Vec::new(),
            key,
        }
    }

    /// Bytes read but not yet returned as a frame.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Returns the next complete frame, `Ok(None)` when a read timed out first.
    pub(crate) fn poll<R: Read + ?Sized>(
        &mut self,
        r: &mut R,
    ) -> Result<Option<Message>, FrameError> {
        loop {
            match decode_with(&self.buf, self.key.as_mut()) {
                Ok((m, used)) => {
                    self.buf.drain(..used);
                    return Ok(Some(m));
                }
                Err(FrameError::Truncated { .. }) => {}
                Err(e) => return Err(e),
            }
            let mut chunk = [0u8; 4096];
            match r.read(&mut chunk) {
                Ok(0) if self.buf.is_empty() => return Err(FrameError::Closed),
                Ok(0) => {
                    let have = self.buf.len();
                    return Err(match decode(&self.buf) {
                        Err(e @ FrameError::Truncated { .. }) => e,
                        _ => FrameError::Truncated {
                            need: have + 1,
                            have,
                        },
                    });
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Ok(None),
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::msg::*;
    use crate::control::tests::samples;

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let bytes = encode(&m).unwrap();
            let (back, used) = decode(&bytes).unwrap();
            assert_eq!((back, used), (m.clone(), bytes.len()));
            let mut cur = io::Cursor::new(bytes.clone());
            assert_eq!(read_frame(&mut cur).unwrap(), m);
            let mut fr = FrameReader::new();
            assert_eq!(fr.poll(&mut io::Cursor::new(bytes)).unwrap(), Some(m));
        }
    }

    #[test]
    fn oversize_rejected_before_reading_payload() {
        // Only the header exists: an allocating reader would fail with Truncated/Closed instead.
        let head = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(decode(&head), Err(FrameError::Oversize { .. })));
        let mut cur = io::Cursor::new(u32::MAX.to_be_bytes().to_vec());
        assert!(
            matches!(read_frame(&mut cur), Err(FrameError::Oversize { len, .. }) if len == u32::MAX as usize)
        );
        let big = Message::Refused(Refused {
            reason: "x".repeat(MAX_FRAME),
        });
        assert!(write_frame(&mut Vec::new(), &big).is_err());
    }

    #[test]
    fn truncated_and_garbage_rejected() {
        let bytes = encode(&samples()[7]).unwrap();
        for cut in 0..bytes.len() {
            assert!(
                matches!(decode(&bytes[..cut]), Err(FrameError::Truncated { .. })),
                "cut {cut}"
            );
            let e = read_frame(&mut io::Cursor::new(bytes[..cut].to_vec())).unwrap_err();
            let want = if cut == 0 { "Closed" } else { "Truncated" };
            assert!(format!("{e:?}").starts_with(want), "cut {cut}: {e:?}");
        }
        let mut bad = bytes.clone();
        bad[4] = VERSION + 1;
        assert!(matches!(decode(&bad), Err(FrameError::UnknownVersion(v)) if v == VERSION + 1));
        // Version-1 to -5 frames (older senders) still read, and say their version.
        for version in [1, 2, 3, 4, 5] {
            let mut old = bytes.clone();
            old[4] = version;
            let (_, v) = read_frame_versioned(&mut io::Cursor::new(old)).unwrap();
            assert_eq!(v, version);
        }
        // The clock exchange is version 3: its types are unknown in an older frame.
        let mut probe = encode(&Message::ClockProbe(ClockProbe { t1_ns: 1 })).unwrap();
        assert!(decode(&probe).is_ok());
        probe[4] = 2;
        assert!(matches!(decode(&probe), Err(FrameError::UnknownType(12))));
        let mut bad = bytes.clone();
        bad[5] = 0;
        assert!(matches!(decode(&bad), Err(FrameError::UnknownType(0))));
        let mut bad = bytes.clone();
        bad[6] = b'!';
        assert!(matches!(
            decode(&bad),
            Err(FrameError::Malformed { kind: "Hello", .. })
        ));
        assert!(matches!(decode(&[0, 0, 0, 1, 1]), Err(FrameError::Runt(1))));
        assert!(matches!(
            decode(b"GET / HTTP/1.1\r\n"),
            Err(FrameError::Oversize { .. })
        ));
        let unknown_field = [&[0, 0, 0, 12, 1, 9][..], br#"{"x":1}    "#].concat();
        assert!(matches!(
            decode(&unknown_field),
            Err(FrameError::Malformed { .. })
        ));
    }

    #[test]
    fn sealed_frames_read_back_in_any_chunking_and_a_changed_one_is_a_breach() {
        use crate::control::seal::{End, derive};
        let (c, s) = ([7u8; 32], [9u8; 32]);
        let mut writer = derive(b"secret", &c, &s, End::Sender);
        let reader_key = derive(b"secret", &c, &s, End::Sink).read;
        let mut stream = Vec::new();
        for m in samples() {
            stream.extend(encode_with(&m, VERSION, Some(&mut writer.write)).unwrap());
        }
        // One byte per read: the reader keeps partial frames and opens each once.
        struct Trickle(io::Cursor<Vec<u8>>);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(1);
                self.0.read(&mut buf[..n])
            }
        }
        let mut fr = FrameReader::opening(Some(reader_key));
        let mut t = Trickle(io::Cursor::new(stream.clone()));
        for m in samples() {
            assert_eq!(fr.poll(&mut t).unwrap(), Some(m));
        }
        // The same bytes read as plain frames fail (the seal is not JSON), and one flipped
        // payload byte fails the seal.
        assert!(decode(&stream).is_err());
        let mut fr = FrameReader::opening(Some(derive(b"secret", &c, &s, End::Sink).read));
        stream[HEADER + 3] ^= 0x20;
        assert!(matches!(
            fr.poll(&mut io::Cursor::new(stream)),
            Err(FrameError::Breach(crate::control::seal::Breach::BadMac))
        ));
    }

    #[test]
    fn invalid_name_is_a_protocol_error() {
        let m = Message::AuthOk(AuthOk {
            sink_session: "bad name".into(),
        });
        let bytes = encode(&m).unwrap();
        assert!(matches!(
            decode(&bytes),
            Err(FrameError::Invalid { kind: "AuthOk", .. })
        ));
    }

    #[test]
    fn messages_are_one_line() {
        let errs = [
            FrameError::Oversize { len: 1, max: 2 },
            FrameError::Runt(0),
            FrameError::UnknownVersion(9),
            FrameError::UnknownType(99),
            FrameError::Truncated { need: 3, have: 1 },
            FrameError::Timeout,
            FrameError::Closed,
        ];
        for e in errs {
            assert!(!e.to_string().contains('\n'));
        }
    }
}
