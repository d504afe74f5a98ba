//! `RECVMSG` and `SENDMSG` over `msghdr`s that live in the engine's arena: a worker reserves a
//! table of them once at setup, and each receive or send it queues names one entry of the table
//! together with the arena ranges the kernel may write the sender's address and the control
//! messages into (a receive), or read the payload and control messages from (a send).
//!
//! The engine, not the caller, writes every `msghdr` and its one `iovec` (none for a receive
//! into the provided-buffer ring), just before it queues the operation, so the kernel only ever
//! reads pointers the engine checked: into the arena, outside the buffer ring and outside the
//! table.
//! The table itself is kernel-facing memory that [`Engine::arena_bytes_mut`] refuses to hand
//! out. Which entry belongs to which receive, and when the kernel is done with it, is the
//! caller's bookkeeping; a wrong call can only make the kernel write into the wrong arena bytes,
//! never outside the arena, which lives until after the ring.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types, types::RecvMsgOut};

use super::{BUFFER_GROUP, Engine};

/// One table entry: a `msghdr` and the one `iovec` it points at when it carries a payload.
#[repr(C)]
struct TableEntry {
    header: libc::msghdr,
    iov: libc::iovec,
}

const HEADER_SIZE: usize = std::mem::size_of::<TableEntry>();

/// A range of arena bytes: `len` bytes from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArenaRange {
    /// Start, in bytes from the arena's start.
    pub(crate) offset: usize,
    /// Length in bytes.
    pub(crate) len: usize,
}

impl ArenaRange {
    /// One past the last byte; `None` on overflow.
    fn end(self) -> Option<usize> {
        self.offset.checked_add(self.len)
    }

    /// Whether the two ranges share a byte (an empty range shares none).
    fn overlaps(self, other: ArenaRange) -> bool {
        self.len > 0
            && other.len > 0
            && self.offset < other.offset.saturating_add(other.len)
            && other.offset < self.offset.saturating_add(self.len)
    }
}

/// Where the reserved `msghdr` table lies in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MsghdrTable {
    offset: usize,
    count: usize,
}

impl MsghdrTable {
    fn bytes(self) -> ArenaRange {
        ArenaRange {
            offset: self.offset,
            len: self.count * HEADER_SIZE,
        }
    }
}

/// What the kernel wrote back into a `msghdr` when its receive completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MsghdrLengths {
    /// Bytes of the sender's address (`msg_namelen`).
    pub(crate) name: usize,
    /// Bytes of control messages (`msg_controllen`).
    pub(crate) control: usize,
    /// `msg_flags` (`MSG_TRUNC`, `MSG_CTRUNC`).
    pub(crate) flags: i32,
}

/// The parts of one multishot `RECVMSG` buffer (`io_uring_recvmsg_out`, then the address,
/// the control messages and the payload) of a receive queued with `name_len` bytes of room for
/// the address and `control_len` for control messages; `None` when the buffer is too short.
pub(crate) fn parse_recvmsg_out(
    buffer: &[u8],
    name_len: usize,
    control_len: usize,
) -> Option<RecvMsgOut<'_>> {
    // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths).
    let mut template: libc::msghdr = unsafe { std::mem::zeroed() };
    template.msg_namelen = libc::socklen_t::try_from(name_len).ok()?;
    template.msg_controllen = control_len;
    RecvMsgOut::parse(buffer, &template).ok()
}

impl Engine {
    /// Bytes one table entry (a `msghdr` and an `iovec`) takes (entries lie back to back).
    pub(crate) const MSGHDR_BYTES: usize = HEADER_SIZE;

    /// Reserves `count` `msghdr`s at arena `offset` for receives (setup, once) and zeroes them.
    /// False when already reserved, for no entries, a misaligned offset, a table that leaves
    /// the arena or one that overlaps the provided-buffer ring.
    pub(crate) fn reserve_msghdrs(&mut self, offset: usize, count: usize) -> bool {
        let table = MsghdrTable { offset, count };
        let Some(len) = count.checked_mul(HEADER_SIZE) else {
            return false;
        };
        let fits = self.msghdrs.is_none()
            && count > 0
            && offset.is_multiple_of(std::mem::align_of::<libc::msghdr>())
            && !self.buf_ring_bytes().overlaps(table.bytes());
        match self.arena.bytes_mut(offset, len).filter(|_| fits) {
            Some(bytes) => {
                bytes.fill(0);
                self.msghdrs = Some(table);
                true
            }
            None => false,
        }
    }

