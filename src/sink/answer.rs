//! The sink's answers to UDP requests (`--pattern rr`, `proto::exchange`): a fixed pool of
//! response slots after the receive memory in the worker's arena, each holding the requester's
//! socket address and one response of up to [`MAX_RESPONSE`] bytes. A counted request takes a
//! slot, its header is echoed into it and a `SEND` to the stored address goes out from the
//! queue's own socket; the slot comes back with the send's completion. The bytes after each
//! slot's header are zeroed once at set-up and never written, so a response carries nothing of
//! an earlier one. A request that finds no slot free, or a send that fails, is counted as
//! unanswered on this side: the sink's own limit, never loss on the way back.

use std::os::fd::RawFd;

use crate::{
    error::Error,
    proto::{
        exchange::{ECHO_AT, MAX_RESPONSE, response_header},
        header::HEADER_LEN,
    },
    ring::{ArenaRange, Engine, Wait},
};

/// Response slots per sink queue.
const SLOTS: usize = 256;
/// Bytes of a slot's address area (a `sockaddr_in6` is 28).
const ADDR_BYTES: usize = 64;
/// Bytes of one slot: the address area, then the response.
const SLOT_BYTES: usize = ADDR_BYTES + MAX_RESPONSE;
/// Completions of answer sends carry `ANSWER_TAG | slot`.
pub(super) const ANSWER_TAG: u64 = 1 << 40;

/// A sink queue's response slots.
pub(super) struct Answers {
    /// Arena offset of slot 0.
    base: usize,
    /// Slots not in flight.
    free: Vec<u16>,
}

impl Answers {
    /// Bytes of arena the slots take.
    pub(super) const ARENA_BYTES: usize = SLOTS * SLOT_BYTES;

    /// The pool at arena offset `base`, its memory zeroed (and so faulted in) now.
    pub(super) fn new(engine: &mut Engine, base: usize) -> Result<Answers, Error> {
        engine
            .arena_bytes_mut(base, Self::ARENA_BYTES)
            .ok_or_else(|| {
                Error::Unsupported("the sink's answer memory lies outside its arena".into())
            })?
            .fill(0);
        Ok(Answers {
            base,
            free: (0..SLOTS as u16).rev().collect(),
        })
    }

    /// Sends a `len`-byte response to the request whose first bytes are `request` (its header
    /// and the bytes it echoes) to `name` (the request's source, as the kernel wrote it) from
    /// `fd`; false when no slot is free, the address does not fit or the send cannot be queued
    /// (the request stays unanswered).
    pub(super) fn answer(
        &mut self,
        engine: &mut Engine,
        fd: RawFd,
        request: &[u8; ECHO_AT.end],
        name: &[u8],
        len: usize,
    ) -> bool {
        if name.is_empty() || name.len() > ADDR_BYTES || len > MAX_RESPONSE {
            return false;
        }
        let Some(slot) = self.free.pop() else {
            return false;
        };
        let at = self.base + usize::from(slot) * SLOT_BYTES;
        let written = match engine.arena_bytes_mut(at, SLOT_BYTES) {
            Some(bytes) => {
                bytes[..name.len()].copy_from_slice(name);
                let head = request
                    .first_chunk::<HEADER_LEN>()
                    .copied()
                    .unwrap_or([0; HEADER_LEN]);
                let response = &mut bytes[ADDR_BYTES..];
                response[..HEADER_LEN].copy_from_slice(&response_header(&head));
                // Always written, so no answer carries an earlier one's echo.
                let echo: &[u8] = if len >= ECHO_AT.end {
                    &request[ECHO_AT]
                } else {
                    &[0; 8]
                };
                response[ECHO_AT].copy_from_slice(echo);
                true
            }
            None => false,
        };
        let addr = ArenaRange {
            offset: at,
            len: name.len(),
        };
        let user_data = ANSWER_TAG | u64::from(slot);
        let payload = at + ADDR_BYTES;
        let mut queued = written && engine.push_send_to(fd, payload, len as u32, addr, user_data);
        if written && !queued {
            // The SQ is full: hand the kernel what it holds and try once more.
            queued = engine.submit(Wait::Nothing).is_ok()
                && engine.push_send_to(fd, payload, len as u32, addr, user_data);
        }
        if !queued {
            self.free.push(slot);
        }
        queued
    }

    /// Answers queued and not yet completed.
    pub(super) fn in_flight(&self) -> usize {
        SLOTS - self.free.len()
    }

    /// Takes back the slot of a completed answer; true when `user_data` was one.
    pub(super) fn completed(&mut self, user_data: u64) -> bool {
        if user_data & ANSWER_TAG == 0 {
            return false;
        }
        // A plain send completes once: every answer gives its slot back exactly once.
        let slot = (user_data & 0xffff) as u16;
        if usize::from(slot) < SLOTS {
            self.free.push(slot);
        }
        true
    }
}
