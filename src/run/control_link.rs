//! Links a run's sender and sink: the sink serves the control channel over its books, the
//! sender talks to a remote sink over it, and `pair` asks its in-process sink directly. Nothing
//! here runs on a worker thread, and the data path never waits on any of it.
//!
//! The sink decides at each hello how its latency relates to the sender's clock: a sender on
//! its own kernel (the same boot id) shares its clock; any other waits for the sender's offset
//! estimate; `pair` is one process, so one clock.

use crate::say;
use std::{
    net::SocketAddr,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use super::{
    part_link,
    roles::{SenderSet, SinkSet},
    session::{GOODBYE_WAIT, VerdictSource},
};
use crate::{
    clock,
    control::{
        auth::Secret,
        client::{ClientConfig, ClientEvent, ControlClient, SenderView},
        msg::{
            ClockEstimate, FlowProgress, FlowStart, FlowVerdict, Goodbye, Hello, MAX_NAME,
            Progress, SizeCount, Verdict, VerdictClock, name_byte_allowed,
        },
        server::{ControlServer, RunningServer, ServerConfig, ServerStats, SinkBooks},
    },
    error::Error,
    latency_clock::{ClockKind, LatencyClock, NO_ESTIMATE_YET},
    metrics::names,
    sender::SenderShared,
    sink::{
        registry::{self, FlowReport, Registry, RunVerdict},
        sizes::ClassCount,
    },
    stats::{Latency, SessionCounters},
};

/// How this run's sender and sink talk.
pub enum Link {
    /// Nothing to link (the sink of `pair` is linked through `InProcess`).
    None,
    /// `pair`: the sender says hello and goodbye to the sink's registry directly.
    InProcess,
    /// A sink serving the control channel.
    Serve {
        listen: SocketAddr,
        secret: Option<Arc<Secret>>,
        /// `--share-port`: a control port held by the other sink is not an error.
        share: bool,
    },
    /// A sender talking to a sink.
    Connect {
        addr: SocketAddr,
        secret: Option<Arc<Secret>>,
        name: String,
    },
    /// A sender with `--control off`.
    Off,
}

/// What a sender's control channel found out, for its summary.
#[derive(Debug)]
pub struct LinkState {
    /// The sink refused this sender's credentials (the run exits 3).
    pub refused: AtomicBool,
    /// The smallest round trip of any clock exchange, in ns (`u64::MAX`: none).
    control_rtt_ns: AtomicU64,
    /// Connections dropped because a frame from the sink failed its integrity check, in the
    /// order of [`INTEGRITY_REASONS`].
    integrity_failures: [AtomicU64; INTEGRITY_REASONS.len()],
    /// The sender's first connection attempt has an outcome (hello answered, refused or
    /// unreachable); set with `awaits` by a sender that talks to a sink.
    answered: Mutex<bool>,
    answered_now: Condvar,
    awaits: AtomicBool,
}

/// The integrity failures a sender counts (`FrameError::integrity_label`).
const INTEGRITY_REASONS: [&str; 4] = ["bad_mac", "replayed", "out_of_order", "truncated"];

impl Default for LinkState {
    fn default() -> LinkState {
        LinkState {
            refused: AtomicBool::new(false),
            control_rtt_ns: AtomicU64::new(u64::MAX),
            integrity_failures: Default::default(),
            answered: Mutex::new(false),
            answered_now: Condvar::new(),
            awaits: AtomicBool::new(false),
        }
    }
}

impl LinkState {
    /// The smallest control round trip measured, if any clock exchange completed.
    pub fn control_rtt_ns(&self) -> Option<u64> {
        Some(self.control_rtt_ns.load(Ordering::Relaxed)).filter(|&ns| ns != u64::MAX)
    }

    /// Whether the sink refused this sender's credentials.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// The summary's `control_integrity_failures`: connections dropped per reason.
    pub fn integrity_json(&self) -> serde_json::Value {
        INTEGRITY_REASONS
            .iter()
            .zip(&self.integrity_failures)
            .map(|(reason, n)| ((*reason).to_string(), n.load(Ordering::Relaxed).into()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    fn answer(&self) {
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        *answered = true;
        self.answered_now.notify_all();
    }

    /// Waits up to `limit` for the sender's first connection attempt, so its hello reaches the
    /// sink before its first datagram (a sink with a secret counts only the datagrams of senders
    /// that said hello). Returns false when it gave up waiting; true at once without a link.
    pub fn wait_first_answer(&self, limit: Duration) -> bool {
        if !self.awaits.load(Ordering::Relaxed) {
            return true;
        }
        let answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        let (answered, _) = self
            .answered_now
            .wait_timeout_while(answered, limit, |a| !*a)
            .unwrap_or_else(|e| e.into_inner());
        *answered
    }
}

/// What a started link leaves running.
pub struct Started {
    /// Where the sender's verdict comes from.
    pub verdict: VerdictSource,
    /// The sink's control server, stopped after the run.
    pub server: Option<RunningServer>,
    /// What the sender's control channel found out.
    pub state: Arc<LinkState>,
}

/// The longest suffix a default name puts after the hostname: a sender's `/{queues}q{flows}f`
/// (two counts of at most 20 digits) is longer than a sink session's `/{random:08x}`.
const MAX_NAME_SUFFIX: usize = "/qf".len() + 2 * 20;

/// Bytes of the hostname a default name keeps, so that hostname and suffix fit [`MAX_NAME`].
const MAX_HOST_PART: usize = MAX_NAME - MAX_NAME_SUFFIX;

/// The default `--name` of a sender: the hostname and its queue plan.
pub fn default_sender_name(queues: usize, flows: usize) -> String {
    sender_name_on(&hostname(), queues, flows)
}

/// A fresh sink session id: the hostname and 32 random bits.
pub fn sink_session_id() -> String {
    session_id_on(&hostname(), rand::random::<u32>())
}

fn sender_name_on(host: &str, queues: usize, flows: usize) -> String {
    format!("{host}/{queues}q{flows}f")
}

fn session_id_on(host: &str, random: u32) -> String {
    format!("{host}/{random:08x}")
}

/// This host's name as the first part of default sender names and sink session ids: always a
/// valid control-channel name part (see [`name_part`]), whatever the kernel holds (`(none)` on
/// hosts that never set one).
fn hostname() -> String {
    name_part(&std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default())
}

/// `raw` made fit for a control-channel name: every byte outside `[A-Za-z0-9._:/@-]` becomes
/// `-`, and it is cut to [`MAX_HOST_PART`] bytes; `localhost` when nothing but `-` is left.
fn name_part(raw: &str) -> String {
    let part: String = raw
        .trim()
        .bytes()
        .take(MAX_HOST_PART)
        .map(|b| {
            if name_byte_allowed(b) {
                char::from(b)
            } else {
                '-'
            }
        })
        .collect();
    if part.bytes().all(|b| b == b'-') {
        "localhost".into()
    } else {
        part
    }
}

/// Starts the link for a run whose workers are set up but not released.
pub fn start(
    link: Link,
    senders: Option<&SenderSet>,
    sinks: Option<&SinkSet>,
) -> Result<Started, Error> {
    let state = Arc::new(LinkState::default());
    let mut started = Started {
        verdict: VerdictSource::None,
        server: None,
        state: Arc::clone(&state),
    };
    match (link, senders, sinks) {
        // A rate schedule: each part is its own session epoch (`part_link`).
        (Link::InProcess, Some(s), Some(k)) if s.schedule.is_some() => {
            let sink = part_link::InProcess {
                registry: Arc::clone(&k.registry),
                books: part_books(s),
            };
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(1.0);
            started.verdict = VerdictSource::Parts(part_link::start(Box::new(sink), part_books(s)));
        }
        (Link::Connect { addr, secret, name }, Some(s), _) if s.schedule.is_some() => {
            let mut config = ClientConfig::new(addr);
            config.secret = secret;
            let sink = part_link::Remote {
                config,
                name,
                books: part_books(s),
                schedule: s
                    .schedule
                    .clone()
                    .ok_or_else(|| Error::Usage("a stepped run without its schedule".into()))?,
                size: u32::try_from(s.size).unwrap_or(u32::MAX),
                started_ns: clock::monotonic_ns(),
                state,
                clients: Vec::new(),
            };
            started.verdict = VerdictSource::Parts(part_link::start(Box::new(sink), part_books(s)));
        }
        (Link::InProcess, Some(s), Some(k)) => {
            let (_, line) = k.registry.hello(None, &registry_hello("pair", s, 0));
            say!("{line}");
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(1.0);
            started.verdict = VerdictSource::InProcess;
        }
        (
            Link::Serve {
                listen,
                secret,
                share,
            },
            _,
            Some(k),
        ) => {
            let session = sink_session_id();
            let mut config = ServerConfig::new(listen, session.clone());
            config.secret = secret;
            let server = match ControlServer::bind(config) {
                // Only a port in use is `Unsupported` here; with --share-port it is the other
                // sink's control channel, and the senders report to that sink.
                Err(Error::Unsupported(_)) if share => {
                    say!(
                        "control: tcp {listen} is held by the sink this one shares the port with (--share-port); this sink serves no control channel"
                    );
                    return Ok(started);
                }
                other => other?,
            };
            say!("control: listening on tcp {listen} (sink session {session})");
            let books = Arc::new(Books {
                registry: Arc::clone(&k.registry),
                sink_session: session,
            });
            started.server = Some(server.start(books, Box::new(|line| say!("{line}"))));
        }
        (Link::Connect { addr, secret, name }, Some(s), _) => {
            let view = Arc::new(View {
                name,
                epoch: s.epoch,
                first_seq: s.first_seq,
                shared: s.shared.clone(),
                flows: s.flows.clone(),
                started_ns: clock::monotonic_ns(),
                size: u32::try_from(s.size).unwrap_or(u32::MAX),
                rate_pps: s.target_pps,
            });
            let mut config = ClientConfig::new(addr);
            config.secret = secret;
            state.awaits.store(true, Ordering::Relaxed);
            let client = ControlClient::start(config, view, Box::new(move |e| event(e, &state)));
            started.verdict = VerdictSource::Remote(Box::new(move |flows: &[FlowReport]| {
                let goodbye = Goodbye {
                    flows: flows.iter().map(progress_of).collect(),
                };
                client
                    .finish(goodbye, GOODBYE_WAIT + Duration::from_secs(2))
                    .map(|v| (v.sink_session.clone(), run_verdict(&v)))
                    .map_err(|e| e.to_string())
            }));
        }
        (Link::Off, Some(_), _) => {
            started.verdict = VerdictSource::Remote(Box::new(|_: &[FlowReport]| {
                Err("the control channel is off (--control off): the sink cannot report, and a tail lost on the way is not counted".into())
            }));
        }
        _ => {}
    }
    Ok(started)
}

pub(super) fn event(e: ClientEvent, state: &LinkState) {
    if !matches!(e, ClientEvent::Clock { .. }) {
        state.answer();
    }
    match e {
        ClientEvent::Connected {
            addr,
            sink_session,
            reconnect,
        } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(1.0);
            if reconnect > 0 {
                metrics::counter!(names::TX_CONTROL_RECONNECTS).increment(1);
            }
            say!(
                "control: connected to sink {sink_session} at {addr} (connection {})",
                reconnect + 1
            );
        }
        ClientEvent::Unreachable {
            addr,
            reason,
            retry_in,
        } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(0.0);
            say!(
                "control: cannot reach the sink at {addr}: {reason}; sending anyway, retrying (next in {:.1}s)",
                retry_in.as_secs_f64()
            );
        }
        ClientEvent::Lost { reason } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(0.0);
            say!("control: lost the sink: {reason}; sending anyway, reconnecting");
        }
        ClientEvent::Refused { reason } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(0.0);
            state.refused.store(true, Ordering::Relaxed);
            say!("control: {reason}");
        }
        ClientEvent::Breach { reason } => {
            if let Some(i) = INTEGRITY_REASONS.iter().position(|r| *r == reason) {
                state.integrity_failures[i].fetch_add(1, Ordering::Relaxed);
            }
            metrics::counter!(names::TX_CONTROL_INTEGRITY, "reason" => reason).increment(1);
        }
        ClientEvent::Clock { min_rtt_ns, .. } => {
            let min = state
                .control_rtt_ns
                .fetch_min(min_rtt_ns, Ordering::Relaxed)
                .min(min_rtt_ns);
            metrics::gauge!(names::TX_CONTROL_RTT).set(min as f64 / 1e9);
        }
    }
}

