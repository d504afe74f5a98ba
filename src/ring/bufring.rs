//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`, Linux 5.19) laid out inside a worker's
//! arena: the ring of `io_uring_buf` entries at the arena's start, the buffers after it.
//!
//! The kernel takes buffers from the ring's head (one per datagram or plain receive, several
//! consecutive ones per recv bundle); the worker hands buffers back with `recycle` and makes them
//! visible with one release store of the tail per batch (`publish`).
//!
//! Two orders ([`BufOrder`]):
//! - **By id** (recv bundles): slot `i` of the ring always holds buffer `i`. A recycled buffer
//!   is marked returned, and the tail advances only over slots whose buffer came back, in slot
//!   order. So the kernel always takes buffers in id order (wrapping at the ring size), which is
//!   what lets a bundle completion name only its first buffer id, whatever order completions
//!   are handled in.
//! - **As returned** (one datagram per buffer): a recycled buffer goes into the next slot at
//!   once. The kernel then reuses the buffers handed back most recently, so a worker that keeps
//!   some buffers back keeps the kernel's copies inside the ones it still hands out.

use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;

use crate::mem::{Arena, PAGE_SIZE};

/// Byte offset of the shared tail inside the first ring entry (`io_uring_buf_ring.tail`).
const TAIL_OFFSET: usize = 14;
const ENTRY_SIZE: usize = std::mem::size_of::<BufRingEntry>();

/// The order in which recycled buffers go back to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BufOrder {
    /// In buffer id order, as recv bundles need.
    ById,
    /// As each one is recycled, in any order.
    AsReturned,
}

/// Shape of a buffer ring: how many buffers, how large each is, in which order they go back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BufRingLayout {
    /// Number of buffers (a power of two, at most 32768).
    pub(crate) entries: u16,
    /// Size of each buffer in bytes.
    pub(crate) buf_size: u32,
    /// How recycled buffers go back.
    pub(crate) order: BufOrder,
}

impl BufRingLayout {
    /// Bytes of the entry array, rounded to whole pages.
    pub(crate) fn ring_bytes(&self) -> usize {
        (usize::from(self.entries) * ENTRY_SIZE).div_ceil(PAGE_SIZE) * PAGE_SIZE
    }

    /// Bytes the whole layout needs in an arena.
    pub(crate) fn arena_bytes(&self) -> usize {
        self.ring_bytes() + usize::from(self.entries) * self.buf_size as usize
    }
}

/// The worker-side view of a registered buffer ring inside an arena.
#[derive(Debug)]
pub(super) struct BufRing {
    entries: *mut BufRingEntry,
    mask: u16,
    tail: u16,
    layout: BufRingLayout,
    buffers_offset: usize,
    base: *mut u8,
    /// Buffers handed back whose slot the tail has not reached yet, by buffer id.
    returned: Box<[bool]>,
}

impl BufRing {
    /// Lays the ring out at the start of `arena` and fills it with every buffer.
    ///
    /// The caller registers `ring_addr()` with the kernel afterwards and keeps `arena` alive
    /// for as long as this value and the ring exist.
    pub(super) fn new(arena: &mut Arena, layout: BufRingLayout) -> Option<BufRing> {
        if !layout.entries.is_power_of_two()
            || layout.entries > 32768
            || arena.len() < layout.arena_bytes()
        {
            return None;
        }
        let mut ring = BufRing {
            entries: arena.as_ptr().cast(),
            mask: layout.entries - 1,
            tail: 0,
            layout,
            buffers_offset: layout.ring_bytes(),
            base: arena.as_ptr(),
            returned: vec![false; usize::from(layout.entries)].into_boxed_slice(),
        };
        for bid in 0..layout.entries {
            ring.recycle(bid);
        }
        ring.publish();
        Some(ring)
    }

    /// Address of the entry array, for registration.
    pub(super) fn ring_addr(&self) -> u64 {
        self.entries as u64
    }

    /// The layout this ring was built with.
    pub(super) fn layout(&self) -> BufRingLayout {
        self.layout
    }

    /// Offset in the arena of buffer `bid`.
    pub(super) fn buffer_offset(&self, bid: u16) -> usize {
        self.buffers_offset + usize::from(bid) * self.layout.buf_size as usize
    }

    /// Hands buffer `bid` back, visible after `publish`: at once (`AsReturned`), or with every
    /// returned buffer after it once the tail reaches its slot (`ById`). Each buffer the kernel
    /// handed out goes back at most once.
    pub(super) fn recycle(&mut self, bid: u16) {
        if self.layout.order == BufOrder::AsReturned {
            self.refill(self.tail & self.mask, bid & self.mask);
            return;
        }
        self.returned[usize::from(bid & self.mask)] = true;
        loop {
            let slot = self.tail & self.mask;
            if !std::mem::take(&mut self.returned[usize::from(slot)]) {
                break;
            }
            self.refill(slot, slot);
        }
    }

