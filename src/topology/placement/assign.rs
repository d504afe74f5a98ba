//! Turns the placement rule that was chosen into one CPU per queue: an explicit CPU list, or
//! round-robin over nodes' usable CPUs that stays off CPUs to avoid while others remain.

use super::{PlacementError, PlacementRequest, QueuePlacement};
use crate::topology::sysfs::format_cpu_list;
use crate::topology::{Node, Topology, list_or_none};

/// Queue i runs on `cpus[i % len]`; every CPU must be usable. Warns (never overrides) when the
/// CPUs lie off `--node` or off the NIC's node.
pub(super) fn on_explicit_cpus(
    topo: &Topology,
    req: &PlacementRequest,
    cpus: &[u32],
    nic_node: Option<(&str, u32)>,
    warnings: &mut Vec<String>,
) -> Result<Vec<QueuePlacement>, PlacementError> {
    if cpus.is_empty() {
        return Err(PlacementError::EmptyCpuList);
    }
    let mut cpu_nodes = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let node = topo
            .nodes
            .iter()
            .find(|node| node.cpus.contains(&cpu))
            .ok_or_else(|| PlacementError::CpuNotAllowed {
                cpu,
                usable: list_or_none(&topo.usable_cpus()),
            })?;
        cpu_nodes.push(node.id);
    }
    let cpu_list = format_cpu_list(cpus);
    if let Some(wanted) = req.node {
        let off_node: Vec<u32> = cpus
            .iter()
            .zip(&cpu_nodes)
            .filter(|&(_, &node)| node != wanted)
            .map(|(&cpu, _)| cpu)
            .collect();
        if !off_node.is_empty() {
            warnings.push(format!(
                "explicit --cpus {cpu_list} include CPUs {} not on --node {wanted}; keeping --cpus",
                format_cpu_list(&off_node)
            ));
        }
    }
    if let Some((nic, nic_node)) = nic_node
        && cpu_nodes.iter().any(|&node| node != nic_node)
    {
        warnings.push(format!(
            "explicit --cpus {cpu_list} ({}) differ from NIC {nic}'s node {nic_node}; keeping --cpus",
            describe_nodes(&cpu_nodes)
        ));
    }
    Ok((0..req.queues)
        .map(|queue| QueuePlacement {
            queue,
            cpu: cpus[queue % cpus.len()],
            node: cpu_nodes[queue % cpus.len()],
        })
        .collect())
}

/// Queue i goes to the (i % n)-th node, nodes with CPUs outside `avoid_cpus` first; within a
/// node, CPUs round-robin over those not in `avoid_cpus`, or over all of the node's usable CPUs
/// when every one is to be avoided (with a warning); from the top of the list with `from_top`.
pub(super) fn spread_over(
    nodes: &[&Node],
    req: &PlacementRequest,
    warnings: &mut Vec<String>,
) -> Vec<QueuePlacement> {
    let mut pools: Vec<(u32, Vec<u32>, bool)> = nodes
        .iter()
        .map(|node| {
            let mut all = node.cpus.clone();
            if req.from_top {
                all.reverse();
            }
            let free: Vec<u32> = all
                .iter()
                .copied()
                .filter(|cpu| !req.avoid_cpus.contains(cpu))
                .collect();
            if free.is_empty() {
                (node.id, all, true)
            } else {
                (node.id, free, false)
            }
        })
        .collect();
    pools.sort_by_key(|&(_, _, all_avoided)| all_avoided);
    pools.truncate(req.queues);
    for (node, cpus, _) in pools.iter().filter(|(_, _, all_avoided)| *all_avoided) {
        warnings.push(format!(
            "every usable CPU of node {node} ({}) is already taken by the other role; sharing them",
            format_cpu_list(cpus)
        ));
    }
    (0..req.queues)
        .map(|queue| {
            let (node, cpus, _) = &pools[queue % pools.len()];
            QueuePlacement {
                queue,
                cpu: cpus[(queue / pools.len()) % cpus.len()],
                node: *node,
            }
        })
        .collect()
}

fn describe_nodes(nodes: &[u32]) -> String {
    let mut distinct = nodes.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let label = if distinct.len() == 1 { "node" } else { "nodes" };
    format!("{label} {}", format_cpu_list(&distinct))
}

#[cfg(test)]
mod tests {
    use crate::topology::NicLocality;
    use crate::topology::placement::test_support::*;
    use crate::topology::placement::{PlacementError, PlacementRequest, Reason, plan};

    #[test]
    fn explicit_cpus_on_nic_node_give_no_warning() {
        let topo = topo("two-node", ALL);
        let req = PlacementRequest {
            cpus: Some(&[5, 6]),
            nic: Some(("eth0", NicLocality::Node(1))),
            ..request(2)
        };
        let plan = plan(&topo, &req).unwrap();
        assert_eq!(cpus_of(&plan), vec![5, 6]);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    }

    #[test]
    fn more_queues_than_cpus_wraps_and_warns() {
        let topo = topo("two-node", ALL);
        let plan = plan(
            &topo,
            &PlacementRequest {
                cpus: Some(&[3, 4]),
                ..request(5)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&plan), vec![3, 4, 3, 4, 3]);
        assert_eq!(nodes_of(&plan), vec![0, 1, 0, 1, 0]);
        assert_eq!(
            plan.warnings,
            vec!["5 queues on 2 CPUs from --cpus (3-4): some queues share a CPU"]
        );
    }

