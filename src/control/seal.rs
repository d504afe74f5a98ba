//! Per-frame authentication of a control connection after its handshake.
//!
//! Both sides derive two keys from the shared secret and the connection's two nonces with
//! HKDF-SHA256 (RFC 5869): the salt is `nonce_c || nonce_s`, so every connection gets fresh keys,
//! and the info string names the direction, so a frame cannot be reflected back to its writer.
//! Every frame after the handshake ends with a seal: its sequence number (8 bytes, big endian,
//! from 0 in each direction) and an HMAC-SHA256 tag over the frame's version and type bytes, its
//! payload and that sequence number. The reader checks the tag in constant time before it parses
//! anything, then the sequence number: a changed frame fails its tag, a frame from another
//! connection fails it too, a replayed frame carries a number already used, and a dropped or
//! swapped frame leaves a gap. Each ends the connection, counted by [`Breach`].
//!
//! The HMAC handshake is kept (rather than a Noise or TLS handshake) because it already proves
//! the secret both ways with fresh nonces; HKDF turns that proof into keys, which is what it is
//! for. Key bytes live in [`Zeroizing`] buffers, wiped on drop, and never reach a log.

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

/// Bytes of the sequence number in a seal.
const SEQ_LEN: usize = 8;
/// Bytes of the tag in a seal.
const TAG_LEN: usize = 32;
/// Bytes a seal adds to a frame.
pub(crate) const SEAL_LEN: usize = SEQ_LEN + TAG_LEN;

const SENDER_TO_SINK: &[u8] = b"ringblast control v4 sender to sink";
const SINK_TO_SENDER: &[u8] = b"ringblast control v4 sink to sender";

/// How a sealed frame failed: each ends the connection and is counted under its label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Breach {
    /// The tag does not match: the frame was changed, came from another connection, or was
    /// written without the key (or is too short to carry a seal).
    BadMac,
    /// A sequence number already used: an old frame sent again.
    Replayed,
    /// A sequence number beyond the next one: a frame was dropped or two were swapped.
    OutOfOrder,
}

impl Breach {
    /// The label this breach is counted under.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Breach::BadMac => "bad_mac",
            Breach::Replayed => "replayed",
            Breach::OutOfOrder => "out_of_order",
        }
    }
}

/// Which end of the connection a key pair is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The sender (the client).
    Sender,
    /// The sink (the server).
    Sink,
}

/// One direction's key and the sequence number of its next frame.
pub(crate) struct DirectionKey {
    key: Zeroizing<[u8; 32]>,
    next_seq: u64,
}

impl DirectionKey {
    fn mac(&self, version: u8, kind: u8, payload: &[u8], seq: u64) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this never fails.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(self.key.as_slice())
            .expect("HMAC takes any key length");
        m.update(&[version, kind]);
        m.update(payload);
        m.update(&seq.to_be_bytes());
        m
    }

    /// Appends the seal of the frame (`version`, `kind`, `payload`) to `out`.
    pub(crate) fn seal(&mut self, version: u8, kind: u8, payload: &[u8], out: &mut Vec<u8>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(
            &self
                .mac(version, kind, payload, seq)
                .finalize()
                .into_bytes(),
        );
    }

    /// Checks the seal at the end of `body` (a frame's bytes after its version and type) and
    /// returns the payload before it.
    pub(crate) fn open<'a>(
        &mut self,
        version: u8,
        kind: u8,
        body: &'a [u8],
    ) -> Result<&'a [u8], Breach> {
        let Some(payload_len) = body.len().checked_sub(SEAL_LEN) else {
            return Err(Breach::BadMac);
        };
        let (payload, seal) = body.split_at(payload_len);
        let (seq, tag) = seal.split_at(SEQ_LEN);
        let seq = u64::from_be_bytes(seq.try_into().expect("SEQ_LEN bytes"));
        self.mac(version, kind, payload, seq)
            .verify_slice(tag)
            .map_err(|_| Breach::BadMac)?;
        match seq.cmp(&self.next_seq) {
            std::cmp::Ordering::Less => Err(Breach::Replayed),
            std::cmp::Ordering::Greater => Err(Breach::OutOfOrder),
            std::cmp::Ordering::Equal => {
                self.next_seq += 1;
                Ok(payload)
            }
        }
    }
}