/// The clock of `pair`'s sender at its in-process sink: the same clock (moved by the test
/// skew, which the one process knows exactly, when that hook is set).
pub(super) fn in_process_clock() -> LatencyClock {
    LatencyClock {
        offset_ns: clock::test_skew_ns().unwrap_or(0),
        ..LatencyClock::same_clock()
    }
}

/// The clock of a sender at its hello in protocol `version`, as far as the hello tells.
pub(super) fn hello_clock(hello: &Hello, version: u8) -> LatencyClock {
    if version < 3 {
        LatencyClock::unknown(format!(
            "no clock estimate: the sender speaks control protocol version {version}, without the clock exchange (upgrade it)"
        ))
    } else if clock::same_kernel(hello.boot_id.as_deref()) {
        LatencyClock::same_clock()
    } else {
        LatencyClock::unknown(NO_ESTIMATE_YET)
    }
}

/// A run's clock, with its packets without a sample and its clamped samples, for a verdict.
pub(super) fn verdict_clock(clock: &LatencyClock, unknown: u64, clamped: u64) -> VerdictClock {
    let known = clock.kind != ClockKind::Unknown;
    VerdictClock {
        kind: clock.kind,
        offset_ns: known.then_some(clock.offset_ns),
        error_bound_ns: known.then_some(clock.error_bound_ns),
        control_rtt_ns: clock.control_rtt_ns,
        latency_unknown_packets: unknown,
        latency_clamped_packets: clamped,
        reason: (!known).then(|| clock.reason.clone()),
    }
}

