//! Carries out a [`Plan`] that `cli`'s resolve step made: starts the worker groups of a `send`,
//! `sink` or `pair` through the one run pipeline (`pipeline`) with the protocol as its
//! `Transport` (UDP's here, TCP's in `tcp`), runs a search's trials (`search`, `trials`), or
//! prints `topo`'s placement. Every option was checked before a plan exists; nothing here reads
//! the command line.

pub(crate) mod control_link;
pub(crate) mod exporting;
pub(crate) mod fds;
pub(crate) mod judge;
pub(crate) mod link;
pub(crate) mod link_ends;
pub(crate) mod link_state;
pub(crate) mod part_link;
pub(crate) mod pipeline;
pub(crate) mod placement;
pub(crate) mod plan;
pub(crate) mod roles;
pub(crate) mod search;
pub(crate) mod session;
pub(crate) mod steps;
pub(crate) mod tcp;
pub(crate) mod tcp_control;
pub(crate) mod tcp_groups;
pub(crate) mod tcp_report;
pub(crate) mod tcp_trials;
pub(crate) mod ticker;
pub(crate) mod trials;
pub(crate) mod udp_report;
pub(crate) mod udp_verdict;
pub(crate) mod verdict;

use crate::say;
use std::sync::Arc;

use self::{
    placement::{PlacementArgs, discover, plan_queues},
    plan::{Plan, TopoPlan, UdpPlan, UdpSinkSide},
    roles::{start_senders, start_sinks},
    session::Session,
    udp_report::UdpReport,
};
use crate::{
    error::Error, metrics::Shape, report, sender::UdpSendJob, sink::SinkWorker, topology,
    worker::Control,
};

/// Carries out one command's plan to completion.
pub(crate) fn execute(plan: Plan) -> Result<(), Error> {
    match plan {
        Plan::Udp(plan, reporting) => pipeline::run(
            RunSpec {
                plan,
                arena_bytes: (0, 0),
            },
            reporting,
        ),
        Plan::Tcp(plan, reporting) => pipeline::run(tcp::TcpRunSpec::new(plan), reporting),
        Plan::Search(plan, sender) => search::execute(&plan, sender),
        Plan::Topo(plan) => topo(&plan),
    }
}

/// A UDP plan as the run pipeline starts it.
struct RunSpec {
    plan: UdpPlan,
    /// Each role's packet memory per worker, for the exporter (set as the groups start).
    arena_bytes: (u64, u64),
}

impl pipeline::Transport for RunSpec {
    type Senders = roles::SenderSet;
    type Sinks = roles::SinkSet;
    type Report = UdpReport;

    fn fd_needs(&self) -> fds::Needs {
        fds::Needs {
            sender_flows: self.plan.senders.as_ref().map_or(0, |s| u64::from(s.flows)),
            sender_queues: self
                .plan
                .senders
                .as_ref()
                .map_or(0, |s| s.queues.len() as u64),
            sink_queues: self
                .plan
                .sinks
                .as_ref()
                .map_or(0, |s| s.queues.len() as u64),
            // The control server accepts up to its connection cap, whatever --max-senders says.
            sink_senders: self.plan.sinks.as_ref().map_or(0, |_| {
                crate::control::server::ServerConfig::new(([127, 0, 0, 1], 0).into(), "")
                    .max_connections as u64
            }),
            exporter: false,
        }
    }

    fn exporter_shape(&self) -> Result<Shape, Error> {
        Ok(Shape {
            tx_flows_per_queue: self
                .plan
                .senders
                .as_ref()
                .map(|s| s.queue_flows().iter().map(Vec::len).collect())
                .unwrap_or_default(),
            rx_queues: self.plan.sinks.as_ref().map_or(0, |s| s.queues.len()),
            rx_exported_flows: self.plan.exported_flows,
            rx_senders: if self.plan.sinks.is_some() {
                self.plan.max_senders + 1
            } else {
                0
            },
            nodes: self
                .plan
                .senders
                .iter()
                .flat_map(|s| &s.queues)
                .chain(self.plan.sinks.iter().flat_map(|s| &s.queues))
                .map(|q| q.node)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            memory_nodes: topology::Topology::detect()
                .map_err(|e| Error::Unsupported(e.to_string()))?
                .nodes
                .len(),
        })
    }

