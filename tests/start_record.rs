//! A run describes itself: the first JSON line of every traffic run is a `"type":"start"`
//! record, and the first human line carries its essentials. Each fact is checked against an
//! observer outside ringblast: `uname`, `nproc`, the kernel's node list, `ip route get`, and
//! the test's own clock and command line.

mod common;

use std::{
    net::UdpSocket,
    process::Command,
    time::{Duration, SystemTime},
};

use common::*;
use serde_json::Value;

/// The trimmed stdout of a command.
fn observe(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The interface `ip route get` names for `ip`, in namespace `ns` when given.
fn route_dev(ns: Option<&str>, ip: &str) -> String {
    let mut args: Vec<&str> = ns.map_or_else(Vec::new, |ns| vec!["-n", ns]);
    args.extend(["-o", "route", "get", ip]);
    let line = observe("ip", &args);
    let mut words = line.split_whitespace();
    words.find(|w| *w == "dev").unwrap();
    words.next().unwrap().to_string()
}

/// The first stdout record of a run, checked to be its start record, and the first stderr line.
fn start_of(out: &std::process::Output) -> (Value, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    let record = common::schema::record(first);
    assert_eq!(record["type"], "start", "{first}");
    assert_eq!(
        stdout.matches("\"type\":\"start\"").count(),
        1,
        "one start record"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    (record, err.lines().next().unwrap_or_default().to_string())
}

fn parse_rfc3339(text: &str) -> SystemTime {
    humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn a_send_says_what_ran_where_and_when_as_the_host_tells_it() {
    let _lock = traffic_lock();
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = receiver.local_addr().unwrap().to_string();
    let args = [
        "send",
        "--to",
        &to,
        "--rate",
        "2kpps",
        "--count",
        "200",
        "--control",
        "off",
        "--json",
    ];
    let before = SystemTime::now();
    let out = ringblast(&args);
    let after = SystemTime::now();
    assert_ok(&out);
    let (start, first_line) = start_of(&out);

    assert_eq!(start["role"], "send");
    assert_eq!(start["protocol"], "udp");
    assert_eq!(start["target"], to.as_str());
    let mut argv = vec![bin().to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    assert_eq!(start["command"], serde_json::json!(argv));
    assert_eq!(start["version"], env!("CARGO_PKG_VERSION"));
    let commit = observe(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "-c",
            "safe.directory=*",
            "rev-parse",
            "HEAD",
        ],
    );
    let named = start["commit"].as_str().expect("built from a git checkout");
    assert!(
        named.len() >= 7 && commit.starts_with(named),
        "{named} vs HEAD {commit}"
    );

    let started = parse_rfc3339(start["started_at"].as_str().unwrap());
    let slack = Duration::from_millis(5);
    assert!(
        started + slack >= before && started <= after + slack,
        "started_at {:?} outside the run",
        start["started_at"]
    );

    let host = &start["host"];
    assert_eq!(host["name"], observe("uname", &["-n"]).as_str());
    assert_eq!(host["kernel"], observe("uname", &["-r"]).as_str());
    let online: u64 = observe("nproc", &["--all"]).parse().unwrap();
    let allowed: u64 = observe("nproc", &[]).parse().unwrap();
    assert_eq!(host["cpus_online"], online);
    assert_eq!(host["cpus_allowed"], allowed);
    let nodes = std::fs::read_to_string("/sys/devices/system/node/online").unwrap();
    let first_node: u64 = nodes
        .trim()
        .split([',', '-'])
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(host["numa_nodes"][0], first_node, "{nodes}");
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        });
    assert_eq!(host["cpu_model"].as_str().map(str::to_string), model);

    assert_eq!(start["nic"]["name"], route_dev(None, "127.0.0.1").as_str());
    assert_eq!(
        start["nic"]["driver"],
        Value::Null,
        "loopback has no driver"
    );
    assert!(start["nic"]["driver_unknown_reason"].is_string());

    assert_eq!(start["parameters"]["rate"], "2kpps");
    assert_eq!(
        start["parameters"]["size"], "64",
        "a default is resolved too"
    );
    let set: Vec<&str> = start["set"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for given in ["to", "rate", "count", "control", "json"] {
        assert!(set.contains(&given), "{given} not in {set:?}");
    }
    assert!(!set.contains(&"size"), "{set:?}");

    // The human output's first line carries the essentials.
    assert!(
        first_line.starts_with(&format!(
            "ringblast {} (commit {named}) send udp to {to}, started {}",
            env!("CARGO_PKG_VERSION"),
            start["started_at"].as_str().unwrap()
        )),
        "{first_line}"
    );
    assert!(
        first_line.contains(&format!("host {}", observe("uname", &["-n"]))),
        "{first_line}"
    );
}

#[test]
fn a_sink_on_every_interface_says_it_has_no_nic_and_a_tcp_pair_says_tcp() {
    let _lock = traffic_lock();
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let mut sink = common::proc::Proc::ringblast(
        None,
        &[
            "sink",
            "--listen",
            &listen,
            "--insecure-control",
            "--json",
            "--interval",
            "0",
        ],
    );
    sink.wait_line("startup: workers released", Duration::from_secs(10));
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let first = out.lines().next().unwrap_or_default();
    let start = common::schema::record(first);
    assert_eq!(start["type"], "start", "{first}");
    assert_eq!(start["role"], "sink");
    assert_eq!(start["target"], listen.as_str());
    assert_eq!(start["nic"]["name"], Value::Null);
    assert!(start["nic"]["unknown_reason"].is_string(), "{start}");

    let out = ringblast(&[
        "pair",
        "--proto",
        "tcp",
        "--count",
        "100",
        "--json",
        "--no-metrics",
    ]);
    assert_ok(&out);
    let (start, first_line) = start_of(&out);
    assert_eq!(start["role"], "pair");
    assert_eq!(start["protocol"], "tcp");
    assert_eq!(start["target"], "127.0.0.1");
    assert!(
        first_line.contains(" pair tcp over 127.0.0.1, started "),
        "{first_line}"
    );
}

#[test]
#[ignore = "needs root: a veth pair between two network namespaces"]
fn the_nic_is_the_one_the_route_to_the_target_leaves_through() {
    let _lock = traffic_lock();
    assert!(is_root(), "this test needs root (namespaces)");
    let lab = Lab::create("snic", 219);
    let to = "10.219.0.2:7700";
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "send", "--to", to])
        .args([
            "--count",
            "10",
            "--rate",
            "1kpps",
            "--control",
            "off",
            "--json",
        ])
        .output()
        .unwrap();
    // Nothing listens there: its sends fail (exit 1), which the record does not depend on.
    let (start, first_line) = start_of(&out);
    let dev = route_dev(Some(&lab.tx), "10.219.0.2");
    assert_eq!(dev, lab.tx_dev, "ip route get");
    assert_eq!(start["nic"]["name"], dev.as_str());
    assert!(first_line.contains(&format!("NIC {dev} (")), "{first_line}");
}
