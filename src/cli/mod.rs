//! The command line: the clap definitions of each subcommand (what it accepts, its defaults and
//! help text), the configuration file that supplies defaults for them (`file`), the TCP options
//! (`tcp`), which flags belong to one protocol (`protocols`), the files `generate` writes from
//! them, and the one resolve step (`resolve`) that turns a parsed command into the plain-data
//! plan `run` carries out. [`execute`] is the whole program after parsing.

pub mod file;
#[cfg(test)]
mod fuzz;
pub(crate) mod generate;
mod parameters;
pub(crate) mod protocols;
mod resolve;
pub(crate) mod tcp;

use std::{net::SocketAddr, time::Duration};

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::{
    config::units::{self, Rate},
    sender::{SendOp, mix::SizeSpec, payload::PayloadFill},
    sink::RxWait,
};

/// The metrics endpoint `pair` uses by default, and the documented port for every role.
pub(crate) const DEFAULT_METRICS: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    9977,
));

/// io_uring UDP and TCP traffic generator and sink with per-NUMA-node rings.
#[derive(Debug, Parser)]
#[command(name = "ringblast", version, about, propagate_version = true)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Runs one parsed command to completion: resolves it into a plan and carries the plan out
/// (`report` and `generate` need no run).
pub fn execute(cli: Cli, matches: &clap::ArgMatches) -> Result<(), crate::error::Error> {
    let json = match &cli.command {
        Command::Send(a) => a.common.json,
        Command::Sink(a) => a.common.json,
        Command::Pair(a) => a.common.json,
        Command::Search(a) => a.json,
        Command::Topo(_) | Command::Generate(_) | Command::Report(_) => false,
    };
    crate::output::json_on_stdout(json);
    let start = starting(&cli.command, json, matches);
    let plan = match cli.command {
        Command::Send(args) => resolve::send(args)?,
        Command::Sink(args) => resolve::sink(args)?,
        Command::Pair(args) => resolve::pair(args)?,
        Command::Search(args) => resolve::search(args)?,
        Command::Topo(args) => resolve::topo(args),
        Command::Report(args) => {
            return crate::html_report::command(
                &args.input,
                args.output.as_deref(),
                args.title.as_deref(),
            );
        }
        Command::Generate(args) => return generate::run(args.kind, args.dir.as_deref()),
    };
    if let Some(start) = start {
        crate::start_record::prepare(start);
    }
    crate::run::execute(plan)
}

/// What the start record of a traffic run (`send`, `sink`, `pair`, `search`) says about its
/// command; none for the other subcommands.
fn starting(
    command: &Command,
    json: bool,
    matches: &clap::ArgMatches,
) -> Option<crate::start_record::Run> {
    let protocol = |p: tcp::Proto| match p {
        tcp::Proto::Udp => "udp",
        tcp::Proto::Tcp => "tcp",
    };
    let (role, protocol, target) = match command {
        Command::Send(a) => ("send", protocol(a.tcp.proto), a.to),
        Command::Sink(a) => ("sink", protocol(a.tcp.proto), a.listen),
        Command::Pair(a) => ("pair", protocol(a.tcp.proto), SocketAddr::new(a.address, 0)),
        Command::Search(a) => ("search", protocol(a.proto), a.to),
        Command::Topo(_) | Command::Generate(_) | Command::Report(_) => return None,
    };
    let (name, sub) = matches.subcommand()?;
    let (parameters, set) = parameters::resolved(&Cli::command(), name, sub);
    Some(crate::start_record::Run {
        role,
        protocol,
        target,
        json,
        parameters,
        set,
    })
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Send UDP or TCP traffic to a sink.
    Send(SendArgs),
    /// Receive, check and count ringblast traffic (UDP or TCP).
    Sink(SinkArgs),
    /// Run a sink and a sender in one process over loopback.
    Pair(PairArgs),
    /// Find the highest rates with loss at most each ratio (NDR/PDR) against a remote sink.
    Search(SearchArgs),
    /// Print NUMA nodes, CPUs, the NIC's node and the queue placement that would be used.
    Topo(TopoArgs),
    /// Turn the JSON Lines of a send, sink, pair, search or stepped run into one HTML file.
    Report(ReportArgs),
    /// Write shell completions or the man page (for packaging; see scripts/build-assets.sh).
    Generate(GenerateArgs),
}

/// `ringblast report`.
#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Example:\n  ringblast pair --duration 60s --json > run.jsonl\n  ringblast report run.jsonl -o run.html\n\n\
The page is self-contained (inline SVG and CSS, no scripts, no network fetches): the achieved \
rate against the target, loss, reorder and duplicates per interval and per step, the latency \
and jitter distribution, the per-sender table and, for a search, the trial ladder with the NDR \
and PDR. Input that is not ringblast JSON Lines exits 4."
)]
pub(crate) struct ReportArgs {
    /// The JSON Lines a `--json` run wrote on stdout (`-` reads standard input).
    #[arg(value_name = "FILE")]
    pub(crate) input: std::path::PathBuf,
    /// Write the HTML page here (`-` writes standard output) [default: FILE with the extension
    /// .html, e.g. run.jsonl → run.html].
    #[arg(short, long, value_name = "OUT.html")]
    pub(crate) output: Option<std::path::PathBuf>,
    /// The page's title (default: what the run's start record says ran, else the run kind and
    /// the input's name).
    #[arg(long)]
    pub(crate) title: Option<String>,
}

