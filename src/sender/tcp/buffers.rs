//! Each TCP connection's two send buffers, which its writes take in turn.
//!
//! Why two, and why offset by [`BUFFER_SKEW`]: the kernel copies every write from the
//! buffer into the socket's page fragments, and the destination advances by the bytes written.
//! With a write size that is a multiple of 4 KiB (the 128 KiB default of iperf3 and of
//! ringblast's `--size 131072`) the source and the destination keep the same distance modulo
//! 4 KiB for the whole run; when that distance is small, every load of the copy aliases the
//! store before it (4K aliasing) and loopback throughput falls by a third. Alternating two
//! buffers whose starts differ by half a page and a cache line modulo 4 KiB moves that distance
//! on every write, whatever the size.
//!
//! A zero-copy send (`--send-op send-zc`) owns its buffer until its notification arrives, after
//! the write's own completion; a buffer is stamped again only once it owes none, so the kernel
//! never sends bytes the next write already overwrote.

use crate::ring::token::{OpKind, Token};

/// How far the second buffer's start is from the first's, modulo 4 KiB.
pub(super) const BUFFER_SKEW: usize = 2048 + 64;
const PAGE: usize = 4096;
/// The bit of a send token's index that names the connection's second buffer.
const SECOND_BUFFER: u32 = 1 << 31;

/// Where the connections' buffers lie in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SendBuffers {
    base: usize,
    stride: usize,
}

impl SendBuffers {
    /// Buffers of `slot_bytes` each, from arena offset `base`.
    pub(super) fn new(base: usize, slot_bytes: usize) -> SendBuffers {
        SendBuffers {
            base,
            stride: (slot_bytes + BUFFER_SKEW).div_ceil(PAGE) * PAGE,
        }
    }

    /// The arena end of `conns` connections' buffers.
    pub(super) fn end(&self, conns: usize) -> usize {
        self.base + 2 * conns * self.stride
    }

    /// The arena offset of connection `conn`'s buffer `buffer` (0 or 1).
    pub(super) fn offset(&self, conn: usize, buffer: usize) -> usize {
        self.base + (2 * conn + buffer) * self.stride + buffer * BUFFER_SKEW
    }
}

/// Which buffer a connection writes from, and the zero-copy notifications each still owes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct BufferTurn {
    current: usize,
    next: usize,
    notifications_due: [u32; 2],
}

impl BufferTurn {
    /// The buffer the next write may stamp, `None` while it still owes a notification.
    pub(super) fn free(&self) -> Option<usize> {
        (self.notifications_due[self.next] == 0).then_some(self.next)
    }

    /// A write from `buffer` was queued: it is current, and the other one goes next.
    pub(super) fn begin(&mut self, buffer: usize) {
        self.current = buffer;
        self.next = buffer ^ 1;
    }

    /// The buffer of the write in flight (or of the last one).
    pub(super) fn current(&self) -> usize {
        self.current
    }

    /// Books a send completion of `buffer`: a write whose completion says a notification
    /// follows (`more`) keeps the buffer until that notification arrives.
    pub(super) fn completed(&mut self, buffer: usize, more: bool, notification: bool) {
        let due = &mut self.notifications_due[buffer & 1];
        if notification {
            *due = due.saturating_sub(1);
        } else if more {
            *due += 1;
        }
    }
}

/// The `user_data` of a write from connection `conn`'s buffer `buffer`.
pub(super) fn send_token(generation: u32, conn: usize, buffer: usize) -> u64 {
    let second = if buffer == 1 { SECOND_BUFFER } else { 0 };
    Token::new(OpKind::Send, generation, conn as u32 | second).user_data()
}

/// The connection and the buffer a send token's index names.
pub(super) fn split_send_index(index: u32) -> (usize, usize) {
    (
        (index & !SECOND_BUFFER) as usize,
        usize::from(index & SECOND_BUFFER != 0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_disjoint_and_skewed_by_half_a_page() {
        let slot = 128 * 1024;
        let b = SendBuffers::new(8192, slot);
        let mut ranges: Vec<(usize, usize)> = (0..3)
            .flat_map(|c| (0..2).map(move |k| (c, k)))
            .map(|(c, k)| (b.offset(c, k), b.offset(c, k) + slot))
            .collect();
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "{ranges:?}");
        assert!(ranges.last().unwrap().1 <= b.end(3));
        assert_eq!(b.offset(0, 0), 8192);
        for c in 0..3 {
            let distance = (b.offset(c, 1) - b.offset(c, 0)) % PAGE;
            assert_eq!(distance, BUFFER_SKEW);
        }
    }

    #[test]
    fn turns_alternate_and_a_buffer_owing_a_notification_waits() {
        let mut t = BufferTurn::default();
        assert_eq!(t.free(), Some(0));
        t.begin(0);
        t.completed(0, true, false);
        assert_eq!(t.free(), Some(1));
        t.begin(1);
        t.completed(1, false, false);
        assert_eq!(t.current(), 1);
        assert_eq!(t.free(), None, "buffer 0 still owes its notification");
        t.completed(0, false, true);
        assert_eq!(t.free(), Some(0));
    }

    #[test]
    fn send_tokens_carry_the_buffer() {
        for (conn, buffer) in [(0, 0), (0, 1), (12345, 1), (7, 0)] {
            let token = Token::decode(send_token(3, conn, buffer)).unwrap();
            assert_eq!(token.kind, OpKind::Send);
            assert!(token.is_generation(3));
            assert_eq!(split_send_index(token.index), (conn, buffer));
        }
    }
}
