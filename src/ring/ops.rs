//! One small builder per io_uring operation the workers queue, each a method on [`Engine`]
//! that checks what its SQE points at and pushes it.
//!
//! Every buffer an op names is checked to lie inside the engine's arena, and the only other
//! memory an SQE may point at is the connect address the engine owns, so each builder is safe
//! to call. Receives through a `msghdr` (also in the arena) are built in `msghdr`. Operations
//! without memory (accept, poll, buffer-selecting receives) only need a descriptor; a
//! descriptor closed while its op is in flight makes the op fail, never touch freed memory.

use std::{net::SocketAddr, os::fd::RawFd};

use io_uring::{opcode, types};

use super::{BUFFER_GROUP, Engine};

/// `IORING_SEND_ZC_REPORT_USAGE`: the notification says whether the kernel copied anyway.
const SEND_ZC_REPORT_USAGE: u16 = 8;

impl Engine {
    /// Queues a `WRITE_FIXED` of arena bytes `offset..offset+len` on `fd`. Returns false when
    /// the SQ is full or the range is outside the registered arena.
    pub(crate) fn push_write_fixed(
        &mut self,
        fd: RawFd,
        offset: usize,
        len: u32,
        user_data: u64,
    ) -> bool {
        let Some(bytes) = self.arena.bytes(offset, len as usize) else {
            return false;
        };
        let entry = opcode::WriteFixed::new(types::Fd(fd), bytes.as_ptr(), len, 0)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a plain `SEND` of arena bytes (node-local memory, copied like any send).
    pub(crate) fn push_send(&mut self, fd: RawFd, offset: usize, len: u32, user_data: u64) -> bool {
        let Some(bytes) = self.arena.bytes(offset, len as usize) else {
            return false;
        };
        let entry = opcode::Send::new(types::Fd(fd), bytes.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a plain `SEND` of arena bytes `offset..offset+len` on unconnected `fd` to the
    /// socket address stored in the arena at `addr` (`addr.len` bytes: a `sockaddr_in` or
    /// `sockaddr_in6`), as `sendto(2)` would. Returns false when the SQ is full or either range
    /// is outside the arena.
    pub(crate) fn push_send_to(
        &mut self,
        fd: RawFd,
        offset: usize,
        len: u32,
        addr: super::ArenaRange,
        user_data: u64,
    ) -> bool {
        let Some(name) = self.arena.bytes(addr.offset, addr.len) else {
            return false;
        };
        let name = (name.as_ptr(), addr.len as libc::socklen_t);
        let Some(bytes) = self.arena.bytes(offset, len as usize) else {
            return false;
        };
        let entry = opcode::Send::new(types::Fd(fd), bytes.as_ptr(), len)
            .dest_addr(name.0.cast())
            .dest_addr_len(name.1)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a zero-copy `SEND_ZC` of arena bytes from the registered buffer.
    pub(crate) fn push_send_zc_fixed(
        &mut self,
        fd: RawFd,
        offset: usize,
        len: u32,
        user_data: u64,
    ) -> bool {
        let Some(bytes) = self.arena.bytes(offset, len as usize) else {
            return false;
        };
        let entry = opcode::SendZc::new(types::Fd(fd), bytes.as_ptr(), len)
            .buf_index(Some(0))
            .zc_flags(SEND_ZC_REPORT_USAGE)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a multishot `RECV` on a stream socket into the provided-buffer ring: one
    /// completion per filled buffer until EOF, an error, or the ring runs dry (`ENOBUFS`).
    pub(crate) fn push_recv_multi(&mut self, fd: RawFd, user_data: u64) -> bool {
        if self.buf_ring.is_none() {
            return false;
        }
        let entry = opcode::RecvMulti::new(types::Fd(fd), BUFFER_GROUP)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a multishot `RECV` bundle on a stream socket (Linux 6.10): each completion
    /// carries every byte that was ready, spread over consecutive buffers of the
    /// provided-buffer ring from the one it names (see [`Engine::received_bytes`]). False
    /// when the SQ is full, no buffer ring is registered or the kernel has no bundles.
    pub(crate) fn push_recv_multi_bundle(&mut self, fd: RawFd, user_data: u64) -> bool {
        if self.buf_ring.is_none() || !self.has_recv_bundles() {
            return false;
        }
        let entry = opcode::RecvMultiBundle::new(types::Fd(fd), BUFFER_GROUP)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues one plain `RECV` on a stream socket into the provided-buffer ring: a single
    /// completion (one buffer at most), so the caller can look at a connection's first bytes
    /// before it commits the descriptor to a multishot receive.
    pub(crate) fn push_recv_once(&mut self, fd: RawFd, user_data: u64) -> bool {
        if self.buf_ring.is_none() {
            return false;
        }
        let entry = opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), 0)
            .buf_group(BUFFER_GROUP)
            .build()
            .flags(io_uring::squeue::Flags::BUFFER_SELECT)
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a one-shot `POLL_ADD` for `fd` becoming readable.
    pub(crate) fn push_poll_readable(&mut self, fd: RawFd, user_data: u64) -> bool {
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Queues a multishot `ACCEPT` on listener `fd`: one completion (the new descriptor) per
    /// connection until it fails or is cancelled.
    pub(crate) fn push_accept_multi(&mut self, fd: RawFd, user_data: u64) -> bool {
        let entry = opcode::AcceptMulti::new(types::Fd(fd))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// Sets the address every later [`push_connect`](Self::push_connect) goes to. Only the
    /// first call takes effect, so an address an in-flight connect points at is never freed.
    pub(crate) fn set_connect_target(&mut self, to: SocketAddr) {
        if self.connect_to.is_none() {
            self.connect_to = Some(Box::new(socket2::SockAddr::from(to)));
        }
    }

    /// Queues a `CONNECT` of `fd` to the connect target; false when none was set or the SQ is full.
    pub(crate) fn push_connect(&mut self, fd: RawFd, user_data: u64) -> bool {
        let Some(addr) = self.connect_to.as_deref() else {
            return false;
        };
        let entry = opcode::Connect::new(types::Fd(fd), addr.as_ptr().cast(), addr.len())
            .build()
            .user_data(user_data);
        self.push(&entry)
    }
}