    /// Queues a multishot `RECVMSG` on `fd` through table entry `index`, buffers from the
    /// provided-buffer ring: the kernel writes each datagram's address (up to `name.len`
    /// bytes) and control messages (up to `control.len`) into its buffer, after an
    /// `io_uring_recvmsg_out`. False without a buffer ring, for a bad entry or range (see
    /// [`Engine::push_recvmsg_nowait`]), or when the SQ is full.
    pub(crate) fn push_recvmsg_multi(
        &mut self,
        fd: RawFd,
        index: usize,
        name: ArenaRange,
        control: ArenaRange,
        user_data: u64,
    ) -> bool {
        let Some(header) = self.write_entry(index, Some(name), None, control) else {
            return false;
        };
        let entry = opcode::RecvMsgMulti::new(types::Fd(fd), header.cast_const(), BUFFER_GROUP)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a non-blocking single-shot `RECVMSG` (`MSG_DONTWAIT`) on `fd` through table
    /// entry `index`: the payload goes to a buffer of the provided-buffer ring, the address
    /// into arena bytes `name` and the control messages into `control`, and the kernel writes
    /// their lengths back into the entry ([`Engine::msghdr_lengths`]). False without a buffer
    /// ring, for an entry outside the table, for a range that leaves the arena or overlaps the
    /// buffer ring or the table, or when the SQ is full.
    pub(crate) fn push_recvmsg_nowait(
        &mut self,
        fd: RawFd,
        index: usize,
        name: ArenaRange,
        control: ArenaRange,
        user_data: u64,
    ) -> bool {
        let Some(header) = self.write_entry(index, Some(name), None, control) else {
            return false;
        };
        let entry = opcode::RecvMsg::new(types::Fd(fd), header)
            .flags(libc::MSG_DONTWAIT as u32)
            .buf_group(BUFFER_GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a `SENDMSG` of arena bytes `payload` on `fd` through table entry `index`, with
    /// the control messages the caller wrote into arena bytes `control` (the kernel reads both,
    /// and copies the entry when the send is issued). False for an entry outside the table, for
    /// a range that leaves the arena or overlaps the buffer ring or the table, or when the SQ is
    /// full.
    pub(crate) fn push_sendmsg(
        &mut self,
        fd: RawFd,
        index: usize,
        payload: ArenaRange,
        control: ArenaRange,
        user_data: u64,
    ) -> bool {
        let Some(header) = self.write_entry(index, None, Some(payload), control) else {
            return false;
        };
        let entry = opcode::SendMsg::new(types::Fd(fd), header.cast_const())
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a non-blocking single-shot `RECVMSG` of `fd`'s error queue (`MSG_ERRQUEUE`,
    /// `MSG_DONTWAIT`: `-EAGAIN` when it is empty) through table entry `index`: the first
    /// `data.len` bytes of the queued packet go into arena bytes `data` (the rest is cut,
    /// `MSG_TRUNC`), its control messages into `control`, and the kernel writes their lengths
    /// back into the entry ([`Engine::msghdr_lengths`]). False as for [`Engine::push_sendmsg`].
    pub(crate) fn push_recv_errqueue(
        &mut self,
        fd: RawFd,
        index: usize,
        data: ArenaRange,
        control: ArenaRange,
        user_data: u64,
    ) -> bool {
        let Some(header) = self.write_entry(index, None, Some(data), control) else {
            return false;
        };
        let entry = opcode::RecvMsg::new(types::Fd(fd), header)
            .flags((libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) as u32)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// The lengths and flags table entry `index` holds: what the kernel wrote back when the
    /// last receive through it completed (as queued while one is in flight).
    pub(crate) fn msghdr_lengths(&self, index: usize) -> Option<MsghdrLengths> {
        let header = self.msghdr_ptr(index)?;
        // SAFETY: `msghdr_ptr` returns an aligned entry inside the arena, which lives as long
        // as `self`. The kernel may write it back concurrently, so it is read volatile, as a
        // copy, and no reference to it is formed.
        let h = unsafe { header.read_volatile() };
        Some(MsghdrLengths {
            name: h.msg_namelen as usize,
            control: h.msg_controllen,
            flags: h.msg_flags,
        })
    }

    /// Arena bytes the kernel may be writing: the buffer-ring entries and the `msghdr` table.
    /// [`Engine::arena_bytes_mut`] refuses ranges that overlap them.
    pub(super) fn kernel_owned(&self, range: ArenaRange) -> bool {
        let entries = ArenaRange {
            offset: 0,
            len: self
                .buf_ring
                .as_ref()
                .map_or(0, |br| br.layout().ring_bytes()),
        };
        range.overlaps(entries) || self.msghdrs.is_some_and(|t| range.overlaps(t.bytes()))
    }

    /// The whole provided-buffer ring (entries and buffers); empty without one.
    fn buf_ring_bytes(&self) -> ArenaRange {
        ArenaRange {
            offset: 0,
            len: self
                .buf_ring
                .as_ref()
                .map_or(0, |br| br.layout().arena_bytes()),
        }
    }

    /// Whether the kernel may read or write `range` for an operation queued through the table
    /// (an address, a payload, control messages): inside the arena, outside the buffer ring and
    /// the table.
    fn kernel_range_ok(&self, range: ArenaRange) -> bool {
        range.end().is_some_and(|end| end <= self.arena.len())
            && u32::try_from(range.len).is_ok()
            && !range.overlaps(self.buf_ring_bytes())
            && !self.msghdrs.is_some_and(|t| range.overlaps(t.bytes()))
    }

    /// Table entry `index` inside the arena; `None` without a table or past its end.
    fn msghdr_ptr(&self, index: usize) -> Option<*mut libc::msghdr> {
        let table = self.msghdrs?;
        if index >= table.count {
            return None;
        }
        // Checked at reservation: the table is aligned and inside the arena.
        Some(
            self.arena
                .as_ptr()
                .wrapping_add(table.offset + index * HEADER_SIZE)
                .cast(),
        )
    }

    /// Writes entry `index` with the arena ranges the kernel may use: the peer's address
    /// (`name`: none on a connected socket), the payload (`payload`: none for a receive into
    /// the provided-buffer ring, which then must exist) and the control messages, after
    /// checking them all.
    fn write_entry(
        &mut self,
        index: usize,
        name: Option<ArenaRange>,
        payload: Option<ArenaRange>,
        control: ArenaRange,
    ) -> Option<*mut libc::msghdr> {
        let ranges_ok = [name, payload, Some(control)]
            .into_iter()
            .flatten()
            .all(|r| self.kernel_range_ok(r));
        if !ranges_ok || (payload.is_none() && self.buf_ring.is_none()) {
            return None;
        }
        let header = self.msghdr_ptr(index)?;
        let iov_at: *mut libc::iovec = header
            .cast::<u8>()
            .wrapping_add(std::mem::offset_of!(TableEntry, iov))
            .cast();
        let base = self.arena.as_ptr();
        // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths).
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        if let Some(name) = name {
            h.msg_name = base.wrapping_add(name.offset).cast();
            h.msg_namelen = name.len as libc::socklen_t;
        }
        h.msg_control = base.wrapping_add(control.offset).cast();
        h.msg_controllen = control.len;
        if let Some(payload) = payload {
            let iov = libc::iovec {
                iov_base: base.wrapping_add(payload.offset).cast(),
                iov_len: payload.len,
            };
            // SAFETY: `msghdr_ptr` returns an aligned entry inside the arena, which lives as
            // long as `self`, and its `iovec` lies inside the same entry (`TableEntry` is
            // `repr(C)`, so the field is aligned too); the kernel reads it only while it copies
            // an operation queued through this entry, so it is written volatile and no
            // reference to it is formed.
            unsafe { iov_at.write_volatile(iov) };
            h.msg_iov = iov_at;
            h.msg_iovlen = 1;
        }
        // SAFETY: as above, the entry is aligned inside the arena; the kernel may still write
        // back an earlier operation's lengths into it, so it is written volatile and no
        // reference to it is formed.
        unsafe { header.write_volatile(h) };
        Some(header)
    }
}
