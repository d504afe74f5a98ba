//! `user_data` tokens: one ring carries several kinds of operation (accept, connect, receive,
//! send), so every SQE's `user_data` packs the op kind, a generation and an index.
//!
//! Layout (high to low bits): 8 bits kind, 24 bits generation, 32 bits index. The index names
//! the worker's slot (a connection, a send slot); the generation lets a worker that reuses a
//! connection slot tell a late completion of the old connection from one of the new. A token
//! of kind [`OpKind::Send`] with generation 0 is the bare slot index, which is what the UDP
//! sender has always used.

/// What an operation is, so a completion can be routed without a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum OpKind {
    /// A send or write of arena bytes.
    Send = 0,
    /// A (multishot) receive.
    Recv = 1,
    /// A multishot accept on a listener.
    Accept = 2,
    /// A connect.
    Connect = 3,
}

impl OpKind {
    fn from_bits(bits: u8) -> Option<OpKind> {
        Some(match bits {
            0 => OpKind::Send,
            1 => OpKind::Recv,
            2 => OpKind::Accept,
            3 => OpKind::Connect,
            _ => return None,
        })
    }
}

const GENERATION_MASK: u32 = (1 << 24) - 1;

/// A decoded `user_data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    /// The op kind.
    pub(crate) kind: OpKind,
    /// Generation of the slot when the op was queued (24 bits; wraps).
    pub(crate) generation: u32,
    /// The slot index.
    pub(crate) index: u32,
}

impl Token {
    /// A token; `generation` is kept modulo 2^24.
    #[inline]
    pub(crate) fn new(kind: OpKind, generation: u32, index: u32) -> Token {
        Token {
            kind,
            generation: generation & GENERATION_MASK,
            index,
        }
    }

    /// The packed `user_data`.
    #[inline]
    pub(crate) fn user_data(self) -> u64 {
        (u64::from(self.kind as u8) << 56)
            | (u64::from(self.generation & GENERATION_MASK) << 32)
            | u64::from(self.index)
    }

    /// Unpacks `user_data`; `None` for a kind this build never queues.
    #[inline]
    pub(crate) fn decode(user_data: u64) -> Option<Token> {
        Some(Token {
            kind: OpKind::from_bits((user_data >> 56) as u8)?,
            generation: (user_data >> 32) as u32 & GENERATION_MASK,
            index: user_data as u32,
        })
    }

    /// Whether this token belongs to slot generation `generation`.
    #[inline]
    pub(crate) fn is_generation(self, generation: u32) -> bool {
        self.generation == generation & GENERATION_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind_and_extreme() {
        for kind in [OpKind::Send, OpKind::Recv, OpKind::Accept, OpKind::Connect] {
            for (generation, index) in [(0, 0), (1, 7), (GENERATION_MASK, u32::MAX)] {
                let t = Token::new(kind, generation, index);
                assert_eq!(Token::decode(t.user_data()), Some(t));
            }
        }
    }

    #[test]
    fn generation_wraps_at_24_bits_and_send_slot_is_bare() {
        let t = Token::new(OpKind::Recv, GENERATION_MASK + 2, 3);
        assert_eq!(t.generation, 1);
        assert!(t.is_generation(GENERATION_MASK + 2));
        assert!(!t.is_generation(2));
        assert_eq!(Token::new(OpKind::Send, 0, 42).user_data(), 42);
    }

    #[test]
    fn unknown_kind_is_refused() {
        assert_eq!(Token::decode(0xFF << 56), None);
    }
}
