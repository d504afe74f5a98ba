//! A tally: a plain UDP socket of the test's own, on loopback, that counts every datagram that
//! arrives and its length. It knows nothing of ringblast, so what it counts is a neutral count of
//! what a sender put on the wire. A thread reads as the datagrams come, so the receive queue
//! never fills; [`Tally::finish`], called once the sender has exited, drains what is still
//! queued (loopback delivers inside the sender's `sendmsg`, so nothing is still in flight then).

use std::{
    collections::BTreeMap,
    io::ErrorKind,
    net::UdpSocket,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use nix::sys::socket::{setsockopt, sockopt};

/// What a tally counted: datagrams by length.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counted {
    pub by_len: BTreeMap<usize, u64>,
}

impl Counted {
    pub fn datagrams(&self) -> u64 {
        self.by_len.values().sum()
    }
}

pub struct Tally {
    thread: JoinHandle<Counted>,
    sender_done: Arc<AtomicBool>,
}

impl Tally {
    /// Binds `addr` (e.g. `127.0.0.1:0`) and returns the tally and the address it listens on.
    pub fn bind(addr: &str) -> (Tally, String) {
        let socket = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        // As root the buffer goes past rmem_max; otherwise it is capped there. The reading thread
        // keeps the queue short either way at the rates these tests send.
        if setsockopt(&socket, sockopt::RcvBufForce, &(16 << 20)).is_err() {
            setsockopt(&socket, sockopt::RcvBuf, &(16 << 20)).expect("SO_RCVBUF");
        }
        // The poll period of the read loop: after the sender has exited, a read that times out
        // means the queue is empty.
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let local = socket.local_addr().unwrap().to_string();
        let sender_done = Arc::new(AtomicBool::new(false));
        let done = sender_done.clone();
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let mut counted = Counted::default();
            loop {
                match socket.recv(&mut buf) {
                    Ok(len) => *counted.by_len.entry(len).or_default() += 1,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        if done.load(Ordering::Acquire) {
                            return counted;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => panic!("tally recv: {e}"),
                }
            }
        });
        (
            Tally {
                thread,
                sender_done,
            },
            local,
        )
    }

    /// Call once the sender has exited: drains the queue and returns the count.
    pub fn finish(self) -> Counted {
        self.sender_done.store(true, Ordering::Release);
        self.thread.join().expect("the tally thread")
    }
}