/// The keys of one end of a connection: what it writes with and what it reads with.
pub(crate) struct ChannelKeys {
    /// Seals the frames this end writes.
    pub(crate) write: DirectionKey,
    /// Opens the frames this end reads.
    pub(crate) read: DirectionKey,
}

impl std::fmt::Debug for ChannelKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChannelKeys(<redacted>)")
    }
}

/// Derives `end`'s keys from the secret and the connection's nonces.
pub(crate) fn derive(
    secret: &[u8],
    nonce_c: &[u8; 32],
    nonce_s: &[u8; 32],
    end: End,
) -> ChannelKeys {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(nonce_c);
    salt[32..].copy_from_slice(nonce_s);
    let hk = Hkdf::<Sha256>::new(Some(&salt), secret);
    let key = |info: &[u8]| {
        let mut k = Zeroizing::new([0u8; 32]);
        // 32 bytes is far below HKDF-SHA256's limit of 255 * 32, so this never fails.
        hk.expand(info, k.as_mut_slice())
            .expect("32 bytes is a valid HKDF-SHA256 output length");
        DirectionKey {
            key: k,
            next_seq: 0,
        }
    };
    let (write, read) = match end {
        End::Sender => (SENDER_TO_SINK, SINK_TO_SENDER),
        End::Sink => (SINK_TO_SENDER, SENDER_TO_SINK),
    };
    ChannelKeys {
        write: key(write),
        read: key(read),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (ChannelKeys, ChannelKeys) {
        let (c, s) = ([1u8; 32], [2u8; 32]);
        (
            derive(b"k", &c, &s, End::Sender),
            derive(b"k", &c, &s, End::Sink),
        )
    }

    fn sealed(key: &mut DirectionKey, payload: &[u8]) -> Vec<u8> {
        let mut body = payload.to_vec();
        key.seal(4, 9, payload, &mut body);
        body
    }

    #[test]
    fn frames_open_in_order_and_every_change_is_caught() {
        let (mut sender, mut sink) = pair();
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|i| sealed(&mut sender.write, format!("{{\"n\":{i}}}").as_bytes()))
            .collect();
        assert_eq!(sink.read.open(4, 9, &frames[0]).unwrap(), b"{\"n\":0}");
        // Replayed, then skipped ahead (a drop or a swap), then changed in every byte.
        assert_eq!(sink.read.open(4, 9, &frames[0]), Err(Breach::Replayed));
        assert_eq!(sink.read.open(4, 9, &frames[2]), Err(Breach::OutOfOrder));
        for i in 0..frames[1].len() {
            let mut bad = frames[1].clone();
            bad[i] ^= 1;
            assert_eq!(sink.read.open(4, 9, &bad), Err(Breach::BadMac), "byte {i}");
        }
        // The version and type bytes are covered too, and a cut frame carries no seal.
        assert_eq!(sink.read.open(3, 9, &frames[1]), Err(Breach::BadMac));
        assert_eq!(sink.read.open(4, 8, &frames[1]), Err(Breach::BadMac));
        assert_eq!(
            sink.read.open(4, 9, &frames[1][..SEAL_LEN - 1]),
            Err(Breach::BadMac)
        );
        assert_eq!(sink.read.open(4, 9, &frames[1]).unwrap(), b"{\"n\":1}");
    }

    #[test]
    fn keys_differ_by_direction_connection_and_secret() {
        let (_, mut sink) = pair();
        // Reflected: the sink's own frame does not open as one from the sender.
        let own = sealed(&mut sink.write, b"{}");
        assert_eq!(sink.read.open(4, 9, &own), Err(Breach::BadMac));
        // Another connection (other nonces) or another secret cannot open it either.
        let mut other = derive(b"k", &[1; 32], &[3; 32], End::Sender);
        assert_eq!(other.read.open(4, 9, &own), Err(Breach::BadMac));
        let mut wrong = derive(b"j", &[1; 32], &[2; 32], End::Sender);
        assert_eq!(wrong.read.open(4, 9, &own), Err(Breach::BadMac));
        let mut right = derive(b"k", &[1; 32], &[2; 32], End::Sender);
        assert_eq!(right.read.open(4, 9, &own).unwrap(), b"{}");
    }
}