    #[test]
    fn cpus_win_over_node_with_warning() {
        let topo = topo("two-node", ALL);
        let plan = plan(
            &topo,
            &PlacementRequest {
                cpus: Some(&[2, 3, 4]),
                node: Some(0),
                ..request(3)
            },
        )
        .unwrap();
        assert_eq!(plan.reason, Reason::ExplicitCpus);
        assert_eq!(cpus_of(&plan), vec![2, 3, 4]);
        assert_eq!(
            plan.warnings,
            vec!["explicit --cpus 2-4 include CPUs 4 not on --node 0; keeping --cpus"]
        );
    }

    #[test]
    fn offline_cpus_are_never_chosen() {
        let topo = topo("offline-cpus", ALL);
        for req in [
            request(16),
            PlacementRequest {
                node: Some(0),
                ..request(8)
            },
        ] {
            let plan = plan(&topo, &req).unwrap();
            assert!(!cpus_of(&plan).contains(&3), "{plan:?}");
        }
        let node0 = plan(
            &topo,
            &PlacementRequest {
                node: Some(0),
                ..request(4)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&node0), vec![0, 1, 2, 0]);
        let error = plan(
            &topo,
            &PlacementRequest {
                cpus: Some(&[3]),
                ..request(1)
            },
        )
        .unwrap_err();
        assert_eq!(
            error,
            PlacementError::CpuNotAllowed {
                cpu: 3,
                usable: "0-2,4-7".into()
            }
        );
    }

    #[test]
    fn restricted_affinity_is_honoured() {
        let topo = topo("two-node", &[0, 5]);
        let spread = plan(&topo, &request(4)).unwrap();
        assert_eq!(cpus_of(&spread), vec![0, 5, 0, 5]);
        let nic = plan(
            &topo,
            &PlacementRequest {
                nic: Some(("eth0", NicLocality::Node(1))),
                ..request(2)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&nic), vec![5, 5]);
        let node = plan(
            &topo,
            &PlacementRequest {
                node: Some(0),
                ..request(1)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&node), vec![0]);
        let error = plan(
            &topo,
            &PlacementRequest {
                cpus: Some(&[1]),
                ..request(1)
            },
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "CPU 1 from --cpus is not usable by this process (usable: 0,5); pick CPUs from that list"
        );
    }

    #[test]
    fn disallowed_cpu_is_an_error_naming_it() {
        let topo = topo("two-node", ALL);
        let error = plan(
            &topo,
            &PlacementRequest {
                cpus: Some(&[1, 9]),
                ..request(2)
            },
        )
        .unwrap_err();
        assert_eq!(
            error,
            PlacementError::CpuNotAllowed {
                cpu: 9,
                usable: "0-7".into()
            }
        );
    }

    #[test]
    fn pair_sink_avoids_sender_cpus() {
        let topo = topo("one-node", ALL);
        let sender = plan(&topo, &request(1)).unwrap();
        assert_eq!(cpus_of(&sender), vec![0]);
        let sink = plan(
            &topo,
            &PlacementRequest {
                avoid_cpus: &sender.cpus(),
                ..request(1)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&sink), vec![1]);
        assert!(sink.warnings.is_empty());
    }

    #[test]
    fn avoided_cpus_are_skipped_while_others_remain() {
        let topo = topo("two-node", ALL);
        let plan = plan(
            &topo,
            &PlacementRequest {
                node: Some(0),
                avoid_cpus: &[0, 1],
                ..request(3)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&plan), vec![2, 3, 2]);
    }

    #[test]
    fn spread_prefers_nodes_with_free_cpus() {
        let topo = topo("two-node", &[0, 5]);
        let plan = plan(
            &topo,
            &PlacementRequest {
                avoid_cpus: &[0],
                ..request(1)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&plan), vec![5]);
        assert!(plan.warnings.is_empty());
    }

    #[test]
    fn a_sink_counts_from_the_top_and_a_sender_from_the_bottom() {
        let topo = topo("two-node", ALL);
        let sender = plan(&topo, &request(2)).unwrap();
        let sink = plan(
            &topo,
            &PlacementRequest {
                from_top: true,
                ..request(2)
            },
        )
        .unwrap();
        let (tx, rx) = (cpus_of(&sender), cpus_of(&sink));
        assert!(tx.iter().all(|c| !rx.contains(c)), "{tx:?} vs {rx:?}");
        let nodes = |p: &crate::topology::placement::Plan| -> Vec<u32> {
            p.queues.iter().map(|q| q.node).collect()
        };
        assert_eq!(
            nodes(&sender),
            nodes(&sink),
            "the same nodes, other ends of their lists"
        );
    }

    #[test]
    fn all_cpus_avoided_shares_them_with_warning() {
        let topo = topo("one-node", ALL);
        let plan = plan(
            &topo,
            &PlacementRequest {
                avoid_cpus: &[0, 1],
                ..request(2)
            },
        )
        .unwrap();
        assert_eq!(cpus_of(&plan), vec![0, 1]);
        assert_eq!(
            plan.warnings,
            vec![
                "every usable CPU of node 0 (0-1) is already taken by the other role; sharing them"
            ]
        );
    }
}
