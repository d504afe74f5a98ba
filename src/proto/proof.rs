//! The per-run proof that a data datagram comes from the sender run that announced it.
//!
//! With a secret, every sender run (every epoch) has a [`RunProof`], derived from the secret and
//! the epoch alone (HKDF-SHA256 with its own salt, so no key of the control channel is reused),
//! so the sender and the sink agree on it without a message and it outlives a reconnection.
//! The eight bytes after the 32-byte header ([`PROOF_AT`]) carry it in every datagram of
//! [`PROVEN_LEN`] bytes or more:
//! - by default the run's 64-bit **token**: an off-path injector must guess it (2^63 tries on
//!   average) on top of the epoch and the sender's source address and port, so only someone who
//!   sees the run's traffic can forge its datagrams;
//! - with `--auth-data` ([`FLAG_TAGGED`] in the header's flags) a **tag**: SipHash-2-4, keyed
//!   by the run's tag key, over the 32 header bytes and the datagram's length, so not even an
//!   on-path attacker can change a number (the token never goes on the wire, so a datagram
//!   stripped of its flag fails too). What it cannot stop is a replay, which is a duplicate.
//!
//! Below [`PROVEN_LEN`] bytes a proven run sends the compact header (the one of a 64-byte frame
//! has no room for a proof) with its failed-send count and sequence number masked by the token
//! ([`RunProof::unmask`]), so an off-path forger cannot predict them either. A full header
//! without its proof, or with a wrong one, is refused: `invalid{reason="auth"}`.

use std::ops::Range;

use hkdf::Hkdf;
use sha2::Sha256;
use siphasher::sip::SipHasher24;
use std::hash::Hasher;
use zeroize::Zeroizing;

use super::header::{COMPACT_LEN, HEADER_LEN, Header};

/// Where the proof sits: right after the header.
pub(crate) const PROOF_AT: Range<usize> = HEADER_LEN..HEADER_LEN + 8;
/// The fewest bytes a datagram of a proven run has.
pub(crate) const PROVEN_LEN: usize = PROOF_AT.end;
/// Header flag: the proof is a tag, not the token.
pub(crate) const FLAG_TAGGED: u8 = 0x01;
/// HKDF's salt: the data plane's own, so its keys are never a control channel's.
const SALT: &[u8] = b"ringblast data proof v1";

/// The key every run's proof is derived from (the secret's HKDF pseudo-random key).
pub struct DataKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(<redacted>)")
    }
}

impl DataKey {
    /// The data key of a shared secret.
    pub fn from_secret(secret: &[u8]) -> DataKey {
        let (prk, _) = Hkdf::<Sha256>::extract(Some(SALT), secret);
        let mut key = Zeroizing::new([0u8; 32]);
        key.copy_from_slice(&prk);
        DataKey(key)
    }

    // A 32-byte PRK is a valid HKDF-SHA256 pseudo-random key, and 8 or 16 bytes are far below
    // its output limit, so neither expansion below can fail.
    fn hkdf(&self) -> Hkdf<Sha256> {
        Hkdf::<Sha256>::from_prk(self.0.as_slice()).expect("32 bytes is a valid PRK")
    }

    /// The token of sender run `epoch` alone: what a TCP connection's first record carries
    /// (`proto::record::FLAG_PROOF`).
    pub fn token(&self, epoch: u32) -> u64 {
        let mut info = *b"token\0\0\0\0";
        info[5..].copy_from_slice(&epoch.to_be_bytes());
        let mut token = [0u8; 8];
        self.hkdf().expand(&info, &mut token).expect("8 bytes");
        u64::from_be_bytes(token)
    }

    /// The proof of sender run `epoch`.
    pub fn run(&self, epoch: u32) -> RunProof {
        let hk = self.hkdf();
        let mut info = *b"tag key\0\0\0\0";
        info[7..].copy_from_slice(&epoch.to_be_bytes());
        let mut key = [0u8; 16];
        hk.expand(&info, &mut key).expect("16 bytes");
        let half = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"));
        RunProof {
            token: self.token(epoch),
            tag_key: (half(0), half(8)),
        }
    }
}

