//! Decides which CPU (and so which NUMA node) each queue runs on. The operator always wins:
//! `--cpus` over `--node` over the NIC's node over spreading, and every conflict becomes a
//! warning instead of a silent override.

use std::fmt;

mod assign;

use self::assign::{on_explicit_cpus, spread_over};
use super::sysfs::{NicLocality, format_cpu_list};
use super::{Node, Topology, list_or_none};

/// What the caller asks for; built from the CLI (and, for `pair`, the sender's plan).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlacementRequest<'a> {
    /// Number of queues (workers) to place; must be at least 1.
    pub(crate) queues: usize,
    /// Explicit `--cpus`: queue i runs on `cpus[i % len]`.
    pub(crate) cpus: Option<&'a [u32]>,
    /// Explicit `--node`.
    pub(crate) node: Option<u32>,
    /// The egress/ingress interface and its locality, when known.
    pub(crate) nic: Option<(&'a str, NicLocality)>,
    /// CPUs to stay off while others are left (e.g. the sender's CPUs when placing `pair`'s sink).
    pub(crate) avoid_cpus: &'a [u32],
    /// Take each node's CPUs from the top of its list (a sink) instead of the bottom (a
    /// sender), so a sink and a sender started as separate processes stay apart.
    pub(crate) from_top: bool,
}

/// Why the spread rule was used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SpreadCause {
    /// No NIC was given (e.g. `topo` without `--to`).
    NoNic,
    /// The NIC has no known node; `why` is the [`NicLocality::Unknown`] reason.
    NicUnknown { nic: String, why: &'static str },
    /// The NIC reports a node the process has no usable CPU on.
    NicNodeUnusable { nic: String, node: u32 },
}

/// Which rule chose the placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reason {
    ExplicitCpus,
    ExplicitNode { node: u32 },
    NicNode { nic: String, node: u32 },
    Spread(SpreadCause),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::ExplicitCpus => write!(f, "explicit --cpus"),
            Reason::ExplicitNode { node } => write!(f, "explicit --node {node}"),
            Reason::NicNode { nic, node } => {
                write!(f, "NIC {nic} is on node {node}; placing queues there")
            }
            Reason::Spread(SpreadCause::NoNic) => write!(
                f,
                "no --cpus, --node or NIC locality; spreading across nodes"
            ),
            Reason::Spread(SpreadCause::NicUnknown { nic, why }) => {
                write!(
                    f,
                    "NIC {nic} has no NUMA locality ({why}); spreading across nodes"
                )
            }
            Reason::Spread(SpreadCause::NicNodeUnusable { nic, node }) => write!(
                f,
                "NIC {nic} is on node {node}, where this process has no usable CPU; spreading across nodes"
            ),
        }
    }
}

/// Where one queue runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuePlacement {
    pub(crate) queue: usize,
    pub(crate) cpu: u32,
    pub(crate) node: u32,
}

/// The decided placement, the rule that produced it, and anything the operator should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) queues: Vec<QueuePlacement>,
    pub(crate) reason: Reason,
    pub(crate) warnings: Vec<String>,
}

impl Plan {
    /// Distinct CPUs used by this plan, ascending (feed to another request's `avoid_cpus`).
    pub(crate) fn cpus(&self) -> Vec<u32> {
        let mut cpus: Vec<u32> = self.queues.iter().map(|queue| queue.cpu).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }
}

/// A request that cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PlacementError {
    #[error("--queues must be at least 1")]
    NoQueues,
    #[error("--cpus is empty; give CPUs like 0-3")]
    EmptyCpuList,
    #[error(
        "CPU {cpu} from --cpus is not usable by this process (usable: {usable}); pick CPUs from that list"
    )]
    CpuNotAllowed { cpu: u32, usable: String },
    #[error(
        "NUMA node {node} does not exist (online nodes: {existing}); pick --node from that list"
    )]
    NodeNotFound { node: u32, existing: String },
    #[error(
        "NUMA node {node} has no CPU this process may use (its online CPUs: {online}); pick another --node or widen the CPU affinity"
    )]
    NodeWithoutUsableCpus { node: u32, online: String },
    #[error("this process may not run on any online CPU; check its CPU affinity (taskset, cpuset)")]
    NoUsableCpus,
}

