//! UDP socket set-up for both roles, done once before a worker's loop starts.
//!
//! Sender sockets are connected (one per flow, so each flow has its own source port for RSS and
//! `SO_REUSEPORT` hashing), report qdisc drops as ENOBUFS through `IP_RECVERR`, and optionally
//! segment with `UDP_SEGMENT`. Sink sockets share the listen address with `SO_REUSEPORT`, ask for
//! `UDP_GRO` and for the kernel's drop counter with `SO_RXQ_OVFL`.

pub(crate) mod claim;
pub(crate) mod cmsg;
pub(crate) mod fields;
pub(crate) mod steer;
pub(crate) mod wire;

use std::{
    io,
    net::SocketAddr,
    os::fd::{AsFd, AsRawFd},
};

use nix::sys::socket::{setsockopt, sockopt};
use socket2::{Domain, Protocol, Socket, Type};

use crate::error::Error;

/// Receive buffer asked for on sink sockets (forced when permitted).
pub(crate) const SINK_RCVBUF: usize = 8 << 20;
/// Send buffer asked for on sender sockets.
pub(crate) const SEND_SNDBUF: usize = 4 << 20;

fn new_udp(addr: &SocketAddr) -> Result<Socket, Error> {
    Socket::new(Domain::for_address(*addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| Error::io("socket(AF_INET*, SOCK_DGRAM)", e))
}

fn opt(what: &str, r: nix::Result<()>) -> Result<(), Error> {
    r.map_err(|e| Error::io(format!("setsockopt {what}"), io::Error::from(e)))
}

#[cfg(test)]
/// A connected sender socket for one flow, with `IP_RECVERR` and optional GSO segment size.
pub(crate) fn sender_socket(to: SocketAddr, gso_segment: Option<u16>) -> Result<Socket, Error> {
    sender_socket_with(to, gso_segment, |_| Ok(()))
}

/// As [`sender_socket`], with `prepare` run on the socket before it connects (header fields,
/// a fixed source port: `net::fields`).
pub(crate) fn sender_socket_with(
    to: SocketAddr,
    gso_segment: Option<u16>,
    prepare: impl FnOnce(&Socket) -> Result<(), Error>,
) -> Result<Socket, Error> {
    let sock = new_udp(&to)?;
    prepare(&sock)?;
    let _ = sock.set_send_buffer_size(SEND_SNDBUF);
    match to {
        SocketAddr::V4(_) => opt(
            "IP_RECVERR",
            setsockopt(&sock.as_fd(), sockopt::Ipv4RecvErr, &true),
        )?,
        SocketAddr::V6(_) => opt(
            "IPV6_RECVERR",
            setsockopt(&sock.as_fd(), sockopt::Ipv6RecvErr, &true),
        )?,
    }
    if let Some(seg) = gso_segment {
        setsockopt(&sock.as_fd(), sockopt::UdpGsoSegment, &i32::from(seg)).map_err(|e| {
            Error::Unsupported(format!(
                "this kernel refuses UDP_SEGMENT ({e}); run without --gso (UDP GSO needs Linux 4.18)"
            ))
        })?;
    }
    sock.connect(&to.into())
        .map_err(|e| Error::io(format!("connect to {to}"), e))?;
    Ok(sock)
}

/// The path MTU towards `to`: `IP_MTU` of a connected socket for IPv4; for IPv6 (no safe
/// getter for `IPV6_MTU` here) the MTU of the interface the route goes out of. `None` if it
/// cannot be read.
pub(crate) fn path_mtu(to: SocketAddr) -> Option<u32> {
    match to {
        SocketAddr::V4(_) => {
            let sock = new_udp(&to).ok()?;
            sock.connect(&to.into()).ok()?;
            nix::sys::socket::getsockopt(&sock.as_fd(), sockopt::IpMtu)
                .ok()
                .and_then(|m| u32::try_from(m).ok())
        }
        SocketAddr::V6(_) => {
            let ifname = crate::topology::egress_interface(to).ok()?;
            std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu"))
                .ok()?
                .trim()
                .parse()
                .ok()
        }
    }
}

/// Options for sink sockets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SinkSocketOptions {
    /// Ask for `UDP_GRO` so coalesced segments arrive in one buffer.
    pub(crate) gro: bool,
    /// Share the address with other workers (`SO_REUSEPORT`).
    pub(crate) reuse_port: bool,
    /// Ask for `SO_TIMESTAMPNS`, each datagram's software receive stamp (`timestamps::Arrival`:
    /// where a kernel refuses it, arrival times are taken when the sink reads, and its queueing
    /// delay is unknown).
    pub(crate) receive_stamps: bool,
}

