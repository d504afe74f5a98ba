//! Helpers shared by the integration tests: run the real binary, read its JSON Lines summaries
//! (every JSON line read is validated against the published schema, see [`schema`]).
#![allow(dead_code)]

pub mod inject;
pub mod neutral;
pub mod proc;
pub mod schema;
pub mod tally;
pub mod tcp;

use std::{
    process::{Command, Output, Stdio},
    sync::{Mutex, MutexGuard},
};

use serde_json::Value;

/// Serialises tests that push traffic, so concurrent runs do not share the two CPUs.
static TRAFFIC: Mutex<()> = Mutex::new(());

pub fn traffic_lock() -> MutexGuard<'static, ()> {
    TRAFFIC.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ringblast")
}

pub fn ringblast(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ringblast")
}

/// The `"type":"summary"` lines of a run, keyed by role.
pub struct Summaries {
    pub send: Option<Value>,
    pub sink: Option<Value>,
    pub last_line: Value,
}

pub fn summaries(out: &Output) -> Summaries {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = schema::records(&stdout);
    let find = |role: &str| {
        lines
            .iter()
            .rev()
            .find(|v| v["type"] == "summary" && v["role"] == role)
            .cloned()
    };
    Summaries {
        send: find("send"),
        sink: find("sink"),
        last_line: lines.last().cloned().unwrap_or(Value::Null),
    }
}

pub fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing or not an integer in {v}"))
}

/// The SQEs of a UDP send summary that were sends: all of them but its transmit-lag samples'
/// error-queue reads.
pub fn send_sqes(send: &Value) -> u64 {
    let reads: u64 = send["transmit_lag"]
        .as_array()
        .unwrap_or_else(|| panic!("no transmit_lag[] in {send}"))
        .iter()
        .map(|q| u(q, "reads"))
        .sum();
    u(send, "ring_sqes_submitted") - reads
}

pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts the sink saw exactly what the sender sent: nothing lost, duplicated or invalid.
pub fn assert_exact(send: &Value, sink: &Value) {
    assert_eq!(u(send, "tx_errors"), 0, "{send}");
    assert!(u(send, "tx_packets") > 0, "{send}");
    assert_eq!(
        u(send, "tx_packets"),
        u(sink, "rx_packets"),
        "send {send}\nsink {sink}"
    );
    assert_eq!(
        u(send, "tx_bytes"),
        u(sink, "rx_bytes"),
        "send {send}\nsink {sink}"
    );
    for key in [
        "rx_lost",
        "rx_duplicates",
        "rx_invalid",
        "rx_kernel_drops",
        "rx_reordered",
    ] {
        assert_eq!(u(sink, key), 0, "{key} in {sink}");
    }
}

/// Asserts every sent packet is accounted for: received, dropped by the kernel, or lost.
pub fn assert_accounted(send: &Value, sink: &Value) {
    assert_eq!(u(send, "tx_errors"), 0, "{send}");
    assert_eq!(
        u(send, "tx_packets"),
        u(sink, "rx_packets") + u(sink, "rx_kernel_drops") + u(sink, "rx_lost"),
        "send {send}\nsink {sink}"
    );
    assert_eq!(u(sink, "rx_duplicates"), 0, "{sink}");
    assert_eq!(u(sink, "rx_invalid"), 0, "{sink}");
}

/// Every sink interval's part of each sender (`senders[]` of the `"type":"interval"` records
/// of the sink), in order.
pub fn sink_interval_parts(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r["type"] == "interval" && r["role"] == "sink")
        .flat_map(|r| {
            r["senders"]
                .as_array()
                .expect("a sink interval has senders[]")
        })
        .collect()
}

/// The last `"type":"summary"` line of `role` in JSON Lines output.
pub fn last_summary(stdout: &str, role: &str) -> Value {
    stdout
        .lines()
        .filter_map(schema::parsed)
        .rfind(|v| v["type"] == "summary" && v["role"] == role)
        .unwrap_or_else(|| panic!("no {role} summary in:\n{stdout}"))
}

/// A private network namespace with only loopback up, named after `tag` and this process,
/// deleted on drop.
pub struct Netns(pub String);

impl Netns {
    pub fn create(tag: &str) -> Netns {
        let ns = Netns(format!("rb{tag}{}", std::process::id() % 100_000));
        assert!(
            ip(&["netns", "add", &ns.0]) && ip(&["-n", &ns.0, "link", "set", "lo", "up"]),
            "create a network namespace (iproute2, root)"
        );
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

/// The Prometheus text a ringblast metrics endpoint on 127.0.0.1:`port` serves now.
pub fn scrape_local(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// The value of the one series written exactly `name{labels}` (or a bare name) in a scrape.
pub fn series_value(text: &str, name_and_labels: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name_and_labels} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name_and_labels} in:\n{text}")) as u64
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    })
}

