//! UDP request/response on the wire (`--proto udp --pattern rr`). A request is an ordinary
//! datagram (the 32-byte header, then the proof bytes when the run has a secret) whose flags
//! carry [`FLAG_REQUEST`] and whose bytes 40..44 (big-endian) name the length of the response
//! it asks for, so the sink counts it exactly like any other datagram. The sink answers each
//! request it counted (never a duplicate, a refused or an invalid one) with one datagram of
//! that length from the socket the request came in on: the request's header with
//! [`FLAG_RESPONSE`] in place of [`FLAG_REQUEST`], then (from 40 bytes) the request's bytes
//! 32..40 echoed, the rest zero. With a secret those 8 bytes are the request's proof (its run's
//! token, or its tag), so a sender with a secret takes only a response that carries the proof
//! of the very request it answers: one forged without the secret matches nothing. The sender
//! matches a response to its outstanding request by flow, epoch and sequence number and takes
//! the round trip on its own clock, so nothing in a response is trusted for a figure.

use std::ops::Range;

use super::header::HEADER_LEN;

/// Header flag of a request.
pub(crate) const FLAG_REQUEST: u8 = 0x02;
/// Header flag of a response.
pub(crate) const FLAG_RESPONSE: u8 = 0x04;
/// Where a request names its response length (after the header and the proof bytes).
const RESPONSE_LEN_AT: Range<usize> = 40..44;
/// The shortest request: the header, the proof bytes and the response length.
pub(crate) const MIN_REQUEST: usize = RESPONSE_LEN_AT.end;
/// The longest response a sink sends (one 4 KiB slot of its answer memory each).
pub(crate) const MAX_RESPONSE: usize = 4096;
/// The shortest response: the echoed header.
pub(crate) const MIN_RESPONSE: usize = HEADER_LEN;
/// The request bytes a response echoes after its header (a proven request's proof).
pub(crate) const ECHO_AT: Range<usize> = HEADER_LEN..HEADER_LEN + 8;

/// Writes the response length `len` into request `buf` (at least [`MIN_REQUEST`] bytes).
pub(crate) fn write_response_len(buf: &mut [u8], len: u32) {
    if let Some(at) = buf.get_mut(RESPONSE_LEN_AT) {
        at.copy_from_slice(&len.to_be_bytes());
    }
}

/// The response length a request asks for: `None` when the datagram is too short to name one
/// or names one outside [`MIN_RESPONSE`]..=[`MAX_RESPONSE`] (such a request is counted and not
/// answered).
pub(crate) fn response_len(request: &[u8]) -> Option<usize> {
    let bytes: [u8; 4] = request.get(RESPONSE_LEN_AT)?.try_into().ok()?;
    let len = u32::from_be_bytes(bytes) as usize;
    (MIN_RESPONSE..=MAX_RESPONSE).contains(&len).then_some(len)
}

/// Turns a copy of a request's header into its response's header.
pub(crate) fn response_header(request_header: &[u8; HEADER_LEN]) -> [u8; HEADER_LEN] {
    let mut h = *request_header;
    h[5] = (h[5] & !FLAG_REQUEST) | FLAG_RESPONSE;
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::header::{self, Header};

    #[test]
    fn a_request_names_its_response_and_the_response_echoes_its_header() {
        let h = Header {
            flags: FLAG_REQUEST | 0x01,
            failed: 3,
            flow: 7,
            epoch: 0xdead_beef,
            seq: 42,
            timestamp_ns: 99,
        };
        let mut request = vec![0u8; 64];
        h.write(&mut request);
        write_response_len(&mut request, 1000);
        assert_eq!(response_len(&request), Some(1000));
        let head: [u8; HEADER_LEN] = request[..HEADER_LEN].try_into().unwrap();
        let back = header::parse(&response_header(&head)).unwrap();
        assert_eq!(back.flags, FLAG_RESPONSE | 0x01);
        assert_eq!((back.flow, back.epoch, back.seq), (7, 0xdead_beef, 42));
    }

    #[test]
    fn a_request_too_short_or_asking_too_much_gets_no_answer() {
        let mut request = vec![0u8; 64];
        assert_eq!(response_len(&request[..43]), None);
        for bad in [0u32, 31, MAX_RESPONSE as u32 + 1, u32::MAX] {
            write_response_len(&mut request, bad);
            assert_eq!(response_len(&request), None, "{bad}");
        }
        write_response_len(&mut request, MIN_RESPONSE as u32);
        assert_eq!(response_len(&request), Some(MIN_RESPONSE));
    }
}