/// `ringblast generate`.
#[derive(Debug, Clone, Args)]
pub(crate) struct GenerateArgs {
    /// What to write.
    #[arg(value_enum)]
    pub(crate) kind: crate::cli::generate::Artifact,
    /// Write files into this directory (printing their paths) instead of to stdout.
    #[arg(long)]
    pub(crate) dir: Option<std::path::PathBuf>,
}

/// `ADDR:PORT` or `HOST:PORT` (resolved once, first address wins), for `--to`.
fn parse_destination(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    s.to_socket_addrs()
        .map_err(|e| format!("{s:?} is not ADDR:PORT or a resolvable HOST:PORT ({e})"))?
        .next()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

fn parse_rate(s: &str) -> Result<Rate, String> {
    s.parse::<Rate>().map_err(|e| e.to_string())
}
fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}
fn parse_count(s: &str) -> Result<u64, String> {
    units::parse_count(s).map_err(|e| e.to_string())
}
fn parse_payload(s: &str) -> Result<PayloadFill, String> {
    s.parse()
}
fn parse_size_spec(s: &str) -> Result<SizeSpec, String> {
    s.parse()
}
fn parse_size(s: &str) -> Result<usize, String> {
    units::parse_byte_size(s).map_err(|e| e.to_string())
}

/// The headings `--help` groups options under (clap's `help_heading`). A command's help shows
/// them in the order its options first use them: its own first (`pair`, `search`), then what is
/// sent, how fast, each protocol's own options (the flags the other protocol refuses), control
/// and pairing, placement, output and metrics.
pub(crate) mod heading {
    pub(crate) const PAIR: &str = "Pair";
    pub(crate) const SEARCH: &str = "Search";
    pub(crate) const TRAFFIC: &str = "Traffic";
    pub(crate) const RECEIVE: &str = "Receive";
    pub(crate) const RATE: &str = "Rate and shape";
    pub(crate) const UDP: &str = "UDP only";
    pub(crate) const TCP: &str = "TCP only";
    pub(crate) const CONTROL: &str = "Control and pairing";
    pub(crate) const PLACEMENT: &str = "Placement";
    pub(crate) const OUTPUT: &str = "Output";
    pub(crate) const METRICS: &str = "Metrics";
}

/// Where workers run and how the run reports, shared by every role.
#[derive(Debug, Clone, Args)]
pub(crate) struct CommonArgs {
    /// Worker threads (queues), one io_uring each.
    #[arg(help_heading = heading::PLACEMENT, long, default_value_t = 1, env = "RINGBLAST_QUEUES")]
    pub(crate) queues: usize,
    /// CPUs for the queues (e.g. `0-3,8`); always wins over NIC locality.
    #[arg(help_heading = heading::PLACEMENT, long, env = "RINGBLAST_CPUS")]
    pub(crate) cpus: Option<String>,
    /// NUMA node for the queues; always wins over NIC locality.
    #[arg(help_heading = heading::PLACEMENT, long, env = "RINGBLAST_NODE")]
    pub(crate) node: Option<u32>,
    /// Print JSON Lines on stdout (interval lines and a final summary).
    #[arg(help_heading = heading::OUTPUT, long, env = "RINGBLAST_JSON")]
    pub(crate) json: bool,
    /// Serve Prometheus metrics on ADDR:PORT (documented default port 9977).
    #[arg(help_heading = heading::METRICS, long, env = "RINGBLAST_METRICS")]
    pub(crate) metrics: Option<SocketAddr>,
    /// Back packet memory with 2 MiB pages when available (the start-up `memory` lines say
    /// whether they were used or it fell back to normal pages).
    #[arg(help_heading = heading::PLACEMENT, long, env = "RINGBLAST_HUGEPAGES")]
    pub(crate) hugepages: bool,
    /// Read options from this TOML file (keys are long option names); flags and RINGBLAST_*
    /// variables override it.
    #[arg(long, env = "RINGBLAST_CONFIG")]
    pub(crate) config: Option<std::path::PathBuf>,
    /// Refuse to start when the exporter would publish more series than this.
    #[arg(help_heading = heading::METRICS, long, default_value_t = 10_000, env = "RINGBLAST_MAX_SERIES")]
    pub(crate) max_series: usize,
    /// Keep serving metrics this long after the run ends, so the final values get scraped (also
    /// after a SIGINT or SIGTERM stopped the run; a signal during the linger ends it, and one
    /// that comes as a run ends on its own means no linger).
    #[arg(help_heading = heading::METRICS, long, value_parser = parse_duration_or_zero, default_value = "0", env = "RINGBLAST_METRICS_LINGER")]
    pub(crate) metrics_linger: Duration,
    /// Seconds between report lines (0 = only the summary).
    #[arg(help_heading = heading::OUTPUT, long, default_value = "1s", value_parser = parse_duration_or_zero, env = "RINGBLAST_INTERVAL")]
    pub(crate) interval: Duration,
    /// Start at TIME: RFC 3339 in UTC (`2026-12-07T23:00:00Z`) or `+DURATION` from now (`+30s`).
    /// The workers are set up first and start on it, so runs launched apart (a fleet of senders)
    /// start together; a time in the past or more than a day ahead is refused.
    #[arg(help_heading = heading::CONTROL, long, value_name = "TIME", value_parser = parse_start_at, env = "RINGBLAST_START_AT")]
    pub(crate) start_at: Option<StartAt>,
}

