//! TCP_INFO sampled by the sender's reporter: with segments dropped by nft on input (so the
//! sender really retransmits them; an output drop is only a local send error) inside a private
//! namespace, the sender's retransmits are seen (and never more than the namespace's own
//! `/proc/net/snmp` RetransSegs count), every open connection is sampled, and the stream still
//! arrives exactly.

mod common;

use std::{process::Command, time::Duration};

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
    let rule = format!(
        "add table inet rbloss; add chain inet rbloss inp {{ type filter hook input priority 0; }}; add rule inet rbloss inp tcp dport {port} numgen random mod 40 == 0 drop"
    );
    let nft = Command::new("ip")
        .args(["netns", "exec", &ns.0, "nft", &rule])
        .status()
        .is_ok_and(|s| s.success());
    assert!(nft, "nft {rule:?}");
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
    sink.wait_line("conns 0 open  accepted 2 ", WAIT);
    sink.interrupt();
    let (status, out, err) = sink.finish();
    assert!(status.success(), "sink failed: {status}\n{err}");
    let rx = last_summary(&out, "sink");
    let kernel = common::snmp(&ns.0, "Tcp", "RetransSegs");
    let seen = u(&tx, "retransmits");
    assert!(
        seen > 0,
        "no retransmits seen with 1 in 40 segments dropped: {tx}"
    );
    assert!(
        seen <= kernel,
        "{seen} retransmits > the kernel's {kernel}: {tx}"
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
