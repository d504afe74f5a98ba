//! Links a run's sender and sink: the sink serves the control channel over its books, the
//! sender talks to a remote sink over it, and `pair` asks its in-process sink directly. Nothing
//! here runs on a worker thread, and the data path never waits on any of it.
//!
//! The sink decides at each hello how its latency relates to the sender's clock: a sender on
//! its own kernel (the same boot id) shares its clock; any other waits for the sender's offset
//! estimate; `pair` is one process, so one clock.

use crate::proto::reach::RunReach;
use crate::say;
use std::{net::SocketAddr, sync::Arc, time::Duration};

use super::{
    link_state::{self, LinkState},
    part_link,
    roles::{RunPace, SenderSet, SinkSet},
    verdict::{
        AskSink, GOODBYE_WAIT, flow_verdict, hello_clock, in_process_clock, progress_of,
        reports_of, run_verdict, verdict_clock, verdict_jitter,
    },
};
use crate::{
    clock,
    control::{
        auth::Secret,
        client::{ClientConfig, ControlClient, SenderView},
        msg::{
            ClockEstimate, DataProto, FlowStart, FlowVerdict, Goodbye, Hello, MAX_NAME, Progress,
            SizeCount, Verdict, name_byte_allowed,
        },
        server::{ControlServer, HelloFrom, RunningServer, ServerConfig, ServerStats, SinkBooks},
    },
    error::Error,
    metrics::names,
    sender::SenderShared,
    sink::registry::{self, FlowReport, Registry},
};

/// How this run's sender and sink talk.
pub(crate) enum Link {
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
    Connect(SenderLink),
    /// A sender with `--control off`.
    Off,
}

/// Where a sender's control channel goes, and how it introduces itself (either protocol).
pub(crate) struct SenderLink {
    /// The sink's control address: `--control ADDR:PORT`, or the sink's own (`--to`).
    pub(crate) addr: SocketAddr,
    /// The shared secret from `--secret-file`, if any.
    pub(crate) secret: Option<Arc<Secret>>,
    /// `--name`, checked, or the hostname and the queue plan.
    pub(crate) name: String,
}

/// Where a sender's verdict comes from: the sink's books for this sender run.
pub(crate) enum VerdictSource {
    /// This run does not send.
    None,
    /// The sink runs in this process (`pair`): its registry is asked directly.
    InProcess,
    /// A sink elsewhere: given the flows' ends, says goodbye and waits for the verdict
    /// (the sink's session name and its books), or says why none came.
    Remote(AskSink),
    /// A rate schedule: each part is its own epoch, closed as it settles (`part_link`).
    Parts(part_link::PartLink),
}

/// What a started link leaves running.
pub(crate) struct Started {
    /// Where the sender's verdict comes from.
    pub(crate) verdict: VerdictSource,
    /// The sink's control server, stopped after the run.
    pub(crate) server: Option<RunningServer>,
    /// What the sender's control channel found out.
    pub(crate) state: Arc<LinkState>,
}

/// The longest suffix a default name puts after the hostname: a sender's `/{queues}q{flows}f`
/// (two counts of at most 20 digits) is longer than a sink session's `/{random:08x}`.
const MAX_NAME_SUFFIX: usize = "/qf".len() + 2 * 20;

/// Bytes of the hostname a default name keeps, so that hostname and suffix fit [`MAX_NAME`].
const MAX_HOST_PART: usize = MAX_NAME - MAX_NAME_SUFFIX;

/// The default `--name` of a sender: the hostname and its queue plan.
pub(crate) fn default_sender_name(queues: usize, flows: usize) -> String {
    sender_name_on(&hostname(), queues, flows)
}

/// A fresh sink session id: the hostname and 32 random bits.
pub(crate) fn sink_session_id() -> String {
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
pub(crate) fn start(
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
        (Link::Connect(SenderLink { addr, secret, name }), Some(s), _) if s.schedule.is_some() => {
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
        ) => started.server = serve(listen, secret, share, k)?,
        (Link::Connect(link), Some(s), _) => started.verdict = connect(link, s, state),
        (Link::Off, Some(_), _) => {
            started.verdict = VerdictSource::Remote(Box::new(|_: &[FlowReport]| {
                Err("the control channel is off (--control off): the sink cannot report, and a tail lost on the way is not counted".into())
            }));
        }
        _ => {}
    }
    Ok(started)
}

