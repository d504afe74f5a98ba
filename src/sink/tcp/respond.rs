//! What the sink writes back: on request/response connections every complete request is queued
//! (at most [`MAX_OWED`]) and answered, in order, with a response record of the length it asked
//! for, echoing its flow, epoch, sequence number and timestamp; on streams an acknowledgement
//! record carries the count of records counted so far. Acknowledgements go out at the worker's
//! tick (every 10 ms, when records were counted since the last) and when the stream ends or
//! the sink stops, never per receive: each one is a data segment the sender's kernel must
//! take in, and on loopback its arrival makes the sender's queued data leave from the sink's
//! core, out of order with the sender's own transmits (spurious retransmits).
//! Replies go out with plain `SEND`s from the connection's slot of the arena, one write in
//! flight per connection, as many responses per write as fit in the slot; short writes are
//! continued. A connection marked `close_after_reply` is closed once nothing is left to send.

use super::TcpSinkWorker;
use crate::{
    clock,
    proto::record::{
        FLAG_ACK, FLAG_RESPONSE, MAX_RESPONSE, RECORD_HEADER_LEN, Record, RecordHeader,
    },
    ring::token::{OpKind, Token},
};

/// Bytes of one connection's response slot (the largest response fits).
pub(super) const SLOT_BYTES: usize = MAX_RESPONSE;
/// Requests a connection may have outstanding at the sink.
pub(super) const MAX_OWED: usize = 64;

/// Requests read and not yet answered, oldest first (a fixed ring).
#[derive(Clone, Copy, Debug)]
pub(super) struct Owed {
    items: [RecordHeader; MAX_OWED],
    head: usize,
    len: usize,
}

impl Default for Owed {
    fn default() -> Self {
        Owed {
            items: [RecordHeader::default(); MAX_OWED],
            head: 0,
            len: 0,
        }
    }
}

impl Owed {
    /// Queues the response to request `r`; false when [`MAX_OWED`] are queued already.
    pub(super) fn push(&mut self, r: &Record) -> bool {
        if self.len == MAX_OWED {
            return false;
        }
        self.items[(self.head + self.len) % MAX_OWED] = RecordHeader {
            len: r.response_len,
            flags: FLAG_RESPONSE,
            ..r.header
        };
        self.len += 1;
        true
    }

    fn front(&self) -> Option<&RecordHeader> {
        (self.len > 0).then(|| &self.items[self.head])
    }

    fn pop(&mut self) {
        if self.len > 0 {
            self.head = (self.head + 1) % MAX_OWED;
            self.len -= 1;
        }
    }
}

impl TcpSinkWorker {
    /// Starts a write on connection `i` if none is in flight: the responses owed, else, when
    /// `ack` (the tick) or the stream ended, an acknowledgement if records were counted since
    /// the last; with nothing to send, a connection marked `close_after_reply` is closed.
    pub(super) fn reply(&mut self, i: usize, ack: bool) {
        let offset = self.response_base + i * SLOT_BYTES;
        let c = &mut self.conns[i];
        if c.reply_len != 0 {
            return;
        }
        let Some(fd) = c.fd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd) else {
            return;
        };
        if c.owed.len == 0 {
            if c.counted > c.acked && (ack || c.close_after_reply) {
                let ack = RecordHeader {
                    len: RECORD_HEADER_LEN as u32,
                    flags: FLAG_ACK,
                    seq: c.counted,
                    timestamp_ns: clock::realtime_ns(),
                    ..RecordHeader::default()
                };
                if let Some(bytes) = self.engine.arena_bytes_mut(offset, RECORD_HEADER_LEN) {
                    ack.write(bytes);
                }
                c.acked = c.counted;
                let token = Token::new(OpKind::Send, c.generation, i as u32).user_data();
                (c.reply_len, c.reply_written, c.reply_count) = (RECORD_HEADER_LEN as u32, 0, 0);
                self.counters.acks += 1;
                if !self
                    .engine
                    .push_send(fd, offset, RECORD_HEADER_LEN as u32, token)
                {
                    self.close(i);
                }
            } else if c.close_after_reply {
                self.close(i);
            }
            return;
        }
        let (mut len, mut count) = (0usize, 0u32);
        while let Some(h) = c.owed.front().copied() {
            let size = h.len as usize;
            if len + size > SLOT_BYTES {
                break;
            }
            if let Some(bytes) = self.engine.arena_bytes_mut(offset + len, size) {
                h.write(bytes);
            }
            c.owed.pop();
            len += size;
            count += 1;
        }
        let token = Token::new(OpKind::Send, c.generation, i as u32).user_data();
        (c.reply_len, c.reply_written, c.reply_count) = (len as u32, 0, count);
        if !self.engine.push_send(fd, offset, len as u32, token) {
            self.close(i);
        }
    }

    /// The acknowledgement tick: every open stream with records counted since its last
    /// acknowledgement gets one now, or at the next tick when a write is in flight.
    pub(super) fn acknowledge_streams(&mut self) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.fd.is_some() && c.counted > c.acked {
                self.reply(i, true);
            }
        }
    }

    /// Handles a response write's completion on connection `i`.
    pub(super) fn on_reply(&mut self, i: usize, result: i32) {
        if result <= 0 {
            self.counters.resets += 1;
            self.close(i);
            return;
        }
        let c = &mut self.conns[i];
        c.reply_written += result as u32;
        if c.reply_written < c.reply_len {
            let offset = self.response_base + i * SLOT_BYTES + c.reply_written as usize;
            let rest = c.reply_len - c.reply_written;
            let token = Token::new(OpKind::Send, c.generation, i as u32).user_data();
            let fd = c.fd.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
            if !self.engine.push_send(fd, offset, rest, token) {
                self.close(i);
            }
            return;
        }
        if c.reply_count > 0 {
            self.counters.responses += u64::from(c.reply_count);
            self.counters.tx_response_bytes += u64::from(c.reply_len);
        }
        c.reply_len = 0;
        c.reply_count = 0;
        self.reply(i, false);
    }
}
