//! The per-worker io_uring engine: one ring, the worker's arena and (for sinks) a provided-buffer
//! ring inside that arena; it builds the ring, submits and copies completions out. The op
//! builders (one small safe method per SQE kind) live in `ops`, receives through `msghdr`s in
//! the arena in `msghdr`, and `token` packs each op's kind and slot index into its
//! `user_data`, so one ring carries accept, connect, recv and send. The engine knows no
//! protocol: what a worker keeps in its arena, and where, is the worker's layout.
//!
//! `Engine` declares `ring` before `arena`: Rust drops fields in declaration order, so the ring
//! (and with it every in-flight operation and registration) is gone before the memory it points
//! into is unmapped. All memory an SQE points at is in the arena (buffers, the buffer ring,
//! receive `msghdr`s and the buffers they name), except the connect address, which the engine
//! boxes and never replaces. Every pushed address is checked to lie inside the arena, and the
//! arena bytes the kernel reads pointers from (buffer-ring entries, `msghdr`s) are never handed
//! out for writing, which is what makes the pushes safe to call. This module and `mem` are the
//! only places with `unsafe`.

pub(crate) mod bufring;
#[cfg(test)]
mod bundle_tests;
mod msghdr;
#[cfg(test)]
mod msghdr_tests;
mod ops;
pub(crate) mod probe;
pub(crate) mod tcp_info;
pub(crate) mod token;

use std::io;

use io_uring::{IoUring, cqueue, squeue, types};

use self::bufring::BufRing;
pub(crate) use self::bufring::{BufOrder, BufRingLayout};
pub(crate) use self::msghdr::{ArenaRange, parse_recvmsg_out};
use crate::{error::Error, mem::Arena};

/// `IORING_ENTER_GETEVENTS`: run deferred task work and reap completions (io-uring keeps `sys` private).
const ENTER_GETEVENTS: u32 = 1;
/// Buffer group id of the sink's provided-buffer ring.
const BUFFER_GROUP: u16 = 7;

/// How a ring was set up, after probing the kernel's accepted flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SetupMode {
    /// `SINGLE_ISSUER | DEFER_TASKRUN` (Linux 6.1): completion work runs only when we enter.
    DeferTaskrun,
    /// `SINGLE_ISSUER | COOP_TASKRUN` (Linux 6.0).
    CoopTaskrun,
    /// No optional flags.
    Plain,
}

impl std::fmt::Display for SetupMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SetupMode::DeferTaskrun => "SINGLE_ISSUER|DEFER_TASKRUN",
            SetupMode::CoopTaskrun => "SINGLE_ISSUER|COOP_TASKRUN",
            SetupMode::Plain => "default",
        })
    }
}

/// Sizes of a ring.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingSize {
    /// Submission queue entries.
    pub(crate) sq_entries: u32,
    /// Completion queue entries.
    pub(crate) cq_entries: u32,
}

impl RingSize {
    /// Approximate bytes of ring memory the kernel charges to locked memory.
    pub(crate) fn locked_bytes(&self) -> u64 {
        u64::from(self.sq_entries) * 68 + u64::from(self.cq_entries) * 16 + 4096
    }
}

/// One completion, copied out of the CQ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Completion {
    /// The `user_data` the SQE carried.
    pub(crate) user_data: u64,
    /// Result: bytes or `-errno`.
    pub(crate) result: i32,
    /// CQE flags.
    pub(crate) flags: u32,
}

impl Completion {
    /// More completions will follow for this request (multishot, or a zero-copy send).
    pub(crate) fn more(&self) -> bool {
        cqueue::more(self.flags)
    }

    /// This is a zero-copy send's notification.
    pub(crate) fn is_notification(&self) -> bool {
        cqueue::notif(self.flags)
    }

