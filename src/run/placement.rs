//! Resolves where a role's queues run: reads the topology, finds the NIC for the target or
//! listen address, applies the placement rules and prints the result (placement is never
//! applied silently).

use std::{net::SocketAddr, path::Path};

use crate::{
    error::Error,
    report::QueueView,
    topology::{self, NicLocality, Topology, placement},
};

/// Placement inputs from the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct PlacementArgs<'a> {
    /// Queues to place.
    pub(crate) queues: usize,
    /// `--cpus` text.
    pub(crate) cpus: Option<&'a str>,
    /// `--node`.
    pub(crate) node: Option<u32>,
    /// Address whose interface decides NIC locality.
    pub(crate) address: Option<SocketAddr>,
    /// CPUs to stay off while others are left.
    pub(crate) avoid_cpus: &'a [u32],
    /// A sink: take CPUs from the top of each node's list.
    pub(crate) from_top: bool,
}

/// The topology and the NIC the address goes through, for `topo` and for planning.
pub(crate) fn discover(
    address: Option<SocketAddr>,
) -> Result<(Topology, Option<(String, NicLocality)>), Error> {
    let topo = Topology::detect().map_err(|e| Error::Unsupported(e.to_string()))?;
    let nic = address
        .filter(|a| !a.ip().is_unspecified())
        .map(|a| topology::egress_interface(a).map_err(|e| Error::Usage(e.to_string())))
        .transpose()?
        .map(|ifname| {
            let locality = topology::nic_numa_node(Path::new(topology::sysfs::SYSFS_ROOT), &ifname);
            (ifname, locality)
        });
    Ok((topo, nic))
}

/// Plans `args.queues` queues for `role`; returns them with the plan and its warnings as text.
pub(crate) fn plan_queues(
    role: &str,
    args: &PlacementArgs<'_>,
) -> Result<(Vec<QueueView>, String), Error> {
    let (topo, nic) = discover(args.address)?;
    let cpus = args
        .cpus
        .map(|text| {
            topology::parse_cpu_list(text)
                .map_err(|e| Error::Usage(format!("invalid --cpus {text:?}: {e}")))
        })
        .transpose()?;
    let request = placement::PlacementRequest {
        queues: args.queues,
        cpus: cpus.as_deref(),
        node: args.node,
        nic: nic.as_ref().map(|(name, loc)| (name.as_str(), *loc)),
        avoid_cpus: args.avoid_cpus,
        from_top: args.from_top,
    };
    let plan = placement::plan(&topo, &request).map_err(|e| Error::Usage(e.to_string()))?;
    let text = topology::render_plan(role, &plan);
    let queues = plan
        .queues
        .iter()
        .map(|q| QueueView {
            queue: q.queue,
            node: q.node,
            cpu: q.cpu,
        })
        .collect();
    Ok((queues, text))
}
