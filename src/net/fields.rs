//! IP and UDP header fields a sender sets per flow: `--tos`/`--dscp`, `--ttl` (`--hop-limit`
//! over IPv6), and the port tuple each flow uses (`--src-ports LO-HI`, `--dst-ports LO-HI`).
//! Flow `f` takes source port `LO + f mod S` and destination port `LO + (f div S) mod D` (S and
//! D the sizes of the ranges), so consecutive flows spread over the whole tuple space for RSS
//! and `SO_REUSEPORT`. Everything is set on the flow's socket at set-up, never per packet.

use std::net::SocketAddr;

use socket2::Socket;

use crate::error::Error;

/// A TOS byte, decimal or `0x` hex (`184`, `0xb8`).
pub(crate) fn parse_tos(s: &str) -> Result<u8, String> {
    let t = s.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| format!("--tos {t:?} is not a byte: give 0-255 or 0x00-0xff (e.g. 0xb8 = DSCP 46), or use --dscp"))
}

/// A port range `LO-HI` (or one port).
pub(crate) fn parse_ports(s: &str) -> Result<(u16, u16), String> {
    let bad =
        || format!("{s:?} is not a port range LO-HI within 1-65535 (e.g. 5000-5063), or one port");
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
    if lo == 0 || hi < lo {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// The header fields of every flow's socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeaderFields {
    /// IPv4 TOS / IPv6 traffic class byte (DSCP << 2 | ECN).
    pub(crate) tos: Option<u8>,
    /// IPv4 TTL / IPv6 hop limit.
    pub(crate) ttl: Option<u8>,
    /// Source ports (default: one the kernel picks per flow).
    pub(crate) src_ports: Option<(u16, u16)>,
    /// Destination ports (default: the `--to` port).
    pub(crate) dst_ports: Option<(u16, u16)>,
}

fn span(range: Option<(u16, u16)>) -> u32 {
    range.map_or(1, |(lo, hi)| u32::from(hi - lo) + 1)
}

impl HeaderFields {
    /// Refuses more flows than distinct tuples when the source ports are fixed (two sockets
    /// cannot share one source port towards one destination).
    pub(crate) fn check(&self, flows: u32) -> Result<(), Error> {
        let tuples = span(self.src_ports) * span(self.dst_ports);
        if self.src_ports.is_some() && flows > tuples {
            return Err(Error::Usage(format!(
                "--flows {flows} needs {flows} distinct port tuples but --src-ports × --dst-ports give {tuples}; widen the ranges or lower --flows"
            )));
        }
        Ok(())
    }

    /// Flow `flow`'s source port (None: the kernel's choice) and destination.
    pub(crate) fn tuple(&self, flow: u32, to: SocketAddr) -> (Option<u16>, SocketAddr) {
        let s = span(self.src_ports);
        let src = self.src_ports.map(|(lo, _)| lo + (flow % s) as u16);
        let mut dst = to;
        if let Some((lo, _)) = self.dst_ports {
            dst.set_port(lo + ((flow / s) % span(self.dst_ports)) as u16);
        }
        (src, dst)
    }

    /// Sets TOS/TTL and binds the source port on a flow's socket before it connects.
    pub(crate) fn apply(
        &self,
        sock: &Socket,
        src: Option<u16>,
        to: SocketAddr,
    ) -> Result<(), Error> {
        let set = |what: &str, r: std::io::Result<()>| {
            r.map_err(|e| Error::io(format!("set {what} on a sender socket"), e))
        };
        match to {
            SocketAddr::V4(_) => {
                if let Some(tos) = self.tos {
                    set("IP_TOS", sock.set_tos_v4(u32::from(tos)))?;
                }
                if let Some(ttl) = self.ttl {
                    set("IP_TTL", sock.set_ttl_v4(u32::from(ttl)))?;
                }
            }
            SocketAddr::V6(_) => {
                if let Some(tos) = self.tos {
                    set("IPV6_TCLASS", sock.set_tclass_v6(u32::from(tos)))?;
                }
                if let Some(ttl) = self.ttl {
                    set(
                        "IPV6_UNICAST_HOPS",
                        sock.set_unicast_hops_v6(u32::from(ttl)),
                    )?;
                }
            }
        }
        if let Some(port) = src {
            let any: SocketAddr = match to {
                SocketAddr::V4(_) => ([0, 0, 0, 0], port).into(),
                SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, port).into(),
            };
            // Flows share a source port towards different destination ports.
            set("SO_REUSEADDR", sock.set_reuse_address(true))?;
            sock.bind(&any.into()).map_err(|e| {
                Error::Unsupported(format!(
                    "cannot bind source port {port} for a flow ({e}); pick a --src-ports range nothing else uses"
                ))
            })?;
        }
        Ok(())
    }

    /// The plan line: what is set and how flows map onto ports (first flows listed).
    pub(crate) fn describe(&self, flows: u32, to: SocketAddr) -> Option<String> {
        if *self == HeaderFields::default() {
            return None;
        }
        let mut parts = Vec::new();
        if let Some(tos) = self.tos {
            parts.push(format!(
                "tos 0x{tos:02x} (dscp {}, ecn {})",
                tos >> 2,
                tos & 3
            ));
        }
        if let Some(ttl) = self.ttl {
            parts.push(format!("ttl/hop limit {ttl}"));
        }
        if self.src_ports.is_some() || self.dst_ports.is_some() {
            let shown: Vec<String> = (0..flows.min(8))
                .map(|f| {
                    let (src, dst) = self.tuple(f, to);
                    let src = src.map_or("*".to_string(), |p| p.to_string());
                    format!("{f}:{src}→{}", dst.port())
                })
                .collect();
            parts.push(format!(
                "flows onto ports (flow:src→dst; src LO + f mod {}, dst LO + (f div {}) mod {}): {}{}",
                span(self.src_ports),
                span(self.src_ports),
                span(self.dst_ports),
                shown.join(" "),
                if flows > 8 { " …" } else { "" }
            ));
        }
        Some(format!("send: header fields: {}", parts.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_cover_the_tuple_space_source_first() {
        let f = HeaderFields {
            src_ports: Some((5000, 5001)),
            dst_ports: Some((7400, 7402)),
            ..HeaderFields::default()
        };
        let to: SocketAddr = "10.0.0.2:9".parse().unwrap();
        let tuples: Vec<(u16, u16)> = (0..6)
            .map(|i| {
                let (s, d) = f.tuple(i, to);
                (s.unwrap(), d.port())
            })
            .collect();
        assert_eq!(
            tuples,
            [
                (5000, 7400),
                (5001, 7400),
                (5000, 7401),
                (5001, 7401),
                (5000, 7402),
                (5001, 7402)
            ]
        );
        assert!(f.check(6).is_ok());
        assert!(f.check(7).unwrap_err().to_string().contains("give 6"));
        assert_eq!(parse_ports("7400"), Ok((7400, 7400)));
        assert_eq!(parse_tos("0xb8"), Ok(184));
        assert_eq!(parse_tos("184"), Ok(184));
        assert!(parse_tos("256").is_err());
        assert!(parse_ports("10-5").is_err());
        assert!(parse_ports("0-5").is_err());
        assert!(parse_ports("5-70000").is_err());
        let plan = f.describe(6, to).unwrap();
        assert!(
            plan.contains("0:5000→7400 1:5001→7400 2:5000→7401"),
            "{plan}"
        );
    }
}
