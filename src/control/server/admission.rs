//! Who gets a place among the sink's control connections.
//!
//! A connection is *unauthenticated* from its accept until its handshake passes. At most
//! `max_unauthenticated` of them are held at once, and at most `max_unauthenticated_per_address`
//! from one address (an IPv6 address counts by its /64, the block one host usually holds). A new
//! connection is never refused for them: when either cap is reached, the oldest unauthenticated
//! connection of the address that holds the most is closed (*evicted*) to make room. A flood of
//! silent connections therefore only ever displaces its own kind, and a sender that completes
//! its handshake before that many newer connections arrive gets in. A connection is refused as
//! busy only when `max_connections` are authenticated.

use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// A connection's state; changed only under the places' lock, so each connection has exactly
/// one outcome.
const WAITING: u8 = 0;
const AUTHENTICATED: u8 = 1;
const EVICTED: u8 = 2;
const LEFT: u8 = 3;

/// The caps a control server admits connections under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    /// Connections at once, authenticated or not.
    pub(crate) total: usize,
    /// Unauthenticated connections at once.
    pub(crate) unauthenticated: usize,
    /// Unauthenticated connections at once from one address (IPv6: one /64).
    pub(crate) per_address: usize,
}

/// One connection's place.
#[derive(Clone)]
pub(crate) struct Ticket {
    id: u64,
    state: Arc<AtomicU8>,
}

struct Waiting {
    id: u64,
    key: IpAddr,
    peer: SocketAddr,
    stream: TcpStream,
    state: Arc<AtomicU8>,
}

#[derive(Default)]
struct Places {
    /// Unauthenticated connections, oldest first.
    waiting: Vec<Waiting>,
    authenticated: usize,
}

/// The server's connection places.
pub(crate) struct Admission {
    caps: Caps,
    places: Mutex<Places>,
}

/// What [`Admission::admit`] decided.
pub(crate) enum Admitted {
    /// In, having evicted the connection from this peer to make room, if any.
    In(Ticket, Option<SocketAddr>),
    /// Every place is held by an authenticated connection.
    Busy,
}

/// The address a connection counts under: IPv4 as it is, IPv6 by its /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

impl Admission {
    pub(crate) fn new(caps: Caps) -> Admission {
        Admission {
            caps,
            places: Mutex::default(),
        }
    }

    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits the connection `id` from `peer` (unauthenticated), evicting one if a cap is
    /// reached; `stream` is a handle that closes it.
    pub(crate) fn admit(&self, id: u64, peer: SocketAddr, stream: TcpStream) -> Admitted {
        let key = key(peer.ip());
        let mut p = self.places();
        let mine = p.waiting.iter().filter(|w| w.key == key).count();
        let full = p.waiting.len() >= self.caps.unauthenticated
            || p.waiting.len() + p.authenticated >= self.caps.total;
        let victim = if mine >= self.caps.per_address {
            p.waiting.iter().position(|w| w.key == key)
        } else if full {
            busiest_oldest(&p.waiting)
        } else {
            None
        };
        if victim.is_none() && full {
            return Admitted::Busy;
        }
        let evicted = victim.map(|i| {
            let w = p.waiting.remove(i);
            w.state.store(EVICTED, Ordering::Relaxed);
            let _ = w.stream.shutdown(Shutdown::Both);
            w.peer
        });
        let state = Arc::new(AtomicU8::new(WAITING));
        p.waiting.push(Waiting {
            id,
            key,
            peer,
            stream,
            state: Arc::clone(&state),
        });
        Admitted::In(Ticket { id, state }, evicted)
    }

    /// The connection passed its handshake: it leaves the unauthenticated ones. False if it
    /// was evicted first (it is closed already, and was counted then).
    pub(crate) fn authenticated(&self, t: &Ticket) -> bool {
        let mut p = self.places();
        if t.state.load(Ordering::Relaxed) != WAITING {
            return false;
        }
        p.waiting.retain(|w| w.id != t.id);
        p.authenticated += 1;
        t.state.store(AUTHENTICATED, Ordering::Relaxed);
        true
    }

    /// The connection ends: its place is free. True if it was evicted instead (it was counted
    /// then, and must not be again).
    pub(crate) fn leave(&self, t: &Ticket) -> bool {
        let mut p = self.places();
        match t.state.load(Ordering::Relaxed) {
            WAITING => p.waiting.retain(|w| w.id != t.id),
            AUTHENTICATED => p.authenticated = p.authenticated.saturating_sub(1),
            EVICTED => return true,
            _ => return false,
        }
        t.state.store(LEFT, Ordering::Relaxed);
        false
    }
}

