//! Command-line definitions for the TCP modes (clap derive), flattened into `send`, `sink` and
//! `pair`: the protocol switch, connections per queue and the request/response pattern.
//! Checking them against each other happens in the resolve step (`resolve::tcp`).

use clap::{Args, ValueEnum};

use super::heading;

/// Transport protocol of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Proto {
    /// UDP datagrams (the default).
    #[default]
    Udp,
    /// TCP streams cut into records.
    Tcp,
}

/// What a sender does on its flows (UDP) or connections (TCP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Pattern {
    /// Bulk streams of records (default).
    #[default]
    Stream,
    /// Request/response: each request is answered by the sink with one response.
    Rr,
}

fn parse_size(s: &str) -> Result<usize, String> {
    crate::config::units::parse_byte_size(s).map_err(|e| e.to_string())
}

/// TCP options of `send` and `pair`.
#[derive(Debug, Clone, Args)]
pub(crate) struct TcpSendArgs {
    /// Transport: `udp` datagrams or `tcp` streams of records (each --size bytes).
    #[arg(help_heading = heading::TRAFFIC, long, value_enum, default_value = "udp", env = "RINGBLAST_PROTO")]
    pub(crate) proto: Proto,
    /// TCP connections per queue (default 1).
    #[arg(help_heading = heading::TCP, long, env = "RINGBLAST_CONNS")]
    pub(crate) conns: Option<u32>,
    /// Traffic pattern: `stream` or `rr` (request/response: the sink answers every request).
    #[arg(help_heading = heading::TRAFFIC, long, value_enum, default_value = "stream", env = "RINGBLAST_PATTERN")]
    pub(crate) pattern: Pattern,
    /// rr: request bytes, header included (default 64; UDP at least 44, TCP at least 36).
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = parse_size, env = "RINGBLAST_REQUEST_SIZE")]
    pub(crate) request_size: Option<usize>,
    /// rr: response bytes, header included (default 64; 32 to 4 KiB over UDP, 16 KiB over TCP).
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = parse_size, env = "RINGBLAST_RESPONSE_SIZE")]
    pub(crate) response_size: Option<usize>,
    /// rr: requests outstanding per flow (UDP) or connection (TCP), 1 to 64 (default 1).
    #[arg(help_heading = heading::TRAFFIC, long, env = "RINGBLAST_DEPTH")]
    pub(crate) depth: Option<u32>,
    /// rr over UDP: how long a request waits for its response before it counts as lost
    /// (default 1s).
    #[arg(help_heading = heading::UDP, long, value_parser = parse_timeout, env = "RINGBLAST_RESPONSE_TIMEOUT")]
    pub(crate) response_timeout: Option<std::time::Duration>,
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    crate::config::units::parse_duration(s).map_err(|e| e.to_string())
}

/// TCP options of `sink`.
#[derive(Debug, Clone, Args)]
pub(crate) struct TcpSinkArgs {
    /// Transport: `udp` datagrams or `tcp` streams of records.
    #[arg(help_heading = heading::RECEIVE, long, value_enum, default_value = "udp", env = "RINGBLAST_PROTO")]
    pub(crate) proto: Proto,
    /// TCP connections each sink queue holds at once; more are accepted and closed at once
    /// (counted as refused).
    ///
    /// TCP only: a UDP sink refuses it.
    #[arg(help_heading = heading::TCP, long, default_value_t = 1024, env = "RINGBLAST_MAX_CONNS")]
    pub(crate) max_conns: u32,
}
