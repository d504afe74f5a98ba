//! Whether a UDP listen address is held by another process, so that a second sink is refused
//! instead of silently splitting the traffic with the first.
//!
//! Every sink queue binds with `SO_REUSEPORT`, so the queues of one process share the port.
//! The kernel lets any socket of the same user join that group, and there is no flag that admits
//! only the sockets of one process, so the check is done here, from `/proc/net/udp{,6}` (which
//! lists the sockets of this network namespace): a socket bound to the same port on the same or
//! a wildcard address whose inode is not one of this process's descriptors belongs to someone
//! else. The sink checks twice:
//! - before it binds, so that a sink already running never sees a stranger in its group, not
//!   even for a moment;
//! - after all its queues are bound and before any is released, so that two sinks started at
//!   the same moment cannot both pass the first check unseen: the one that binds last sees the
//!   other and exits; if both bind before either looks, both exit. Neither ever runs split.
//!
//! `--share-port` skips both checks.

use std::{
    collections::HashSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
};

use crate::error::Error;

/// One socket from `/proc/net/udp{,6}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bound {
    addr: SocketAddr,
    inode: u64,
}

/// Fails with one line naming the holder when another process has a socket on `listen`.
pub(crate) fn refuse_others(listen: SocketAddr) -> Result<(), Error> {
    if listen.port() == 0 {
        return Ok(());
    }
    // A socket no process holds is most likely one being torn down: a killed sink's io_uring
    // releases its files asynchronously, after the process is gone. Give it a moment to go
    // (within the 1 s an environment failure may take); one with a holder is refused at once.
    let deadline = std::time::Instant::now() + ORPHAN_WAIT;
    loop {
        match other_holder(listen) {
            None => return Ok(()),
            Some((_, None)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Some((b, who)) => return Err(Error::Unsupported(refusal(listen, b, who))),
        }
    }
}

/// How long a socket with no holder may take to disappear.
const ORPHAN_WAIT: std::time::Duration = std::time::Duration::from_millis(800);

/// Another process's socket on `listen`, and who holds it, if anyone can be seen to.
fn other_holder(listen: SocketAddr) -> Option<(Bound, Option<(u32, String)>)> {
    let ours = own_socket_inodes();
    let tables = ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect::<Vec<_>>();
    let b = tables
        .iter()
        .flat_map(|t| parse_table(t))
        .find(|b| conflicts(b.addr, listen) && !ours.contains(&b.inode))?;
    Some((b, holder(b.inode)))
}

fn refusal(listen: SocketAddr, b: Bound, who: Option<(u32, String)>) -> String {
    let who = match who {
        Some((pid, comm)) if comm == "ringblast" => format!("another ringblast (pid {pid})"),
        Some((pid, comm)) => format!("another program ({comm}, pid {pid})"),
        None => "another program".to_string(),
    };
    format!(
        "cannot listen on {listen}: UDP {} is already held by {who}; stop it, pick another --listen port, or pass --share-port to split the traffic with it",
        b.addr
    )
}

/// Whether a socket bound to `held` takes datagrams meant for `want`.
fn conflicts(held: SocketAddr, want: SocketAddr) -> bool {
    if held.port() != want.port() {
        return false;
    }
    let (a, b) = (canonical(held.ip()), canonical(want.ip()));
    a == b || a.is_unspecified() || b.is_unspecified()
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Inodes of every socket this process holds.
fn own_socket_inodes() -> HashSet<u64> {
    socket_inodes_of("self")
}

fn socket_inodes_of(pid: &str) -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| socket_inode(l.to_str()?))
        .collect()
}

fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The process holding socket `inode`, if it is visible to us (only looked for on refusal).
fn holder(inode: u64) -> Option<(u32, String)> {
    let procs = std::fs::read_dir("/proc").ok()?;
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| socket_inodes_of(&pid.to_string()).contains(&inode))
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, comm.trim().to_string())
        })
}

/// The bound sockets of one `/proc/net/udp` or `/proc/net/udp6` table.
fn parse_table(table: &str) -> Vec<Bound> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let addr = parse_addr(cols.get(1)?)?;
            let inode = cols.get(9)?.parse().ok()?;
            Some(Bound { addr, inode })
        })
        .collect()
}

/// `0100007F:3039` or a 32-digit IPv6 form: each 32-bit word is printed in host byte order.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_both_tables() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
   1: 0100007F:3039 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n";
        assert_eq!(
            parse_table(v4),
            vec![Bound {
                addr: a("127.0.0.1:12345"),
                inode: 4242
            }]
        );
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 77 2 0000000000000000 0\n";
        assert_eq!(parse_table(v6)[0].addr, a("[::1]:8080"));
        assert!(parse_table("header\ngarbage line\n").is_empty());
    }

    #[test]
    fn same_port_on_same_or_wildcard_address_conflicts() {
        assert!(conflicts(a("127.0.0.1:9"), a("127.0.0.1:9")));
        assert!(conflicts(a("0.0.0.0:9"), a("127.0.0.1:9")));
        assert!(conflicts(a("127.0.0.1:9"), a("0.0.0.0:9")));
        assert!(conflicts(a("[::]:9"), a("127.0.0.1:9")));
        assert!(conflicts(a("[::ffff:127.0.0.1]:9"), a("127.0.0.1:9")));
        assert!(!conflicts(a("127.0.0.2:9"), a("127.0.0.1:9")));
        assert!(!conflicts(a("127.0.0.1:10"), a("127.0.0.1:9")));
    }

    #[test]
    fn a_socket_of_this_process_is_ours_and_a_foreign_holder_is_named() {
        let mine = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = mine.local_addr().unwrap();
        refuse_others(addr).unwrap();
        let msg = refusal(
            addr,
            Bound { addr, inode: 1 },
            Some((42, "python3".to_string())),
        );
        assert!(msg.contains("another program (python3, pid 42)"), "{msg}");
        assert!(msg.contains("--share-port"), "{msg}");
        let rb = refusal(
            addr,
            Bound { addr, inode: 1 },
            Some((7, "ringblast".into())),
        );
        assert!(rb.contains("another ringblast (pid 7)"), "{rb}");
    }
}