/// Places `req.queues` queues on `topo`; see the module docs for the rule order.
pub(crate) fn plan(topo: &Topology, req: &PlacementRequest) -> Result<Plan, PlacementError> {
    if req.queues == 0 {
        return Err(PlacementError::NoQueues);
    }
    let mut warnings = Vec::new();
    let nic_node = match req.nic {
        Some((nic, NicLocality::Node(node))) => Some((nic, node)),
        _ => None,
    };
    let (queues, reason) = if let Some(cpus) = req.cpus {
        (
            on_explicit_cpus(topo, req, cpus, nic_node, &mut warnings)?,
            Reason::ExplicitCpus,
        )
    } else if let Some(node) = req.node {
        let chosen = usable_node(topo, node)?;
        if let Some((nic, nic_node)) = nic_node
            && nic_node != node
        {
            warnings.push(format!(
                "explicit --node {node} differs from NIC {nic}'s node {nic_node}; keeping --node"
            ));
        }
        (
            spread_over(&[chosen], req, &mut warnings),
            Reason::ExplicitNode { node },
        )
    } else if let Some((nic, node)) = nic_node
        && let Some(chosen) = topo
            .node(node)
            .filter(|candidate| candidate.has_allowed_cpus())
    {
        (
            spread_over(&[chosen], req, &mut warnings),
            Reason::NicNode {
                nic: nic.to_string(),
                node,
            },
        )
    } else {
        let cause = match req.nic {
            None => SpreadCause::NoNic,
            Some((nic, NicLocality::Unknown(why))) => SpreadCause::NicUnknown {
                nic: nic.to_string(),
                why,
            },
            Some((nic, NicLocality::Node(node))) => SpreadCause::NicNodeUnusable {
                nic: nic.to_string(),
                node,
            },
        };
        let nodes: Vec<&Node> = topo
            .nodes
            .iter()
            .filter(|node| node.has_allowed_cpus())
            .collect();
        if nodes.is_empty() {
            return Err(PlacementError::NoUsableCpus);
        }
        (
            spread_over(&nodes, req, &mut warnings),
            Reason::Spread(cause),
        )
    };
    let plan = Plan {
        queues,
        reason,
        warnings,
    };
    Ok(with_sharing_warning(plan, req))
}

fn usable_node(topo: &Topology, id: u32) -> Result<&Node, PlacementError> {
    let node = topo.node(id).ok_or_else(|| PlacementError::NodeNotFound {
        node: id,
        existing: list_or_none(&topo.node_ids()),
    })?;
    if !node.has_allowed_cpus() {
        return Err(PlacementError::NodeWithoutUsableCpus {
            node: id,
            online: list_or_none(&node.online_cpus),
        });
    }
    Ok(node)
}

