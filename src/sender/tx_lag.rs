//! The sender's own lag, sampled: from the stamp it writes into a datagram (its clock when the
//! datagram's batch is submitted) to the kernel's software transmit stamp, which the device's
//! driver takes as it hands the packet on, after the socket, netfilter and the qdisc.
//!
//! About once a millisecond one send goes out as a `SENDMSG` whose control message asks for a
//! transmit stamp (the socket only reports them: no other send is stamped). Once that send has
//! completed, non-blocking reads of its socket's error queue fetch the stamp together with the
//! packet's first bytes, which must hold the sampled datagram's own header bytes: a late stamp
//! of an earlier sample is passed over, and a stamp that never comes within a second (the packet
//! was dropped before the driver, or the kernel returns no payload) is counted missing, never
//! invented. Everything lives in the worker's arena, laid out at setup; the loop only pushes
//! SQEs and reads completions.

use hdrhistogram::Histogram;

use crate::{
    net::cmsg,
    proto::header::HEADER_LEN,
    ring::{ArenaRange, Completion, Engine},
};

/// Monotonic ns from the end of one sample to the start of the next.
const SAMPLE_EVERY_NS: u64 = 1_000_000;
/// Monotonic ns before an empty error queue is read again.
const RETRY_NS: u64 = 250_000;
/// Monotonic ns a sample waits for its stamp before it is counted missing.
const GIVE_UP_NS: u64 = 1_000_000_000;
/// Bytes of the returned packet read: link, network and UDP headers, then the datagram's own.
const DATA_LEN: usize = 256;
/// Bytes for the control messages of an error-queue read (`SCM_TIMESTAMPING` takes 64, the
/// extended error 32).
const CONTROL_LEN: usize = 256;
/// `struct cmsghdr` and one `u32` (`CMSG_LEN(4)`), and its room (`CMSG_SPACE(4)`).
const REQUEST_LEN: usize = 20;
const REQUEST_SPACE: usize = 24;
/// Table entries: the sampled send's and the error-queue read's.
const SEND_ENTRY: usize = 0;
const READ_ENTRY: usize = 1;
/// The `user_data` of an error-queue read (send slots are `u32`).
pub(super) const USER_DATA_READ: u64 = u64::MAX - 1;

/// Where one sample is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The kernel refuses to report stamps on this worker's sockets: the lag is unknown.
    Off,
    /// No sample; the next one is due at this monotonic time.
    Idle { next_at: u64 },
    /// The sampled send (this slot) is in flight.
    Sending { slot: u32, fd: i32 },
    /// Waiting for the stamp on `fd`'s error queue since `since`; a read is in flight, or the
    /// next one is due at `next_try`.
    Reading {
        fd: i32,
        since: u64,
        next_try: u64,
        in_flight: bool,
    },
}

/// One worker's transmit-lag sampler.
#[derive(Debug)]
pub(super) struct TxLag {
    /// Arena offset of this sampler's memory.
    base: usize,
    /// Whether the kernel reports the stamps (set up once).
    enabled: bool,
    state: State,
    /// The first header bytes of the sampled send's first and last datagram (a segmented send
    /// is stamped whole where the device segments it, on its last segment where the kernel
    /// does), and how many of them count.
    expect: [[u8; HEADER_LEN]; 2],
    expect_len: usize,
    /// The send stamp written into the sampled datagram.
    sent_real: u64,
    /// Lags from stamp to transmit, ns.
    pub(super) lag: Histogram<u64>,
    /// Samples whose stamp never came.
    pub(super) missing: u64,
    /// Error-queue reads queued (each one SQE that is not a send).
    pub(super) reads: u64,
}

impl TxLag {
    /// Arena bytes a sampler takes.
    pub(super) const ARENA_BYTES: usize =
        (2 * Engine::MSGHDR_BYTES + REQUEST_SPACE + DATA_LEN + CONTROL_LEN).next_multiple_of(64);

