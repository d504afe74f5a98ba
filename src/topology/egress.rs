//! Finds the network interface traffic to a target leaves through, by letting the kernel pick
//! a route for a connected UDP socket (no packet is sent) and matching its local address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use nix::ifaddrs::getifaddrs;

use super::TopologyError;

/// Name of the interface holding the local address the kernel would use to reach `target`
/// (`lo` for 127.0.0.1 and ::1). An unspecified target (`0.0.0.0`, `::`), typical of listen
/// addresses, gives [`TopologyError::UnspecifiedTarget`]; callers then skip NIC locality.
pub(crate) fn egress_interface(target: SocketAddr) -> Result<String, TopologyError> {
    if target.ip().is_unspecified() {
        return Err(TopologyError::UnspecifiedTarget(target));
    }
    let local = local_address_towards(target)?;
    let local_scope = match local {
        SocketAddr::V6(v6) => v6.scope_id(),
        SocketAddr::V4(_) => 0,
    };
    let interfaces = getifaddrs().map_err(TopologyError::InterfaceList)?;
    let mut fallback = None;
    for interface in interfaces {
        let Some(address) = interface.address else {
            continue;
        };
        let (ip, scope) = if let Some(v4) = address.as_sockaddr_in() {
            (IpAddr::V4(v4.ip()), 0)
        } else if let Some(v6) = address.as_sockaddr_in6() {
            (IpAddr::V6(v6.ip()), v6.scope_id())
        } else {
            continue;
        };
        if ip != local.ip() {
            continue;
        }
        // Link-local IPv6 addresses repeat across interfaces; the scope id tells them apart.
        if scope == local_scope {
            return Ok(interface.interface_name);
        }
        fallback.get_or_insert(interface.interface_name);
    }
    fallback.ok_or(TopologyError::NoInterfaceForAddress {
        address: local.ip(),
        target,
    })
}

fn local_address_towards(target: SocketAddr) -> Result<SocketAddr, TopologyError> {
    let no_route = |source| TopologyError::NoRoute { target, source };
    let any: IpAddr = match target {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let socket = UdpSocket::bind((any, 0)).map_err(no_route)?;
    socket.connect(target).map_err(no_route)?;
    socket.local_addr().map_err(no_route)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_loopback_leaves_through_lo() {
        assert_eq!(
            egress_interface("127.0.0.1:9".parse().unwrap()).unwrap(),
            "lo"
        );
    }

    #[test]
    fn other_loopback_address_also_uses_lo() {
        assert_eq!(
            egress_interface("127.0.0.2:9".parse().unwrap()).unwrap(),
            "lo"
        );
    }

    #[test]
    fn ipv6_loopback_leaves_through_lo() {
        assert_eq!(egress_interface("[::1]:9".parse().unwrap()).unwrap(), "lo");
    }

    #[test]
    fn unspecified_target_is_refused() {
        for target in ["0.0.0.0:9", "[::]:9"] {
            let error = egress_interface(target.parse().unwrap()).unwrap_err();
            assert!(
                matches!(error, TopologyError::UnspecifiedTarget(_)),
                "{target}: {error}"
            );
        }
    }
}
