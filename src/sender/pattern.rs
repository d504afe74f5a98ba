//! What a sender's queues send, whatever the transport carries it: a stream, or requests each
//! answered by a response (`--pattern rr`). The request/response shape is one type for UDP and
//! TCP, checked against each transport's limits in one place; each transport's workers then
//! send it their own way (`sender::exchange` over UDP, `sender::tcp::rr` over TCP).

use std::ops::RangeInclusive;

/// The request/response shape of a sender: the same for every transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RrShape {
    /// Request bytes, header included.
    pub(crate) request: usize,
    /// Response bytes asked for.
    pub(crate) response: usize,
    /// Requests outstanding per flow (UDP) or connection (TCP).
    pub(crate) depth: u32,
}

/// What a transport can carry of a request/response shape.
pub(crate) struct RrLimits {
    /// Request bytes, and why the bounds are what they are.
    pub(crate) request: RangeInclusive<usize>,
    pub(crate) request_why: &'static str,
    /// Response bytes.
    pub(crate) response: RangeInclusive<usize>,
    /// Over what the transport says it ("over UDP"), for the error lines.
    pub(crate) over: &'static str,
    /// What one stream of requests is called ("flow", "connection").
    pub(crate) per: &'static str,
}

/// Requests outstanding per flow or connection, at most.
pub(crate) const MAX_DEPTH: u32 = 64;

impl RrShape {
    /// The shape asked for: the given sizes and depth, 64-byte requests and responses and one
    /// request outstanding by default.
    pub(crate) fn asked(
        request: Option<usize>,
        response: Option<usize>,
        depth: Option<u32>,
    ) -> RrShape {
        RrShape {
            request: request.unwrap_or(64),
            response: response.unwrap_or(64),
            depth: depth.unwrap_or(1),
        }
    }

    /// The shape if `limits` can carry it, or the one line that says which flag to change.
    pub(crate) fn within(self, limits: &RrLimits) -> Result<RrShape, String> {
        let RrLimits {
            request,
            request_why,
            response,
            over,
            per,
        } = limits;
        if !request.contains(&self.request) {
            return Err(format!(
                "--request-size {} must be {} to {} bytes{over} ({request_why})",
                self.request,
                request.start(),
                request.end()
            ));
        }
        if !response.contains(&self.response) {
            return Err(format!(
                "--response-size {} must be {} to {} bytes{over}",
                self.response,
                response.start(),
                response.end()
            ));
        }
        if !(1..=MAX_DEPTH).contains(&self.depth) {
            return Err(format!(
                "--depth {} must be 1 to {MAX_DEPTH} requests outstanding per {per}",
                self.depth
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RrLimits = RrLimits {
        request: 40..=1000,
        request_why: "a request carries its header",
        response: 32..=2000,
        over: " over UDP",
        per: "flow",
    };

    #[test]
    fn a_shape_is_checked_against_its_transports_limits() {
        let asked = RrShape::asked(None, None, None);
        assert_eq!(
            asked.within(&LIMITS),
            Ok(RrShape {
                request: 64,
                response: 64,
                depth: 1
            })
        );
        let e = RrShape::asked(Some(39), None, None)
            .within(&LIMITS)
            .unwrap_err();
        assert_eq!(
            e,
            "--request-size 39 must be 40 to 1000 bytes over UDP (a request carries its header)"
        );
        let e = RrShape::asked(None, Some(2001), None)
            .within(&LIMITS)
            .unwrap_err();
        assert_eq!(e, "--response-size 2001 must be 32 to 2000 bytes over UDP");
        let e = RrShape::asked(None, None, Some(65))
            .within(&LIMITS)
            .unwrap_err();
        assert_eq!(
            e,
            "--depth 65 must be 1 to 64 requests outstanding per flow"
        );
        assert!(
            RrShape::asked(Some(1000), Some(32), Some(64))
                .within(&LIMITS)
                .is_ok()
        );
    }
}