/// One sender run's token and tag key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RunProof {
    token: u64,
    tag_key: (u64, u64),
}

impl std::fmt::Debug for RunProof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunProof(<redacted>)")
    }
}

/// What a received datagram carried as its proof.
#[derive(Clone, Copy, Debug)]
pub enum Proof {
    /// Nothing: shorter than [`PROVEN_LEN`], or the compact header.
    Missing,
    /// A token.
    Token(u64),
    /// A tag, with what it covers.
    Tag {
        tag: u64,
        head: [u8; HEADER_LEN],
        len: u32,
    },
}

impl Proof {
    /// The proof in `datagram`, whose full header said `flags` (`None`: compact).
    #[inline]
    pub fn read(datagram: &[u8], flags: Option<u8>) -> Proof {
        let (Some(flags), Some(head), Some(proof)) = (
            flags,
            datagram.first_chunk::<HEADER_LEN>(),
            datagram
                .get(PROOF_AT)
                .and_then(|p| <[u8; 8]>::try_from(p).ok()),
        ) else {
            return Proof::Missing;
        };
        let value = u64::from_be_bytes(proof);
        if flags & FLAG_TAGGED != 0 {
            Proof::Tag {
                tag: value,
                head: *head,
                len: datagram.len() as u32,
            }
        } else {
            Proof::Token(value)
        }
    }
}

impl RunProof {
    fn tag(&self, head: &[u8], len: u32) -> u64 {
        let mut h = SipHasher24::new_with_keys(self.tag_key.0, self.tag_key.1);
        h.write(head);
        h.write(&len.to_be_bytes());
        h.finish()
    }

    /// Writes `header` into `datagram` in the form a proven run sends (the full one when its
    /// proof fits after it, the compact one below), then the proof ([`Self::stamp`]).
    #[inline]
    pub fn write(&self, header: &Header, tagged: bool, datagram: &mut [u8]) {
        if datagram.len() >= PROVEN_LEN {
            header.write(datagram);
        } else if let Some(head) = datagram.first_chunk_mut::<COMPACT_LEN>() {
            *head = header.to_compact_bytes();
        }
        self.stamp(tagged, datagram);
    }

    /// Writes this run's proof into `datagram`, whose header is written: after the full header
    /// (with [`FLAG_TAGGED`] set when `tagged`) from [`PROVEN_LEN`] bytes; below, into the
    /// compact header that a proven run sends there, by masking its numbers ([`Self::unmask`]).
    #[inline]
    pub fn stamp(&self, tagged: bool, datagram: &mut [u8]) {
        let len = datagram.len() as u32;
        if datagram.len() < PROVEN_LEN {
            if let Some(head) = datagram.first_chunk_mut::<COMPACT_LEN>() {
                let (failed, seq) = self.masks();
                for (at, mask) in [(4, failed), (14, seq)] {
                    let field = u32::from_be_bytes(head[at..at + 4].try_into().expect("4 bytes"));
                    head[at..at + 4].copy_from_slice(&(field ^ mask).to_be_bytes());
                }
            }
            return;
        }
        let value = if tagged {
            self.tag(&datagram[..HEADER_LEN], len)
        } else {
            self.token
        };
        datagram[PROOF_AT].copy_from_slice(&value.to_be_bytes());
    }

    /// The masks of a compact header's failed-send count and sequence number: the token's
    /// halves.
    fn masks(&self) -> (u32, u32) {
        ((self.token >> 32) as u32, self.token as u32)
    }

    /// A compact header's failed-send count and 32-bit sequence number as the run sent them:
    /// the compact header has no room for a proof, so a proven run masks both with its token,
    /// and one forged without the token decodes to numbers its session finds implausible or
    /// far behind (see `docs/security.md` for the odds).
    #[inline]
    pub fn unmask(&self, failed32: u32, seq32: u32) -> (u32, u32) {
        let (failed, seq) = self.masks();
        (failed32 ^ failed, seq32 ^ seq)
    }

