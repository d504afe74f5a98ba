//! An injector of the tests' own, as an attacker on the path would be: sniff a ringblast
//! datagram off the namespace's loopback (`AF_PACKET`), and send datagrams with any source
//! address and port (a raw IPv4 socket). Run inside the test's namespace, as root.

use std::{
    io::Read,
    net::{Ipv4Addr, SocketAddrV4},
    time::{Duration, Instant},
};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Waits (at most 10 s) for a full-header ringblast datagram to port `dport` whose payload
/// `wanted` accepts, and returns its source and UDP payload.
pub fn sniff(dport: u16, wanted: impl Fn(&[u8]) -> bool) -> (SocketAddrV4, Vec<u8>) {
    const ETH_P_IP: u16 = 0x0800;
    let socket = Socket::new(
        Domain::PACKET,
        Type::DGRAM,
        Some(Protocol::from(i32::from(ETH_P_IP.to_be()))),
    )
    .expect("an AF_PACKET socket (root)");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 2048];
    while Instant::now() < until {
        let Ok(n) = (&socket).read(&mut buf) else {
            continue;
        };
        let frame = &buf[..n];
        let ihl = usize::from(frame[0] & 0x0f) * 4;
        if frame[0] >> 4 != 4 || frame[9] != 17 || frame.len() < ihl + 8 + 32 {
            continue;
        }
        let udp = &frame[ihl..];
        let port = u16::from_be_bytes([udp[2], udp[3]]);
        if port != dport || &udp[8..12] != b"RBLS" || !wanted(&udp[8..]) {
            continue;
        }
        let src = Ipv4Addr::new(frame[12], frame[13], frame[14], frame[15]);
        let sport = u16::from_be_bytes([udp[0], udp[1]]);
        return (SocketAddrV4::new(src, sport), udp[8..].to_vec());
    }
    panic!("no ringblast datagram to port {dport} seen within 10 s");
}

/// A raw IPv4 socket for [`spoof`].
pub fn raw_socket() -> Socket {
    Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    )
    .expect("a raw socket (root)")
}

/// Sends `payload` from `source` to `dest` (the kernel fills in the IP checksum and length,
/// and a UDP checksum of 0 means none).
pub fn spoof(raw: &Socket, source: SocketAddrV4, dest: SocketAddrV4, payload: &[u8]) {
    let udp_len = 8 + payload.len();
    let mut packet = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    packet.extend_from_slice(&source.ip().octets());
    packet.extend_from_slice(&dest.ip().octets());
    packet.extend_from_slice(&source.port().to_be_bytes());
    packet.extend_from_slice(&dest.port().to_be_bytes());
    packet.extend_from_slice(&(udp_len as u16).to_be_bytes());
    packet.extend_from_slice(&[0, 0]);
    packet.extend_from_slice(payload);
    let to = SockAddr::from(SocketAddrV4::new(*dest.ip(), 0));
    raw.send_to(&packet, &to).expect("send a spoofed datagram");
}