/// The clock a verdict carries (an older sink says nothing of it).
fn clock_of(v: Option<&VerdictClock>) -> LatencyClock {
    match v {
        Some(c) if c.kind != ClockKind::Unknown => LatencyClock {
            kind: c.kind,
            offset_ns: c.offset_ns.unwrap_or(0),
            error_bound_ns: c.error_bound_ns.unwrap_or(0),
            control_rtt_ns: c.control_rtt_ns,
            reason: String::new(),
        },
        Some(c) => LatencyClock {
            control_rtt_ns: c.control_rtt_ns,
            ..LatencyClock::unknown(c.reason.clone().unwrap_or_default())
        },
        None => LatencyClock::unknown(
            "the sink's verdict does not say how its latency relates to this sender's clock",
        ),
    }
}

/// A sender's per-flow progress (PROGRESS or GOODBYE) as the registry's reports.
fn reports_of(flows: &[FlowProgress]) -> Vec<FlowReport> {
    flows
        .iter()
        .map(|f| FlowReport {
            flow: f.flow,
            first_seq: 0,
            next_seq: f.next_seq,
            failed: f.failed,
        })
        .collect()
}

pub(super) fn progress_of(f: &FlowReport) -> FlowProgress {
    FlowProgress {
        flow: f.flow,
        next_seq: f.next_seq,
        failed: f.failed,
    }
}

