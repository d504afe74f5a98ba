//! The UDP sink's receive memory, laid out in the worker's arena right after the
//! provided-buffer ring: a table of `msghdr`s (the multishot `RECVMSG` template, then, for
//! `--rx-wait inline`, one per inline receive slot), then one address buffer and one control
//! buffer per entry. This module plans that layout, sizes the address and control room every
//! receive gets, knows which inline slot the kernel still owns (busy flags) and reads back
//! what a completed receive wrote. The engine only writes the `msghdr`s it is asked for,
//! after checking that everything they point at lies in the arena, which outlives the ring.

use std::os::fd::RawFd;

use io_uring::types::RecvMsgOut;

use crate::{
    error::Error,
    ring::{ArenaRange, Engine, parse_recvmsg_out},
};

/// Control bytes reserved per received datagram: UDP_GRO (24) + SO_RXQ_OVFL (24) +
/// SCM_TIMESTAMPNS (32), with room to spare.
pub(crate) const RECV_CONTROL_LEN: usize = 96;
/// Bytes of `io_uring_recvmsg_out` at the start of every multishot `RECVMSG` buffer.
pub(crate) const RECVMSG_OUT_LEN: usize = 16;
/// Bytes reserved for the sender's address in each receive (`sockaddr_in6`).
pub(crate) const RECV_NAME_LEN: usize = std::mem::size_of::<libc::sockaddr_in6>();
/// Receives queued per `io_uring_enter` in inline mode (and slots laid out for them).
pub(crate) const INLINE_BATCH: usize = 32;
/// Table entry of the multishot template; inline slot `s` is entry `1 + s`.
const TEMPLATE: usize = 0;

/// What an inline receive wrote besides the payload: the source address and the control
/// messages, as long as the kernel said they were.
pub(super) struct InlineMeta<'a> {
    /// The source `sockaddr`.
    pub(crate) name: &'a [u8],
    /// The control messages (`cmsghdr`s).
    pub(crate) control: &'a [u8],
}

/// Where the receive memory lies in the arena, and which inline slots are in flight.
#[derive(Debug)]
pub(super) struct RecvMemory {
    /// Arena offset of the `msghdr` table (aligned, right after the buffer ring).
    table: usize,
    /// Entries of the table: the template plus the inline slots.
    entries: usize,
    /// A receive on the inline slot is in flight: its entry and buffers belong to the kernel.
    busy: [bool; INLINE_BATCH],
}

impl RecvMemory {
    /// The layout from arena offset `after` on, with inline slots when `inline`.
    pub(super) fn plan(after: usize, inline: bool) -> RecvMemory {
        RecvMemory {
            table: after.next_multiple_of(std::mem::align_of::<libc::msghdr>()),
            entries: 1 + if inline { INLINE_BATCH } else { 0 },
            busy: [false; INLINE_BATCH],
        }
    }

    /// One past the last arena byte the layout uses.
    pub(super) fn end(&self) -> usize {
        self.table + self.entries * (Engine::MSGHDR_BYTES + RECV_NAME_LEN + RECV_CONTROL_LEN)
    }

    /// Reserves the table in `engine` and faults in the address and control buffers (setup).
    pub(super) fn reserve(&self, engine: &mut Engine) -> Result<(), Error> {
        let buffers = self.name(0).offset;
        let zeroed = engine.reserve_msghdrs(self.table, self.entries)
            && engine
                .arena_bytes_mut(buffers, self.end() - buffers)
                .map(|bytes| bytes.fill(0))
                .is_some();
        match zeroed {
            true => Ok(()),
            false => Err(Error::Unsupported(format!(
                "cannot lay out the receive msghdrs at arena offset {} ({} entries)",
                self.table, self.entries
            ))),
        }
    }

    /// Queues the multishot `RECVMSG` on `fd` through the template.
    pub(super) fn push_multishot(&self, engine: &mut Engine, fd: RawFd, user_data: u64) -> bool {
        engine.push_recvmsg_multi(
            fd,
            TEMPLATE,
            self.name(TEMPLATE),
            self.control(TEMPLATE),
            user_data,
        )
    }

    /// Queues a non-blocking receive on `fd` into inline slot `slot`; false while an earlier
    /// one on it is in flight, for a slot this layout has not, or when the SQ is full.
    pub(super) fn push_inline(
        &mut self,
        engine: &mut Engine,
        fd: RawFd,
        slot: usize,
        user_data: u64,
    ) -> bool {
        let entry = 1 + slot;
        if entry >= self.entries || self.busy[slot] {
            return false;
        }
        let pushed =
            engine.push_recvmsg_nowait(fd, entry, self.name(entry), self.control(entry), user_data);
        self.busy[slot] = pushed;
        pushed
    }

