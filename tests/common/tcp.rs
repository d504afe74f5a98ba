//! TCP test helpers: a `sink --proto tcp` started and stopped on its own lines, and a
//! `send --proto tcp` run to its summary.

use std::time::Duration;

use serde_json::Value;

use super::{last_summary, proc::Proc};

pub const WAIT: Duration = Duration::from_secs(15);

/// The arguments of a TCP sink on `listen` with JSON lines every 100 ms.
pub fn sink_args(listen: &str) -> [&str; 8] {
    [
        "sink",
        "--proto",
        "tcp",
        "--listen",
        listen,
        "--json",
        "--interval",
        "100ms",
    ]
}

/// Starts a TCP sink (with `extra` arguments) and returns it once it listens.
pub fn start_sink_with(ns: Option<&str>, listen: &str, extra: &[&str]) -> Proc {
    let mut args = sink_args(listen).to_vec();
    args.extend_from_slice(extra);
    let mut sink = Proc::ringblast(ns, &args);
    sink.wait_line("tcp sink listening on", WAIT);
    sink
}

pub fn start_sink(ns: Option<&str>, listen: &str) -> Proc {
    start_sink_with(ns, listen, &[])
}

/// Stops a sink once it has accepted `accepts` connections and all of them ended; returns
/// its summary and its stderr.
pub fn stop_sink_with_err(mut sink: Proc, accepts: u64) -> (Value, String) {
    sink.wait_tcp_sink_conns(accepts, 0, WAIT);
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "sink failed: {status}\n{err}");
    (last_summary(&out, "sink"), err)
}

/// As [`stop_sink_with_err`], the summary alone.
pub fn stop_sink(sink: Proc, accepts: u64) -> Value {
    stop_sink_with_err(sink, accepts).0
}

/// Starts `send --proto tcp --json ARGS`, running on while the caller does more.
pub fn start_send(ns: Option<&str>, args: &[&str]) -> Proc {
    let mut all = vec!["send", "--proto", "tcp", "--json"];
    all.extend_from_slice(args);
    Proc::ringblast(ns, &all)
}

fn run_send(ns: Option<&str>, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    start_send(ns, args).finish()
}

/// Runs a TCP sender to its end; returns its exit code, summary and stderr.
pub fn send_status(ns: Option<&str>, args: &[&str]) -> (Option<i32>, Value, String) {
    let (status, out, err) = run_send(ns, args);
    (status.code(), last_summary(&out, "send"), err)
}

/// Runs a TCP sender that must succeed; returns its summary.
pub fn send(ns: Option<&str>, args: &[&str]) -> Value {
    let (status, out, err) = run_send(ns, args);
    assert!(status.success(), "sender failed: {status}\n{err}");
    last_summary(&out, "send")
}

/// Counts, with nft on `hook` (`output` or `input`) of namespace `ns`, the IPv4 TCP data
/// streams to `port`: every SYN to the port (`syns`), and the segments of data connections
/// only (`data`: data offset 8, the timestamp option; `others`: any other shape). A data
/// connection is told from a control connection to the same port by its first payload bytes,
/// the record magic `RBLS` (a control frame starts with its length, never that), which marks
/// the connection in conntrack; segments before it carry no payload.
pub fn count_streams(ns: &str, hook: &str, port: u16) {
    count_streams_matching(ns, hook, &port.to_string(), &format!("tcp dport {port}"));
}

/// As [`count_streams`], for the segments from each connection's client to its server on any
/// port (a `pair` picks its own): conntrack's original direction.
pub fn count_streams_any_port(ns: &str, hook: &str) {
    count_streams_matching(ns, hook, "any", "meta l4proto tcp ct direction original");
}

fn count_streams_matching(ns: &str, hook: &str, tag: &str, matcher: &str) {
    super::nft(
        ns,
        &format!(
            "table ip rbtcp_{hook}_{tag} {{\n counter syns {{ }}\n counter data {{ }}\n counter others {{ }}\n chain c {{\n type filter hook {hook} priority 0; policy accept;\n {matcher} ct mark 0 @ih,0,32 0x52424c53 ct mark set 1\n {matcher} tcp flags & syn == syn counter name syns\n {matcher} ct mark 1 tcp flags & syn == 0 tcp doff 8 counter name data\n {matcher} ct mark 1 tcp flags & syn == 0 tcp doff != 8 counter name others\n }}\n}}\n"
        ),
    );
}

/// What [`count_streams`] counted.
#[derive(Debug)]
pub struct Streams {
    /// SYNs to the port: data and control connections, retried SYNs included.
    pub syns: u64,
    /// Segments of the data connections (headers only ones, such as ACKs and FINs, included).
    pub segments: u64,
    /// Their payload: bytes less 20 (IPv4) + 32 (TCP with timestamps) per segment.
    pub payload: u64,
}

/// Reads [`count_streams`]'s counters; asserts every data segment had data offset 8.
pub fn streams(ns: &str, hook: &str, port: u16) -> Streams {
    streams_counted(ns, hook, &port.to_string())
}

/// Reads [`count_streams_any_port`]'s counters.
pub fn streams_any_port(ns: &str, hook: &str) -> Streams {
    streams_counted(ns, hook, "any")
}

fn streams_counted(ns: &str, hook: &str, tag: &str) -> Streams {
    let table = format!("rbtcp_{hook}_{tag}");
    let (others, _) = super::nft_named(ns, "ip", &table, "others");
    assert_eq!(
        others, 0,
        "a data segment without data offset 8 on {hook} in {ns}"
    );
    let (syns, _) = super::nft_named(ns, "ip", &table, "syns");
    let (segments, bytes) = super::nft_named(ns, "ip", &table, "data");
    Streams {
        syns,
        segments,
        payload: bytes - segments * (20 + 32),
    }
}

/// Turns tail loss probes off in `ns`, so that only a retransmission timeout (200 ms at
/// least) can resend a segment: nft's byte counts include retransmitted bytes, and a probe
/// fires after about 2 RTTs without an ACK (a few ms on a loaded 2-core host). Callers assert
/// `Tcp RetransSegs` stayed put, so a retransmission fails a test, never inflates it.
pub fn no_tail_loss_probes(ns: &str) {
    assert!(
        std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv4.tcp_early_retrans=0"
            ])
            .status()
            .is_ok_and(|s| s.success()),
        "turn tail loss probes off in {ns} (sysctl, procps)"
    );
}

/// Asserts nft's payload count equals `bytes` exactly when the kernel resent nothing
/// (`retransmitted`, the `Tcp RetransSegs` delta), else that it exceeds `bytes` by at most one
/// IPv4 loopback/veth MSS (65 483 B, more than any segment on a 1500-byte veth) per segment.
pub fn assert_payload(counted: &Streams, bytes: u64, retransmitted: u64, ctx: &str) {
    if retransmitted == 0 {
        assert_eq!(counted.payload, bytes, "nft payload, {ctx}");
    } else {
        let most = retransmitted * 65_483;
        assert!(
            (bytes..=bytes + most).contains(&counted.payload),
            "nft payload of {counted:?} vs {bytes} with {retransmitted} resent, {ctx}"
        );
    }
}