/// The senders' books of their schedule's parts.
pub(super) fn part_books(s: &SenderSet) -> part_link::PartBooks {
    part_link::PartBooks {
        shared: s.shared.clone(),
        flows: s.flows.clone(),
        first_seq: s.first_seq,
        epochs: Arc::clone(&s.part_epochs),
        tally: Arc::clone(&s.tally),
    }
}

fn registry_hello(name: &str, s: &SenderSet, elapsed_ns: u64) -> registry::Hello {
    registry::Hello {
        name: name.into(),
        epoch: s.epoch,
        flows: s.flow_reports(),
        elapsed_ns,
        step: 0,
        clock: in_process_clock(),
    }
}

fn flow_verdict(c: &SessionCounters) -> FlowVerdict {
    FlowVerdict {
        rx_packets: c.packets,
        rx_bytes: c.bytes,
        rx_lost: c.lost,
        rx_reordered: c.reordered,
        rx_duplicates: c.duplicates,
        rx_invalid: 0,
        rx_kernel_drops: c.kernel_drops,
        rx_unconfirmed: c.unconfirmed,
        tx_failed: c.send_failed,
    }
}

fn counters_of(f: &FlowVerdict) -> SessionCounters {
    SessionCounters {
        packets: f.rx_packets,
        bytes: f.rx_bytes,
        lost: f.rx_lost,
        reordered: f.rx_reordered,
        duplicates: f.rx_duplicates,
        kernel_drops: f.rx_kernel_drops,
        unconfirmed: f.rx_unconfirmed,
        send_failed: f.tx_failed,
        ..SessionCounters::default()
    }
}