fn with_sharing_warning(mut plan: Plan, req: &PlacementRequest) -> Plan {
    let cpus = plan.cpus();
    if cpus.len() < plan.queues.len() {
        let source = if req.cpus.is_some() {
            " from --cpus"
        } else {
            ""
        };
        plan.warnings.push(format!(
            "{} queues on {} CPUs{source} ({}): some queues share a CPU",
            plan.queues.len(),
            cpus.len(),
            format_cpu_list(&cpus)
        ));
    }
    plan
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers shared by the placement tests.
    use super::{PlacementRequest, Plan};
    use crate::topology::{Topology, fixture_root};

    pub(crate) const ALL: &[u32] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    pub(crate) fn topo(fixture: &str, allowed: &[u32]) -> Topology {
        Topology::read(&fixture_root(fixture), allowed).unwrap()
    }

    pub(crate) fn request(queues: usize) -> PlacementRequest<'static> {
        PlacementRequest {
            queues,
            cpus: None,
            node: None,
            nic: None,
            avoid_cpus: &[],
            from_top: false,
        }
    }

    pub(crate) fn cpus_of(plan: &Plan) -> Vec<u32> {
        plan.queues.iter().map(|queue| queue.cpu).collect()
    }

    pub(crate) fn nodes_of(plan: &Plan) -> Vec<u32> {
        plan.queues.iter().map(|queue| queue.node).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::topology::fixture_root;
    use crate::topology::parse_cpu_list;
    use crate::topology::sysfs::{VIRTUAL_INTERFACE, nic_numa_node};

    #[test]
    fn explicit_cpus_win_over_nic_node_with_warning() {
        let root = fixture_root("two-node");
        let topo = topo("two-node", ALL);
        let cpus = parse_cpu_list("4-7").unwrap();
        let nic = Some(("eth1", nic_numa_node(&root, "eth1")));
        let plan = plan(
            &topo,
            &PlacementRequest {
                cpus: Some(&cpus),
                nic,
                ..request(4)
            },
        )
        .unwrap();
        assert_eq!(plan.reason, Reason::ExplicitCpus);
        assert_eq!(cpus_of(&plan), vec![4, 5, 6, 7]);
        assert_eq!(nodes_of(&plan), vec![1, 1, 1, 1]);
        assert_eq!(
            plan.warnings,
            vec!["explicit --cpus 4-7 (node 1) differ from NIC eth1's node 0; keeping --cpus"]
        );
        assert_eq!(plan.reason.to_string(), "explicit --cpus");
    }

    #[test]
    fn explicit_node_wins_over_nic_with_warning() {
        let topo = topo("two-node", ALL);
        let nic = Some(("eth0", nic_numa_node(&fixture_root("two-node"), "eth0")));
        let plan = plan(
            &topo,
            &PlacementRequest {
                node: Some(0),
                nic,
                ..request(3)
            },
        )
        .unwrap();
        assert_eq!(plan.reason, Reason::ExplicitNode { node: 0 });
        assert_eq!(cpus_of(&plan), vec![0, 1, 2]);
        assert_eq!(nodes_of(&plan), vec![0, 0, 0]);
        assert_eq!(
            plan.warnings,
            vec!["explicit --node 0 differs from NIC eth0's node 1; keeping --node"]
        );
    }

    #[test]
    fn nic_node_is_used_when_nothing_explicit() {
        let topo = topo("two-node", ALL);
        let nic = Some(("eth0", nic_numa_node(&fixture_root("two-node"), "eth0")));
        let plan = plan(&topo, &PlacementRequest { nic, ..request(6) }).unwrap();
        assert_eq!(
            plan.reason,
            Reason::NicNode {
                nic: "eth0".into(),
                node: 1
            }
        );
        assert_eq!(cpus_of(&plan), vec![4, 5, 6, 7, 4, 5]);
        assert_eq!(nodes_of(&plan), vec![1; 6]);
        assert_eq!(
            plan.reason.to_string(),
            "NIC eth0 is on node 1; placing queues there"
        );
        assert_eq!(
            plan.warnings,
            vec!["6 queues on 4 CPUs (4-7): some queues share a CPU"]
        );
    }

    #[test]
    fn unknown_nic_spreads_across_two_nodes() {
        let topo = topo("two-node", ALL);
        let nic = Some(("lo", nic_numa_node(&fixture_root("two-node"), "lo")));
        let plan = plan(&topo, &PlacementRequest { nic, ..request(4) }).unwrap();
        assert_eq!(cpus_of(&plan), vec![0, 4, 1, 5]);
        assert_eq!(nodes_of(&plan), vec![0, 1, 0, 1]);
        assert_eq!(
            plan.reason,
            Reason::Spread(SpreadCause::NicUnknown {
                nic: "lo".into(),
                why: VIRTUAL_INTERFACE
            })
        );
        assert_eq!(
            plan.reason.to_string(),
            "NIC lo has no NUMA locality (virtual interface); spreading across nodes"
        );
        assert!(plan.warnings.is_empty());
    }

    #[test]
    fn nic_with_minus_one_spreads() {
        let root = fixture_root("nic-minus-one");
        let topo = Topology::read(&root, ALL).unwrap();
        let plan = plan(
            &topo,
            &PlacementRequest {
                nic: Some(("eth0", nic_numa_node(&root, "eth0"))),
                ..request(2)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&plan), vec![0, 1]);
        assert_eq!(
            plan.reason.to_string(),
            "NIC eth0 has no NUMA locality (no NUMA locality reported); spreading across nodes"
        );
    }

    #[test]
    fn nic_node_without_usable_cpus_falls_back_to_spread() {
        let topo = topo("two-node", &[0, 1]);
        let plan = plan(
            &topo,
            &PlacementRequest {
                nic: Some(("eth0", NicLocality::Node(1))),
                ..request(2)
            },
        )
        .unwrap();
        assert_eq!(
            plan.reason,
            Reason::Spread(SpreadCause::NicNodeUnusable {
                nic: "eth0".into(),
                node: 1
            })
        );
        assert_eq!(cpus_of(&plan), vec![0, 1]);
    }

    #[test]
    fn nonexistent_node_is_an_error_listing_nodes() {
        let topo = topo("two-node", ALL);
        let error = plan(
            &topo,
            &PlacementRequest {
                node: Some(2),
                ..request(1)
            },
        )
        .unwrap_err();
        assert_eq!(
            error,
            PlacementError::NodeNotFound {
                node: 2,
                existing: "0-1".into()
            }
        );
        assert!(error.to_string().contains("online nodes: 0-1"), "{error}");
    }

    #[test]
    fn node_without_usable_cpus_is_an_error() {
        let topo = topo("two-node", &[0]);
        let error = plan(
            &topo,
            &PlacementRequest {
                node: Some(1),
                ..request(1)
            },
        )
        .unwrap_err();
        assert_eq!(
            error,
            PlacementError::NodeWithoutUsableCpus {
                node: 1,
                online: "4-7".into()
            }
        );
    }

    #[test]
    fn zero_queues_and_empty_cpus_are_errors() {
        let topo = topo("one-node", ALL);
        assert_eq!(plan(&topo, &request(0)), Err(PlacementError::NoQueues));
        assert_eq!(
            plan(
                &topo,
                &PlacementRequest {
                    cpus: Some(&[]),
                    ..request(1)
                }
            ),
            Err(PlacementError::EmptyCpuList)
        );
    }

    #[test]
    fn no_usable_cpu_at_all_is_an_error() {
        let topo = topo("two-node", &[]);
        assert_eq!(plan(&topo, &request(1)), Err(PlacementError::NoUsableCpus));
        let no_nic = Reason::Spread(SpreadCause::NoNic).to_string();
        assert_eq!(
            no_nic,
            "no --cpus, --node or NIC locality; spreading across nodes"
        );
    }
}