/// `--start-at`, as given: a wall-clock time, or a delay from now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartAt {
    /// At this wall-clock time.
    At(std::time::SystemTime),
    /// This long after the command is read.
    In(Duration),
}

fn parse_start_at(s: &str) -> Result<StartAt, String> {
    let s = s.trim();
    match s.strip_prefix('+') {
        Some(delay) => humantime::parse_duration(delay)
            .map(StartAt::In)
            .map_err(|_| format!("`{delay}` after `+` is not a duration: give one such as +30s")),
        None => humantime::parse_rfc3339_weak(s).map(StartAt::At).map_err(|_| {
            format!("`{s}` is not a time: give RFC 3339 in UTC such as 2026-12-07T23:00:00Z, or +DURATION such as +30s")
        }),
    }
}

fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// `--send-op`: which io_uring operation sends (the workers' [`SendOp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SendOpArg {
    /// `WRITE_FIXED` on the connected socket from the registered arena (the TCP default).
    WriteFixed,
    /// `SEND_ZC` with `buf_index` (zero-copy; every loopback send is copied anyway).
    SendZc,
    /// Plain `SEND` from the same node-local arena (the registration is not used; the UDP
    /// default: it skips the file-write path `WRITE_FIXED` takes, 1.01-1.20x its datagrams per
    /// second on loopback, benches/README.md).
    Send,
}

impl From<SendOpArg> for SendOp {
    fn from(op: SendOpArg) -> SendOp {
        match op {
            SendOpArg::WriteFixed => SendOp::WriteFixed,
            SendOpArg::SendZc => SendOp::SendZc,
            SendOpArg::Send => SendOp::Send,
        }
    }
}

/// `--rx-wait`: how a sink worker waits for completions (the workers' [`RxWait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum RxWaitArg {
    /// Sleep until 32 completions are ready or 50 µs pass (default): the sending core rarely
    /// pays for a wake-up and the sink core stays mostly idle.
    Batch,
    /// Never sleep while traffic flows, one full core per queue. A UDP sink receives inline
    /// (as `Inline`) with the batches back to back, so no poll is armed and the sending core
    /// runs no wake-up; one poll when traffic stops. A TCP sink polls its completion queue.
    Spin,
    /// Sleep until the next completion.
    Sleep,
    /// Receive inline: batches of non-blocking receives run in the sink's own context with no
    /// poll armed while traffic flows, so the sending core never runs a wake-up for them; a
    /// 50 µs sleep when the socket is empty, one poll when traffic stops.
    Inline,
}

impl From<RxWaitArg> for RxWait {
    fn from(wait: RxWaitArg) -> RxWait {
        match wait {
            RxWaitArg::Batch => RxWait::Batch,
            RxWaitArg::Spin => RxWait::Spin,
            RxWaitArg::Sleep => RxWait::Sleep,
            RxWaitArg::Inline => RxWait::Inline,
        }
    }
}