pub(super) fn run_verdict(v: &Verdict) -> RunVerdict {
    let mut totals = counters_of(&v.totals);
    if let Some(c) = &v.clock {
        totals.latency_unknown = c.latency_unknown_packets;
        totals.latency_clamped = c.latency_clamped_packets;
    }
    RunVerdict {
        totals,
        flows: v.flows.iter().map(|(f, c)| (*f, counters_of(c))).collect(),
        complete: true,
        latency: Latency {
            p50_ns: v.latency_p50_ns,
            p99_ns: v.latency_p99_ns,
            max_ns: v.latency_max_ns,
        },
        sizes: v
            .sizes
            .iter()
            .map(|c| ClassCount {
                payload: (c.payload > 0).then_some(c.payload),
                packets: c.packets,
                bytes: c.bytes,
            })
            .collect(),
        clock: clock_of(v.clock.as_ref()),
        refused: v.totals.rx_invalid,
    }
}

/// The sink's books as the control server sees them.
struct Books {
    registry: Arc<Registry>,
    sink_session: String,
}

impl SinkBooks for Books {
    fn hello(&self, peer: SocketAddr, hello: &Hello, version: u8) -> u64 {
        let h = registry::Hello {
            name: hello.name.clone(),
            epoch: hello.epoch,
            flows: hello
                .flows
                .iter()
                .map(|f: &FlowStart| FlowReport {
                    flow: f.flow,
                    first_seq: f.first_seq,
                    next_seq: f.next_seq,
                    failed: f.failed,
                })
                .collect(),
            elapsed_ns: hello.elapsed_ns,
            step: hello.step.unwrap_or(0),
            clock: hello_clock(hello, version),
        };
        let (uptime, line) = self.registry.hello(Some(peer), &h);
        let rate = hello
            .rate_pps
            .map_or_else(|| "unpaced".to_string(), |r| format!("{r:.0}pps"));
        say!("{line} ({} B, {rate})", hello.size);
        uptime
    }

    fn progress(&self, _peer: SocketAddr, _name: &str, epoch: u32, progress: &Progress) {
        let flows = reports_of(&progress.flows);
        self.registry.progress(epoch, &flows);
    }

    fn clock(&self, _peer: SocketAddr, _name: &str, epoch: u32, e: &ClockEstimate) {
        self.registry
            .clock(epoch, e.offset_ns, e.error_bound_ns, e.rtt_ns);
    }

    fn goodbye(&self, _peer: SocketAddr, name: &str, epoch: u32, goodbye: &Goodbye) -> Verdict {
        let flows = reports_of(&goodbye.flows);
        let v = self.registry.goodbye(epoch, &flows, GOODBYE_WAIT);
        Verdict {
            sink_session: self.sink_session.clone(),
            name: name.into(),
            epoch,
            // The run's datagrams that arrived but found no slot (per run, not per flow).
            totals: FlowVerdict {
                rx_invalid: v.refused,
                ..flow_verdict(&v.totals)
            },
            flows: v.flows.iter().map(|(f, c)| (*f, flow_verdict(c))).collect(),
            latency_p50_ns: v.latency.p50_ns,
            latency_p99_ns: v.latency.p99_ns,
            latency_max_ns: v.latency.max_ns,
            sizes: v
                .sizes
                .iter()
                .map(|c| SizeCount {
                    payload: c.payload.unwrap_or(0),
                    packets: c.packets,
                    bytes: c.bytes,
                })
                .collect(),
            clock: Some(verdict_clock(
                &v.clock,
                v.totals.latency_unknown,
                v.totals.latency_clamped,
            )),
        }
    }

    fn disconnected(&self, peer: SocketAddr, name: &str, _epoch: u32, clean: bool) {
        if !clean {
            say!(
                "sink: sender {name} ({peer}) went away without a goodbye; its sessions close when idle, the tail after its last progress report counted as unconfirmed"
            );
        }
    }
}