    /// Whether `proof` proves a datagram of this run.
    #[inline]
    pub fn admits(&self, proof: &Proof) -> bool {
        match proof {
            Proof::Missing => false,
            // XOR and a compare of one word: the time taken tells nothing of the token.
            Proof::Token(t) => t ^ self.token == 0,
            Proof::Tag { tag, head, len } => tag ^ self.tag(head, *len) == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::header::{Header, parse_any};

    fn datagram(flags: u8, len: usize) -> Vec<u8> {
        let mut d = vec![0u8; len];
        Header {
            flags,
            failed: 3,
            flow: 1,
            epoch: 77,
            seq: 1000,
            timestamp_ns: 5,
        }
        .write_fitting(&mut d);
        d
    }

    fn read(d: &[u8]) -> Proof {
        let (h, form) = parse_any(d).unwrap();
        Proof::read(
            d,
            (form == crate::proto::header::Form::Full).then_some(h.flags),
        )
    }

    #[test]
    fn a_run_admits_its_own_token_and_tag_and_nothing_else() {
        let key = DataKey::from_secret(b"0123456789abcdef");
        let run = key.run(77);
        assert_eq!(
            run,
            key.run(77),
            "the proof depends on the secret and epoch alone"
        );
        assert!(run.admits(&Proof::Token(key.token(77))), "the token alone");
        assert_ne!(key.token(77), key.token(78));
        for tagged in [false, true] {
            let mut d = datagram(if tagged { FLAG_TAGGED } else { 0 }, 64);
            run.stamp(tagged, &mut d);
            assert!(run.admits(&read(&d)));
            // Another run, another secret, a changed number, a changed length: refused.
            assert!(!key.run(78).admits(&read(&d)));
            assert!(
                !DataKey::from_secret(b"0123456789abcdeF")
                    .run(77)
                    .admits(&read(&d))
            );
            let mut changed = d.clone();
            changed[23] ^= 1;
            assert_eq!(
                run.admits(&read(&changed)),
                !tagged,
                "a token does not cover the header"
            );
            let mut longer = d.clone();
            longer.push(0);
            assert_eq!(run.admits(&read(&longer)), !tagged);
        }
    }

    #[test]
    fn a_tagged_datagram_stripped_of_its_flag_fails() {
        let run = DataKey::from_secret(b"0123456789abcdef").run(77);
        let mut d = datagram(FLAG_TAGGED, 40);
        run.stamp(true, &mut d);
        d[5] = 0;
        assert!(!run.admits(&read(&d)));
    }

    #[test]
    fn a_compact_header_is_masked_by_the_token_and_a_short_full_one_carries_no_proof() {
        let run = DataKey::from_secret(b"0123456789abcdef").run(77);
        let mut d = datagram(0, 18);
        run.stamp(false, &mut d);
        let (h, _) = parse_any(&d).unwrap();
        assert_ne!((h.failed, h.seq), (3, 1000), "masked on the wire");
        assert_eq!(run.unmask(h.failed, h.seq as u32), (3, 1000));
        assert!(matches!(read(&d), Proof::Missing));
        for len in [32, 39] {
            let mut d = datagram(0, len);
            d[..18].fill(0);
            Header {
                flags: 0,
                failed: 3,
                flow: 1,
                epoch: 77,
                seq: 1000,
                timestamp_ns: 5,
            }
            .write(&mut d);
            assert!(matches!(read(&d), Proof::Missing), "{len}");
            assert!(!run.admits(&read(&d)));
        }
    }

    #[test]
    fn debug_never_shows_a_key() {
        let key = DataKey::from_secret(b"0123456789abcdef");
        assert_eq!(
            format!("{key:?} {:?}", key.run(1)),
            "DataKey(<redacted>) RunProof(<redacted>)"
        );
    }
}
