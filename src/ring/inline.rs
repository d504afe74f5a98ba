//! Inline receives: single-shot `RECVMSG` with `MSG_DONTWAIT`, taking buffers from the
//! provided-buffer ring, plus a one-shot `POLL_ADD` for when the socket is empty.
//!
//! A multishot receive keeps a poll entry on the socket's wait queue, so every datagram runs
//! io_uring's wake callback in the softirq that queued it: on loopback and veth, on the
//! *sending* core. With `MSG_DONTWAIT` io_uring never arms a poll for a receive
//! (`REQ_F_NOWAIT`): each one runs inline during `io_uring_enter`, in the sink's own context,
//! and completes with a datagram or `-EAGAIN`. While datagrams keep coming nothing waits on the
//! socket and the sending core pays for no wake-up; only an idle sink arms one `POLL_ADD`.
//!
//! Each receive in flight needs its own `msghdr`, name and control buffer, which the kernel
//! writes back: [`InlineSlots`] owns them, allocated once at setup.

use std::os::fd::RawFd;

use io_uring::{opcode, squeue, types};

use super::{BUFFER_GROUP, Engine, RECV_CONTROL_LEN, RECV_NAME_LEN};

/// Receives queued per `io_uring_enter` in inline mode (and slots allocated for them).
pub const INLINE_BATCH: usize = 32;

/// One `msghdr` with its own name and control buffers per inline receive slot.
pub(super) struct InlineSlots {
    /// A receive on the slot is in flight: its msghdr and buffers belong to the kernel.
    busy: [bool; INLINE_BATCH],
    headers: Box<[libc::msghdr]>,
    names: Box<[[u8; RECV_NAME_LEN]]>,
    controls: Box<[[u8; RECV_CONTROL_LEN]]>,
}

impl InlineSlots {
    fn new() -> InlineSlots {
        let mut names = vec![[0u8; RECV_NAME_LEN]; INLINE_BATCH].into_boxed_slice();
        let mut controls = vec![[0u8; RECV_CONTROL_LEN]; INLINE_BATCH].into_boxed_slice();
        let headers = names
            .iter_mut()
            .zip(controls.iter_mut())
            .map(|(name, control)| {
                // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths).
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                // The boxed slices never move or shrink, so these pointers stay valid for the
                // life of `InlineSlots`, which the engine drops after its ring.
                h.msg_name = name.as_mut_ptr().cast();
                h.msg_control = control.as_mut_ptr().cast();
                h
            })
            .collect();
        InlineSlots {
            busy: [false; INLINE_BATCH],
            headers,
            names,
            controls,
        }
    }

    /// Resets slot `slot` for a new receive (the kernel wrote back its lengths) and returns it;
    /// `None` while an earlier receive on it is in flight.
    fn prepare(&mut self, slot: usize) -> Option<*mut libc::msghdr> {
        if *self.busy.get(slot)? {
            return None;
        }
        let h = self.headers.get_mut(slot)?;
        h.msg_namelen = RECV_NAME_LEN as _;
        h.msg_controllen = RECV_CONTROL_LEN as _;
        h.msg_flags = 0;
        Some(h)
    }
}

/// What an inline receive wrote besides the payload: the source address and the control
/// messages, as long as the kernel said they were.
pub struct InlineMeta<'a> {
    /// The source `sockaddr`.
    pub name: &'a [u8],
    /// The control messages (`cmsghdr`s).
    pub control: &'a [u8],
    /// `MSG_TRUNC` / `MSG_CTRUNC` as the kernel set them.
    pub flags: i32,
}

impl Engine {
    /// Allocates the inline receive slots (setup only; idempotent).
    pub fn enable_inline_receives(&mut self) {
        if self.inline.is_none() {
            self.inline = Some(InlineSlots::new());
        }
    }

    /// Queues a non-blocking single-shot `RECVMSG` on `fd` into slot `slot` (below
    /// [`INLINE_BATCH`]) that takes a buffer from the provided-buffer ring. False without
    /// inline slots or a buffer ring, for a slot out of range, or when the SQ is full.
    pub fn push_recv_msg_nowait(&mut self, fd: RawFd, slot: usize, user_data: u64) -> bool {
        if self.buf_ring.is_none() {
            return false;
        }
        let Some(header) = self.inline.as_mut().and_then(|s| s.prepare(slot)) else {
            return false;
        };
        let entry = opcode::RecvMsg::new(types::Fd(fd), header)
            .flags(libc::MSG_DONTWAIT as u32)
            .buf_group(BUFFER_GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(user_data);
        let pushed = self.push(&entry);
        if let (true, Some(slots)) = (pushed, self.inline.as_mut()) {
            slots.busy[slot] = true;
        }
        pushed
    }

    /// The receive of `slot` completed (its CQE was reaped): the slot may be read and reused.
    pub fn inline_completed(&mut self, slot: usize) {
        if let Some(b) = self.inline.as_mut().and_then(|s| s.busy.get_mut(slot)) {
            *b = false;
        }
    }

    /// Queues a one-shot `POLL_ADD` for `fd` becoming readable.
    pub fn push_poll_readable(&mut self, fd: RawFd, user_data: u64) -> bool {
        let entry = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .build()
            .user_data(user_data);
        self.push(&entry)
    }

    /// The name and control bytes the last completed receive of `slot` wrote (`None` while
    /// one is in flight on it).
    pub fn inline_meta(&self, slot: usize) -> Option<InlineMeta<'_>> {
        let slots = self.inline.as_ref()?;
        if *slots.busy.get(slot)? {
            return None;
        }
        let h = slots.headers.get(slot)?;
        let name_len = (h.msg_namelen as usize).min(RECV_NAME_LEN);
        let control_len = h.msg_controllen.min(RECV_CONTROL_LEN);
        Some(InlineMeta {
            name: &slots.names[slot][..name_len],
            control: &slots.controls[slot][..control_len],
            flags: h.msg_flags,
        })
    }
}