/// Traffic shape options shared by `send` and `pair`.
#[derive(Debug, Clone, Args)]
pub(crate) struct TrafficArgs {
    /// UDP (default 64): payload bytes per datagram (a number), or a mix of Ethernet frame
    /// sizes: `imix` (64, 570 and 1518-byte frames, 7:4:1) or `FRAME:WEIGHT,...` (e.g.
    /// `64:28,570:16,1518:4`). Frames convert to UDP payload as F − 46 over IPv4 and F − 66
    /// over IPv6 (64 → 18 B), and are sent in a fixed, evenly spread order. Payloads from 32 B
    /// carry the full header; 18 to 31 B carry an 18-byte compact header that gives up the
    /// timestamp (no latency sample) and sends the sequence number's low 32 bits.
    ///
    /// TCP (default 128000): bytes per record written, its 32-byte header included, up to
    /// 1 MiB; one number, no mix. The default is iperf3's 128 KiB write, trimmed so that a
    /// write never leaves a runt segment over loopback's 64 KiB segments. `--pattern rr` sizes
    /// its records with `--request-size` and `--response-size` instead.
    #[arg(help_heading = heading::TRAFFIC,
        long,
        default_value = "64",
        default_value_if("proto", "tcp", "128000"),
        hide_default_value = true,
        value_parser = parse_size_spec,
        env = "RINGBLAST_SIZE"
    )]
    pub(crate) size: SizeSpec,
    /// Stop after this long (`10s`, `2m`); `0` runs until stopped. Without it, `--count`,
    /// `--rate-steps` or `--ramp` says how long, and otherwise the run stops after 10 s.
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = parse_duration_or_zero, conflicts_with = "count", env = "RINGBLAST_DURATION")]
    pub(crate) duration: Option<Duration>,
    /// Stop after this many in total (`1M`). UDP: datagrams (GSO segments one by one). TCP:
    /// records (requests with `--pattern rr`).
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = parse_count, env = "RINGBLAST_COUNT")]
    pub(crate) count: Option<u64>,
    /// Flows (distinct source ports) in total, spread over the queues; default one per queue.
    #[arg(help_heading = heading::TRAFFIC, long, env = "RINGBLAST_FLOWS")]
    pub(crate) flows: Option<u32>,
    /// `max`, a packet rate (`250kpps`, `1.5Mpps`) or a bit rate (`800Mbit`). UDP: datagrams
    /// per second, or bits of UDP payload. TCP: records per second (requests with `--pattern
    /// rr`), or bits of record bytes.
    #[arg(help_heading = heading::RATE, long, default_value = "max", value_parser = parse_rate, env = "RINGBLAST_RATE")]
    pub(crate) rate: Rate,
    /// A staircase of rates instead of --rate: `RATE:DURATION,...` (e.g.
    /// `100kpps:10s,200kpps:10s`); the run lasts the whole schedule, each step is reported on
    /// its own (`"type":"step"` with --json).
    #[arg(help_heading = heading::UDP, long, conflicts_with_all = ["rate", "ramp", "duration"], env = "RINGBLAST_RATE_STEPS")]
    pub(crate) rate_steps: Option<String>,
    /// A linear ramp instead of --rate: `FROM:TO:OVER` (e.g. `10kpps:100kpps:10s`), reported
    /// per second.
    #[arg(help_heading = heading::UDP, long, conflicts_with_all = ["rate", "duration"], env = "RINGBLAST_RAMP")]
    pub(crate) ramp: Option<String>,
    /// IPv4 TOS / IPv6 traffic class byte of every packet (0-255 or 0x00-0xff).
    #[arg(help_heading = heading::TRAFFIC, long, conflicts_with = "dscp", value_parser = crate::net::fields::parse_tos, env = "RINGBLAST_TOS")]
    pub(crate) tos: Option<u8>,
    /// DSCP of every packet (0-63; the TOS byte's upper six bits, ECN 0).
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = clap::value_parser!(u8).range(0..64), env = "RINGBLAST_DSCP")]
    pub(crate) dscp: Option<u8>,
    /// IPv4 TTL / IPv6 hop limit of every packet (1-255).
    #[arg(help_heading = heading::UDP, long, visible_alias = "hop-limit", value_parser = clap::value_parser!(u8).range(1..), env = "RINGBLAST_TTL")]
    pub(crate) ttl: Option<u8>,
    /// Source ports of the flows, `LO-HI`: flow f uses LO + f mod (HI−LO+1) (shown at start).
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = crate::net::fields::parse_ports, env = "RINGBLAST_SRC_PORTS")]
    pub(crate) src_ports: Option<(u16, u16)>,
    /// Destination ports of the flows, `LO-HI`: flow f uses LO + (f div S) mod (HI−LO+1), S
    /// the number of source ports (the receiver must listen on, or redirect, every one).
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = crate::net::fields::parse_ports, env = "RINGBLAST_DST_PORTS")]
    pub(crate) dst_ports: Option<(u16, u16)>,
    /// Payload after the header: `zero`, `random` or `pattern:HEX`, written into the send
    /// buffers once at start (no per-packet work); with --secret-file the 8 bytes after the
    /// header carry the run's proof instead.
    #[arg(help_heading = heading::UDP, long, default_value = "zero", value_parser = parse_payload, env = "RINGBLAST_PAYLOAD")]
    pub(crate) payload: PayloadFill,
    /// Packets sent back to back at each pacing tick (paced runs): the long-run rate stays
    /// `--rate`; 1 spaces every packet evenly.
    #[arg(help_heading = heading::UDP, long, default_value_t = 1, env = "RINGBLAST_BURST")]
    pub(crate) burst: u64,
    /// SQEs submitted per io_uring_enter.
    ///
    /// UDP only: a TCP sender keeps one write in flight per connection, so --proto tcp refuses it.
    #[arg(help_heading = heading::UDP, long, default_value_t = 32, env = "RINGBLAST_BATCH")]
    pub(crate) batch: u32,
    /// Sends in flight per queue (default: twice --batch).
    ///
    /// UDP only: a TCP sender keeps one write in flight per connection, so --proto tcp refuses it.
    #[arg(help_heading = heading::UDP, long, env = "RINGBLAST_WINDOW")]
    pub(crate) window: Option<u32>,
    /// UDP GSO: packets per send (each with its own header); 1 = off.
    #[arg(help_heading = heading::UDP, long, default_value_t = 1, env = "RINGBLAST_GSO")]
    pub(crate) gso: u16,
    /// The io_uring send operation (default: send for UDP, write-fixed for TCP).
    #[arg(help_heading = heading::RATE, long, value_enum, env = "RINGBLAST_SEND_OP")]
    pub(crate) send_op: Option<SendOpArg>,
    /// First sequence number of every flow (for testing wrap-around, e.g. 4294967000).
    #[arg(long, default_value_t = 0, hide = true)]
    pub(crate) first_seq: u64,
    /// Ethernet frame size in bytes, FCS included (pktgen/TRex style), instead of `--size`:
    /// the UDP payload is F − 46 over IPv4 and F − 66 over IPv6 (14 Ethernet + 4 FCS + IP + 8
    /// UDP). The smallest frame is 64 bytes (IPv4) or 84 (IPv6); frames below 78 (IPv4) or 98
    /// (IPv6) carry the compact header (no timestamp).
    #[arg(help_heading = heading::UDP, long, conflicts_with = "size", value_parser = parse_size, env = "RINGBLAST_FRAME_SIZE")]
    pub(crate) frame_size: Option<usize>,
    /// Send datagrams larger than the path MTU; each leaves as several IP fragments (counted).
    #[arg(help_heading = heading::UDP, long, env = "RINGBLAST_ALLOW_FRAGMENTS")]
    pub(crate) allow_fragments: bool,
    /// Show the L1 wire rate in live lines (frames plus preamble, SFD and inter-frame gap).
    #[arg(help_heading = heading::UDP, long, env = "RINGBLAST_WIRE_RATE")]
    pub(crate) wire_rate: bool,
    /// Exit 1 if the achieved rate is below this share of `--rate` (e.g. 0.95; for CI): packets/s
    /// for UDP, records/s for TCP.
    #[arg(help_heading = heading::RATE, long, value_parser = parse_ratio, env = "RINGBLAST_MIN_RATE_RATIO")]
    pub(crate) min_rate_ratio: Option<f64>,
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a ratio in (0, 1]: give the share of --rate a run must reach, e.g. 0.95"
        )),
    }
}

