//! The control side of a rate schedule's parts (see `sender::parts`): each part is its own
//! session epoch at the sink, announced (a hello) one part ahead and closed (a goodbye with its
//! flows' true ends and failed sends) once every sender worker has settled it, so the sink's
//! verdict for each part is exact. With a remote sink each part is one control connection; with
//! `pair` the in-process sink's registry is asked directly. A thread of its own does this, never
//! a worker and never the reporter, and the run's verdict is the sum of its parts' verdicts.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use super::{
    link_ends::{self, Announce, SenderEnd, SenderLedger, SinkVerdict},
    link_state::{self},
    roles::{RunPace, flow_reports},
    udp_verdict,
    verdict::{self, GOODBYE_WAIT},
};
use crate::{
    clock,
    control::{
        client::{ClientConfig, ClientEvent, ControlClient, SenderView},
        msg::{DataProto, FlowStart, Verdict},
    },
    metrics::steps::StepTally,
    proto::reach::RunReach,
    say,
    schedule::RateSchedule,
    sender::SenderShared,
    sink::registry::{self, FlowReport, Registry},
};

/// How often the thread looks for a settled part.
const POLL: Duration = Duration::from_millis(5);

/// Where every flow of these sender queues stands in `part`.
pub(crate) fn part_reports(
    shared: &[Arc<SenderShared>],
    flows: &[Vec<u32>],
    first_seq: u64,
    part: usize,
) -> Vec<FlowReport> {
    let mut out = Vec::new();
    for (s, ids) in shared.iter().zip(flows) {
        let Some(m) = s.parts.get(part) else { continue };
        for (i, &flow) in ids.iter().enumerate() {
            out.push(FlowReport {
                flow,
                first_seq,
                next_seq: m.next_seq[i].load(Ordering::Relaxed),
                failed: m.failed[i].load(Ordering::Relaxed),
            });
        }
    }
    out
}

/// Every sender queue settled `part`: its sends all completed.
pub(crate) fn settled(shared: &[Arc<SenderShared>], part: usize) -> bool {
    shared.iter().all(|s| {
        s.parts
            .get(part)
            .is_none_or(|m| m.settled.load(Ordering::Acquire))
    })
}

/// Announces and closes the parts' sessions at a sink.
pub(crate) trait PartSink: Send {
    /// Says hello for `part`'s epoch, before its first packet.
    fn open(&mut self, part: usize);
    /// Says goodbye for `part`'s epoch with its flows' true ends; the sink's verdict.
    fn close(&mut self, part: usize, flows: &[FlowReport]) -> SinkVerdict;
}

/// The parts of a run as the sender's books see them.
#[derive(Clone)]
pub(crate) struct PartBooks {
    /// Shared counters per sender queue.
    pub(crate) shared: Vec<Arc<SenderShared>>,
    /// Flow ids per queue.
    pub(crate) flows: Vec<Vec<u32>>,
    /// First sequence number of every flow in every part.
    pub(crate) first_seq: u64,
    /// The epoch of each part.
    pub(crate) epochs: Arc<[u32]>,
    /// The sink's results of the parts judged so far, for the exporter.
    pub(crate) tally: Arc<StepTally>,
    /// How fast the run's flows can number their datagrams.
    pub(crate) pace: RunPace,
}

impl PartBooks {
    /// Where every flow stands in `part`.
    pub(crate) fn reports(&self, part: usize) -> Vec<FlowReport> {
        part_reports(&self.shared, &self.flows, self.first_seq, part)
    }

    /// The flows as each part's hello reads them.
    fn flows_in_parts(&self) -> UdpFlows {
        UdpFlows {
            shared: self.shared.clone(),
            flows: self.flows.clone(),
            first_seq: self.first_seq,
            in_parts: true,
        }
    }
}

/// The running thread that closes the parts.
pub(crate) struct PartLink {
    senders_done: Arc<AtomicBool>,
    thread: JoinHandle<Vec<SinkVerdict>>,
}

