//! Turns a topology and a placement plan into the plain, stable text `ringblast topo` prints.

use std::fmt::Write as _;

use super::placement::Plan;
use super::sysfs::NicLocality;
use super::{Topology, list_or_none};

/// The online nodes, each with its online and allowed CPUs, then the NIC's locality when one
/// is given:
/// ```text
/// 1 node online: 0
///   node 0: cpus 0-1 (allowed 0-1)
/// nic: lo (NUMA node unknown: virtual interface)
/// ```
pub(crate) fn render_topology(topo: &Topology, nic: Option<(&str, &NicLocality)>) -> String {
    let count = topo.nodes.len();
    let mut text = format!(
        "{count} node{} online: {}\n",
        if count == 1 { "" } else { "s" },
        list_or_none(&topo.node_ids())
    );
    for node in &topo.nodes {
        let _ = writeln!(
            text,
            "  node {}: cpus {} (allowed {})",
            node.id,
            list_or_none(&node.online_cpus),
            list_or_none(&node.cpus)
        );
    }
    match nic {
        Some((name, NicLocality::Node(node))) => {
            let _ = writeln!(text, "nic: {name} (node {node})");
        }
        Some((name, NicLocality::Unknown(why))) => {
            let _ = writeln!(text, "nic: {name} (NUMA node unknown: {why})");
        }
        None => {}
    }
    text
}

/// The plan for one role (`send`, `sink`), one line per queue, then each warning once, on a
/// line of its own that starts with `warning:`:
/// ```text
/// placement (send): explicit --cpus
///   q0 -> cpu 4 node 1
/// warning: explicit --cpus 4 (node 1) differ from NIC eth1's node 0; keeping --cpus
/// ```
pub(crate) fn render_plan(role: &str, plan: &Plan) -> String {
    let mut text = format!("placement ({role}): {}\n", plan.reason);
    for queue in &plan.queues {
        let _ = writeln!(
            text,
            "  q{} -> cpu {} node {}",
            queue.queue, queue.cpu, queue.node
        );
    }
    for (i, warning) in plan.warnings.iter().enumerate() {
        if plan.warnings[..i].contains(warning) {
            continue;
        }
        let _ = writeln!(text, "warning: {warning}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::fixture_root;
    use crate::topology::placement::{PlacementRequest, plan};
    use crate::topology::sysfs::nic_numa_node;

    #[test]
    fn one_node_with_loopback() {
        let root = fixture_root("one-node");
        let topo = Topology::read(&root, &[0, 1]).unwrap();
        let nic = nic_numa_node(&root, "lo");
        let req = PlacementRequest {
            queues: 2,
            cpus: None,
            node: None,
            nic: Some(("lo", nic)),
            avoid_cpus: &[],
            from_top: false,
        };
        let text = render_topology(&topo, Some(("lo", &nic)))
            + &render_plan("send", &plan(&topo, &req).unwrap());
        assert_eq!(
            text,
            "1 node online: 0\n\
             \x20 node 0: cpus 0-1 (allowed 0-1)\n\
             nic: lo (NUMA node unknown: virtual interface)\n\
             placement (send): NIC lo has no NUMA locality (virtual interface); spreading across nodes\n\
             \x20 q0 -> cpu 0 node 0\n\
             \x20 q1 -> cpu 1 node 0\n"
        );
    }

    #[test]
    fn two_nodes_restricted_with_warning() {
        let root = fixture_root("two-node");
        let topo = Topology::read(&root, &[4, 5]).unwrap();
        let nic = nic_numa_node(&root, "eth1");
        let req = PlacementRequest {
            queues: 1,
            cpus: Some(&[4]),
            node: None,
            nic: Some(("eth1", nic)),
            avoid_cpus: &[],
            from_top: false,
        };
        let text = render_topology(&topo, Some(("eth1", &nic)))
            + &render_plan("sink", &plan(&topo, &req).unwrap());
        assert_eq!(
            text,
            "2 nodes online: 0-1\n\
             \x20 node 0: cpus 0-3 (allowed none)\n\
             \x20 node 1: cpus 4-7 (allowed 4-5)\n\
             nic: eth1 (node 0)\n\
             placement (sink): explicit --cpus\n\
             \x20 q0 -> cpu 4 node 1\n\
             warning: explicit --cpus 4 (node 1) differ from NIC eth1's node 0; keeping --cpus\n"
        );
    }

    #[test]
    fn no_nic_line_without_nic() {
        let topo = Topology::read(&fixture_root("offline-cpus"), &[0, 1, 2, 3, 4]).unwrap();
        assert_eq!(
            render_topology(&topo, None),
            "2 nodes online: 0-1\n  node 0: cpus 0-2 (allowed 0-2)\n  node 1: cpus 4-7 (allowed 4)\n"
        );
    }
}