    /// Puts buffer `bid` into ring slot `slot` (the unpublished tail's) and advances the tail.
    fn refill(&mut self, slot: u16, bid: u16) {
        let addr = self.base as u64 + self.buffer_offset(bid) as u64;
        // SAFETY: `slot <= mask < entries`, and the entry array lies inside the arena, which
        // outlives this ring (the engine drops the ring first). The kernel only reads entries
        // between its head and our published tail, and this slot is beyond the published tail:
        // at most `entries` buffers are out of the worker's hands, so the tail never laps the
        // kernel's head.
        let entry = unsafe { &mut *self.entries.add(usize::from(slot)) };
        entry.set_addr(addr);
        entry.set_len(self.layout.buf_size);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Makes every recycled buffer visible to the kernel with one release store.
    pub(super) fn publish(&mut self) {
        // SAFETY: the tail field sits at byte 14 of the first entry (it overlays that entry's
        // `resv`), is 2-byte aligned because the array is page aligned, and the kernel reads it
        // with an acquire load, which this release store pairs with.
        let tail = unsafe {
            &*(self
                .entries
                .cast::<u8>()
                .add(TAIL_OFFSET)
                .cast::<AtomicU16>())
        };
        tail.store(self.tail, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_sizes() {
        let l = BufRingLayout {
            entries: 1024,
            buf_size: 2048,
            order: BufOrder::ById,
        };
        assert_eq!(l.ring_bytes(), 16384);
        assert_eq!(l.arena_bytes(), 16384 + 1024 * 2048);
    }

    /// A ring of 8 buffers of 1 KiB going back in `order`, and the arena it lies in (the
    /// mapping stays put when the `Arena` value moves).
    fn eight_buffers(order: BufOrder) -> (Arena, BufRing) {
        let layout = BufRingLayout {
            entries: 8,
            buf_size: 1024,
            order,
        };
        let mut arena = Arena::allocate_on_node(layout.arena_bytes(), 0, false).unwrap();
        let ring = BufRing::new(&mut arena, layout).unwrap();
        (arena, ring)
    }

    #[test]
    fn the_tail_advances_only_over_returned_buffers_in_slot_order() {
        let (_arena, mut ring) = eight_buffers(BufOrder::ById);
        assert_eq!(ring.tail, 8);
        ring.recycle(2);
        ring.recycle(1);
        assert_eq!(ring.tail, 8, "buffer 0 is still out");
        ring.recycle(0);
        assert_eq!(ring.tail, 11);
        for bid in [3, 4, 5, 6, 7, 0] {
            ring.recycle(bid);
        }
        assert_eq!(ring.tail, 17, "ids wrap at the ring size");
        for slot in 0..8u16 {
            // SAFETY: the entries lie in `arena`, alive for this test.
            let entry = unsafe { &*ring.entries.add(usize::from(slot)) };
            assert_eq!(entry.bid(), slot);
        }
    }

    #[test]
    fn buffers_returned_in_any_order_go_into_the_next_slots_at_once() {
        let (_arena, mut ring) = eight_buffers(BufOrder::AsReturned);
        assert_eq!(ring.tail, 8);
        for bid in [5, 2, 7] {
            ring.recycle(bid);
        }
        assert_eq!(ring.tail, 11, "no waiting for buffer 0");
        for (slot, bid) in [(0u16, 5u16), (1, 2), (2, 7), (3, 3)] {
            // SAFETY: the entries lie in `arena`, alive for this test.
            let entry = unsafe { &*ring.entries.add(usize::from(slot)) };
            assert_eq!(entry.bid(), bid);
            assert_eq!(
                entry.addr(),
                ring.base as u64 + ring.buffer_offset(bid) as u64
            );
            assert_eq!(entry.len(), 1024);
        }
    }

    #[test]
    fn rejects_bad_layouts() {
        let mut arena = Arena::allocate_on_node(1 << 20, 0, false).unwrap();
        let odd = BufRingLayout {
            entries: 100,
            buf_size: 1024,
            order: BufOrder::ById,
        };
        assert!(BufRing::new(&mut arena, odd).is_none());
        let too_big = BufRingLayout {
            entries: 1024,
            buf_size: 4096,
            order: BufOrder::ById,
        };
        assert!(BufRing::new(&mut arena, too_big).is_none());
    }
}
