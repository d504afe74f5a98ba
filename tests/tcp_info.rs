//! TCP_INFO sampled by the sender: with segments of the data connections dropped by nft on
//! input (so the sender really retransmits them; an output drop is only a local send error)
//! inside a private namespace, the sender's retransmits equal the namespace's own
//! `/proc/net/snmp` RetransSegs count, less at most one FIN per connection resent after the
//! worker's final sample; every open connection is sampled, and the stream still arrives
//! exactly.

mod common;

use std::time::Duration;

use common::{Netns, last_summary, proc::Proc, u};

const WAIT: Duration = Duration::from_secs(15);

#[test]
#[ignore = "needs root: network namespaces and nft"]
fn dropped_segments_show_as_retransmits_and_every_connection_is_sampled() {
    let _lock = common::traffic_lock();
    assert!(
        common::is_root(),
        "this test needs root (network namespaces, nft)"
    );
    let ns = Netns::create("ti");
    let port = common::free_port().to_string();
    // Only the data connections lose segments: a connection is marked by its first payload, the
    // record magic `RBLS` (a control frame starts with its length), so SYNs and the control
    // connection, whose retransmits the sender does not report, are never dropped.
    common::nft(
        &ns.0,
        &format!(
            "table inet rbloss {{\n chain inp {{\n  type filter hook input priority 0; policy accept;\n  tcp dport {port} ct mark 0 @ih,0,32 0x52424c53 ct mark set 1\n  tcp dport {port} ct mark 1 numgen random mod 40 == 0 drop\n }}\n}}\n"
        ),
    );
    let listen = format!("127.0.0.1:{port}");
    let mut sink = Proc::ringblast(
        Some(&ns.0),
        &[
            "sink",
            "--proto",
            "tcp",
            "--listen",
            &listen,
            "--json",
            "--interval",
            "100ms",
        ],
    );
    sink.wait_line("tcp sink listening on", WAIT);
    let mut send = Proc::ringblast(
        Some(&ns.0),
        &[
            "send",
            "--proto",
            "tcp",
            "--to",
            &listen,
            "--conns",
            "2",
            "--size",
            "4096",
            "--rate",
            "200Mbit",
            "--duration",
            "2s",
            "--json",
            "--interval",
            "200ms",
        ],
    );
    let live = send.wait_line("srtt max", WAIT);
    assert!(live.contains("cwnd") && live.contains("retrans"), "{live}");
    let (status, out, err) = send.finish();
    assert!(status.success(), "sender failed: {status}\n{err}");
    let tx = last_summary(&out, "send");
    sink.wait_tcp_sink_conns(2, 0, WAIT);
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "sink failed: {status}\n{err}");
    let rx = last_summary(&out, "sink");
    let kernel = common::snmp(&ns.0, "Tcp", "RetransSegs");
    let seen = u(&tx, "retransmits");
    eprintln!("retransmits: the sender's {seen}, the kernel's RetransSegs {kernel}");
    assert!(
        seen > 0,
        "no retransmits seen with 1 in 40 segments dropped: {tx}"
    );
    // Each connection's final TCP_INFO is taken once the sink has acknowledged all its records,
    // so every data segment's resends are in it; only its FIN, dropped too (1 in 40) and resent
    // after that sample, can be missing: at most one per connection.
    assert!(
        seen <= kernel && kernel - seen <= 2,
        "{seen} retransmits against the kernel's {kernel}: {tx}"
    );
    // The summary holds the last sample taken while connections were open: both, or one when the
    // other was already closing at the end.
    assert!((1..=2).contains(&u(&tx, "tcp_info_conns")), "{tx}");
    assert!(
        u(&tx, "cwnd_segments") > 0 && u(&tx, "srtt_us_max") > 0,
        "{tx}"
    );
    assert_eq!(u(&tx, "tx_records"), u(&rx, "rx_records"), "{tx}\n{rx}");
    assert_eq!(
        u(&tx["verdict"], "rx_records"),
        u(&rx, "rx_records"),
        "{tx}"
    );
}