/// Opens the first two parts now (before the workers are released) and closes each part on a
/// thread as soon as it settles, opening the one after the next.
pub(crate) fn start(mut sink: Box<dyn PartSink>, books: PartBooks) -> PartLink {
    let parts = books.epochs.len();
    for part in 0..parts.min(2) {
        sink.open(part);
    }
    let senders_done = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&senders_done);
    let thread = std::thread::Builder::new()
        .name("parts".into())
        .spawn(move || {
            let mut verdicts = Vec::with_capacity(parts);
            for part in 0..parts {
                while !settled(&books.shared, part) {
                    // Every worker settles every part when it ends: one that ended without
                    // (a failed thread) leaves the rest unknown.
                    if done.load(Ordering::Acquire) && !settled(&books.shared, part) {
                        for _ in part..parts {
                            verdicts.push(Err(
                                "a sender worker ended without settling this step".to_string()
                            ));
                        }
                        return verdicts;
                    }
                    std::thread::sleep(POLL);
                }
                let flows = books.reports(part);
                let verdict = sink.close(part, &flows);
                let sent = flows
                    .iter()
                    .map(|f| (f.next_seq - f.first_seq).saturating_sub(f.failed))
                    .sum();
                books.tally.add(sent, verdict.as_ref().ok().map(|(_, v)| v));
                verdicts.push(verdict);
                if part + 2 < parts {
                    sink.open(part + 2);
                }
            }
            verdicts
        })
        .expect("spawning the parts thread");
    PartLink {
        senders_done,
        thread,
    }
}

impl PartLink {
    /// After every sender worker has ended: waits for the last goodbyes, one verdict per part.
    pub(crate) fn finish(self) -> Vec<SinkVerdict> {
        self.senders_done.store(true, Ordering::Release);
        self.thread
            .join()
            .unwrap_or_else(|_| vec![Err("the parts thread failed".to_string())])
    }
}

/// The run's verdict: the sum of its parts' (`Verdict::sum_of_parts`); the first part
/// without one makes it unknown.
pub(crate) fn run_verdict(parts: &[SinkVerdict]) -> SinkVerdict {
    let mut session = String::new();
    let mut verdicts = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let (name, v) = part
            .as_ref()
            .map_err(|why| format!("no verdict for step {}: {why}", i + 1))?;
        if !name.is_empty() {
            session.clone_from(name);
        }
        verdicts.push(v);
    }
    Ok((session, Verdict::sum_of_parts(&verdicts)))
}

/// `pair`: the in-process sink's registry.
pub(crate) struct InProcess {
    /// The sink's books.
    pub(crate) registry: Arc<Registry>,
    /// The sender's books.
    pub(crate) books: PartBooks,
}

impl PartSink for InProcess {
    fn open(&mut self, part: usize) {
        let hello =
            registry::Hello {
                name: "pair".into(),
                epoch: self.books.epochs[part],
                flows: self.books.reports(part),
                elapsed_ns: 0,
                step: part as u32,
                clock: verdict::in_process_clock(),
                proof: None,
                // One process, one clock: the run's start is known exactly.
                reach: self.books.pace.flow_pps.and_then(|r| {
                    RunReach::new(self.books.first_seq, r, self.books.pace.started_ns)
                }),
            };
        let (_, line) = self.registry.hello(None, &hello);
        if part == 0 {
            say!("{line}");
        }
    }

    fn close(&mut self, part: usize, flows: &[FlowReport]) -> SinkVerdict {
        let v = self
            .registry
            .goodbye(self.books.epochs[part], flows, GOODBYE_WAIT);
        Ok(("this process".to_string(), udp_verdict::verdict_of(&v)))
    }
}

/// A sink elsewhere: one control connection per part.
pub(crate) struct Remote {
    /// The sink's control address and secret.
    pub(crate) config: ClientConfig,
    /// The sender's name.
    pub(crate) name: String,
    /// The sender's books.
    pub(crate) books: PartBooks,
    /// The schedule, for each part's rate and start.
    pub(crate) schedule: Arc<RateSchedule>,
    /// UDP payload bytes of the largest datagram.
    pub(crate) size: u32,
    /// Monotonic ns at (about) the first send.
    pub(crate) started_ns: u64,
    /// What the control connections found out (the sink refused us; the control round trip).
    pub(crate) state: Arc<link_state::LinkState>,
    /// The open connections, per part.
    pub(crate) clients: Vec<Option<ControlClient>>,
}

impl PartSink for Remote {
    fn open(&mut self, part: usize) {
        let (start, end) = self.schedule.parts()[part];
        let view = Arc::new(SenderEnd::new(
            Announce {
                name: self.name.clone(),
                size: self.size,
                epochs: Arc::clone(&self.books.epochs),
                part,
                rate: Some(self.schedule.mean_rate(start, end)),
                flow_pps: self.books.pace.flow_pps,
                started_ns: self.started_ns + start,
                paced_since_ns: self.books.pace.started_ns,
            },
            self.books.flows_in_parts(),
        ));
        let state = Arc::clone(&self.state);
        let on_event = Box::new(move |e: ClientEvent| {
            // One connection line per run, not per step; every trouble is said.
            if part == 0 || !matches!(e, ClientEvent::Connected { .. }) {
                link_state::event(e, &state);
            }
        });
        let client = ControlClient::start(self.config.clone(), view, on_event);
        if self.clients.len() <= part {
            self.clients.resize_with(part + 1, || None);
        }
        self.clients[part] = Some(client);
    }

