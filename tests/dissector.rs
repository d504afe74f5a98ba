//! The Wireshark dissector (`deploy/wireshark/ringblast.lua`, written out by `ringblast generate
//! wireshark-dissector`) run by tshark over a real capture. Three namespaces this test creates
//! form a path: sender, router, sink. The router's nftables forward chain drops K chosen
//! datagrams (sequence numbers 100-102 and 700 of every flow: one gap of three, one of one) and
//! duplicates J (300 and 900), counting both; `dumpcap` captures on the sink's veth. tshark must
//! decode every captured datagram (as many as the sink namespace's nft counter saw arrive, and
//! as many as were sent, less K, plus J), and the gaps and repeats it marks must add up to
//! nft's K and J and to the sink's `rx_lost` and `rx_duplicates`.
//!
//! Four runs: full and compact headers, each with GSO off and on. With GSO, the sender's veth
//! has `gso_max_segs 1`, so the kernel cuts every GSO send into its datagrams before the veth,
//! as a NIC with UDP segmentation offload puts them on the wire (a veth would otherwise carry
//! the whole super-datagram to the sink's namespace); the sender namespace's
//! `/proc/net/snmp` shows the sends were GSO sends (one `OutDatagrams` per send).

mod common;

use std::{
    io::Read,
    process::{Child, Command, Output, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use common::*;

const PORT: u16 = 7000;
/// The path's addresses: the sender on 10.232.0.0/24, the sink on 10.232.1.0/24.
const NET: u8 = 232;
const FLOWS: u64 = 2;
const COUNT: u64 = 6000;
const GSO: u64 = 8;
/// Sequence numbers dropped on the path in every flow: a gap of three and a gap of one, far
/// from a flow's first and last packets (each flow sends COUNT / FLOWS).
const DROPPED: [u32; 4] = [100, 101, 102, 700];
/// Sequence numbers duplicated on the path in every flow.
const DUPLICATED: [u32; 2] = [300, 900];
/// Longest a sender, sink, capture or tshark run may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);

struct Case {
    tag: &'static str,
    args: &'static [&'static str],
    compact: bool,
    gso: bool,
}

const CASES: [Case; 4] = [
    Case {
        tag: "df",
        args: &[],
        compact: false,
        gso: false,
    },
    Case {
        tag: "dg",
        args: &["--gso", "8"],
        compact: false,
        gso: true,
    },
    Case {
        tag: "dc",
        args: &["--frame-size", "64"],
        compact: true,
        gso: false,
    },
    Case {
        tag: "dh",
        args: &["--size", "24", "--gso", "8"],
        compact: true,
        gso: true,
    },
];

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// Sender, router and sink namespaces joined by two veth pairs, deleted on drop.
struct Path {
    tx: String,
    router: String,
    rx: String,
    /// The sink's veth device (the capture's interface).
    rx_dev: String,
}

impl Path {
    fn create(tag: &str, gso_max_segs_one: bool) -> Path {
        let id = std::process::id() % 100_000;
        let name = |role: &str| format!("rb{tag}{role}{id}");
        let path = Path {
            tx: name("t"),
            router: name("m"),
            rx: name("r"),
            rx_dev: name("rb"),
        };
        let (tx_dev, up_dev, down_dev) = (name("ta"), name("ma"), name("mb"));
        let (tx_addr, up_addr) = (format!("10.{NET}.0.1/24"), format!("10.{NET}.0.254/24"));
        let (down_addr, rx_addr) = (format!("10.{NET}.1.254/24"), format!("10.{NET}.1.2/24"));
        let (to_rx, to_tx) = (format!("10.{NET}.1.0/24"), format!("10.{NET}.0.0/24"));
        let (via_up, via_down) = (format!("10.{NET}.0.254"), format!("10.{NET}.1.254"));
        let mut ok = [&path.tx, &path.router, &path.rx]
            .iter()
            .all(|ns| ip(&["netns", "add", ns]) && ip(&["-n", ns, "link", "set", "lo", "up"]));
        ok =
            ok && ip(&[
                "link",
                "add",
                &tx_dev,
                "netns",
                &path.tx,
                "type",
                "veth",
                "peer",
                "name",
                &up_dev,
                "netns",
                &path.router,
            ]) && ip(&[
                "link",
                "add",
                &down_dev,
                "netns",
                &path.router,
                "type",
                "veth",
                "peer",
                "name",
                &path.rx_dev,
                "netns",
                &path.rx,
            ]);
        for (ns, dev, addr) in [
            (&path.tx, &tx_dev, &tx_addr),
            (&path.router, &up_dev, &up_addr),
            (&path.router, &down_dev, &down_addr),
            (&path.rx, &path.rx_dev, &rx_addr),
        ] {
            ok = ok
                && ip(&["-n", ns, "addr", "add", addr, "dev", dev])
                && ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        ok = ok
            && ip(&["-n", &path.tx, "route", "add", &to_rx, "via", &via_up])
            && ip(&["-n", &path.rx, "route", "add", &to_tx, "via", &via_down])
            && Command::new("ip")
                .args(["netns", "exec", &path.router, "sysctl", "-qw"])
                .arg("net.ipv4.ip_forward=1")
                .status()
                .is_ok_and(|s| s.success());
        if gso_max_segs_one {
            ok = ok && ip(&["-n", &path.tx, "link", "set", &tx_dev, "gso_max_segs", "1"]);
        }
        assert!(
            ok,
            "create three namespaces, two veth pairs and routes (iproute2, root)"
        );
        path
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        for ns in [&self.tx, &self.router, &self.rx] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The packet count of named counter `name` in table `ip rbdissect` of namespace `ns`.
fn counter(ns: &str, name: &str) -> u64 {
    nft_named(ns, "ip", "rbdissect", name).0
}

/// Waits for `child` to exit within [`DEADLINE`], reading its piped output meanwhile, and
/// kills it (by its PID) when it does not.
fn wait_bounded(mut child: Child, what: &str) -> Output {
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap();
            panic!(
                "{what} still running after {DEADLINE:?}: {}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn interrupt(child: &Child) {
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -INT {}", child.id());
}

/// What dumpcap says on stderr: `File: ...` once capturing, `Packets: N` as it writes.
enum Capture {
    Started,
    Written(u64),
}

/// Reads dumpcap's stderr (lines ended by `\r` or `\n`) into events.
fn follow(mut stderr: impl Read + Send + 'static, events: mpsc::Sender<Capture>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut line = Vec::new();
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            for &b in &buf[..n] {
                // `Packets: N ` stays unterminated until the next update: its space ends it.
                let counted = b == b' ' && line.starts_with(b"Packets:") && line.len() > 9;
                if b != b'\r' && b != b'\n' && !counted {
                    line.push(b);
                    continue;
                }
                let text = String::from_utf8_lossy(&line).trim().to_string();
                line.clear();
                let event = if text.starts_with("File:") {
                    Some(Capture::Started)
                } else {
                    text.strip_prefix("Packets:")
                        .and_then(|n| n.trim().parse().ok())
                        .map(Capture::Written)
                };
                if let Some(event) = event {
                    let _ = events.send(event);
                }
            }
        }
    });
}

#[test]
#[ignore = "needs root: network namespaces, nftables and a packet capture (tshark, dumpcap)"]
fn dissector_marks_the_gaps_and_repeats_nft_made_and_the_sink_counted() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    for tool in ["tshark", "dumpcap", "nft"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "{tool} is missing: apt-get install tshark nftables (scripts/test.sh does)"
        );
    }
    let _guard = traffic_lock();
    let dir = tempfile::tempdir().unwrap();
    let out = ringblast(&[
        "generate",
        "wireshark-dissector",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_ok(&out);
    let lua = dir.path().join("ringblast.lua");
    for case in &CASES {
        let start = Instant::now();
        run_case(case, &lua, dir.path());
        eprintln!(
            "{} header, GSO {}: {:.1} s",
            if case.compact { "compact" } else { "full" },
            if case.gso { "on" } else { "off" },
            start.elapsed().as_secs_f64()
        );
    }
}

fn run_case(case: &Case, lua: &std::path::Path, dir: &std::path::Path) {
    let path = Path::create(case.tag, case.gso);
    // The sequence number's low 32 bits, as bits after the UDP header's start: payload offset
    // 20 in the full header, 14 in the compact one (UDP's own header is 8 bytes).
    let seq_bits = if case.compact {
        (8 + 14) * 8
    } else {
        (8 + 20) * 8
    };
    let set = |seqs: &[u32]| {
        seqs.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    nft(
        &path.router,
        &format!(
            "table ip rbdissect {{\n counter dropped {{ }}\n counter duplicated {{ }}\n \
             chain path {{\n  type filter hook forward priority 0; policy accept;\n  \
             udp dport {PORT} @th,{seq_bits},32 {{ {} }} counter name \"dropped\" drop\n  \
             udp dport {PORT} @th,{seq_bits},32 {{ {} }} counter name \"duplicated\" dup to 10.{NET}.1.2\n \
             }}\n}}\n",
            set(&DROPPED),
            set(&DUPLICATED)
        ),
    );
    // What reaches the sink's veth, in and out: the capture must hold exactly this.
    nft(
        &path.rx,
        &format!(
            "table ip rbdissect {{\n counter arrived {{ }}\n counter inbound {{ }}\n counter outbound {{ }}\n \
             chain pre {{\n  type filter hook prerouting priority -300; policy accept;\n  \
             iifname \"{dev}\" udp dport {PORT} counter name \"arrived\"\n  \
             iifname \"{dev}\" meta l4proto {{ tcp, udp }} th dport {PORT} counter name \"inbound\"\n \
             }}\n chain post {{\n  type filter hook postrouting priority 300; policy accept;\n  \
             oifname \"{dev}\" meta l4proto {{ tcp, udp }} th sport {PORT} counter name \"outbound\"\n \
             }}\n}}\n",
            dev = path.rx_dev
        ),
    );

    let capture = dir.join(format!("{}.pcapng", case.tag));
    let mut dumpcap = Command::new("ip")
        .args(["netns", "exec", &path.rx, "dumpcap", "-i", &path.rx_dev])
        .args(["-f", &format!("port {PORT}"), "-B", "32", "-w"])
        .arg(&capture)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dumpcap");
    let (events_tx, events) = mpsc::channel();
    follow(dumpcap.stderr.take().unwrap(), events_tx);
    match events.recv_timeout(DEADLINE) {
        Ok(Capture::Started) => {}
        _ => {
            let _ = dumpcap.kill();
            panic!("dumpcap did not start capturing on {}", path.rx_dev);
        }
    }

    let secret = secret_file();
    let secret = secret.path().to_str().unwrap();
    let listen = format!("10.{NET}.1.2:{PORT}");
    // A compact header's numbers are masked by a proven run's token (`proto::proof`), so the
    // compact runs go without a secret: the dissector reads what is on the wire.
    let (sink_auth, send_auth): (&[&str], &[&str]) = if case.compact {
        (&["--insecure-control"], &[])
    } else {
        (&["--secret-file", secret], &["--secret-file", secret])
    };
    let sink = Command::new("ip")
        .args(["netns", "exec", &path.rx, bin(), "sink", "--json"])
        .args(sink_auth)
        .args(["--listen", &listen])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bound(Some(&path.rx), PORT);
    let count = COUNT.to_string();
    let flows = FLOWS.to_string();
    let send = Command::new("ip")
        .args(["netns", "exec", &path.tx, bin(), "send", "--json"])
        .args(send_auth)
        .args(["--to", &listen, "--rate", "20kpps"])
        .args(["--count", &count, "--flows", &flows])
        .args(case.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let send = wait_bounded(send, "ringblast send");
    assert_ok(&send);
    // The sender has its verdict: the sink has settled every gap.
    interrupt(&sink);
    let sink = wait_bounded(sink, "ringblast sink");
    assert_ok(&sink);
    let (send, sink) = (
        summaries(&send).send.unwrap(),
        summaries(&sink).sink.unwrap(),
    );

    // Every packet that reached the sink's veth is in the capture: wait until dumpcap says it
    // wrote them all, then stop it.
    let on_veth = counter(&path.rx, "inbound") + counter(&path.rx, "outbound");
    let mut written = 0;
    let waited = Instant::now();
    while written < on_veth {
        let left = DEADLINE.saturating_sub(waited.elapsed());
        match events.recv_timeout(left) {
            Ok(Capture::Written(n)) => written = n,
            Ok(Capture::Started) => {}
            Err(_) => break,
        }
    }
    interrupt(&dumpcap);
    let dumped = wait_bounded(dumpcap, "dumpcap");
    assert!(dumped.status.success(), "dumpcap exit {:?}", dumped.status);
    assert_eq!(
        written, on_veth,
        "the capture holds every packet nft counted on the sink's veth"
    );

    let tshark = Command::new("tshark")
        .arg("-X")
        .arg(format!("lua_script:{}", lua.display()))
        .args(["-o", &format!("ringblast.port:{PORT}"), "-r"])
        .arg(&capture)
        .args(["-T", "fields", "-E", "separator=/t"])
        .args([
            "-e",
            "udp.dstport",
            "-e",
            "ringblast.form",
            "-e",
            "ringblast.seq",
            "-e",
            "ringblast.segments",
            "-e",
            "ringblast.gap.missing",
            "-e",
            "ringblast.expert.gap",
            "-e",
            "ringblast.repeat.of",
            "-e",
            "ringblast.expert.repeat",
            "-e",
            "ringblast.ctl.type",
            "-e",
            "ringblast.ctl.sealed",
            "-e",
            "ringblast.expert.malformed",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tshark");
    let tshark = wait_bounded(tshark, "tshark");
    assert_ok(&tshark);
    let text = String::from_utf8(tshark.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len() as u64, on_veth, "tshark read the whole capture");

    let (k, j) = (
        counter(&path.router, "dropped"),
        counter(&path.router, "duplicated"),
    );
    let sent = u(&send, "tx_packets");
    assert_eq!(sent, COUNT, "{send}");
    assert_eq!(
        k,
        FLOWS * DROPPED.len() as u64,
        "nft dropped every chosen datagram"
    );
    assert_eq!(
        j,
        FLOWS * DUPLICATED.len() as u64,
        "nft duplicated every chosen datagram"
    );
    if case.gso {
        let sends = snmp(&path.tx, "Udp", "OutDatagrams");
        assert!(
            sends * GSO >= sent && sends * 2 <= sent,
            "{sends} UDP sends for {sent} datagrams: the sender used GSO"
        );
    }

    let datagrams: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == PORT.to_string()).collect();
    let decoded = datagrams.iter().filter(|r| !r[2].is_empty()).count() as u64;
    let arrived = counter(&path.rx, "arrived");
    assert_eq!(
        datagrams.len() as u64,
        arrived,
        "the capture's datagrams to the port are the ones nft saw arrive"
    );
    assert_eq!(
        arrived,
        sent - k + j,
        "sent, less the dropped, plus the duplicates"
    );
    assert_eq!(decoded, arrived, "the dissector decoded every datagram");
    let form = if case.compact { "1" } else { "0" };
    assert!(
        datagrams.iter().all(|r| r[1] == form && r[3].is_empty()),
        "every datagram has the {} header and holds one datagram",
        if case.compact { "compact" } else { "full" }
    );

    let marked = |value: usize, expert: usize| -> Vec<&Vec<&str>> {
        let rows: Vec<_> = datagrams
            .iter()
            .copied()
            .filter(|r| !r[value].is_empty())
            .collect();
        let flagged = datagrams.iter().filter(|r| r[expert] == "1").count();
        assert_eq!(flagged, rows.len(), "expert info on every marked datagram");
        rows
    };
    let gaps = marked(4, 5);
    let missing: u64 = gaps.iter().map(|r| r[4].parse::<u64>().unwrap()).sum();
    let repeats = marked(6, 7).len() as u64;
    assert_eq!(gaps.len() as u64, FLOWS * 2, "two gaps per flow");
    assert_eq!(missing, k, "the gaps add up to what nft dropped");
    assert_eq!(repeats, j, "one repeat per duplicate nft made");
    assert_eq!(u(&sink, "rx_lost"), missing, "{sink}");
    assert_eq!(u(&sink, "rx_duplicates"), repeats, "{sink}");
    assert_eq!(u(&sink, "rx_packets"), sent - k, "{sink}");
    assert_eq!(u(&sink, "rx_invalid"), 0, "{sink}");
    assert_eq!(u(&sink, "rx_kernel_drops"), 0, "{sink}");

    // The control channel: the handshake in the clear, everything after it sealed.
    assert!(rows.iter().all(|r| r[10].is_empty()), "nothing malformed");
    let frames: Vec<(u8, bool)> = rows
        .iter()
        .filter(|r| !r[8].is_empty())
        .flat_map(|r| {
            let sealed: Vec<bool> = r[9].split(',').map(|s| s == "1").collect();
            r[8].split(',')
                .map(|t| t.parse::<u8>().unwrap())
                .zip(sealed)
                .collect::<Vec<_>>()
        })
        .collect();
    for kind in [1, 2, 3, 4, 6, 7, 10, 11] {
        assert!(
            frames.iter().any(|&(t, _)| t == kind),
            "control message type {kind} decoded: {frames:?}"
        );
    }
    // Without a secret (the compact cases) nothing is sealed.
    assert!(
        frames
            .iter()
            .all(|&(t, sealed)| sealed == (t > 5 && !case.compact)),
        "handshake frames (types 1-5) in the clear, the rest sealed when a secret is set: {frames:?}"
    );
}
