//! Bad input and hostile environments: one clear line and a distinct exit code, never a panic.

mod common;

use std::process::Command;

use common::*;

fn expect_exit(args: &[&str], code: i32, needle: &str) {
    let out = ringblast(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}\n{stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The CPUs a child of this test may use: the online ones in its affinity (which the child
/// inherits), in the kernel's cpulist form (`0-3,8`).
fn usable_cpus() -> String {
    let ids = |list: &str| -> Vec<u32> {
        list.trim()
            .split(',')
            .flat_map(|item| {
                let (lo, hi) = item.split_once('-').unwrap_or((item, item));
                lo.parse::<u32>().unwrap()..=hi.parse::<u32>().unwrap()
            })
            .collect()
    };
    let online = ids(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap());
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = ids(status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap());
    let usable: Vec<u32> = online.into_iter().filter(|c| allowed.contains(c)).collect();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for cpu in usable {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == cpu => *hi = cpu,
            _ => runs.push((cpu, cpu)),
        }
    }
    let items: Vec<String> = runs
        .iter()
        .map(|&(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect();
    items.join(",")
}

#[test]
fn bad_flags_exit_2_with_a_clear_message() {
    let to = "127.0.0.1:9";
    expect_exit(
        &["send", "--to", to, "--rate", "10furlongs"],
        2,
        "invalid rate",
    );
    expect_exit(&["send", "--to", to, "--rate", "0pps"], 2, "invalid rate");
    expect_exit(
        &["send", "--to", to, "--size", "8"],
        2,
        "18-byte compact ringblast header",
    );
    expect_exit(
        &["send", "--to", to, "--gso", "64", "--size", "1400"],
        2,
        "use --gso 46",
    );
    expect_exit(
        &["send", "--to", to, "--gso", "500"],
        2,
        "--gso 500 is out of range",
    );
    expect_exit(
        &["send", "--to", to, "--queues", "2", "--flows", "1"],
        2,
        "--flows 1 is below --queues 2",
    );
    expect_exit(
        &["send", "--to", to, "--count", "5", "--duration", "1s"],
        2,
        "cannot be used with",
    );
    expect_exit(&["send", "--to", "nowhere"], 2, "invalid value");
    // The explanations name what this host has, as the kernel lists it.
    let online_nodes = std::fs::read_to_string("/sys/devices/system/node/online").unwrap();
    expect_exit(
        &["send", "--to", to, "--node", "99", "--count", "1"],
        2,
        &format!(
            "NUMA node 99 does not exist (online nodes: {}); pick --node from that list",
            online_nodes.trim()
        ),
    );
    expect_exit(
        &["send", "--to", to, "--cpus", "0-", "--count", "1"],
        2,
        "\"0-\" in CPU list \"0-\" is not a number or range; write it like 0-3,8",
    );
    expect_exit(
        &["send", "--to", to, "--cpus", "4000", "--count", "1"],
        2,
        &format!(
            "CPU 4000 from --cpus is not usable by this process (usable: {}); pick CPUs from that list",
            usable_cpus()
        ),
    );
    expect_exit(
        &["sink", "--listen", "127.0.0.1:9", "--rx-buffers", "100"],
        2,
        "power of two",
    );
    expect_exit(
        &[
            "sink",
            "--listen",
            "127.0.0.1:9",
            "--proto",
            "tcp",
            "--rx-wait",
            "inline",
        ],
        2,
        "--rx-wait inline applies to UDP only (a TCP sink waits with batch, spin or sleep); drop it for --proto tcp",
    );
    expect_exit(
        &[
            "sink",
            "--listen",
            "127.0.0.1:9",
            "--proto",
            "tcp",
            "--arrival",
            "kernel",
        ],
        2,
        "--arrival applies to UDP only (a TCP record's arrival is always the sink's read); drop it for --proto tcp",
    );
    expect_exit(&["pair", "--address", "10.1.2.3"], 2, "loopback");
    expect_exit(&["frobnicate"], 2, "unrecognized subcommand");
}

#[test]
fn port_in_use_exits_3() {
    let holder = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap().to_string();
    expect_exit(
        &["sink", "--listen", &addr, "--duration", "1s"],
        3,
        "already held by another program",
    );
}

#[test]
fn topo_prints_nodes_nic_and_placement() {
    let out = ringblast(&["topo", "--to", "127.0.0.1:9", "--queues", "2"]);
    assert_ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("node 0: cpus"), "{stdout}");
    assert!(stdout.contains("nic: lo"), "{stdout}");
    assert!(
        stdout.contains("q0 -> cpu") && stdout.contains("q1 -> cpu"),
        "{stdout}"
    );
    let explicit = ringblast(&["topo", "--cpus", "0", "--queues", "1"]);
    assert_ok(&explicit);
    let stdout = String::from_utf8_lossy(&explicit.stdout);
    assert!(stdout.contains("explicit --cpus"), "{stdout}");
    assert!(stdout.contains("  q0 -> cpu 0 node "), "{stdout}");
}

fn no_uring_helper() -> Option<std::path::PathBuf> {
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no_uring");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/no_uring.c");
    let status = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(src)
        .status()
        .ok()?;
    status.success().then_some(out)
}

#[test]
fn io_uring_blocked_by_seccomp_exits_3_naming_the_fix() {
    let helper = no_uring_helper().expect("a C compiler (cc) to build tests/support/no_uring.c");
    for (errno, needle) in [("EPERM", "seccomp"), ("ENOSYS", "no io_uring")] {
        let t0 = std::time::Instant::now();
        let out = Command::new(&helper)
            .args([
                errno,
                "--",
                bin(),
                "send",
                "--to",
                "127.0.0.1:9",
                "--count",
                "10",
            ])
            .output()
            .unwrap();
        let took = t0.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{errno}: {stderr}");
        // A hang guard, not a speed test: the refusal comes at setup.
        assert!(
            took < std::time::Duration::from_secs(10),
            "{errno}: took {took:?}"
        );
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line expected: {stderr}");
        assert!(lines[0].contains(needle), "{stderr}");
    }
}

#[test]
#[ignore = "needs root: dropping CAP_IPC_LOCK with setpriv"]
fn low_memlock_without_cap_ipc_lock_exits_3_naming_bytes_and_fix() {
    // A missing prlimit or setpriv fails the test.
    let t0 = std::time::Instant::now();
    let out = Command::new("prlimit")
        .args([
            "--memlock=65536",
            "setpriv",
            "--inh-caps=-ipc_lock",
            "--bounding-set=-ipc_lock",
            bin(),
        ])
        .args([
            "send",
            "--to",
            "127.0.0.1:9",
            "--size",
            "1400",
            "--gso",
            "46",
            "--count",
            "10",
        ])
        .output()
        .expect("prlimit and setpriv (util-linux)");
    let took = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    // A hang guard, not a speed test: the refusal comes at setup, before any traffic or wait.
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    assert_eq!(stderr.lines().count(), 1, "one line expected: {stderr}");
    assert!(stderr.contains("RLIMIT_MEMLOCK is 65536 bytes"), "{stderr}");
    assert!(
        stderr.contains("ulimit -l") && stderr.contains("CAP_IPC_LOCK"),
        "{stderr}"
    );
}

/// `topo` names the online nodes plainly and prints each warning once, unindented.
#[test]
fn topo_says_how_many_nodes_are_online_and_warns_once() {
    let out = ringblast(&["topo", "--queues", "1000"]);
    assert_ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    let (count, ids) = first
        .split_once(" online: ")
        .unwrap_or_else(|| panic!("first line {first:?}"));
    // The kernel's own list of online nodes, and how many it names.
    let online = std::fs::read_to_string("/sys/devices/system/node/online").unwrap();
    let online = online.trim();
    let kernel_nodes: usize = online
        .split(',')
        .map(|item| match item.split_once('-') {
            Some((lo, hi)) => hi.parse::<usize>().unwrap() - lo.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum();
    let expected = if kernel_nodes == 1 {
        "1 node".to_string()
    } else {
        format!("{kernel_nodes} nodes")
    };
    assert_eq!(count, expected, "{stdout}");
    assert_eq!(ids, online, "the kernel's online nodes: {stdout}");
    let node_lines = stdout.lines().filter(|l| l.starts_with("  node ")).count();
    assert_eq!(
        node_lines, kernel_nodes,
        "one line per online node: {stdout}"
    );
    let warnings: Vec<&str> = stdout.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0].starts_with("warning: 1000 queues on ")
            && warnings[0].ends_with("some queues share a CPU"),
        "{stdout}"
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