fn parse_tolerance(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "{s:?} is not a tolerance in [0, 1): give the share of the rate a trial may fall short by, e.g. 0.01"
        )),
    }
}

/// `ringblast send`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SendArgs {
    /// Destination ADDR:PORT or HOST:PORT.
    #[arg(help_heading = heading::TRAFFIC, long, env = "RINGBLAST_TO", value_parser = parse_destination)]
    pub(crate) to: SocketAddr,
    /// Traffic shape.
    #[command(flatten)]
    pub(crate) traffic: TrafficArgs,
    /// TCP: protocol, connections and pattern.
    #[command(flatten)]
    pub(crate) tcp: crate::cli::tcp::TcpSendArgs,
    /// Name this sender gives the sink (default: the hostname and the queue plan); a sender
    /// restarted under the same name continues the same series at the sink.
    #[arg(help_heading = heading::CONTROL, long, env = "RINGBLAST_NAME")]
    pub(crate) name: Option<String>,
    /// The control channel to the sink: `auto` (TCP to the --to address), `off` or ADDR:PORT.
    /// A sink that refuses the secret exits 7, one of the other --proto 8 (both before the
    /// first datagram); one still busy (every place it has for control
    /// connections held by an authenticated sender) when the run gives up on its verdict exits 5.
    #[arg(help_heading = heading::CONTROL, long, default_value = "auto", value_parser = parse_control, env = "RINGBLAST_CONTROL")]
    pub(crate) control: ControlTarget,
    /// File holding the secret shared with the sink (HMAC-SHA256 authentication): at least 16
    /// bytes, e.g. `umask 077; head -c32 /dev/urandom | base64 > FILE`.
    #[arg(help_heading = heading::CONTROL, long, env = "RINGBLAST_SECRET_FILE")]
    pub(crate) secret_file: Option<std::path::PathBuf>,
    /// Tag every datagram (SipHash-2-4 keyed from the secret, over its header and length), so
    /// that not even an attacker on the path can forge one; needs --secret-file. Without it
    /// each datagram carries its run's token, which stops off-path forgery only.
    #[arg(help_heading = heading::CONTROL, long, env = "RINGBLAST_AUTH_DATA", requires = "secret_file")]
    pub(crate) auth_data: bool,
    /// Placement and reporting.
    #[command(flatten)]
    pub(crate) common: CommonArgs,
}