/// A bound sink socket with `SO_RXQ_OVFL`, optional receive stamps, a large receive buffer and
/// optional GRO.
pub(crate) fn sink_socket(listen: SocketAddr, opts: SinkSocketOptions) -> Result<Socket, Error> {
    let sock = new_udp(&listen)?;
    if opts.reuse_port {
        sock.set_reuse_port(true)
            .map_err(|e| Error::io("setsockopt SO_REUSEPORT", e))?;
    }
    if listen.is_ipv6() {
        let _ = sock.set_only_v6(false);
    }
    if setsockopt(&sock.as_fd(), sockopt::RcvBufForce, &SINK_RCVBUF).is_err() {
        let _ = sock.set_recv_buffer_size(SINK_RCVBUF);
    }
    opt(
        "SO_RXQ_OVFL",
        setsockopt(&sock.as_fd(), sockopt::RxqOvfl, &1),
    )?;
    if opts.receive_stamps {
        let _ = setsockopt(&sock.as_fd(), sockopt::ReceiveTimestampns, &true);
    }
    if opts.gro {
        // Kernels without UDP GRO (before 5.0) would deliver datagrams one by one; the sink's
        // multishot receives (6.0) already rule them out.
        let _ = setsockopt(&sock.as_fd(), sockopt::UdpGroSegment, &true);
    }
    sock.bind(&listen.into()).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => Error::Unsupported(format!(
            "cannot listen on {listen}: address already in use by another program; pick another --listen port"
        )),
        io::ErrorKind::AddrNotAvailable => Error::Usage(format!(
            "cannot listen on {listen}: no local interface has that address"
        )),
        _ => Error::io(format!("bind {listen}"), e),
    })?;
    Ok(sock)
}

/// Asks the kernel to report software stamps on `sock` (`SO_TIMESTAMPING` with
/// `SOF_TIMESTAMPING_SOFTWARE` alone: no stamp is generated until a send asks for one in its
/// control message); false where the kernel refuses.
pub(crate) fn report_software_stamps<S: AsFd>(sock: &S) -> bool {
    setsockopt(
        &sock.as_fd(),
        sockopt::Timestamping,
        &nix::sys::socket::TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE,
    )
    .is_ok()
}

/// The kernel's drop counter of `sock` (`/proc/net/udp{,6}`, `drops` column), read once at the
/// end of a run so drops after the last received datagram are counted too.
pub(crate) fn socket_drops(sock: &Socket) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", sock.as_raw_fd())).ok()?;
    let inode = link
        .to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .to_string();
    ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .find_map(|table| drops_for_inode(&table, &inode))
}

fn drops_for_inode(table: &str, inode: &str) -> Option<u64> {
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.get(9) == Some(&inode)).then(|| cols.last()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_drops_column_by_inode() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
   1: 0100007F:3039 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 17\n";
        assert_eq!(drops_for_inode(table, "4242"), Some(17));
        assert_eq!(drops_for_inode(table, "1"), None);
    }

    #[test]
    fn live_socket_has_zero_drops() {
        let opts = SinkSocketOptions {
            gro: false,
            reuse_port: false,
            receive_stamps: true,
        };
        let s = sink_socket("127.0.0.1:0".parse().unwrap(), opts).unwrap();
        assert_eq!(socket_drops(&s), Some(0));
    }

    use super::*;

    #[test]
    fn sink_sockets_share_a_port_with_reuseport() {
        let opts = SinkSocketOptions {
            gro: true,
            reuse_port: true,
            receive_stamps: true,
        };
        let a = sink_socket("127.0.0.1:0".parse().unwrap(), opts).unwrap();
        let addr = a.local_addr().unwrap().as_socket().unwrap();
        let b = sink_socket(addr, opts).unwrap();
        assert_eq!(b.local_addr().unwrap().as_socket().unwrap(), addr);
    }

    #[test]
    fn port_in_use_without_reuseport_is_exit_3() {
        let opts = SinkSocketOptions {
            gro: false,
            reuse_port: false,
            receive_stamps: true,
        };
        let a = sink_socket("127.0.0.1:0".parse().unwrap(), opts).unwrap();
        let addr = a.local_addr().unwrap().as_socket().unwrap();
        let err = sink_socket(addr, opts).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::EXIT_UNSUPPORTED);
        assert!(err.to_string().contains("already in use"));
    }

    #[test]
    fn sender_sockets_get_distinct_source_ports() {
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let a = sender_socket(to, Some(64)).unwrap();
        let b = sender_socket(to, None).unwrap();
        let pa = a.local_addr().unwrap().as_socket().unwrap().port();
        let pb = b.local_addr().unwrap().as_socket().unwrap().port();
        assert_ne!(pa, pb);
    }
}
