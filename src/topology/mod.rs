//! Describes the machine's NUMA layout as this process sees it: which nodes are online, which
//! CPUs each holds, and which of those the process may run on (its affinity mask).

pub(crate) mod egress;
pub(crate) mod placement;
pub(crate) mod render;
pub(crate) mod sysfs;

use std::path::{Path, PathBuf};

use nix::sched::{CpuSet, sched_getaffinity};
use nix::unistd::Pid;

pub(crate) use egress::egress_interface;
pub(crate) use render::{render_plan, render_topology};
pub(crate) use sysfs::{NicLocality, SysfsError, format_cpu_list, nic_numa_node, parse_cpu_list};

/// Building the topology or finding the egress interface failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TopologyError {
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    #[error("sysfs under {} lists no online NUMA node; point it at the host's /sys", root.display())]
    NoOnlineNodes { root: PathBuf },
    #[error("cannot read this process's CPU affinity: {0}; check the cpuset or pass --cpus")]
    Affinity(nix::Error),
    #[error("{0} is an unspecified address; give a concrete address to find its egress interface")]
    UnspecifiedTarget(std::net::SocketAddr),
    #[error("cannot find a route to {target}: {source}; check the address and the routing table")]
    NoRoute {
        target: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot list network interfaces: {0}; check that /proc and netlink are available")]
    InterfaceList(nix::Error),
    #[error(
        "no interface holds {address}, the local address used to reach {target}; check `ip addr`"
    )]
    NoInterfaceForAddress {
        address: std::net::IpAddr,
        target: std::net::SocketAddr,
    },
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) id: u32,
    /// CPUs of this node that are online (sorted).
    pub(crate) online_cpus: Vec<u32>,
    /// The subset of `online_cpus` this process may run on (sorted). Empty means the node is
    /// kept for display only: no queue can be placed there.
    pub(crate) cpus: Vec<u32>,
}

impl Node {
    /// Whether at least one CPU of this node is usable by the process.
    pub(crate) fn has_allowed_cpus(&self) -> bool {
        !self.cpus.is_empty()
    }
}

/// Online NUMA nodes in ascending id order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    pub(crate) nodes: Vec<Node>,
}

impl Topology {
    /// Reads nodes and CPUs from sysfs at `root` and keeps, per node, the online CPUs that are
    /// also in `allowed` (the affinity mask). Without a node directory (kernel built without
    /// NUMA) the machine is one node 0 holding all online CPUs.
    pub(crate) fn read(root: &Path, allowed: &[u32]) -> Result<Topology, TopologyError> {
        let online = sysfs::online_cpus(root)?;
        let node_cpu_lists = match sysfs::online_nodes(root)? {
            None => vec![(0, online.clone())],
            Some(ids) => ids
                .into_iter()
                .map(|id| sysfs::node_cpus(root, id).map(|cpus| (id, cpus)))
                .collect::<Result<Vec<_>, _>>()?,
        };
        if node_cpu_lists.is_empty() {
            return Err(TopologyError::NoOnlineNodes {
                root: root.to_path_buf(),
            });
        }
        let nodes = node_cpu_lists
            .into_iter()
            .map(|(id, listed)| {
                let online_cpus: Vec<u32> = listed
                    .into_iter()
                    .filter(|cpu| online.contains(cpu))
                    .collect();
                let cpus = online_cpus
                    .iter()
                    .copied()
                    .filter(|cpu| allowed.contains(cpu))
                    .collect();
                Node {
                    id,
                    online_cpus,
                    cpus,
                }
            })
            .collect();
        Ok(Topology { nodes })
    }

    /// Reads the real `/sys` with this process's affinity mask.
    pub(crate) fn detect() -> Result<Topology, TopologyError> {
        Topology::read(Path::new(sysfs::SYSFS_ROOT), &allowed_cpus()?)
    }

    /// The node with this id, if online.
    pub(crate) fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|node| node.id == id)
    }

    #[cfg(test)]
    /// Whether `id` is an online node.
    pub(crate) fn is_node(&self, id: u32) -> bool {
        self.node(id).is_some()
    }

    #[cfg(test)]
    /// The node an online CPU belongs to (whether or not the process may use it).
    pub(crate) fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.nodes
            .iter()
            .find(|node| node.online_cpus.contains(&cpu))
            .map(|node| node.id)
    }

    /// Ids of all online nodes, ascending.
    pub(crate) fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|node| node.id).collect()
    }

    /// Every CPU the process may use, over all nodes, ascending.
    pub(crate) fn usable_cpus(&self) -> Vec<u32> {
        let mut cpus: Vec<u32> = self
            .nodes
            .iter()
            .flat_map(|node| node.cpus.iter().copied())
            .collect();
        cpus.sort_unstable();
        cpus
    }
}

/// CPUs this process may run on, from `sched_getaffinity` (taskset/cpuset restrictions).
pub(crate) fn allowed_cpus() -> Result<Vec<u32>, TopologyError> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(TopologyError::Affinity)?;
    Ok((0..CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .filter_map(|cpu| u32::try_from(cpu).ok())
        .collect())
}