    /// Lays a sampler out at arena `base` (8-byte aligned, [`TxLag::ARENA_BYTES`] long), off
    /// when `stamps` is false (the kernel would not report them on every socket) or the layout
    /// fails.
    pub(super) fn new(engine: &mut Engine, base: usize, stamps: bool) -> TxLag {
        let mut sampler = TxLag {
            base,
            enabled: false,
            state: State::Off,
            expect: [[0; HEADER_LEN]; 2],
            expect_len: 0,
            sent_real: 0,
            lag: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds"),
            missing: 0,
            reads: 0,
        };
        let request = sampler.request_range();
        let written = engine
            .arena_bytes_mut(request.offset, REQUEST_SPACE)
            .map(|bytes| bytes.copy_from_slice(&transmit_stamp_request()))
            .is_some();
        if stamps && written && engine.reserve_msghdrs(base, 2) {
            sampler.state = State::Idle { next_at: 0 };
            sampler.enabled = true;
        }
        sampler
    }

    /// Whether the lag is measured at all (a kernel that then refuses to read the error queue
    /// leaves the samples taken until then).
    pub(super) fn measured(&self) -> bool {
        self.enabled
    }

    /// Whether the next send should be the sample.
    #[inline]
    pub(super) fn due(&self, now: u64) -> bool {
        matches!(self.state, State::Idle { next_at } if now >= next_at)
    }

    /// Queues the send of `payload` (slot `slot`, `segs` datagrams stamped `sent_real`) on
    /// `fd` as the sample; false when the SQ is full.
    pub(super) fn push_sample(
        &mut self,
        engine: &mut Engine,
        fd: i32,
        slot: u32,
        payload: ArenaRange,
        segs: u16,
        sent_real: u64,
    ) -> bool {
        let segment = payload.len / usize::from(segs.max(1));
        let len = segment.min(HEADER_LEN);
        let last = payload.offset + payload.len - segment;
        for (expect, at) in self.expect.iter_mut().zip([payload.offset, last]) {
            let Some(head) = engine.arena_bytes_mut(at, len) else {
                return false;
            };
            expect[..len].copy_from_slice(head);
        }
        self.expect_len = len;
        if !engine.push_sendmsg(
            fd,
            SEND_ENTRY,
            payload,
            self.request_range(),
            u64::from(slot),
        ) {
            return false;
        }
        self.sent_real = sent_real;
        self.state = State::Sending { slot, fd };
        true
    }

    /// Sees the completion of the send in `slot`: the sample's, once it succeeded, waits for
    /// its stamp (a failed send has none, and is counted as failed like any other).
    #[inline]
    pub(super) fn send_completed(&mut self, slot: u32, result: i32, now: u64) {
        if let State::Sending { slot: sampled, fd } = self.state
            && sampled == slot
        {
            self.state = if result >= 0 {
                State::Reading {
                    fd,
                    since: now,
                    next_try: now,
                    in_flight: false,
                }
            } else {
                State::Idle {
                    next_at: now + SAMPLE_EVERY_NS,
                }
            };
        }
    }

    /// Queues the next error-queue read when one is due (called just before sends are pushed,
    /// so the read is submitted with them).
    #[inline]
    pub(super) fn poll(&mut self, engine: &mut Engine, now: u64) {
        let State::Reading {
            fd,
            since,
            next_try,
            in_flight: false,
        } = self.state
        else {
            return;
        };
        if now.saturating_sub(since) >= GIVE_UP_NS {
            self.missing += 1;
            self.state = State::Idle {
                next_at: now + SAMPLE_EVERY_NS,
            };
            return;
        }
        if now >= next_try
            && engine.push_recv_errqueue(
                fd,
                READ_ENTRY,
                self.data_range(),
                self.control_range(),
                USER_DATA_READ,
            )
        {
            self.reads += 1;
            self.state = State::Reading {
                fd,
                since,
                next_try,
                in_flight: true,
            };
        }
    }