/// A sink's control server on `listen`, serving its registry's books; none when `--share-port`
/// finds the other sink's server on the port.
fn serve(
    listen: SocketAddr,
    secret: Option<Arc<Secret>>,
    share: bool,
    k: &SinkSet,
) -> Result<Option<RunningServer>, Error> {
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
            return Ok(None);
        }
        other => other?,
    };
    say!("control: listening on tcp {listen} (sink session {session})");
    let books = Arc::new(Books {
        registry: Arc::clone(&k.registry),
        sink_session: session,
    });
    Ok(Some(server.start(books, Box::new(|line| say!("{line}")))))
}

/// A sender's control client to its sink: hello now, and the verdict asked with a goodbye at
/// the end.
fn connect(
    SenderLink { addr, secret, name }: SenderLink,
    s: &SenderSet,
    state: Arc<LinkState>,
) -> VerdictSource {
    let view = Arc::new(View {
        name,
        epoch: s.epoch,
        first_seq: s.first_seq,
        shared: s.shared.clone(),
        flows: s.flows.clone(),
        started_ns: clock::monotonic_ns(),
        size: u32::try_from(s.size).unwrap_or(u32::MAX),
        rate_pps: s.target_pps,
        pace: s.pace,
    });
    let mut config = ClientConfig::new(addr);
    config.secret = secret;
    state.expect_answer();
    let client = ControlClient::start(
        config,
        view,
        Box::new(move |e| link_state::event(e, &state)),
    );
    VerdictSource::Remote(Box::new(move |flows: &[FlowReport]| {
        let goodbye = Goodbye {
            flows: flows.iter().map(progress_of).collect(),
        };
        client
            .finish(goodbye, GOODBYE_WAIT + Duration::from_secs(2))
            .map(|v| (v.sink_session.clone(), run_verdict(&v)))
            .map_err(|e| e.to_string())
    }))
}

/// The senders' books of their schedule's parts.
pub(super) fn part_books(s: &SenderSet) -> part_link::PartBooks {
    part_link::PartBooks {
        shared: s.shared.clone(),
        flows: s.flows.clone(),
        first_seq: s.first_seq,
        epochs: Arc::clone(&s.part_epochs),
        tally: Arc::clone(&s.tally),
        pace: s.pace,
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
        proof: None,
        // One process, one clock: the run's start is known exactly.
        reach: s
            .pace
            .flow_pps
            .and_then(|r| RunReach::new(s.first_seq, r, s.pace.started_ns)),
    }
}

/// The sink's books as the control server sees them.
struct Books {
    registry: Arc<Registry>,
    sink_session: String,
}

impl SinkBooks for Books {
    fn hello(&self, hello: &Hello, from: HelloFrom) -> u64 {
        let h = registry::Hello {
            proof: from.proof,
            reach: hello.reach.and_then(|r| {
                let first_seq = hello.flows.iter().map(|f| f.first_seq).min()?;
                // The run started no earlier than the connection minus the Hello's age of it.
                let since = from.connected_ns.saturating_sub(r.run_elapsed_ns);
                RunReach::new(first_seq, r.flow_pps, since)
            }),
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
            clock: hello_clock(hello, from.version),
        };
        let (uptime, line) = self.registry.hello(Some(from.peer), &h);
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
            latency_p999_ns: v.latency.p999_ns,
            jitter: Some(Box::new(verdict_jitter(&v.jitter))),
            latency_figures: v.latency.figures.map(Box::new),
            jitter_figures: v.jitter.bounds.figures.map(Box::new),
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
    pace: RunPace,
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
            reach: self.pace.reach(self.pace.flow_pps),
            proto: Some(DataProto::Udp),
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            flows: self.reports().iter().map(progress_of).collect(),
        }
    }
}

/// Copies the control server's counters into `ringblast_rx_control_connections_total`.
pub(crate) fn export_server_stats(stats: &ServerStats) {
    use std::sync::atomic::Ordering::Relaxed;
    for (result, value) in [
        ("accepted", &stats.accepted),
        ("authenticated", &stats.authenticated),
        ("auth_failed", &stats.auth_failed),
        ("protocol_error", &stats.protocol_errors),
        ("timeout", &stats.timeouts),
        ("busy", &stats.rejected_busy),
        ("evicted", &stats.evicted),
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