fn ip(args: &[&str]) -> bool {
    std::process::Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// Two network namespaces joined by a veth pair (10.x addresses), deleted on drop.
pub struct Lab {
    /// Sender side namespace.
    pub tx: String,
    /// Sink side namespace.
    pub rx: String,
    /// The sender side's veth device.
    pub tx_dev: String,
}

impl Lab {
    /// Creates `rb<tag>tx<pid>` at `10.<net>.0.1/24` and `rb<tag>rx<pid>` at `10.<net>.0.2/24`.
    pub fn create(tag: &str, net: u8) -> Lab {
        let id = std::process::id() % 100_000;
        let (va, vb) = (format!("rb{tag}{id}a"), format!("rb{tag}{id}b"));
        let lab = Lab {
            tx: format!("rb{tag}tx{id}"),
            rx: format!("rb{tag}rx{id}"),
            tx_dev: va.clone(),
        };
        let (a, b) = (format!("10.{net}.0.1/24"), format!("10.{net}.0.2/24"));
        let ok = ip(&["netns", "add", &lab.tx])
            && ip(&["netns", "add", &lab.rx])
            && ip(&[
                "link", "add", &va, "netns", &lab.tx, "type", "veth", "peer", "name", &vb, "netns",
                &lab.rx,
            ])
            && ip(&["-n", &lab.tx, "addr", "add", &a, "dev", &va])
            && ip(&["-n", &lab.rx, "addr", "add", &b, "dev", &vb])
            && ip(&["-n", &lab.tx, "link", "set", &va, "up"])
            && ip(&["-n", &lab.rx, "link", "set", &vb, "up"]);
        assert!(ok, "create namespaces and a veth pair (iproute2, root)");
        lab
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in [&self.tx, &self.rx] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", n])
                .status();
        }
    }
}

impl Lab {
    /// Runs a sink (`sink_args` after `sink --json`) in the sink namespace, waits until it is
    /// bound to `port`, runs a sender (`send_args` after `send --json`) in the sender namespace,
    /// and returns both summaries after both exit successfully.
    pub fn run(&self, port: u16, sink_args: &[&str], send_args: &[&str]) -> (Value, Value) {
        let secret = secret_file();
        let secret = secret.path().to_str().unwrap();
        let sink = std::process::Command::new("ip")
            .args(["netns", "exec", &self.rx, bin(), "sink", "--json"])
            .args(["--secret-file", secret])
            .args(sink_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_bound(Some(&self.rx), port);
        // The control listener binds after the UDP sockets: a sender started before it sends
        // its first datagrams before its hello, which a sink with a secret cannot count.
        wait_listening(Some(&self.rx), port);
        let send = std::process::Command::new("ip")
            .args(["netns", "exec", &self.tx, bin(), "send", "--json"])
            .args(["--secret-file", secret])
            .args(send_args)
            .output()
            .unwrap();
        let sunk = sink.wait_with_output().unwrap();
        assert_ok(&send);
        assert_ok(&sunk);
        (
            summaries(&send).send.unwrap(),
            summaries(&sunk).sink.unwrap(),
        )
    }
}

/// A fresh secret file for a sink and its senders.
pub fn secret_file() -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    use std::io::Write;
    writeln!(f, "test-secret-{}-{}", std::process::id(), rand_word()).unwrap();
    f
}

fn rand_word() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs `ringblast pair ARGS --json --no-metrics`, checks it succeeded, returns both summaries
/// and the last stdout line.
pub fn pair(args: &[&str]) -> (Value, Value, Value) {
    let mut all = vec!["pair"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", "--no-metrics"]);
    let out = ringblast(&all);
    assert_ok(&out);
    let s = summaries(&out);
    (s.send.unwrap(), s.sink.unwrap(), s.last_line)
}

/// Waits (at most 5 s, polling the kernel's socket list every 50 ms) until `ss FLAGS` lists a
/// socket on `port`, inside namespace `ns` if given; `what` names it in the failure.
fn wait_listed(ns: Option<&str>, port: u16, flags: &str, what: &str, count: usize) {
    let needle = format!(":{port} ");
    let listed = || {
        let out = match ns {
            Some(ns) => std::process::Command::new("ip")
                .args(["netns", "exec", ns, "ss", flags])
                .output(),
            None => std::process::Command::new("ss").arg(flags).output(),
        };
        out.is_ok_and(|o| {
            let text = String::from_utf8_lossy(&o.stdout);
            text.lines().filter(|l| l.contains(&needle)).count() >= count
        })
    };
    let found = (0..100).any(|_| {
        listed() || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            false
        }
    });
    assert!(found, "fewer than {count} {what} on port {port}");
}