    /// The descriptor an `ACCEPT` completion hands over, now owned by the caller. Call it once
    /// per accept completion and never on another kind: the result of any other op is not a
    /// descriptor (a completion whose token is not an accept yields `None`).
    pub(crate) fn accepted_fd(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let accept =
            token::Token::decode(self.user_data).is_some_and(|t| t.kind == token::OpKind::Accept);
        if !accept || self.result < 0 {
            return None;
        }
        // SAFETY: a non-negative ACCEPT result is a new descriptor installed for this process
        // that nothing else owns; the caller takes it once.
        Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(self.result) })
    }

    /// The provided buffer this completion used.
    pub(crate) fn buffer_id(&self) -> Option<u16> {
        cqueue::buffer_select(self.flags)
    }
}

/// Plain counters of ring activity, owned by the worker.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RingCounters {
    /// `io_uring_enter` calls.
    pub(crate) enter_calls: u64,
    /// SQEs the kernel consumed.
    pub(crate) sqes_submitted: u64,
    /// CQEs reaped.
    pub(crate) cqes_reaped: u64,
    /// Pushes that found the SQ full.
    pub(crate) sq_full: u64,
}

/// What `submit` waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Submit only.
    Nothing,
    /// Submit and run completion work without sleeping (a spinning worker).
    Poll,
    /// Submit and sleep until one completion arrives or the timeout (ns) passes.
    One {
        /// Upper bound on the sleep in nanoseconds.
        timeout_ns: u64,
    },
    /// Submit and sleep until `count` completions are ready or the timeout (ns) passes.
    Many {
        /// Completions to wait for.
        count: u32,
        /// Upper bound on the sleep in nanoseconds.
        timeout_ns: u64,
    },
}

/// A worker's ring together with the memory it points into.
pub(crate) struct Engine {
    // Field order is the drop order: the ring goes first, then what it points into.
    ring: IoUring,
    buf_ring: Option<BufRing>,
    /// Where in the arena the receive `msghdr`s lie, once reserved (never moved after).
    msghdrs: Option<msghdr::MsghdrTable>,
    /// The address every `CONNECT` of this ring goes to (set up before the first one).
    connect_to: Option<Box<socket2::SockAddr>>,
    arena: Arena,
    counters: RingCounters,
}