    fn start_sinks(&mut self, control: &Arc<Control>) -> Result<Option<roles::SinkSet>, Error> {
        let Some(UdpSinkSide { queues, config }) = self.plan.sinks.take() else {
            return Ok(None);
        };
        self.arena_bytes.1 = SinkWorker::arena_bytes(&config);
        start_sinks(
            control,
            queues,
            config,
            self.plan.max_senders,
            self.plan.share_port,
        )
        .map(Some)
    }

    fn start_senders(&mut self, control: &Arc<Control>) -> Result<Option<roles::SenderSet>, Error> {
        let Some(send) = self.plan.senders.take() else {
            return Ok(None);
        };
        let flows = send.queue_flows();
        self.arena_bytes.0 = flows
            .first()
            .map_or(0, |f| UdpSendJob::arena_bytes(&send.run, f.len()));
        start_senders(control, send).map(Some)
    }

    fn abandon_sinks(&self, mut sinks: roles::SinkSet) {
        sinks.group.release();
        sinks.group.join();
    }

    fn memory_text(senders: Option<&roles::SenderSet>, sinks: Option<&roles::SinkSet>) -> String {
        let send = senders.map(|s| report::memory_text("send", &s.queues, s.group.memory()));
        let sink = sinks.map(|s| report::memory_text("sink", &s.queues, s.group.memory()));
        send.into_iter().chain(sink).collect()
    }

    fn link(
        self,
        run: pipeline::Started<roles::SenderSet, roles::SinkSet>,
    ) -> Result<pipeline::Linked<UdpReport>, Error> {
        let pipeline::Started {
            senders,
            sinks,
            send_control,
            sink_control,
            exporting,
        } = run;
        if let (Some(s), Some(k)) = (&senders, &sinks) {
            say!(
                "pair: {} sink queue(s), {} sender queue(s), sender epoch {:08x}",
                k.queues.len(),
                s.queues.len(),
                s.epoch
            );
        }
        let link = match control_link::start(self.plan.link, senders.as_ref(), sinks.as_ref()) {
            Ok(link) => link,
            Err(e) => {
                send_control.request_stop();
                sink_control.request_stop();
                if let Some(s) = senders.as_ref() {
                    s.group.release();
                }
                if let Some(s) = sinks.as_ref() {
                    s.group.release();
                }
                return Err(e);
            }
        };
        let server_stats = link.server.as_ref().map(|s| s.stats());
        let exporter = exporting.then(|| {
            roles::register_series(
                senders.as_ref(),
                sinks.as_ref(),
                self.plan.exported_flows,
                self.arena_bytes,
            )
        });
        let report = UdpReport {
            prefix_roles: senders.is_some() && sinks.is_some(),
            senders,
            sinks,
            json: self.plan.output.json,
            verdict: link.verdict,
            min_rate_ratio: self.plan.min_rate_ratio,
            wire_rate: self.plan.wire_rate,
            link: Arc::clone(&link.state),
            state: udp_report::UdpState::started(),
        };
        let session = Session::new(
            report,
            (send_control, sink_control),
            self.plan.output.interval,
        )
        .exporting(exporter, server_stats);
        Ok(pipeline::Linked {
            session,
            server: link.server,
            link: Some(link.state),
        })
    }
}

fn topo(plan: &TopoPlan) -> Result<(), Error> {
    let (topo, nic) = discover(plan.to)?;
    let place = PlacementArgs {
        queues: plan.queues,
        cpus: plan.cpus.as_deref(),
        node: plan.node,
        address: plan.to,
        avoid_cpus: &[],
        from_top: false,
    };
    let (_, text) = plan_queues("send", &place)?;
    print!(
        "{}{text}{}{}",
        topology::render_topology(&topo, nic.as_ref().map(|(n, l)| (n.as_str(), l))),
        crate::sink::tcp::RecvMode::choose()?.note(),
        crate::ring::probe::ring_setup_note().unwrap_or_default()
    );
    Ok(())
}