/// A cpulist, or `none` when empty.
pub(crate) fn list_or_none(ids: &[u32]) -> String {
    if ids.is_empty() {
        "none".to_string()
    } else {
        format_cpu_list(ids)
    }
}

/// Root of the committed fake sysfs trees (tests/fixtures/sysfs/NAME).
#[cfg(test)]
pub(crate) fn fixture_root(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sysfs")).join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_cpus() -> Vec<u32> {
        (0..64).collect()
    }

    #[test]
    fn one_node_fixture() {
        let topo = Topology::read(&fixture_root("one-node"), &all_cpus()).unwrap();
        assert_eq!(
            topo.nodes,
            vec![Node {
                id: 0,
                online_cpus: vec![0, 1],
                cpus: vec![0, 1]
            }]
        );
    }

    #[test]
    fn two_node_fixture_maps_cpus_to_nodes() {
        let topo = Topology::read(&fixture_root("two-node"), &all_cpus()).unwrap();
        assert_eq!(topo.node_ids(), vec![0, 1]);
        assert_eq!(topo.node(0).unwrap().cpus, vec![0, 1, 2, 3]);
        assert_eq!(topo.node(1).unwrap().cpus, vec![4, 5, 6, 7]);
        assert_eq!(topo.node_of_cpu(5), Some(1));
        assert_eq!(topo.node_of_cpu(0), Some(0));
        assert_eq!(topo.node_of_cpu(8), None);
        assert!(topo.is_node(1));
        assert!(!topo.is_node(2));
    }

    #[test]
    fn offline_cpu_is_absent() {
        let topo = Topology::read(&fixture_root("offline-cpus"), &all_cpus()).unwrap();
        assert_eq!(topo.usable_cpus(), vec![0, 1, 2, 4, 5, 6, 7]);
        assert_eq!(topo.node_of_cpu(3), None);
    }

    #[test]
    fn node_list_is_intersected_with_online_cpus() {
        // A stale node cpulist naming an offline CPU must not make it usable.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("devices/system/node/node0")).unwrap();
        std::fs::create_dir_all(root.join("devices/system/cpu")).unwrap();
        std::fs::write(root.join("devices/system/node/online"), "0\n").unwrap();
        std::fs::write(root.join("devices/system/node/node0/cpulist"), "0-3\n").unwrap();
        std::fs::write(root.join("devices/system/cpu/online"), "0-1,3\n").unwrap();
        let topo = Topology::read(root, &all_cpus()).unwrap();
        assert_eq!(topo.nodes[0].online_cpus, vec![0, 1, 3]);
        assert_eq!(topo.nodes[0].cpus, vec![0, 1, 3]);
    }

    #[test]
    fn restricted_affinity_keeps_node_without_cpus() {
        let topo = Topology::read(&fixture_root("two-node"), &[4]).unwrap();
        assert_eq!(topo.nodes.len(), 2);
        assert!(!topo.node(0).unwrap().has_allowed_cpus());
        assert_eq!(topo.node(0).unwrap().online_cpus, vec![0, 1, 2, 3]);
        assert_eq!(topo.node(1).unwrap().cpus, vec![4]);
        assert_eq!(topo.usable_cpus(), vec![4]);
    }

    #[test]
    fn kernel_without_numa_is_one_node() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("devices/system/cpu")).unwrap();
        std::fs::write(dir.path().join("devices/system/cpu/online"), "0-5\n").unwrap();
        let topo = Topology::read(dir.path(), &[1, 2, 9]).unwrap();
        assert_eq!(
            topo.nodes,
            vec![Node {
                id: 0,
                online_cpus: (0..6).collect(),
                cpus: vec![1, 2]
            }]
        );
    }

    #[test]
    fn missing_sysfs_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = Topology::read(dir.path(), &all_cpus()).unwrap_err();
        assert!(matches!(
            error,
            TopologyError::Sysfs(SysfsError::Read { .. })
        ));
        assert!(
            error.to_string().contains("devices/system/cpu/online"),
            "{error}"
        );
    }

    #[test]
    fn empty_node_list_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("devices/system/node")).unwrap();
        std::fs::create_dir_all(dir.path().join("devices/system/cpu")).unwrap();
        std::fs::write(dir.path().join("devices/system/node/online"), "\n").unwrap();
        std::fs::write(dir.path().join("devices/system/cpu/online"), "0\n").unwrap();
        let error = Topology::read(dir.path(), &all_cpus()).unwrap_err();
        assert!(matches!(error, TopologyError::NoOnlineNodes { .. }));
    }

    #[test]
    fn real_sysfs_has_node_zero_with_the_affinity_cpus() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        let topo = Topology::read(Path::new("/sys"), &allowed).unwrap();
        assert!(topo.is_node(0));
        assert_eq!(topo.usable_cpus(), allowed);
        assert_eq!(Topology::detect().unwrap(), topo);
    }
}
