//! `getsockopt(TCP_INFO)` (neither nix nor socket2 exposes it): the smoothed RTT, the
//! connection's total retransmits and its congestion window. The reporter thread samples open
//! connections; a worker calls it only as it closes one, off its hot path. For the reporter the
//! descriptor may have been closed meanwhile; the call then fails (`EBADF`) or answers for
//! whatever socket now holds the number, which is why it validates the descriptor's generation
//! around the call (see `sender::tcp::info`).

use std::os::fd::RawFd;

/// What one TCP_INFO sample gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TcpInfo {
    /// Smoothed round-trip time, microseconds.
    pub(crate) srtt_us: u32,
    /// Segments retransmitted over the connection's life.
    pub(crate) total_retrans: u32,
    /// Congestion window, segments.
    pub(crate) snd_cwnd: u32,
}

/// Samples TCP_INFO of socket `fd`; `None` when the call fails (closed, not TCP).
pub(crate) fn sample(fd: RawFd) -> Option<TcpInfo> {
    // SAFETY: tcp_info is plain old data (integers only), so all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are live locals, `len` holds the size of `info`, and the kernel
    // writes at most `len` bytes into it; an invalid `fd` only makes the call fail.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(TcpInfo {
        srtt_us: info.tcpi_rtt,
        total_retrans: info.tcpi_total_retrans,
        snd_cwnd: info.tcpi_snd_cwnd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_connected_socket_has_a_window_and_a_udp_socket_has_no_sample() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let info = sample(c.as_raw_fd()).unwrap();
        assert!(info.snd_cwnd > 0, "{info:?}");
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(sample(udp.as_raw_fd()), None);
    }
}