/// Waits until a UDP socket is bound to `port`, inside namespace `ns` if given.
pub fn wait_bound(ns: Option<&str>, port: u16) {
    wait_bound_sockets(ns, port, 1);
}

/// Waits until `count` UDP sockets are bound to `port` (a sink's queues, all in its reuseport
/// group), inside namespace `ns` if given.
pub fn wait_bound_sockets(ns: Option<&str>, port: u16, count: usize) {
    wait_listed(ns, port, "-Huan", "UDP socket(s) bound", count);
}

/// Waits until a TCP socket listens on `port`, as the kernel lists it (a probe connection
/// would be counted by a sink).
pub fn wait_listening(ns: Option<&str>, port: u16) {
    wait_listed(ns, port, "-Htln", "TCP socket listening", 1);
}

/// A port number free for both UDP and TCP on 127.0.0.1 (a sink binds both), taken below the
/// kernel's ephemeral range so no client connection of a concurrent test can hold it.
pub fn free_port() -> u16 {
    use std::net::{TcpListener, UdpSocket};
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    for i in 0..12_000u32 {
        let port = 20_000 + ((seed.wrapping_add(i.wrapping_mul(7_919))) % 12_000) as u16;
        if UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port in 20000-31999");
}

/// One field of `/proc/net/snmp` (e.g. `Udp` `InDatagrams`) as seen inside `ns`.
pub fn snmp(ns: &str, proto: &str, field: &str) -> u64 {
    let text = {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
            .output()
            .expect("ip netns exec");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let prefix = format!("{proto}:");
    let mut rows = text.lines().filter(|l| l.starts_with(&prefix));
    let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
    let at = names
        .split_whitespace()
        .position(|n| n == field)
        .unwrap_or_else(|| panic!("no {field} in {names}"));
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// Loads an nft ruleset into namespace `ns`; a rule nft refuses fails the test with its reason.
pub fn nft(ns: &str, rules: &str) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft (apt-get install nftables)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft -f: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `f` on a thread that has joined network namespace `ns` (sockets it opens live there).
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in_netns(ns, f).join().unwrap()
}

/// Starts `f` on a thread that joins network namespace `ns` first (`setns` moves only the
/// calling thread, so the rest of the test process stays where it was).
pub fn spawn_in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

/// One field of `/proc/net/snmp6` (e.g. `Udp6InDatagrams`) as seen inside `ns`.
pub fn snmp6(ns: &str, field: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/proc/net/snmp6"])
        .output()
        .expect("ip netns exec");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(field)).then(|| words.next().unwrap().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/net/snmp6 of {ns}:\n{text}"))
}

/// The packet counts of the anonymous `counter` statements in what `nft list ARGS` prints in
/// `ns`, in rule order.
pub fn nft_rule_packets(ns: &str, list: &[&str]) -> Vec<u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list"])
        .args(list)
        .output()
        .expect("nft (apt-get install nftables)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("counter packets ")
        .skip(1)
        .map(|s| s.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

/// Packets and bytes of the named nft counter `name` in table `family table` of `ns`.
pub fn nft_named(ns: &str, family: &str, table: &str, name: &str) -> (u64, u64) {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "nft", "list", "counter", family, table, name,
        ])
        .output()
        .expect("nft (apt-get install nftables)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |key: &str| -> u64 {
        text.split(key)
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no {key}in counter {family} {table} {name} of {ns}: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    (field("packets "), field("bytes "))
}

/// Waits (at most 10 s) until every UDP socket bound to `port` in `ns` has an empty receive
/// queue, so a sink stopped now has read everything the kernel delivered to it. Panics if
/// no socket is bound to the port at all.
pub fn wait_udp_drained(ns: &str, port: u16) {
    let needle = format!(":{port}");
    let queues = || -> Vec<u64> {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "ss", "-Huan"])
            .output()
            .expect("ss (iproute2)");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .nth(3)
                    .is_some_and(|a| a.ends_with(&needle))
            })
            .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
            .collect()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let q = queues();
        assert!(!q.is_empty(), "no UDP socket bound to port {port} in {ns}");
        if q.iter().all(|&n| n == 0) {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "UDP port {port} in {ns} still holds {q:?} bytes after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Lab {
    /// Adds `fd00:0:<net>::1/64` (sender side) and `fd00:0:<net>::2/64` (sink side), without
    /// duplicate address detection so both are usable at once; returns the two addresses.
    pub fn add_v6(&self, net: u16) -> (String, String) {
        let (a, b) = (format!("fd00:0:{net:x}::1"), format!("fd00:0:{net:x}::2"));
        let rx_dev = self
            .tx_dev
            .strip_suffix('a')
            .map(|d| format!("{d}b"))
            .unwrap();
        let ok = ip(&[
            "-n",
            &self.tx,
            "addr",
            "add",
            &format!("{a}/64"),
            "dev",
            &self.tx_dev,
            "nodad",
        ]) && ip(&[
            "-n",
            &self.rx,
            "addr",
            "add",
            &format!("{b}/64"),
            "dev",
            &rx_dev,
            "nodad",
        ]);
        assert!(ok, "add IPv6 addresses to the veth pair (iproute2, root)");
        (a, b)
    }
}

/// The `Udp:` counters of `/proc/net/snmp` in one network namespace, read at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSnmp {
    pub in_datagrams: u64,
    pub no_ports: u64,
    pub in_errors: u64,
    pub out_datagrams: u64,
    pub rcvbuf_errors: u64,
    pub sndbuf_errors: u64,
}