    fn close(&mut self, part: usize, flows: &[FlowReport]) -> SinkVerdict {
        let Some(client) = self.clients.get_mut(part).and_then(Option::take) else {
            // A run stopped early never reaches its last steps: nothing was sent in them.
            if flows.iter().all(|f| f.next_seq == f.first_seq) {
                return Ok((String::new(), Verdict::default()));
            }
            return Err("this step's control connection was never opened".to_string());
        };
        link_ends::finish(client, flows.iter().map(udp_verdict::progress_of).collect())
    }
}

/// `ringblast search`: every part (trial) on one control connection, each its own epoch: a
/// Hello before the trial's first packet and a Goodbye once its sends settled.
pub(crate) struct OneConnection {
    config: ClientConfig,
    view: Arc<SenderEnd<UdpFlows>>,
    /// The sender's queues, over which a trial's rate is split evenly.
    queues: usize,
    state: Arc<link_state::LinkState>,
    client: Option<ControlClient>,
    /// Why the open part's Hello found no sink, if it did not.
    unopened: Option<String>,
}

impl OneConnection {
    /// The parts of `books` sent by `name` to the sink at `config`'s address.
    pub(crate) fn new(
        config: ClientConfig,
        name: String,
        books: PartBooks,
        size: u32,
        state: Arc<link_state::LinkState>,
    ) -> OneConnection {
        let announce = Announce {
            name,
            size,
            epochs: Arc::clone(&books.epochs),
            part: 0,
            rate: None,
            flow_pps: None,
            started_ns: clock::monotonic_ns(),
            paced_since_ns: books.pace.started_ns,
        };
        let queues = books.shared.len().max(1);
        let view = Arc::new(SenderEnd::new(announce, books.flows_in_parts()));
        OneConnection {
            queues,
            config,
            view,
            state,
            client: None,
            unopened: None,
        }
    }
}

impl OneConnection {
    /// The rate the next part's Hello announces (`None`: unpaced), split evenly over the
    /// queues as the trial's workers pace it.
    pub(crate) fn announce_rate(&self, rate_pps: Option<f64>) {
        let flow_pps = rate_pps.map(|r| r / self.queues as f64);
        self.view.announce_rate(rate_pps, flow_pps);
    }
}

impl PartSink for OneConnection {
    fn open(&mut self, part: usize) {
        self.view.enter(part);
        let wait = self.config.connect_timeout;
        self.unopened = match &self.client {
            Some(client) => client.begin_epoch(wait).err().map(|e| e.to_string()),
            None => {
                let state = Arc::clone(&self.state);
                state.expect_answer();
                let on_event = Box::new(move |e: ClientEvent| link_state::event(e, &state));
                let view: Arc<dyn SenderView> = Arc::clone(&self.view) as _;
                self.client = Some(ControlClient::start(self.config.clone(), view, on_event));
                if !self.state.wait_first_answer(wait) {
                    Some("no answer from the sink's control channel".to_string())
                } else if self.state.refused() {
                    Some("the sink refused this sender".to_string())
                } else {
                    None
                }
            }
        };
    }

    fn close(&mut self, _part: usize, flows: &[FlowReport]) -> SinkVerdict {
        if let Some(why) = self.unopened.take() {
            return Err(why);
        }
        let Some(client) = &self.client else {
            return Err("no control connection".to_string());
        };
        link_ends::end_epoch(client, flows.iter().map(udp_verdict::progress_of).collect())
    }
}

/// Where a UDP sender run's flows stand, as its control thread reads them: over the whole run,
/// or in one part of its rate schedule (or search).
#[derive(Clone)]
pub(crate) struct UdpFlows {
    /// Shared counters per sender queue.
    pub(crate) shared: Vec<Arc<SenderShared>>,
    /// Flow ids per queue.
    pub(crate) flows: Vec<Vec<u32>>,
    /// First sequence number of every flow.
    pub(crate) first_seq: u64,
    /// The run goes in parts, each its own epoch, and the hello reads the part it is in.
    pub(crate) in_parts: bool,
}

impl SenderLedger for UdpFlows {
    const PROTO: DataProto = DataProto::Udp;

    fn flows(&self, part: usize) -> Vec<FlowStart> {
        let reports = if self.in_parts {
            part_reports(&self.shared, &self.flows, self.first_seq, part)
        } else {
            flow_reports(&self.shared, &self.flows, self.first_seq)
        };
        reports
            .iter()
            .map(|f| FlowStart {
                flow: f.flow,
                first_seq: f.first_seq,
                next_seq: f.next_seq,
                failed: f.failed,
            })
            .collect()
    }
}