/// Receive-side options shared by `sink` and `pair`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SinkTuning {
    /// Do not ask for UDP GRO (count datagrams one by one).
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, env = "RINGBLAST_NO_GRO")]
    pub(crate) no_gro: bool,
    /// How sink queues wait while traffic flows: batch (32 completions or 50 µs; a TCP sink
    /// instead polls while completions keep coming and sleeps after 50 µs without one), spin
    /// (never sleeps, one core per queue; UDP receives inline as below, back to back), sleep
    /// (wake per completion) or inline (UDP only: non-blocking receives inside io_uring_enter,
    /// no poll armed while traffic flows, so the sending core pays for no wake-up; 50 µs sleeps
    /// when the socket is empty).
    #[arg(help_heading = heading::RECEIVE, long, value_enum, default_value = "batch", env = "RINGBLAST_RX_WAIT")]
    pub(crate) rx_wait: RxWaitArg,
    /// Where a datagram's arrival time comes from: kernel (the kernel's software receive stamp,
    /// SO_TIMESTAMPNS, so the time a datagram waited for a busy sink is its queue's queueing
    /// delay, not latency) or read (when the sink reads it: no stamp per datagram, but latency
    /// includes the sink's own wait and queueing delay is unknown) [default: kernel; a kernel
    /// that refuses stamps gets read, and the start plan says so].
    ///
    /// UDP only: a TCP record's arrival is always the sink's read, and a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, value_enum, env = "RINGBLAST_ARRIVAL")]
    pub(crate) arrival: Option<crate::timestamps::Arrival>,
    /// Provided receive buffers per queue, a power of two from 8 to 32768 [default: UDP 512
    /// of 64 KiB, of which a UDP sink keeps about 4 MiB of received data circulating (all 512
    /// for single datagrams, 64 for full GRO buffers) so the kernel's copies stay in cache; TCP
    /// 64 of 32 KiB, a 2 MiB ring that stays in cache while the sink copies every byte it reads
    /// into it].
    #[arg(help_heading = heading::RECEIVE, long, env = "RINGBLAST_RX_BUFFERS")]
    pub(crate) rx_buffers: Option<u16>,
    /// Flow ids 0..N are tracked per queue; others count as invalid.
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, default_value_t = 256, env = "RINGBLAST_MAX_FLOWS")]
    pub(crate) max_flows: usize,
    /// Flow ids 0..N get their own metric series per sink queue; the rest are summed as "other".
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, default_value_t = 16, env = "RINGBLAST_METRICS_FLOWS")]
    pub(crate) metrics_flows: usize,
    /// Sessions (sender, epoch, flow) each sink queue tracks at once (memory is allocated at
    /// start: see docs/pairing.md); packets of a session beyond it count as invalid `table_full`.
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, default_value_t = 4096, env = "RINGBLAST_MAX_SESSIONS")]
    pub(crate) max_sessions: usize,
    /// Of --max-sessions, the slots each sink queue gives sessions opened by data alone, from
    /// senders that never said hello on the control channel (--control off, an unreachable
    /// control port, a wrong secret, forged datagrams); the other slots are reserved for
    /// senders that said hello. Their datagrams beyond it count as invalid `table_full`
    /// [default: half of --max-sessions, rounded up].
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, env = "RINGBLAST_MAX_UNANNOUNCED_SESSIONS")]
    pub(crate) max_unannounced_sessions: Option<usize>,
    /// A session without packets for this long is closed and its slot reused.
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, default_value = "10s", value_parser = parse_duration, env = "RINGBLAST_SESSION_IDLE")]
    pub(crate) session_idle: Duration,
    /// Senders with their own `sender` metric series and JSON entry; the rest are summed as
    /// "other".
    ///
    /// UDP and TCP alike.
    #[arg(help_heading = heading::CONTROL, long, default_value_t = 64, env = "RINGBLAST_MAX_SENDERS")]
    pub(crate) max_senders: usize,
    /// How datagrams are spread over the sink's queues: flow (a BPF program on the
    /// SO_REUSEPORT group reads the ringblast header, so one sender's flows alternate over the
    /// queues) or hash (the kernel's 4-tuple hash). Foreign datagrams always use the hash.
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, value_enum, default_value = "flow", env = "RINGBLAST_STEER")]
    pub(crate) steer: Steer,
}

/// How a sink's `SO_REUSEPORT` group picks a queue for each datagram (`--steer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Steer {
    /// By the ringblast header's epoch and flow id (`net::steer`).
    Flow,
    /// By the kernel's 4-tuple hash.
    Hash,
}

/// Where a sender's control channel goes: `auto` (TCP to the `--to` address), `off`, or
/// `ADDR:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ControlTarget {
    /// TCP to the `--to` address and port.
    Auto,
    /// No control channel.
    Off,
    /// TCP to this address.
    At(SocketAddr),
}

fn parse_control(s: &str) -> Result<ControlTarget, String> {
    match s {
        "auto" => Ok(ControlTarget::Auto),
        "off" => Ok(ControlTarget::Off),
        other => parse_destination(other)
            .map(ControlTarget::At)
            .map_err(|e| format!("{e}; use auto, off or ADDR:PORT")),
    }
}

