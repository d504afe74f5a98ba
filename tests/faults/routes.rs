//! Failed sends on the sender's side: its link down and up, a blackhole route and a prohibit
//! route, each held until the sender's own metrics show 1000 failed sends. Failed sends are
//! counted as `tx_errors` and `send_failed`, never as the sink's loss; what was sent reaches
//! the sink (the sink namespace's `Udp InDatagrams`, the sink runs `--no-gro`).
//!
//! Taking a link down has one window where a send is accepted and still dropped on the
//! sender's own host: `dev_close` swaps the device's qdisc for `noop` (which drops and
//! answers `NET_XMIT_CN`, a success to `sendmsg`) before `NETDEV_DOWN` removes the routes.
//! Such a datagram was sent and never arrived, so the sink's loss must equal exactly
//! `tx_packets - InDatagrams`; the test bounds that window, and the route cases allow none.

use std::{net::SocketAddr, time::Duration};

use super::kit::*;

/// Runs 30 000 datagrams at 10 kpps; once 5000 have arrived, `fault(rig, true)` breaks the path
/// until the sender has failed 1000 sends, then `fault(rig, false)` mends it. At most
/// `accepted_then_dropped` sends may be accepted by the kernel and dropped on the sender's
/// host (the sink counts exactly those as lost).
fn broken_path(
    tag: &str,
    net: u8,
    accepted_then_dropped: u64,
    fault: impl Fn(&Rig, bool),
) -> (serde_json::Value, serde_json::Value) {
    let _guard = traffic_lock();
    let mut rig = Rig::new(tag, net);
    rig.start_sink(&["--no-gro"]);
    let before = snmp(&rig.lab.rx, "Udp", "InDatagrams");
    let tx_metrics: SocketAddr = format!("10.{net}.0.1:9978").parse().unwrap();
    let metrics = tx_metrics.to_string();
    let sender = rig.spawn_send(&[
        "--rate",
        "10kpps",
        "--count",
        "30000",
        "--metrics",
        &metrics,
    ]);
    let rx = |r: &Rig| metric(&r.scrape(), "ringblast_rx_packets_total");
    assert!(wait_until(Duration::from_secs(10), || rx(&rig) >= 5_000));
    fault(&rig, true);
    let tx = rig.lab.tx.clone();
    let failed = wait_until(Duration::from_secs(10), || {
        metric(&scrape(&tx, tx_metrics), "ringblast_tx_errors_total") >= 1_000
    });
    fault(&rig, false);
    assert!(failed, "the sender's sends failed");
    let send = sender.summary("send");
    let delivered = snmp(&rig.lab.rx, "Udp", "InDatagrams") - before;
    let (sent, errors) = (u(&send, "tx_packets"), u(&send, "tx_errors"));
    assert!(
        delivered <= sent,
        "{delivered} arrived, {sent} sent: {send}"
    );
    let dropped_on_host = sent - delivered;
    assert!(
        dropped_on_host <= accepted_then_dropped,
        "{dropped_on_host} accepted sends never arrived (at most {accepted_then_dropped}): {send}"
    );
    let sink = rig.stop_sink(&[
        ("ringblast_rx_packets_total", delivered),
        ("ringblast_rx_lost_packets_total", dropped_on_host),
    ]);
    assert_eq!(sent + errors, 30_000, "every send went or failed: {send}");
    assert!(errors >= 1_000, "{send}");
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
    assert_eq!(
        u(&sink, "rx_lost"),
        dropped_on_host,
        "failed sends are not loss; only accepted sends that never arrived are: {sink}"
    );
    assert_eq!(u(verdict(&send), "send_failed"), errors, "{send}");
    assert_eq!(u(verdict(&send), "rx_lost"), dropped_on_host, "{send}");
    (send, sink)
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn link_down_and_up_on_the_sender_gives_failed_sends_not_loss() {
    require_root();
    // 500 sends is 50 ms at 10 kpps, far more than the qdisc swap takes.
    let (send, sink) = broken_path("rl", 225, 500, |rig, down| {
        let state = if down { "down" } else { "up" };
        sh(&[
            "ip",
            "-n",
            &rig.lab.tx,
            "link",
            "set",
            &rig.lab.tx_dev,
            state,
        ]);
    });
    row(
        "sender link down/up: tx_errors / sink send_failed",
        u(&send, "tx_errors"),
        u(&send["sink"], "send_failed"),
    );
    assert_eq!(
        u(&send["tx_errors_by_errno"], "ENETUNREACH"),
        u(&send, "tx_errors"),
        "{send}"
    );
    assert_eq!(u(&sink, "rx_kernel_drops"), 0, "{sink}");
}

fn route_case(tag: &str, net: u8, kind: &'static str) -> serde_json::Value {
    let (send, _) = broken_path(tag, net, 0, move |rig, add| {
        let dst = format!("10.{net}.0.2/32");
        let verb = if add { "add" } else { "del" };
        sh(&["ip", "-n", &rig.lab.tx, "route", verb, kind, &dst]);
    });
    send
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn a_blackhole_route_gives_failed_sends_not_loss() {
    require_root();
    let send = route_case("rb", 226, "blackhole");
    row(
        "blackhole route: tx_errors / sink send_failed",
        u(&send, "tx_errors"),
        u(&send["sink"], "send_failed"),
    );
    // EINVAL has no errno class of its own.
    assert_eq!(
        u(&send["tx_errors_by_errno"], "other"),
        u(&send, "tx_errors"),
        "{send}"
    );
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn a_prohibit_route_gives_failed_sends_not_loss() {
    require_root();
    let send = route_case("rp", 227, "prohibit");
    row(
        "prohibit route: tx_errors / sink send_failed",
        u(&send, "tx_errors"),
        u(&send["sink"], "send_failed"),
    );
    // EACCES has no errno class of its own.
    assert_eq!(
        u(&send["tx_errors_by_errno"], "other"),
        u(&send, "tx_errors"),
        "{send}"
    );
}
