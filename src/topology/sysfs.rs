//! Reads CPU, NUMA-node and NIC-locality facts from a sysfs tree (normally `/sys`, injectable for
//! tests) and parses/formats the kernel's cpulist format (`0-3,8,10-11`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The real sysfs mount point.
pub(crate) const SYSFS_ROOT: &str = "/sys";

/// Largest CPU or node number accepted in a list; protects against ranges like `0-4294967295`.
pub(crate) const MAX_CPU_ID: u32 = 65_535;

/// A cpulist (`0-3,8`) that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CpuListError {
    #[error("empty item in CPU list {list:?}; write it like 0-3,8")]
    EmptyItem { list: String },
    #[error("{item:?} in CPU list {list:?} is not a number or range; write it like 0-3,8")]
    NotANumber { item: String, list: String },
    #[error("range {item:?} in CPU list {list:?} runs backwards; write the lower number first")]
    ReversedRange { item: String, list: String },
    #[error("CPU {id} in CPU list {list:?} is above the limit {MAX_CPU_ID}; use real CPU numbers")]
    TooLarge { id: u32, list: String },
}

/// Reading sysfs failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SysfsError {
    #[error("cannot read {}: {source}; is sysfs mounted at /sys?", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot parse {}: {source}", path.display())]
    Parse { path: PathBuf, source: CpuListError },
}

