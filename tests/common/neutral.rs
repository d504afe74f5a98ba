//! A neutral receiver: a plain UDP socket of the test's own, on a thread that joined a network
//! namespace, that counts the datagrams arriving on one port in 100 ms windows of its own clock
//! (`Instant`, CLOCK_MONOTONIC). It knows nothing of ringblast but the datagram size it expects.
//!
//! The socket turns on `UDP_GRO`, so a GSO send arrives as one buffer of whole segments (the
//! sender's GSO keeps them whole through veth) and a 1 Mpps stream costs it about 62 500
//! receives a second instead of a million; each buffer counts `len / size` datagrams, and a
//! buffer that is not a whole number of datagrams is counted as malformed. Every datagram of a
//! buffer is stamped with that buffer's receive time, which is later than its arrival by the
//! wait for the thread's wake-up (microseconds when it keeps up).

use std::{
    net::{SocketAddr, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use std::{io::IoSliceMut, os::fd::AsRawFd};

use nix::{
    errno::Errno,
    sys::{
        socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt},
        time::TimeSpec,
    },
    time::{ClockId, clock_gettime},
};

/// The width of one counting window.
pub const WINDOW: Duration = Duration::from_millis(100);
/// Windows the receiver can hold: a bound on how long it runs (60 s).
const MAX_WINDOWS: usize = 600;
/// Buffers whose kernel stamps are kept one by one (16 MiB; the tests send at most 300 000).
const MAX_STAMPS: usize = 1 << 20;

/// Arrival times on one clock, in nanoseconds from that clock's own origin.
#[derive(Debug, Default)]
pub struct Timeline {
    /// Datagrams in the first buffer (they arrived at `first`).
    pub first_buffer: u64,
    /// Datagrams in all.
    pub datagrams: u64,
    pub first: Option<u64>,
    pub last: u64,
    /// Datagrams per window, window `k` covering `first + k·WINDOW .. first + (k+1)·WINDOW`.
    pub windows: Vec<u64>,
}

impl Timeline {
    fn add(&mut self, at_ns: u64, n: u64) {
        let first = match self.first {
            Some(first) => first,
            None => {
                self.windows = vec![0; MAX_WINDOWS];
                self.first_buffer = n;
                *self.first.insert(at_ns)
            }
        };
        self.datagrams += n;
        self.last = self.last.max(at_ns);
        let k = (at_ns.saturating_sub(first) / WINDOW.as_nanos() as u64) as usize;
        if let Some(w) = self.windows.get_mut(k) {
            *w += n;
        }
    }

    /// Seconds from the first buffer to the last.
    pub fn span_s(&self) -> f64 {
        (self.last - self.first.expect("a datagram arrived")) as f64 / 1e9
    }

    /// Datagrams per second from the first buffer to the last: the datagrams after the first
    /// buffer over the time between the two.
    pub fn long_run_pps(&self) -> f64 {
        (self.datagrams - self.first_buffer) as f64 / self.span_s()
    }

    /// The windows that lie wholly between the first and the last buffer (the last, partial
    /// window is left out).
    pub fn whole_windows(&self) -> &[u64] {
        let whole = (self.span_s() / WINDOW.as_secs_f64()) as usize;
        &self.windows[..whole.min(self.windows.len())]
    }

    /// The whole window furthest from `pps`: its index, its count and its deviation from `pps`
    /// as a fraction.
    pub fn worst_window(&self, pps: f64) -> (usize, u64, f64) {
        let expected = pps * WINDOW.as_secs_f64();
        self.whole_windows()
            .iter()
            .enumerate()
            .map(|(i, &n)| (i, n, (n as f64 - expected) / expected))
            .max_by(|a, b| a.2.abs().total_cmp(&b.2.abs()))
            .expect("at least one whole window")
    }
}

/// What the receiver counted.
#[derive(Debug, Default)]
pub struct Arrivals {
    /// Datagrams received (segments of GRO buffers included).
    pub datagrams: u64,
    /// Buffers received (one per `recvmsg`).
    pub buffers: u64,
    /// Buffers whose length was not a whole number of `size`-byte datagrams.
    pub malformed: u64,
    /// Buffers that came without a kernel timestamp.
    pub unstamped: u64,
    /// By the receiver's own clock (CLOCK_MONOTONIC) when `recvmsg` returned the buffer.
    pub received: Timeline,
    /// By the kernel's receive timestamp of the buffer (`SO_TIMESTAMPNS`, CLOCK_REALTIME, taken
    /// as the veth handed the packet to the receiving stack, in the sender's context): free of
    /// the receiver thread's scheduling delays.
    pub stamped: Timeline,
    /// How far CLOCK_REALTIME moved against CLOCK_MONOTONIC between the receiver's start and
    /// end (ns): nonzero when the realtime clock was stepped or slewed apart during the run.
    pub realtime_moved_ns: i64,
    /// Each stamped buffer's kernel stamp (ns) and datagrams, in arrival order (the first
    /// `MAX_STAMPS`).
    pub stamps: Vec<(u64, u64)>,
}

impl Arrivals {
    /// The datagrams in each run of buffers that arrived back to back: a run ends where the
    /// kernel stamps of two consecutive buffers lie more than `gap` apart.
    pub fn back_to_back_runs(&self, gap: Duration) -> Vec<u64> {
        let gap = gap.as_nanos() as u64;
        let mut runs: Vec<u64> = Vec::new();
        let mut previous: Option<u64> = None;
        for &(at, n) in &self.stamps {
            match (previous, runs.last_mut()) {
                (Some(p), Some(run)) if at.saturating_sub(p) <= gap => *run += n,
                _ => runs.push(n),
            }
            previous = Some(at);
        }
        runs
    }
}

/// A receiver running on its own thread.
pub struct NeutralReceiver {
    thread: JoinHandle<Arrivals>,
    sender_done: Arc<AtomicBool>,
}

impl NeutralReceiver {
    /// Binds `addr` inside namespace `ns` (a 64 MiB receive buffer, forced past `rmem_max`)
    /// and returns once the socket is bound. It counts `size`-byte datagrams until it has
    /// `expected`, or, once [`NeutralReceiver::finish`] says the sender is done, until 1 s
    /// passes without a datagram (a shortfall, which the test then reports), or after 60 s.
    pub fn start(ns: &str, addr: SocketAddr, size: usize, expected: u64) -> NeutralReceiver {
        let sender_done = Arc::new(AtomicBool::new(false));
        let done = sender_done.clone();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = super::spawn_in_netns(ns, move || {
            let socket = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
            setsockopt(&socket, sockopt::RcvBufForce, &(64 << 20)).expect("SO_RCVBUFFORCE");
            setsockopt(&socket, sockopt::UdpGroSegment, &true).expect("UDP_GRO");
            setsockopt(&socket, sockopt::ReceiveTimestampns, &true).expect("SO_TIMESTAMPNS");
            socket
                .set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            bound_tx.send(()).unwrap();
            count(&socket, size, expected, &done)
        });
        bound_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the neutral receiver bound its socket");
        NeutralReceiver {
            thread,
            sender_done,
        }
    }

    /// Tells the receiver the sender has ended, and returns what it counted.
    pub fn finish(self) -> Arrivals {
        self.sender_done.store(true, Ordering::Relaxed);
        self.thread.join().expect("the neutral receiver")
    }
}

fn now_ns(clock: ClockId) -> i64 {
    let t = clock_gettime(clock).expect("clock_gettime");
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

/// CLOCK_REALTIME less CLOCK_MONOTONIC, in ns.
fn realtime_offset() -> i64 {
    now_ns(ClockId::CLOCK_REALTIME) - now_ns(ClockId::CLOCK_MONOTONIC)
}

fn count(socket: &UdpSocket, size: usize, expected: u64, sender_done: &AtomicBool) -> Arrivals {
    let mut buf = vec![0u8; 65_536];
    let mut cmsg = nix::cmsg_space!(TimeSpec, i32);
    let mut got = Arrivals::default();
    let offset_at_start = realtime_offset();
    let started = Instant::now();
    let mut quiet_since: Option<Instant> = None;
    while got.datagrams < expected && started.elapsed() < Duration::from_secs(60) {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let (len, stamp) = match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::empty(),
        ) {
            Ok(msg) => {
                let stamp = msg.cmsgs().expect("cmsgs").find_map(|c| match c {
                    ControlMessageOwned::ScmTimestampns(t) => {
                        Some((t.tv_sec() * 1_000_000_000 + t.tv_nsec()) as u64)
                    }
                    _ => None,
                });
                (msg.bytes, stamp)
            }
            Err(Errno::EAGAIN | Errno::EINTR) => {
                if sender_done.load(Ordering::Relaxed) {
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= Duration::from_secs(1) {
                        break;
                    }
                }
                continue;
            }
            Err(e) => panic!("neutral receiver: {e}"),
        };
        let now = started.elapsed().as_nanos() as u64;
        quiet_since = None;
        if len % size != 0 {
            got.malformed += 1;
            continue;
        }
        let n = (len / size) as u64;
        got.buffers += 1;
        got.datagrams += n;
        got.received.add(now, n);
        match stamp {
            Some(at) => {
                got.stamped.add(at, n);
                if got.stamps.len() < MAX_STAMPS {
                    got.stamps.push((at, n));
                }
            }
            None => got.unstamped += 1,
        }
    }
    got.realtime_moved_ns = realtime_offset() - offset_at_start;
    got
}