/// `ringblast sink`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SinkArgs {
    /// Listen ADDR:PORT (UDP for traffic, TCP on the same port for the control channel).
    #[arg(help_heading = heading::RECEIVE, long, env = "RINGBLAST_LISTEN")]
    pub(crate) listen: SocketAddr,
    /// File holding the secret shared with the senders (HMAC-SHA256 authentication): at least 16
    /// bytes, e.g. `umask 077; head -c32 /dev/urandom | base64 > FILE`; required off loopback
    /// unless --insecure-control.
    #[arg(help_heading = heading::CONTROL, long, env = "RINGBLAST_SECRET_FILE")]
    pub(crate) secret_file: Option<std::path::PathBuf>,
    /// Accept control connections without a secret on a non-loopback address.
    #[arg(help_heading = heading::CONTROL, long, env = "RINGBLAST_INSECURE_CONTROL")]
    pub(crate) insecure_control: bool,
    /// With --secret-file, also count datagrams of senders that never said an authenticated
    /// hello (within --max-unannounced-sessions). Without it such a sink counts them as invalid
    /// `unannounced` once --unannounced-grace has passed; a sink without a secret always counts
    /// them (within --max-unannounced-sessions).
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, env = "RINGBLAST_ACCEPT_UNANNOUNCED")]
    pub(crate) accept_unannounced: bool,
    /// With --secret-file: for this long after start the sink still counts datagrams of senders
    /// that have not said hello (within --max-unannounced-sessions), so senders that were
    /// running before it started (restarted sink) are counted while they reconnect (their
    /// backoff is at most 5 s); a session opened then joins its sender's books at its hello.
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, default_value = "6s", value_parser = parse_duration, env = "RINGBLAST_UNANNOUNCED_GRACE")]
    pub(crate) unannounced_grace: Duration,
    /// Stop after this long (default: until SIGINT/SIGTERM).
    #[arg(help_heading = heading::RECEIVE, long, value_parser = parse_duration, env = "RINGBLAST_DURATION")]
    pub(crate) duration: Option<Duration>,
    /// Share the UDP port with another process that holds it with `SO_REUSEPORT` (another
    /// sink): the kernel then splits the flows between the two. Without it, a port held by
    /// anyone else is refused (exit 3).
    ///
    /// UDP only: a TCP sink refuses it.
    #[arg(help_heading = heading::UDP, long, env = "RINGBLAST_SHARE_PORT")]
    pub(crate) share_port: bool,
    /// Receive tuning.
    #[command(flatten)]
    pub(crate) tuning: SinkTuning,
    /// TCP: protocol and connection cap.
    #[command(flatten)]
    pub(crate) tcp: crate::cli::tcp::TcpSinkArgs,
    /// Placement and reporting.
    #[command(flatten)]
    pub(crate) common: CommonArgs,
}

/// `ringblast pair`: the embedded default is `--rate max --duration 10s`, with `--size 64` for
/// UDP and `--size 128000` for `--proto tcp`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PairArgs {
    /// Loopback address to use (`127.0.0.1` or `::1`).
    #[arg(help_heading = heading::PAIR, long, default_value = "127.0.0.1")]
    pub(crate) address: std::net::IpAddr,
    /// Do not start the metrics endpoint (pair serves 127.0.0.1:9977 by default).
    #[arg(help_heading = heading::PAIR, long)]
    pub(crate) no_metrics: bool,
    /// Traffic shape.
    #[command(flatten)]
    pub(crate) traffic: TrafficArgs,
    /// Receive tuning.
    #[command(flatten)]
    pub(crate) tuning: SinkTuning,
    /// TCP: protocol, connections and pattern.
    #[command(flatten)]
    pub(crate) tcp: crate::cli::tcp::TcpSendArgs,
    /// Placement and reporting (the sink gets the same number of queues on other CPUs).
    #[command(flatten)]
    pub(crate) common: CommonArgs,
}

