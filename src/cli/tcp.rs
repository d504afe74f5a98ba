//! Command-line definitions for the TCP modes (clap derive), flattened into `send`, `sink` and
//! `pair`: the protocol switch, connections per queue and the request/response pattern.
//! Checking them against each other happens in the resolve step (`resolve::tcp`).

use clap::{Args, ValueEnum};

/// Transport protocol of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Proto {
    /// UDP datagrams (the default).
    #[default]
    Udp,
    /// TCP streams cut into records.
    Tcp,
}

/// What a TCP sender does on its connections.
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
    #[arg(long, value_enum, default_value = "udp", env = "RINGBLAST_PROTO")]
    pub(crate) proto: Proto,
    /// TCP connections per queue (default 1).
    #[arg(long, env = "RINGBLAST_CONNS")]
    pub(crate) conns: Option<u32>,
    /// TCP traffic pattern: `stream` or `rr` (request/response).
    #[arg(long, value_enum, default_value = "stream", env = "RINGBLAST_PATTERN")]
    pub(crate) pattern: Pattern,
    /// rr: request record bytes, header included (at least 36).
    #[arg(long, value_parser = parse_size, env = "RINGBLAST_REQUEST_SIZE")]
    pub(crate) request_size: Option<usize>,
    /// rr: response record bytes, header included (32 to 16 KiB).
    #[arg(long, value_parser = parse_size, env = "RINGBLAST_RESPONSE_SIZE")]
    pub(crate) response_size: Option<usize>,
    /// rr: requests outstanding per connection (1 to 64).
    #[arg(long, env = "RINGBLAST_DEPTH")]
    pub(crate) depth: Option<u32>,
}

/// TCP options of `sink`.
#[derive(Debug, Clone, Args)]
pub(crate) struct TcpSinkArgs {
    /// Transport: `udp` datagrams or `tcp` streams of records.
    #[arg(long, value_enum, default_value = "udp", env = "RINGBLAST_PROTO")]
    pub(crate) proto: Proto,
    /// TCP connections each sink queue holds at once; more are accepted and closed at once
    /// (counted as refused).
    ///
    /// TCP only: a UDP sink refuses it.
    #[arg(long, default_value_t = 1024, env = "RINGBLAST_MAX_CONNS")]
    pub(crate) max_conns: u32,
}