/// Parses the kernel cpulist format (`0-3,8,10-11`) into a sorted list without duplicates.
/// An empty or all-whitespace string is an empty list (a node without CPUs prints that).
pub(crate) fn parse_cpu_list(text: &str) -> Result<Vec<u32>, CpuListError> {
    let list = text.trim();
    let mut cpus = Vec::new();
    if list.is_empty() {
        return Ok(cpus);
    }
    for raw_item in list.split(',') {
        let item = raw_item.trim();
        if item.is_empty() {
            return Err(CpuListError::EmptyItem { list: list.into() });
        }
        let (first, last) = match item.split_once('-') {
            Some((lo, hi)) => (parse_id(lo, item, list)?, parse_id(hi, item, list)?),
            None => {
                let id = parse_id(item, item, list)?;
                (id, id)
            }
        };
        if first > last {
            return Err(CpuListError::ReversedRange {
                item: item.into(),
                list: list.into(),
            });
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn parse_id(number: &str, item: &str, list: &str) -> Result<u32, CpuListError> {
    let number = number.trim();
    let not_a_number = || CpuListError::NotANumber {
        item: item.into(),
        list: list.into(),
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not_a_number());
    }
    let id: u32 = number.parse().map_err(|_| not_a_number())?;
    if id > MAX_CPU_ID {
        return Err(CpuListError::TooLarge {
            id,
            list: list.into(),
        });
    }
    Ok(id)
}

/// Formats CPU (or node) numbers as a cpulist, merging runs: `[0,1,2,3,8]` -> `"0-3,8"`.
/// The input may be unsorted and contain duplicates; an empty input gives `""`.
pub(crate) fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut rest = sorted.as_slice();
    while let Some(&start) = rest.first() {
        let run = rest
            .iter()
            .enumerate()
            .take_while(|&(offset, &cpu)| u64::from(cpu) == u64::from(start) + offset as u64)
            .count();
        let end = rest[run - 1];
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        rest = &rest[run..];
    }
    parts.join(",")
}

fn read_cpu_list_file(path: PathBuf) -> Result<Vec<u32>, SysfsError> {
    let text = fs::read_to_string(&path).map_err(|source| SysfsError::Read {
        path: path.clone(),
        source,
    })?;
    parse_cpu_list(&text).map_err(|source| SysfsError::Parse { path, source })
}

/// CPUs the kernel reports online (`devices/system/cpu/online`).
pub(crate) fn online_cpus(root: &Path) -> Result<Vec<u32>, SysfsError> {
    read_cpu_list_file(root.join("devices/system/cpu/online"))
}

/// Online NUMA nodes (`devices/system/node/online`), or `None` when the kernel has no node
/// directory (built without NUMA); callers then treat the machine as one node 0.
pub(crate) fn online_nodes(root: &Path) -> Result<Option<Vec<u32>>, SysfsError> {
    let node_dir = root.join("devices/system/node");
    if !node_dir.is_dir() {
        return Ok(None);
    }
    read_cpu_list_file(node_dir.join("online")).map(Some)
}

/// CPUs the kernel lists for one NUMA node (`devices/system/node/nodeN/cpulist`).
pub(crate) fn node_cpus(root: &Path, node: u32) -> Result<Vec<u32>, SysfsError> {
    read_cpu_list_file(root.join(format!("devices/system/node/node{node}/cpulist")))
}

/// Which NUMA node a network interface is attached to, as far as sysfs tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NicLocality {
    /// The device (or its nearest ancestor reporting one) sits on this node.
    Node(u32),
    /// Unknown, with the reason (e.g. "virtual interface").
    Unknown(&'static str),
}

/// Reason used when an interface has no `device` link (lo, veth, ifb, bridges).
pub(crate) const VIRTUAL_INTERFACE: &str = "virtual interface";
/// Reason used when no ancestor reports a node, or it reports `-1`.
pub(crate) const NO_LOCALITY_REPORTED: &str = "no NUMA locality reported";
/// Reason used when `class/net/IF` does not exist.
pub(crate) const INTERFACE_NOT_FOUND: &str = "interface not found";
/// Reason used when the name cannot be an interface (empty, contains `/`, `.` or `..`).
pub(crate) const INVALID_INTERFACE_NAME: &str = "invalid interface name";

/// Finds the NUMA node of interface `ifname` under sysfs `root`.
///
/// Reads `class/net/IF/device/numa_node`; when absent (virtio-net: the netdev's parent is a
/// virtio device) it walks up the resolved device path to the first ancestor that has a
/// `numa_node` file, never leaving `root/devices`. `-1` or no such file means unknown.
pub(crate) fn nic_numa_node(root: &Path, ifname: &str) -> NicLocality {
    if ifname.is_empty() || ifname.contains('/') || ifname == "." || ifname == ".." {
        return NicLocality::Unknown(INVALID_INTERFACE_NAME);
    }
    let interface_dir = root.join("class/net").join(ifname);
    if fs::symlink_metadata(&interface_dir).is_err() {
        return NicLocality::Unknown(INTERFACE_NOT_FOUND);
    }
    let device_link = interface_dir.join("device");
    if fs::symlink_metadata(&device_link).is_err() {
        return NicLocality::Unknown(VIRTUAL_INTERFACE);
    }
    let (Ok(device), Ok(root)) = (device_link.canonicalize(), root.canonicalize()) else {
        return NicLocality::Unknown(NO_LOCALITY_REPORTED);
    };
    let devices_root = root.join("devices");
    let mut current = device.as_path();
    while current.starts_with(&devices_root) && current != devices_root {
        let numa_node = current.join("numa_node");
        if numa_node.is_file() {
            return match fs::read_to_string(&numa_node).map(|text| text.trim().parse::<i64>()) {
                Ok(Ok(node)) => u32::try_from(node)
                    .map(NicLocality::Node)
                    .unwrap_or(NicLocality::Unknown(NO_LOCALITY_REPORTED)),
                _ => NicLocality::Unknown(NO_LOCALITY_REPORTED),
            };
        }
        match current.parent() {
            Some(parent) => current = parent,
            None => break,
        }
    }
    NicLocality::Unknown(NO_LOCALITY_REPORTED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::fixture_root;

    #[test]
    fn parses_ranges_singles_and_whitespace() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Ok(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list(" 5 , 1-2 "), Ok(vec![1, 2, 5]));
        assert_eq!(parse_cpu_list("7"), Ok(vec![7]));
        assert_eq!(parse_cpu_list("3-3"), Ok(vec![3]));
    }

    #[test]
    fn parse_sorts_and_deduplicates() {
        assert_eq!(parse_cpu_list("4,0-2,1,4"), Ok(vec![0, 1, 2, 4]));
    }

    #[test]
    fn empty_list_is_no_cpus() {
        assert_eq!(parse_cpu_list(""), Ok(vec![]));
        assert_eq!(parse_cpu_list("\n"), Ok(vec![]));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "a", "1,,2", "1,", "-3", "3-", "1-2-3", "+1", "0x3", "1 2", "1-b",
        ] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(
            parse_cpu_list("5-2"),
            Err(CpuListError::ReversedRange { .. })
        ));
        assert!(matches!(
            parse_cpu_list("1,,2"),
            Err(CpuListError::EmptyItem { .. })
        ));
        assert!(matches!(
            parse_cpu_list("0-4294967295"),
            Err(CpuListError::TooLarge {
                id: 4_294_967_295,
                ..
            })
        ));
        assert!(matches!(
            parse_cpu_list("99999999999"),
            Err(CpuListError::NotANumber { .. })
        ));
    }

    #[test]
    fn error_message_names_the_item() {
        let message = parse_cpu_list("0-2,x").unwrap_err().to_string();
        assert!(message.contains("\"x\""), "{message}");
    }

    #[test]
    fn formats_runs() {
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8]), "0-3,8");
        assert_eq!(format_cpu_list(&[11, 10, 8, 3, 2, 1, 0, 3]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert_eq!(format_cpu_list(&[1, 3]), "1,3");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn format_then_parse_round_trips() {
        let cpus = vec![0, 2, 3, 4, 9, 10, 64, 65535];
        assert_eq!(parse_cpu_list(&format_cpu_list(&cpus)), Ok(cpus));
    }

    #[test]
    fn reads_nodes_and_cpus_from_fixture() {
        let root = fixture_root("two-node");
        assert_eq!(online_cpus(&root).unwrap(), (0..8).collect::<Vec<_>>());
        assert_eq!(online_nodes(&root).unwrap(), Some(vec![0, 1]));
        assert_eq!(node_cpus(&root, 1).unwrap(), vec![4, 5, 6, 7]);
        assert!(matches!(node_cpus(&root, 2), Err(SysfsError::Read { .. })));
    }

    #[test]
    fn missing_node_directory_is_none() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("devices/system/cpu")).unwrap();
        fs::write(dir.path().join("devices/system/cpu/online"), "0-2\n").unwrap();
        assert_eq!(online_nodes(dir.path()).unwrap(), None);
        assert_eq!(online_cpus(dir.path()).unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn garbage_in_sysfs_file_is_a_parse_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("devices/system/cpu")).unwrap();
        fs::write(dir.path().join("devices/system/cpu/online"), "zero\n").unwrap();
        let error = online_cpus(dir.path()).unwrap_err();
        assert!(matches!(error, SysfsError::Parse { .. }));
        assert!(
            error.to_string().contains("devices/system/cpu/online"),
            "{error}"
        );
    }

    #[test]
    fn pci_nic_reports_its_node() {
        assert_eq!(
            nic_numa_node(&fixture_root("two-node"), "eth0"),
            NicLocality::Node(1)
        );
    }

    #[test]
    fn virtio_nic_walks_up_to_the_pci_parent() {
        let root = fixture_root("two-node");
        assert!(!root.join("class/net/eth1/device/numa_node").exists());
        assert_eq!(nic_numa_node(&root, "eth1"), NicLocality::Node(0));
    }

    #[test]
    fn parent_minus_one_is_unknown() {
        let locality = nic_numa_node(&fixture_root("nic-minus-one"), "eth0");
        assert_eq!(locality, NicLocality::Unknown(NO_LOCALITY_REPORTED));
    }

    #[test]
    fn loopback_is_virtual_and_missing_interface_is_not_found() {
        let root = fixture_root("one-node");
        assert_eq!(
            nic_numa_node(&root, "lo"),
            NicLocality::Unknown(VIRTUAL_INTERFACE)
        );
        assert_eq!(
            nic_numa_node(&root, "eth7"),
            NicLocality::Unknown(INTERFACE_NOT_FOUND)
        );
        assert_eq!(
            nic_numa_node(&root, "../lo"),
            NicLocality::Unknown(INVALID_INTERFACE_NAME)
        );
        assert_eq!(
            nic_numa_node(&root, ""),
            NicLocality::Unknown(INVALID_INTERFACE_NAME)
        );
    }

    #[test]
    fn walk_up_stops_at_devices_root() {
        // A numa_node file above `devices/` must never be consulted.
        let dir = tempfile::tempdir().unwrap();
        let device = dir.path().join("devices/platform/foo");
        fs::create_dir_all(&device).unwrap();
        fs::write(dir.path().join("numa_node"), "0\n").unwrap();
        fs::write(dir.path().join("devices/numa_node"), "0\n").unwrap();
        fs::create_dir_all(dir.path().join("class/net/eth9")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/platform/foo",
            dir.path().join("class/net/eth9/device"),
        )
        .unwrap();
        assert_eq!(
            nic_numa_node(dir.path(), "eth9"),
            NicLocality::Unknown(NO_LOCALITY_REPORTED)
        );
        fs::write(device.join("numa_node"), "3\n").unwrap();
        assert_eq!(nic_numa_node(dir.path(), "eth9"), NicLocality::Node(3));
    }

    #[test]
    fn real_loopback_is_virtual() {
        assert_eq!(
            nic_numa_node(Path::new(SYSFS_ROOT), "lo"),
            NicLocality::Unknown(VIRTUAL_INTERFACE)
        );
    }
}
