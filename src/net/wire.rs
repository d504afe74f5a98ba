//! Sizes on the wire, the way pktgen and TRex users think of them: an Ethernet frame size
//! (`--frame-size`, FCS included) to the UDP payload and back, the path-MTU check that refuses a
//! `--size` that would fragment unless `--allow-fragments`, the IP fragments each datagram then
//! becomes, and the L1 bytes per datagram (preamble, SFD and inter-frame gap included) behind
//! `--wire-rate`.

use std::net::SocketAddr;

use crate::{error::Error, proto::header::COMPACT_LEN};

/// Ethernet header (14) and FCS (4) around an IP packet.
pub(crate) const ETHERNET_OVERHEAD: usize = 18;
/// Preamble and SFD (8) and the inter-frame gap (12) around every frame on the wire.
pub(crate) const L1_OVERHEAD: usize = 20;
/// The smallest Ethernet frame.
pub(crate) const MIN_FRAME: usize = 64;
const UDP_HEADER: usize = 8;

fn ip_header(to: SocketAddr) -> usize {
    if to.is_ipv4() { 20 } else { 40 }
}

/// The smallest frame ringblast can send to `to`: the compact ringblast header must fit (64
/// bytes over IPv4, the Ethernet minimum; 84 over IPv6). Frames below 78 (IPv4) or 98 (IPv6)
/// bytes carry the compact header, without a timestamp.
pub(crate) fn smallest_frame(to: SocketAddr) -> usize {
    COMPACT_LEN + UDP_HEADER + ip_header(to) + ETHERNET_OVERHEAD
}

/// The UDP payload of an Ethernet frame of `frame` bytes (FCS included) sent to `to`.
pub(crate) fn payload_for_frame(frame: usize, to: SocketAddr) -> Result<usize, Error> {
    let smallest = smallest_frame(to);
    if frame < smallest {
        let family = if to.is_ipv4() { "IPv4" } else { "IPv6" };
        return Err(Error::Usage(format!(
            "frame size {frame} leaves {} bytes of UDP payload over {family}, less than the {COMPACT_LEN}-byte compact ringblast header; the smallest frame ringblast sends is {smallest} bytes over {family}",
            frame.saturating_sub(smallest - COMPACT_LEN)
        )));
    }
    Ok(frame - (UDP_HEADER + ip_header(to) + ETHERNET_OVERHEAD))
}

/// How many IP packets (fragments) one datagram of `size` payload bytes leaves as, at `mtu`.
pub(crate) fn fragments(size: usize, mtu: usize, to: SocketAddr) -> usize {
    let datagram = size + UDP_HEADER;
    if datagram + ip_header(to) <= mtu {
        return 1;
    }
    // Fragment payloads are multiples of 8; IPv6 adds an 8-byte fragment header to each.
    let extra = if to.is_ipv4() { 0 } else { 8 };
    let per = (mtu.saturating_sub(ip_header(to) + extra) & !7).max(8);
    datagram.div_ceil(per)
}

/// L1 bytes on an Ethernet wire for one datagram of `size` payload bytes at `mtu`.
pub(crate) fn l1_bytes(size: usize, mtu: usize, to: SocketAddr) -> u64 {
    let n = fragments(size, mtu, to);
    let ip = size + UDP_HEADER + n * ip_header(to) + if to.is_ipv4() || n == 1 { 0 } else { 8 * n };
    let frames = ip + n * ETHERNET_OVERHEAD;
    // Each frame is padded to the minimum; count the padding of a single small frame.
    let frames = if n == 1 {
        frames.max(MIN_FRAME)
    } else {
        frames
    };
    (frames + n * L1_OVERHEAD) as u64
}

/// Refuses a `size` that would fragment on the path to `to`, unless `allow`; returns the path
/// MTU and the fragments per datagram.
pub(crate) fn check_path(
    to: SocketAddr,
    size: usize,
    allow: bool,
) -> Result<(usize, usize), Error> {
    let Some(mtu) = crate::net::path_mtu(to).map(|m| m as usize) else {
        return Ok((usize::MAX, 1));
    };
    let n = fragments(size, mtu, to);
    if n > 1 && !allow {
        let fit = mtu - ip_header(to) - UDP_HEADER;
        return Err(Error::Usage(format!(
            "--size {size} makes {}-byte IP packets but the path MTU to {} is {mtu}: each datagram would leave as {n} IP fragments; use --size {fit} or less (--frame-size {}), or --allow-fragments",
            size + UDP_HEADER + ip_header(to),
            to.ip(),
            fit + UDP_HEADER + ip_header(to) + ETHERNET_OVERHEAD
        )));
    }
    Ok((mtu, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4() -> SocketAddr {
        "10.0.0.1:9".parse().unwrap()
    }

    fn v6() -> SocketAddr {
        "[fd00::1]:9".parse().unwrap()
    }

    #[test]
    fn frames_convert_to_payload_for_each_family() {
        assert_eq!(payload_for_frame(1518, v4()).unwrap(), 1472);
        assert_eq!(payload_for_frame(1518, v6()).unwrap(), 1452);
        assert_eq!(smallest_frame(v4()), 64);
        assert_eq!(smallest_frame(v6()), 84);
        assert_eq!(payload_for_frame(64, v4()).unwrap(), 18);
        let e = payload_for_frame(83, v6()).unwrap_err().to_string();
        assert!(
            e.contains("leaves 17 bytes") && e.contains("is 84 bytes over IPv6"),
            "{e}"
        );
    }

    #[test]
    fn fragments_follow_the_mtu() {
        assert_eq!(fragments(1472, 1500, v4()), 1);
        assert_eq!(fragments(1473, 1500, v4()), 2);
        // 9008 bytes of UDP in 1480-byte fragments.
        assert_eq!(fragments(9000, 1500, v4()), 7);
        assert_eq!(fragments(1452, 1500, v6()), 1);
        assert_eq!(fragments(1453, 1500, v6()), 2);
    }

    #[test]
    fn l1_bytes_include_preamble_gap_and_padding() {
        // A 64-byte frame (18-byte payload, compact header) is 84 bytes on the wire.
        assert_eq!(l1_bytes(18, 1500, v4()), 84);
        assert_eq!(l1_bytes(32, 1500, v4()), 98);
        assert_eq!(l1_bytes(1472, 1500, v4()), 1538);
        // Two fragments: 1500 + 48 bytes of IP, two Ethernet overheads and two L1 gaps.
        assert_eq!(l1_bytes(1500, 1500, v4()), 1508 + 40 + 36 + 40);
    }
}