    /// Takes an error-queue read's completion: the sample's stamp ends it; an empty queue or
    /// an earlier sample's stamp means another read.
    pub(super) fn read_completed(&mut self, engine: &mut Engine, c: &Completion, now: u64) {
        let State::Reading { fd, since, .. } = self.state else {
            return;
        };
        let again = |next_try| State::Reading {
            fd,
            since,
            next_try,
            in_flight: false,
        };
        if c.result == -libc::EAGAIN {
            self.state = again(now + RETRY_NS);
            return;
        }
        if c.result < 0 {
            // The kernel cannot read this error queue: the lag stays unknown from here on.
            self.missing += 1;
            self.state = State::Off;
            return;
        }
        let control_len = engine
            .msghdr_lengths(READ_ENTRY)
            .map_or(0, |l| l.control.min(CONTROL_LEN));
        let data_len = (c.result as usize).min(DATA_LEN);
        let control = self.control_range();
        let stamp = engine
            .arena_bytes_mut(control.offset, control_len)
            .and_then(|bytes| cmsg::parse(bytes).stamp_ns);
        let data = self.data_range();
        let ours = engine
            .arena_bytes_mut(data.offset, data_len)
            .is_some_and(|bytes| {
                self.expect
                    .iter()
                    .any(|expect| contains(bytes, &expect[..self.expect_len]))
            });
        match stamp {
            Some(stamp) if ours => {
                self.lag
                    .saturating_record(stamp.saturating_sub(self.sent_real).max(1));
                self.state = State::Idle {
                    next_at: now + SAMPLE_EVERY_NS,
                };
            }
            // An earlier sample's stamp (or a packet without one): read on.
            _ => self.state = again(now),
        }
    }

    /// An error-queue read is in flight (the worker's ring must outlive it).
    #[inline]
    pub(super) fn reading(&self) -> bool {
        matches!(
            self.state,
            State::Reading {
                in_flight: true,
                ..
            }
        )
    }

    fn request_range(&self) -> ArenaRange {
        ArenaRange {
            offset: self.base + 2 * Engine::MSGHDR_BYTES,
            len: REQUEST_SPACE,
        }
    }

    fn data_range(&self) -> ArenaRange {
        ArenaRange {
            offset: self.request_range().offset + REQUEST_SPACE,
            len: DATA_LEN,
        }
    }

    fn control_range(&self) -> ArenaRange {
        ArenaRange {
            offset: self.data_range().offset + DATA_LEN,
            len: CONTROL_LEN,
        }
    }
}

/// The control message that asks the kernel for one software transmit stamp of a send:
/// `SOL_SOCKET`, `SO_TIMESTAMPING`, `SOF_TIMESTAMPING_TX_SOFTWARE`.
fn transmit_stamp_request() -> [u8; REQUEST_SPACE] {
    let mut bytes = [0u8; REQUEST_SPACE];
    bytes[0..8].copy_from_slice(&REQUEST_LEN.to_ne_bytes());
    bytes[8..12].copy_from_slice(&libc::SOL_SOCKET.to_ne_bytes());
    bytes[12..16].copy_from_slice(&libc::SO_TIMESTAMPING.to_ne_bytes());
    bytes[16..20].copy_from_slice(&libc::SOF_TIMESTAMPING_TX_SOFTWARE.to_ne_bytes());
    bytes
}

/// Whether `needle` (non-empty) occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_one_aligned_control_message() {
        let r = transmit_stamp_request();
        assert_eq!(usize::from_ne_bytes(r[0..8].try_into().unwrap()), 20);
        assert_eq!(
            u32::from_ne_bytes(r[16..20].try_into().unwrap()),
            libc::SOF_TIMESTAMPING_TX_SOFTWARE
        );
        assert_eq!(REQUEST_SPACE % std::mem::size_of::<usize>(), 0);
    }

    #[test]
    fn a_header_is_found_behind_any_link_and_network_headers() {
        let header = [7u8; 32];
        for before in [0usize, 28, 42, 62] {
            let mut packet = vec![0u8; before];
            packet.extend_from_slice(&header);
            packet.extend_from_slice(&[1; 30]);
            assert!(contains(&packet, &header), "{before}");
        }
        assert!(!contains(&[7u8; 31], &header), "cut short");
        assert!(!contains(&[1, 2, 3], &[]), "nothing to find is no match");
    }
}