/// What the sender's control thread reads: its flows' progress.
struct View {
    name: String,
    epoch: u32,
    first_seq: u64,
    shared: Vec<Arc<SenderShared>>,
    flows: Vec<Vec<u32>>,
    started_ns: u64,
    size: u32,
    rate_pps: Option<f64>,
}

impl View {
    fn reports(&self) -> Vec<FlowReport> {
        super::roles::flow_reports(&self.shared, &self.flows, self.first_seq)
    }
}

impl SenderView for View {
    fn hello(&self, reconnect: u32) -> Hello {
        Hello {
            name: self.name.clone(),
            epoch: self.epoch,
            flows: self
                .reports()
                .iter()
                .map(|f| FlowStart {
                    flow: f.flow,
                    first_seq: f.first_seq,
                    next_seq: f.next_seq,
                    failed: f.failed,
                })
                .collect(),
            size: self.size,
            rate_pps: self.rate_pps,
            elapsed_ns: clock::monotonic_ns().saturating_sub(self.started_ns),
            reconnect,
            step: None,
            boot_id: None,
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            flows: self.reports().iter().map(progress_of).collect(),
        }
    }
}

/// Copies the control server's counters into `ringblast_rx_control_connections_total`.
pub fn export_server_stats(stats: &ServerStats) {
    use std::sync::atomic::Ordering::Relaxed;
    for (result, value) in [
        ("accepted", &stats.accepted),
        ("authenticated", &stats.authenticated),
        ("auth_failed", &stats.auth_failed),
        ("protocol_error", &stats.protocol_errors),
        ("timeout", &stats.timeouts),
        ("busy", &stats.rejected_busy),
        ("bad_mac", &stats.bad_mac),
        ("replayed", &stats.replayed),
        ("out_of_order", &stats.out_of_order),
        ("truncated", &stats.truncated),
    ] {
        metrics::counter!(names::RX_CONTROL_CONNECTIONS, "result" => result)
            .absolute(value.load(Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::msg::check_name;

    /// Every default name built on `host` passes the control channel's check.
    fn assert_default_names_valid(host: &str) {
        for name in [
            sender_name_on(host, 1, 1),
            sender_name_on(host, usize::MAX, usize::MAX),
            session_id_on(host, u32::MAX),
        ] {
            check_name("default name", &name).unwrap_or_else(|e| panic!("{name:?}: {e}"));
        }
    }

    #[test]
    fn the_kernel_default_hostname_becomes_a_valid_name() {
        assert_eq!(name_part("(none)\n"), "-none-");
        assert_default_names_valid(&name_part("(none)"));
        assert_eq!(sender_name_on(&name_part("(none)"), 2, 8), "-none-/2q8f");
    }

    #[test]
    fn a_long_hostname_is_cut_so_every_default_name_fits() {
        let long = "h".repeat(200);
        let part = name_part(&long);
        assert_eq!(part.len(), MAX_HOST_PART);
        assert!(long.starts_with(&part));
        assert_default_names_valid(&part);
        assert_eq!(
            sender_name_on(&part, usize::MAX, usize::MAX).len(),
            MAX_NAME,
            "the longest queue plan fills the name exactly"
        );
    }

    #[test]
    fn an_empty_or_all_foreign_hostname_falls_back_to_localhost() {
        for raw in ["", "\n", "   ", "()", "日本", "--"] {
            assert_eq!(name_part(raw), "localhost", "{raw:?}");
        }
        // Cut to dashes only: a long run of foreign bytes before the first allowed one.
        assert_eq!(name_part(&format!("{}a", "(".repeat(300))), "localhost");
    }

    #[test]
    fn a_utf8_hostname_keeps_its_ascii_and_maps_every_other_byte() {
        // 'é' is two bytes in UTF-8, each one becomes '-'.
        assert_eq!(name_part("héllo-wörld"), "h--llo-w--rld");
        assert_eq!(name_part("host_1 lab"), "host_1-lab");
        assert_eq!(name_part("edge-7.example.net"), "edge-7.example.net");
        assert_default_names_valid(&name_part("日本のホスト.example"));
    }
}