impl UdpSnmp {
    /// Reads the counters of `ns` (one `cat /proc/net/snmp` inside it).
    pub fn read(ns: &str) -> UdpSnmp {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
            .output()
            .expect("ip netns exec");
        assert!(out.status.success(), "read /proc/net/snmp in {ns}");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut rows = text.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (rows.next().unwrap(), rows.next().unwrap());
        let field = |name: &str| -> u64 {
            let at = names
                .split_whitespace()
                .position(|n| n == name)
                .unwrap_or_else(|| panic!("no {name} in {names}"));
            values.split_whitespace().nth(at).unwrap().parse().unwrap()
        };
        UdpSnmp {
            in_datagrams: field("InDatagrams"),
            no_ports: field("NoPorts"),
            in_errors: field("InErrors"),
            out_datagrams: field("OutDatagrams"),
            rcvbuf_errors: field("RcvbufErrors"),
            sndbuf_errors: field("SndbufErrors"),
        }
    }

    /// What the namespace counted since `before`.
    pub fn since(self, before: UdpSnmp) -> UdpSnmp {
        UdpSnmp {
            in_datagrams: self.in_datagrams - before.in_datagrams,
            no_ports: self.no_ports - before.no_ports,
            in_errors: self.in_errors - before.in_errors,
            out_datagrams: self.out_datagrams - before.out_datagrams,
            rcvbuf_errors: self.rcvbuf_errors - before.rcvbuf_errors,
            sndbuf_errors: self.sndbuf_errors - before.sndbuf_errors,
        }
    }
}

/// As [`pair`], alone in a private network namespace named after `tag` (root), and held to that
/// namespace's `Udp` counters: every send left as one `OutDatagrams` and every buffer the sink
/// read was one `InDatagrams`, each of `--gso N`'s N datagrams or of 1 (loopback's GRO keeps a
/// GSO send whole), and the sink's kernel drops are its `RcvbufErrors` buffers.
pub fn pair_counted(tag: &str, args: &[&str]) -> (Value, Value, Value) {
    let ns = Netns::create(tag);
    let before = UdpSnmp::read(&ns.0);
    let (send, sink, last) = pair_in(&ns.0, args);
    let kernel = UdpSnmp::read(&ns.0).since(before);
    let train: u64 = args
        .iter()
        .position(|a| *a == "--gso")
        .map_or(1, |i| args[i + 1].parse().unwrap());
    let ctx = format!("{kernel:?}\nsend {send}\nsink {sink}");
    assert_eq!(
        u(&send, "tx_packets"),
        train * kernel.out_datagrams,
        "Udp OutDatagrams: {ctx}"
    );
    assert_eq!(
        u(&sink, "rx_packets"),
        train * kernel.in_datagrams,
        "Udp InDatagrams: {ctx}"
    );
    assert_eq!(
        u(&sink, "rx_kernel_drops"),
        train * kernel.rcvbuf_errors,
        "Udp RcvbufErrors: {ctx}"
    );
    (send, sink, last)
}

/// As [`pair`], run inside network namespace `ns` (`ip netns exec`).
pub fn pair_in(ns: &str, args: &[&str]) -> (Value, Value, Value) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, bin(), "pair"])
        .args(args)
        .args(["--json", "--no-metrics"])
        .stdin(Stdio::null())
        .output()
        .expect("ip netns exec ringblast pair");
    assert_ok(&out);
    let s = summaries(&out);
    (s.send.unwrap(), s.sink.unwrap(), s.last_line)
}