    /// The receive of inline slot `slot` completed (its CQE was reaped): it may be read and
    /// reused.
    pub(super) fn completed(&mut self, slot: usize) {
        if let Some(busy) = self.busy.get_mut(slot) {
            *busy = false;
        }
    }

    /// The address and control bytes the last completed receive of inline slot `slot` wrote
    /// (`None` while one is in flight on it).
    pub(super) fn inline_meta<'a>(
        &self,
        engine: &'a Engine,
        slot: usize,
    ) -> Option<InlineMeta<'a>> {
        if *self.busy.get(slot)? {
            return None;
        }
        let entry = 1 + slot;
        let lengths = engine.msghdr_lengths(entry)?;
        let (name, control) = (self.name(entry), self.control(entry));
        Some(InlineMeta {
            name: engine
                .arena()
                .bytes(name.offset, lengths.name.min(name.len))?,
            control: engine
                .arena()
                .bytes(control.offset, lengths.control.min(control.len))?,
        })
    }

    /// The address buffer of table entry `entry`.
    fn name(&self, entry: usize) -> ArenaRange {
        ArenaRange {
            offset: self.table + self.entries * Engine::MSGHDR_BYTES + entry * RECV_NAME_LEN,
            len: RECV_NAME_LEN,
        }
    }

    /// The control buffer of table entry `entry`.
    fn control(&self, entry: usize) -> ArenaRange {
        ArenaRange {
            offset: self.table
                + self.entries * (Engine::MSGHDR_BYTES + RECV_NAME_LEN)
                + entry * RECV_CONTROL_LEN,
            len: RECV_CONTROL_LEN,
        }
    }
}

/// The parts of one multishot receive's buffer, as the template queued it.
pub(super) fn parse_multishot(buffer: &[u8]) -> Option<RecvMsgOut<'_>> {
    parse_recvmsg_out(buffer, RECV_NAME_LEN, RECV_CONTROL_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        mem::Arena,
        ring::{BufOrder, BufRingLayout, RingSize, probe},
    };

    fn sink_engine(layout: BufRingLayout, recv: &RecvMemory) -> Engine {
        let arena = Arena::allocate_on_node(recv.end(), 0, false).unwrap();
        let size = RingSize {
            sq_entries: 64,
            cq_entries: 128,
        };
        Engine::new(size, arena, probe::SINK_OPS, false, Some(layout)).unwrap()
    }

    #[test]
    fn the_layout_follows_the_buffers_aligned_and_back_to_back() {
        let recv = RecvMemory::plan(12_345, true);
        assert_eq!(recv.table, 12_352);
        let last = recv.entries - 1;
        assert_eq!(recv.entries, 1 + INLINE_BATCH);
        assert_eq!(
            recv.name(0).offset,
            recv.table + recv.entries * Engine::MSGHDR_BYTES
        );
        assert_eq!(
            recv.name(last).offset + RECV_NAME_LEN,
            recv.control(0).offset
        );
        assert_eq!(recv.control(last).offset + RECV_CONTROL_LEN, recv.end());
        let multishot_only = RecvMemory::plan(12_345, false);
        assert_eq!(multishot_only.entries, 1);
        assert_eq!(
            multishot_only.end() - multishot_only.table,
            Engine::MSGHDR_BYTES + RECV_NAME_LEN + RECV_CONTROL_LEN
        );
    }

    #[test]
    fn an_inline_slot_is_queued_once_until_it_completes() {
        let layout = BufRingLayout {
            entries: 4,
            buf_size: 2048,
            order: BufOrder::AsReturned,
        };
        let mut recv = RecvMemory::plan(layout.arena_bytes(), true);
        let mut engine = sink_engine(layout, &recv);
        recv.reserve(&mut engine).unwrap();
        assert!(recv.push_inline(&mut engine, -1, 3, 1));
        assert!(!recv.push_inline(&mut engine, -1, 3, 1), "still in flight");
        assert!(recv.inline_meta(&engine, 3).is_none(), "the kernel's");
        recv.completed(3);
        let meta = recv.inline_meta(&engine, 3).unwrap();
        assert_eq!(
            (meta.name.len(), meta.control.len()),
            (RECV_NAME_LEN, RECV_CONTROL_LEN),
            "as queued: nothing ran"
        );
        assert!(recv.push_inline(&mut engine, -1, 3, 1));
        assert!(!recv.push_inline(&mut engine, -1, INLINE_BATCH, 1));
        assert!(recv.push_multishot(&mut engine, -1, 1));
        assert!(recv.reserve(&mut engine).is_err(), "reserved once");

        let mut multishot_only = RecvMemory::plan(layout.arena_bytes(), false);
        let mut engine = sink_engine(layout, &multishot_only);
        multishot_only.reserve(&mut engine).unwrap();
        assert!(
            !multishot_only.push_inline(&mut engine, -1, 0, 1),
            "no slots"
        );
        assert!(multishot_only.push_multishot(&mut engine, -1, 1));
    }
}
