//! The TCP control channel between a sender and a sink.
//!
//! The sender ([`client::ControlClient`]) connects to the sink ([`server::ControlServer`]),
//! authenticates with an optional shared secret ([`auth`]), announces its flows, reports
//! progress and heartbeats while it runs, and at the end sends a Goodbye and receives the
//! sink's [`msg::Verdict`]. Along the way the sender estimates the sink's clock offset with
//! NTP-style exchanges ([`clock`]) and tells the sink, which corrects its one-way latency by it.
//! Messages are length-prefixed JSON frames ([`frame`]); with a secret, every frame after the
//! handshake is sealed with a per-connection key and a sequence number ([`seal`], [`channel`]).
//! Both sides run on their own threads and never block the data path.

pub(crate) mod auth;
pub(crate) mod channel;
pub(crate) mod client;
pub(crate) mod clock;
pub(crate) mod frame;
pub(crate) mod msg;
pub(crate) mod seal;
pub(crate) mod server;
#[cfg(test)]
mod tests;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// A stream whose reads all end by one deadline: each read's timeout is the time left. Bytes
/// read from the connection before it got here (a prefix) are read first.
pub(crate) struct DeadlineStream<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
    prefix: Vec<u8>,
    prefix_at: usize,
}

impl<'a> DeadlineStream<'a> {
    pub(crate) fn new(stream: &'a TcpStream, deadline: Instant) -> Self {
        DeadlineStream {
            stream,
            deadline,
            prefix: Vec::new(),
            prefix_at: 0,
        }
    }

    /// Reads `prefix` before the stream.
    pub(crate) fn with_prefix(mut self, prefix: Vec<u8>) -> Self {
        self.prefix = prefix;
        self.prefix_at = 0;
        self
    }

    /// Moves the deadline of every later read to `deadline`.
    pub(crate) fn extend(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// Bytes of the prefix not read yet.
    pub(crate) fn prefix_left(&self) -> usize {
        self.prefix.len() - self.prefix_at
    }
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.prefix_left() > 0 {
            let n = self.prefix_left().min(buf.len());
            buf[..n].copy_from_slice(&self.prefix[self.prefix_at..self.prefix_at + n]);
            self.prefix_at += n;
            return Ok(n);
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut s = self.stream;
        s.read(buf)
    }
}

impl Write for DeadlineStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut s = self.stream;
        s.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut s = self.stream;
        s.flush()
    }
}