/// `ringblast search`: trials run on one set of sender workers and one control connection to the
/// sink at `--to`, each its own epoch judged by the sink's exact verdict.
#[derive(Debug, Clone, Args)]
pub(crate) struct SearchArgs {
    /// The sink's ADDR:PORT (its control channel on the same port).
    #[arg(help_heading = heading::TRAFFIC, long, value_parser = parse_destination)]
    pub(crate) to: SocketAddr,
    /// Transport of the trials: `udp` datagrams (rates in pps) or `tcp` streams of records
    /// (rates in records/s; a trial's loss is its shortfall, see `docs/search.md`).
    #[arg(help_heading = heading::TRAFFIC, long, value_enum, default_value = "udp")]
    pub(crate) proto: tcp::Proto,
    /// Packet size as for `send --size` (a payload size, `imix` or a frame mix); with
    /// `--proto tcp`, the record size [default: 64 for UDP, 128000 for TCP].
    #[arg(help_heading = heading::TRAFFIC, long)]
    pub(crate) size: Option<String>,
    /// Loss ratios to find the highest rate for (0 = NDR, 0.005 = PDR).
    #[arg(help_heading = heading::SEARCH, long, default_value = "0,0.005", value_delimiter = ',', value_parser = parse_loss_ratio)]
    pub(crate) loss_ratios: Vec<f64>,
    /// The lowest rate searched [default: 1kpps for UDP, 1Mbit for TCP].
    #[arg(help_heading = heading::SEARCH, long, value_parser = parse_rate)]
    pub(crate) min_rate: Option<Rate>,
    /// The highest rate searched (default: the unpaced rate measured in a first trial).
    #[arg(help_heading = heading::SEARCH, long, value_parser = parse_rate)]
    pub(crate) max_rate: Option<Rate>,
    /// Relative width of the final interval (0.005 = 0.5 %).
    #[arg(help_heading = heading::SEARCH, long, default_value = "0.005", value_parser = parse_ratio)]
    pub(crate) precision: f64,
    /// Length of the short trials.
    #[arg(help_heading = heading::SEARCH, long, default_value = "1s", value_parser = parse_duration)]
    pub(crate) trial: Duration,
    /// Length of the trial that confirms each lower bound.
    #[arg(help_heading = heading::SEARCH, long, default_value = "30s", value_parser = parse_duration)]
    pub(crate) final_trial: Duration,
    /// Give up (exit 1) after this long.
    #[arg(help_heading = heading::SEARCH, long, default_value = "10m", value_parser = parse_duration)]
    pub(crate) max_time: Duration,
    /// A trial that offered (sent through the kernel) less than its rate by more than this
    /// ratio is sender-limited: never a pass. Measured again once; if it stays limited the
    /// search climbs no higher, and ends at what the sender could offer (exit 6).
    #[arg(help_heading = heading::SEARCH, long, default_value_t = crate::pacing::OFFERED_TOLERANCE, value_parser = parse_tolerance)]
    pub(crate) offered_tolerance: f64,
    /// Fail any trial whose 99th percentile one-way latency (the sink's) exceeds this, as
    /// TRex's latency-bounded NDR does (e.g. `500us`, `2ms`). Over TCP it is the records'
    /// latency, judged by the upper bound of the sink's latency cell (1-2-5 steps).
    #[arg(help_heading = heading::SEARCH, long, value_parser = parse_duration)]
    pub(crate) max_latency_p99: Option<Duration>,
    /// TCP connections per queue (default 1).
    ///
    /// TCP only: a UDP search refuses it.
    #[arg(help_heading = heading::TCP, long)]
    pub(crate) conns: Option<u32>,
    /// How long after a TCP trial its records may still arrive and count as delivered
    /// [default: 2 % of the trial, at least 50 ms]. It bounds what buffers can hide: a trial of
    /// `d` passes at most `drain / d` above the path's rate. Give it a few round trips.
    ///
    /// TCP only: a UDP trial's loss is the sink's exact count, once its sends completed.
    #[arg(help_heading = heading::TCP, long, value_parser = parse_duration)]
    pub(crate) drain: Option<Duration>,
    /// Sender queues per trial.
    #[arg(help_heading = heading::PLACEMENT, long, default_value_t = 1)]
    pub(crate) queues: usize,
    /// File holding the secret shared with the sink.
    #[arg(help_heading = heading::CONTROL, long)]
    pub(crate) secret_file: Option<std::path::PathBuf>,
    /// Set up, then start the first trial at TIME (as `send --start-at`): RFC 3339 in UTC
    /// (`2026-12-08T10:00:00Z`) or `+DURATION` from now; `--max-time` counts from it.
    #[arg(help_heading = heading::CONTROL, long, value_name = "TIME", value_parser = parse_start_at, env = "RINGBLAST_START_AT")]
    pub(crate) start_at: Option<StartAt>,
    /// Tag every trial's datagrams (see `send --auth-data`); needs --secret-file.
    #[arg(help_heading = heading::CONTROL, long, requires = "secret_file")]
    pub(crate) auth_data: bool,
    /// JSON Lines on stdout: one `"type":"trial"` per trial and a final `"type":"search"`.
    #[arg(help_heading = heading::OUTPUT, long)]
    pub(crate) json: bool,
    /// Serve the search's Prometheus metrics on ADDR:PORT: each trial is a step of the sender's
    /// schedule, so its target, achieved rate and the sink's verdict show in the dashboard's
    /// schedule row.
    #[arg(help_heading = heading::METRICS, long)]
    pub(crate) metrics: Option<SocketAddr>,
    /// With --metrics: keep the metrics up this long after the search, so its last verdict is
    /// scraped (the scrape interval).
    #[arg(help_heading = heading::METRICS, long, value_parser = parse_duration_or_zero, default_value = "0")]
    pub(crate) metrics_linger: Duration,
}

fn parse_loss_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if (0.0..1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "{s:?} is not a loss ratio in [0, 1): e.g. --loss-ratios 0,0.005"
        )),
    }
}

/// `ringblast topo`.
#[derive(Debug, Clone, Args)]
pub(crate) struct TopoArgs {
    /// Show the placement for traffic to this ADDR:PORT (finds the egress NIC).
    #[arg(long)]
    pub(crate) to: Option<SocketAddr>,
    /// Queues to place.
    #[arg(long, default_value_t = 1)]
    pub(crate) queues: usize,
    /// Explicit CPUs.
    #[arg(long)]
    pub(crate) cpus: Option<String>,
    /// Explicit node.
    #[arg(long)]
    pub(crate) node: Option<u32>,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};
    use crate::sender::mix::SizeSpec;

    fn send_size(args: &[&str]) -> SizeSpec {
        let argv = ["ringblast", "send", "--to", "127.0.0.1:9"]
            .iter()
            .chain(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Send(s) => s.traffic.size,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn size_defaults_per_protocol_and_an_explicit_size_wins() {
        assert_eq!(send_size(&[]), SizeSpec::Payload(64));
        assert_eq!(send_size(&["--proto", "udp"]), SizeSpec::Payload(64));
        assert_eq!(send_size(&["--proto", "tcp"]), SizeSpec::Payload(128_000));
        assert_eq!(
            send_size(&["--proto", "tcp", "--size", "1400"]),
            SizeSpec::Payload(1400)
        );
        assert_eq!(
            send_size(&["--size", "1400", "--proto", "tcp"]),
            SizeSpec::Payload(1400)
        );
    }
}
