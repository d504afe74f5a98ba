//! Links a run's sender and sink: the sink serves the control channel over its books, the
//! sender talks to a remote sink over it, and `pair` asks its in-process sink directly. Nothing
//! here runs on a worker thread, and the data path never waits on any of it.
//!
//! The sink decides at each hello how its latency relates to the sender's clock: a sender on
//! its own kernel (the same boot id) shares its clock; any other waits for the sender's offset
//! estimate; `pair` is one process, so one clock.

use crate::proto::reach::RunReach;
use crate::say;
use std::{net::SocketAddr, sync::Arc};

use super::{
    link::{Link, SenderLink, sink_session_id},
    link_ends::{self, Announce, SenderEnd, SinkEnd, SinkLedger},
    link_state::{self, LinkState},
    part_link::{self, UdpFlows},
    roles::{SenderSet, SinkSet},
    udp_verdict::{AskSink, progress_of, reports_of, verdict_of},
    verdict::{GOODBYE_WAIT, in_process_clock},
};
use crate::{
    clock,
    control::{
        auth::Secret,
        client::{ClientConfig, ControlClient},
        msg::{ClockEstimate, FlowProgress, FlowStart, Goodbye, Hello, Verdict},
        server::{ControlServer, HelloFrom, RunningServer, ServerConfig},
    },
    error::Error,
    latency_clock::LatencyClock,
    metrics::names,
    sink::registry::{self, FlowReport, Registry},
};

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
    let books = Arc::new(SinkEnd::new(
        RegistryLedger(Arc::clone(&k.registry)),
        session,
    ));
    Ok(Some(server.start(books, Box::new(|line| say!("{line}")))))
}

/// A sender's control client to its sink: hello now, and the verdict asked with a goodbye at
/// the end.
fn connect(
    SenderLink { addr, secret, name }: SenderLink,
    s: &SenderSet,
    state: Arc<LinkState>,
) -> VerdictSource {
    let announce = Announce {
        name,
        size: u32::try_from(s.size).unwrap_or(u32::MAX),
        epochs: Arc::from([s.epoch]),
        part: 0,
        rate: s.target_pps,
        flow_pps: s.pace.flow_pps,
        started_ns: clock::monotonic_ns(),
        paced_since_ns: s.pace.started_ns,
    };
    let flows = UdpFlows {
        shared: s.shared.clone(),
        flows: s.flows.clone(),
        first_seq: s.first_seq,
        in_parts: false,
    };
    let view = Arc::new(SenderEnd::new(announce, flows));
    let mut config = ClientConfig::new(addr);
    config.secret = secret;
    state.expect_answer();
    let client = ControlClient::start(
        config,
        view,
        Box::new(move |e| link_state::event(e, &state)),
    );
    VerdictSource::Remote(Box::new(move |flows: &[FlowReport]| {
        link_ends::finish(client, flows.iter().map(progress_of).collect())
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

/// The UDP sink's registry as the control channel feeds it.
struct RegistryLedger(Arc<Registry>);

impl SinkLedger for RegistryLedger {
    const GONE_WITHOUT_GOODBYE: &'static str = "; its sessions close when idle, the tail after its last progress report counted as unconfirmed";

    fn hello(&self, hello: &Hello, from: &HelloFrom, clock: LatencyClock) -> (u64, String) {
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
            clock,
        };
        self.0.hello(Some(from.peer), &h)
    }

    fn progress(&self, epoch: u32, flows: &[FlowProgress]) {
        self.0.progress(epoch, &reports_of(flows));
    }

    fn clock(&self, epoch: u32, e: &ClockEstimate) {
        self.0.clock(epoch, e.offset_ns, e.error_bound_ns, e.rtt_ns);
    }

    fn goodbye(&self, epoch: u32, goodbye: &Goodbye) -> Verdict {
        verdict_of(
            &self
                .0
                .goodbye(epoch, &reports_of(&goodbye.flows), GOODBYE_WAIT),
        )
    }
}
