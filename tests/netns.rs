//! A sender and a sink in two network namespaces joined by a veth pair that this test creates
//! (unique names, 10.x addresses) and deletes afterwards. Each side is held to its own
//! namespace's `Udp` counters: the sender's to `OutDatagrams`, the sink's to `InDatagrams`.

mod common;

use common::*;

#[test]
#[ignore = "needs root: creating network namespaces"]
fn paced_traffic_over_veth_between_namespaces_is_exact() {
    let _guard = traffic_lock();
    let lab = Lab::create("n", 203);
    let (tx_before, rx_before) = (UdpSnmp::read(&lab.tx), UdpSnmp::read(&lab.rx));
    let (send, sink) = lab.run(
        7000,
        &["--listen", "10.203.0.2:7000", "--duration", "4s"],
        &[
            "--to",
            "10.203.0.2:7000",
            "--rate",
            "20kpps",
            "--duration",
            "2s",
            "--size",
            "512",
            "--flows",
            "4",
        ],
    );
    let sent = UdpSnmp::read(&lab.tx).since(tx_before);
    let arrived = UdpSnmp::read(&lab.rx).since(rx_before);
    let ctx = format!("sender side {sent:?}\nsink side {arrived:?}\nsend {send}\nsink {sink}");
    assert_exact(&send, &sink);
    assert_eq!(u(&send, "tx_packets"), sent.out_datagrams, "{ctx}");
    assert_eq!(u(&sink, "rx_packets"), arrived.in_datagrams, "{ctx}");
    assert_eq!(arrived.rcvbuf_errors, 0, "{ctx}");
    // 2 s at 20 kpps is 40 000; the window is 0.25 % each way, for where the duration's
    // last tick falls against the pacer's.
    let tx = u(&send, "tx_packets");
    assert!(
        (39_900..=40_100).contains(&tx),
        "2 s at 20 kpps sent {tx}: {send}"
    );
}
