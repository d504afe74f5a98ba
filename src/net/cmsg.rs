//! Parsing of the control messages a `RECVMSG` delivers: with each datagram a sink receives,
//! `UDP_GRO` (the segment size of a coalesced buffer), `SO_RXQ_OVFL` (the socket's cumulative
//! drop counter) and `SCM_TIMESTAMPNS` (the kernel's software receive stamp), and the sender's
//! address (`sockaddr_in`/`sockaddr_in6`); with a sender's error-queue read, `SCM_TIMESTAMPING`
//! (the kernel's software transmit stamp). Pure byte parsing, no pointers.

/// `SOL_UDP`.
const SOL_UDP: i32 = 17;
/// `UDP_GRO` control message type.
const UDP_GRO: i32 = 104;
/// Size of `struct cmsghdr` on 64-bit Linux: `size_t len; int level; int type`.
const CMSG_HEADER: usize = 16;
const ALIGN: usize = std::mem::size_of::<usize>();

/// What the control messages of one received buffer said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ControlInfo {
    /// Segment size when the buffer holds several coalesced datagrams.
    pub(crate) gro_segment: Option<u16>,
    /// The socket's cumulative drop counter, present once drops have happened.
    pub(crate) drops: Option<u32>,
    /// When the kernel received the buffer, or transmitted the packet an error-queue read
    /// returned (`CLOCK_REALTIME`, ns).
    pub(crate) stamp_ns: Option<u64>,
}

/// The sender's address from the name bytes of a received message, if it is IPv4 or IPv6.
pub(crate) fn parse_source(name: &[u8]) -> Option<std::net::SocketAddr> {
    let family = i32::from(u16::from_ne_bytes(name.get(0..2)?.try_into().ok()?));
    let port = u16::from_be_bytes(name.get(2..4)?.try_into().ok()?);
    match family {
        libc::AF_INET => {
            let ip: [u8; 4] = name.get(4..8)?.try_into().ok()?;
            Some((std::net::Ipv4Addr::from(ip), port).into())
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = name.get(8..24)?.try_into().ok()?;
            Some((std::net::Ipv6Addr::from(ip), port).into())
        }
        _ => None,
    }
}

/// Walks the `cmsghdr` chain in `control`. Malformed trailing bytes are ignored.
pub(crate) fn parse(control: &[u8]) -> ControlInfo {
    let mut info = ControlInfo::default();
    let mut offset = 0;
    while let Some(header) = control.get(offset..offset + CMSG_HEADER) {
        let len = read_usize(&header[0..ALIGN]);
        let level = read_i32(&header[8..12]);
        let kind = read_i32(&header[12..16]);
        if len < CMSG_HEADER {
            break;
        }
        let Some(data) = control.get(offset + CMSG_HEADER..offset + len) else {
            break;
        };
        match (level, kind) {
            (SOL_UDP, UDP_GRO) if data.len() >= 4 => {
                let seg = read_i32(&data[0..4]);
                info.gro_segment = u16::try_from(seg).ok().filter(|&s| s > 0);
            }
            (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) if data.len() >= 4 => {
                info.drops = Some(u32::from_ne_bytes([data[0], data[1], data[2], data[3]]));
            }
            // `struct timespec`: two 64-bit words on 64-bit Linux.
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) if data.len() >= 16 => {
                info.stamp_ns = timespec_ns(data);
            }
            // `struct scm_timestamping`: three timespecs, the first the software stamp (zero
            // when there is none).
            (libc::SOL_SOCKET, libc::SO_TIMESTAMPING) if data.len() >= 16 => {
                info.stamp_ns = timespec_ns(data).filter(|&ns| ns > 0);
            }
            _ => {}
        }
        offset += len.div_ceil(ALIGN) * ALIGN;
    }
    info
}

/// The `struct timespec` at the start of `data` in ns; `None` when it is not a valid time.
fn timespec_ns(data: &[u8]) -> Option<u64> {
    let secs = read_i64(&data[0..8]);
    let nanos = read_i64(&data[8..16]);
    u64::try_from(secs)
        .ok()
        .zip(u64::try_from(nanos).ok().filter(|n| *n < 1_000_000_000))
        .and_then(|(s, n)| s.checked_mul(1_000_000_000)?.checked_add(n))
}

fn read_usize(b: &[u8]) -> usize {
    let mut a = [0u8; ALIGN];
    a.copy_from_slice(&b[..ALIGN]);
    usize::from_ne_bytes(a)
}

fn read_i64(b: &[u8]) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    i64::from_ne_bytes(a)
}

fn read_i32(b: &[u8]) -> i32 {
    i32::from_ne_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn cmsg(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        let len = CMSG_HEADER + data.len();
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_ne_bytes());
        v.extend_from_slice(&level.to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(data);
        v.resize(len.div_ceil(ALIGN) * ALIGN, 0);
        v
    }

    #[test]
    fn parses_gro_and_drops() {
        let mut buf = cmsg(SOL_UDP, UDP_GRO, &1400i32.to_ne_bytes());
        buf.extend(cmsg(
            libc::SOL_SOCKET,
            libc::SO_RXQ_OVFL,
            &77u32.to_ne_bytes(),
        ));
        let info = parse(&buf);
        assert_eq!(info.gro_segment, Some(1400));
        assert_eq!(info.drops, Some(77));
    }

    #[test]
    fn a_transmit_stamp_is_the_first_timespec_of_scm_timestamping() {
        let mut stamps = Vec::new();
        for (secs, nanos) in [(1_700_000_000i64, 123i64), (0, 0), (0, 0)] {
            stamps.extend_from_slice(&secs.to_ne_bytes());
            stamps.extend_from_slice(&nanos.to_ne_bytes());
        }
        let info = parse(&cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &stamps));
        assert_eq!(info.stamp_ns, Some(1_700_000_000_000_000_123));
        // No software stamp (only a hardware one): none, not the Unix epoch.
        let none = parse(&cmsg(libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &[0; 48]));
        assert_eq!(none.stamp_ns, None);
    }

    #[test]
    fn tolerates_garbage() {
        assert_eq!(parse(&[]), ControlInfo::default());
        assert_eq!(parse(&[0xff; 7]), ControlInfo::default());
        let mut bad = cmsg(SOL_UDP, UDP_GRO, &1400i32.to_ne_bytes());
        bad[0] = 200; // length past the end
        assert_eq!(parse(&bad), ControlInfo::default());
        let zero_len = vec![0u8; 32];
        assert_eq!(parse(&zero_len), ControlInfo::default());
    }

    #[test]
    fn sources_parse_and_junk_is_none() {
        let mut v4 = vec![0u8; 16];
        v4[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&4242u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(parse_source(&v4), Some("10.0.0.7:4242".parse().unwrap()));
        let mut v6 = vec![0u8; 28];
        v6[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        v6[2..4].copy_from_slice(&9u16.to_be_bytes());
        v6[23] = 1;
        assert_eq!(parse_source(&v6), Some("[::1]:9".parse().unwrap()));
        assert_eq!(parse_source(&v6[..10]), None);
        assert_eq!(parse_source(&[]), None);
        assert_eq!(parse_source(&[0xff; 28]), None);
    }
}