/// The oldest waiting connection of the address that has the most waiting.
fn busiest_oldest(waiting: &[Waiting]) -> Option<usize> {
    let count = |k: IpAddr| waiting.iter().filter(|w| w.key == k).count();
    let most = waiting.iter().map(|w| count(w.key)).max()?;
    waiting.iter().position(|w| count(w.key) == most)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected loopback stream, from `ip` (any 127/8 address).
    fn stream(l: &TcpListener, ip: [u8; 4]) -> (TcpStream, SocketAddr) {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::from((ip, 0)).into()).unwrap();
        s.connect(&l.local_addr().unwrap().into()).unwrap();
        let s: TcpStream = s.into();
        let peer = s.local_addr().unwrap();
        (s, peer)
    }

    fn admit(a: &Admission, id: u64, s: &(TcpStream, SocketAddr)) -> (Ticket, Option<SocketAddr>) {
        match a.admit(id, s.1, s.0.try_clone().unwrap()) {
            Admitted::In(t, e) => (t, e),
            Admitted::Busy => panic!("busy at {id}"),
        }
    }

    #[test]
    fn one_address_displaces_only_its_own_oldest() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::new(Caps {
            total: 10,
            unauthenticated: 6,
            per_address: 2,
        });
        let other = stream(&l, [127, 0, 0, 2]);
        let (kept, _) = admit(&a, 0, &other);
        let flood: Vec<_> = (0..5).map(|_| stream(&l, [127, 0, 0, 1])).collect();
        let mut tickets = Vec::new();
        for (i, s) in flood.iter().enumerate() {
            let (t, evicted) = admit(&a, 1 + i as u64, s);
            // The third from 127.0.0.1 evicts the first, and so on.
            let want = i.checked_sub(2).map(|j| flood[j].1);
            assert_eq!(evicted, want, "at {i}");
            tickets.push(t);
        }
        assert!(tickets[..3].iter().all(|t| a.leave(t)));
        assert!(!a.leave(&tickets[3]), "the fourth was not evicted");
        assert!(a.authenticated(&kept));
        assert!(
            !a.authenticated(&tickets[0]),
            "an evicted connection never gets in"
        );
    }

    #[test]
    fn many_addresses_displace_the_busiest_then_the_oldest_and_busy_needs_all_authenticated() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = Admission::new(Caps {
            total: 4,
            unauthenticated: 3,
            per_address: 3,
        });
        let s: Vec<_> = [1, 1, 2, 3, 4, 5, 6]
            .iter()
            .map(|&n| stream(&l, [127, 0, 0, n]))
            .collect();
        let (t0, _) = admit(&a, 0, &s[0]);
        let (_t1, _) = admit(&a, 1, &s[1]);
        let (t2, _) = admit(&a, 2, &s[2]);
        // Full: 127.0.0.1 holds two, so its oldest goes.
        let (t3, e) = admit(&a, 3, &s[3]);
        assert_eq!(e, Some(s[0].1));
        assert!(a.leave(&t0));
        // Now one each: the oldest (127.0.0.1's second) goes.
        let (_t4, e) = admit(&a, 4, &s[4]);
        assert_eq!(e, Some(s[1].1));
        assert!(a.authenticated(&t2) && a.authenticated(&t3));
        // Two authenticated, one waiting: one place left of four, then eviction again.
        let (t5, e) = admit(&a, 5, &s[5]);
        assert_eq!(e, None);
        assert!(a.authenticated(&t5));
        let (t6, e) = admit(&a, 6, &s[6]);
        assert_eq!(e, Some(s[4].1), "the waiting one makes room");
        assert!(a.authenticated(&t6));
        assert!(matches!(
            a.admit(7, s[0].1, s[0].0.try_clone().unwrap()),
            Admitted::Busy
        ));
        assert!(!a.leave(&t6));
        assert!(matches!(
            a.admit(7, s[0].1, s[0].0.try_clone().unwrap()),
            Admitted::In(_, None)
        ));
    }

    #[test]
    fn ipv6_counts_by_its_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(key(a), key(b));
        assert_ne!(key(a), key(c));
        let mapped: IpAddr = "::ffff:127.0.0.9".parse().unwrap();
        assert_eq!(key(mapped), "127.0.0.9".parse::<IpAddr>().unwrap());
    }
}
