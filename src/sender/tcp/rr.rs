//! What the TCP sender reads back: every connection has a multishot `RECV` into the worker's
//! provided-buffer ring. On a stream the sink sends acknowledgements (how many records it has
//! counted on this connection), which make `delivered_records`: what reached the sink's books,
//! not only the local socket. With `rr` each connection keeps up to `--depth` requests
//! outstanding; a response in order completes one transaction, and its round trip is the time
//! since the request's timestamp, which the sink echoes, so the sender keeps no table of send
//! times.

use super::TcpSendWorker;
use crate::{
    clock,
    proto::record::{FLAG_ACK, FLAG_RESPONSE, Record},
    ring::{
        BufOrder, BufRingLayout, Completion,
        token::{OpKind, Token},
    },
    sender::rtt::rtt_cell,
};

/// Receive buffers for responses and acknowledgements: 1024 of 4 KiB per queue.
pub(super) const RECV_LAYOUT: BufRingLayout = BufRingLayout {
    entries: 1024,
    buf_size: 4096,
    order: BufOrder::ById,
};

impl TcpSendWorker {
    /// Arms the multishot receive of connection `i`'s responses.
    pub(super) fn arm_responses(&mut self, i: usize, now: u64) {
        let c = &self.conns[i];
        let fd = c
            .socket
            .as_ref()
            .map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
        let token = Token::new(OpKind::Recv, c.generation, i as u32).user_data();
        if !self.engine.push_recv_multi(fd, token) {
            self.counters.send_errors += 1;
            self.fail(i, now);
        }
    }

    /// Handles one receive completion of connection `i`.
    pub(super) fn on_responses(&mut self, i: usize, cqe: Completion, now: u64) {
        let bid = cqe.buffer_id();
        if let (true, Some(bid)) = (cqe.result > 0, bid) {
            let data = &self.engine.received_buffer(bid)[..cqe.result as usize];
            let now_real = clock::realtime_ns();
            let counters = &mut self.counters;
            let size = self.config.size as u64;
            let c = &mut self.conns[i];
            let (outstanding, acked, sent) = (&mut c.outstanding, &mut c.acked, c.next_seq);
            let fed = c.parser.feed(data, |r: Record| {
                if r.header.flags & FLAG_ACK != 0 {
                    let count = r.header.seq;
                    if count >= *acked && count <= sent {
                        counters.delivered_records += count - *acked;
                        counters.delivered_bytes += (count - *acked) * size;
                        *acked = count;
                    } else {
                        counters.bad_responses += 1;
                    }
                } else if r.in_sequence && r.header.flags & FLAG_RESPONSE != 0 && *outstanding > 0 {
                    *outstanding -= 1;
                    counters.transactions += 1;
                    counters.rx_response_bytes += u64::from(r.header.len);
                    counters.rtt_cells[rtt_cell(now_real.saturating_sub(r.header.timestamp_ns))] +=
                        1;
                } else {
                    counters.bad_responses += 1;
                }
            });
            self.engine.recycle_buffer(bid);
            if fed.is_err() {
                self.counters.bad_responses += 1;
                self.fail(i, now);
                return;
            }
            if !cqe.more() {
                self.arm_responses(i, now);
            }
            return;
        }
        if let Some(bid) = bid {
            self.engine.recycle_buffer(bid);
        }
        match -cqe.result {
            libc::ENOBUFS => self.arm_responses(i, now),
            // A stopping sender's streams end when the sink has acknowledged and closed them.
            0 if self.draining => self.fail(i, now),
            // End of stream or an error: the sink went away or reset the connection.
            _ => {
                self.counters.resets += 1;
                self.fail(i, now);
            }
        }
    }
}