impl Engine {
    /// Builds a ring on the calling thread, checks `ops`, and registers `arena`: as one fixed
    /// buffer (`register_fixed`), and/or as a provided-buffer ring of `buf_ring` layout.
    pub(crate) fn new(
        size: RingSize,
        arena: Arena,
        ops: &[probe::RequiredOp],
        register_fixed: bool,
        buf_ring: Option<BufRingLayout>,
    ) -> Result<Engine, Error> {
        let (ring, _mode) = build_ring(size)?;
        probe::require_ops(&ring, ops)?;
        let mut arena = arena;
        if register_fixed {
            let iov = libc::iovec {
                iov_base: arena.as_ptr().cast(),
                iov_len: arena.len(),
            };
            // SAFETY: the iovec covers the arena, which `Engine` owns and drops after the ring.
            unsafe { ring.submitter().register_buffers(&[iov]) }.map_err(register_error)?;
        }
        let buf_ring = match buf_ring {
            None => None,
            Some(layout) => {
                let br = BufRing::new(&mut arena, layout).ok_or_else(|| {
                    Error::Usage(format!("invalid receive buffer layout {layout:?}: entries must be a power of two ≤ 32768"))
                })?;
                // SAFETY: the entry array lies in the arena, which outlives the ring (field order).
                unsafe {
                    ring.submitter()
                        .register_buf_ring_with_flags(br.ring_addr(), layout.entries, BUFFER_GROUP, 0)
                }
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::EINVAL) | Some(libc::ENOSYS) => Error::Unsupported(
                        "this kernel lacks provided-buffer rings (IORING_REGISTER_PBUF_RING, Linux 5.19)".into(),
                    ),
                    _ => register_error(e),
                })?;
                Some(br)
            }
        };
        Ok(Engine {
            ring,
            buf_ring,
            msghdrs: None,
            connect_to: None,
            arena,
            counters: RingCounters::default(),
        })
    }

    /// The arena this engine owns.
    pub(crate) fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Mutable bytes of the arena, for stamping headers into send slots. `None` out of range
    /// and for bytes the kernel reads pointers from (buffer-ring entries, receive `msghdr`s).
    pub(crate) fn arena_bytes_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        if self.kernel_owned(ArenaRange { offset, len }) {
            return None;
        }
        self.arena.bytes_mut(offset, len)
    }

    /// Counters of ring activity so far.
    pub(crate) fn counters(&self) -> RingCounters {
        self.counters
    }

    /// Completions the kernel had to drop because the CQ was full (0 with `IORING_FEAT_NODROP`).
    pub(crate) fn cq_overflow(&mut self) -> u32 {
        self.ring.completion().overflow()
    }

    fn push(&mut self, entry: &squeue::Entry) -> bool {
        // SAFETY: every entry built by this module, `ops` and `msghdr` points only into
        // `self.arena` (checked ranges, and `msghdr`s the engine wrote whose name and control
        // pointers it checked) or at `self.connect_to`; both live until the ring is dropped
        // (field order) and the connect address is never replaced once set.
        let pushed = unsafe { self.ring.submission().push(entry) }.is_ok();
        if !pushed {
            self.counters.sq_full += 1;
        }
        pushed
    }

    /// Submits queued SQEs and waits as asked. Timeouts and signals are not errors.
    pub(crate) fn submit(&mut self, wait: Wait) -> io::Result<()> {
        let pending = self.ring.submission().len() as u32;
        let submitter = self.ring.submitter();
        let result = match wait {
            Wait::Nothing => submitter.submit(),
            Wait::Poll => {
                // SAFETY: a plain enter with no argument pointer; GETEVENTS with min_complete 0
                // only runs deferred completion work and never blocks.
                unsafe { submitter.enter::<libc::sigset_t>(pending, 0, ENTER_GETEVENTS, None) }
            }
            Wait::One { timeout_ns } | Wait::Many { timeout_ns, .. } => {
                let count = match wait {
                    Wait::Many { count, .. } => count.max(1) as usize,
                    _ => 1,
                };
                let ts = types::Timespec::new()
                    .sec(timeout_ns / 1_000_000_000)
                    .nsec((timeout_ns % 1_000_000_000) as u32);
                let args = types::SubmitArgs::new().timespec(&ts);
                submitter.submit_with_args(count, &args)
            }
        };
        self.counters.enter_calls += 1;
        match result {
            Ok(n) => {
                self.counters.sqes_submitted += n as u64;
                Ok(())
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Copies up to `out.len()` completions out of the CQ; returns how many.
    pub(crate) fn reap(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        let mut cq = self.ring.completion();
        cq.sync();
        for slot in out.iter_mut() {
            let Some(cqe) = cq.next() else { break };
            *slot = Completion {
                user_data: cqe.user_data(),
                result: cqe.result(),
                flags: cqe.flags(),
            };
            n += 1;
        }
        self.counters.cqes_reaped += n as u64;
        n
    }

    /// The bytes the kernel wrote into provided buffer `bid` (the whole buffer).
    pub(crate) fn received_buffer(&self, bid: u16) -> &[u8] {
        match &self.buf_ring {
            Some(br) => self
                .arena
                .bytes(br.buffer_offset(bid), br.layout().buf_size as usize)
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// The bytes of one receive of `len` bytes that started in provided buffer `bid`: the
    /// buffers from `bid` on in id order (a recv bundle fills several, wrapping at the ring
    /// size), as at most two slices because the buffers lie back to back in the arena.
    pub(crate) fn received_bytes(&self, bid: u16, len: usize) -> impl Iterator<Item = &[u8]> {
        let (start, first, rest) = match &self.buf_ring {
            Some(br) => {
                let layout = br.layout();
                let room = usize::from(layout.entries - (bid & (layout.entries - 1)))
                    * layout.buf_size as usize;
                let first = len.min(room);
                (
                    br.buffer_offset(bid & (layout.entries - 1)),
                    first,
                    len - first,
                )
            }
            None => (0, 0, 0),
        };
        let wrapped = self.buf_ring.as_ref().map_or(0, |br| br.buffer_offset(0));
        [(start, first), (wrapped, rest)]
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(offset, n)| self.arena.bytes(offset, n).unwrap_or(&[]))
    }

    /// Hands back every provided buffer a receive of `len` bytes (0 or less: none used, but
    /// the completion named `bid`) took, starting at `bid`: each exactly once.
    pub(crate) fn recycle_received(&mut self, bid: u16, len: i32) {
        if let Some(br) = self.buf_ring.as_mut() {
            let size = br.layout().buf_size as usize;
            let used = usize::try_from(len).unwrap_or(0).div_ceil(size).max(1);
            for k in 0..used {
                br.recycle(bid.wrapping_add(k as u16));
            }
        }
    }

    /// Whether this ring's kernel takes recv bundles (`IORING_FEAT_RECVSEND_BUNDLE`, 6.10).
    pub(crate) fn has_recv_bundles(&self) -> bool {
        self.ring.params().is_feature_recvsend_bundle()
    }

    /// Hands provided buffer `bid` back to the kernel (visible after `publish_buffers`).
    pub(crate) fn recycle_buffer(&mut self, bid: u16) {
        if let Some(br) = self.buf_ring.as_mut() {
            br.recycle(bid);
        }
    }

    /// Publishes every recycled buffer with one store.
    pub(crate) fn publish_buffers(&mut self) {
        if let Some(br) = self.buf_ring.as_mut() {
            br.publish();
        }
    }
}

fn register_error(e: io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ENOMEM) {
        Error::Unsupported(format!(
            "registering packet memory with io_uring failed with ENOMEM: RLIMIT_MEMLOCK is {} bytes; raise `ulimit -l`, set LimitMEMLOCK= or grant CAP_IPC_LOCK",
            crate::mem::limits::memlock_limit()
        ))
    } else {
        Error::io("io_uring_register", e)
    }
}

fn build_ring(size: RingSize) -> Result<(IoUring, SetupMode), Error> {
    let attempts = [
        SetupMode::DeferTaskrun,
        SetupMode::CoopTaskrun,
        SetupMode::Plain,
    ];
    let mut last = None;
    for mode in attempts {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(size.cq_entries).setup_clamp();
        match mode {
            SetupMode::DeferTaskrun => {
                builder.setup_single_issuer().setup_defer_taskrun();
            }
            SetupMode::CoopTaskrun => {
                builder.setup_single_issuer().setup_coop_taskrun();
            }
            SetupMode::Plain => {}
        }
        match builder.build(size.sq_entries) {
            Ok(ring) => return Ok((ring, mode)),
            // EINVAL means this kernel does not know a flag: try the next, simpler set.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
            Err(e) => return Err(probe::setup_error(e)),
        }
    }
    Err(probe::setup_error(last.unwrap_or_else(|| {
        io::Error::from_raw_os_error(libc::EINVAL)
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_with_defer_taskrun_here() {
        let (_ring, mode) = build_ring(RingSize {
            sq_entries: 64,
            cq_entries: 256,
        })
        .unwrap();
        assert_eq!(mode, SetupMode::DeferTaskrun);
    }

    #[test]
    fn write_fixed_outside_arena_is_refused() {
        let arena = Arena::allocate_on_node(8192, 0, false).unwrap();
        let size = RingSize {
            sq_entries: 8,
            cq_entries: 16,
        };
        let mut engine = Engine::new(size, arena, probe::SEND_OPS, true, None).unwrap();
        assert!(!engine.push_write_fixed(0, 8000, 1000, 1));
        assert!(engine.reserve_msghdrs(0, 1));
        let name = ArenaRange {
            offset: 4096,
            len: 28,
        };
        assert!(
            !engine.push_recvmsg_multi(0, 0, name, name, 1),
            "no buffer ring registered"
        );
        assert!(!engine.push_recv_multi(0, 1), "no buffer ring registered");
        assert!(!engine.push_connect(0, 1), "no connect target set");
        engine.set_connect_target(([127, 0, 0, 1], 9).into());
        assert!(engine.push_connect(-1, 1));
        assert!(engine.push_accept_multi(-1, 2));
    }
}
