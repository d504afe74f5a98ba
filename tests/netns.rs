//! A sender and a sink in two network namespaces joined by a veth pair that this test creates
//! (unique names, 10.x addresses) and deletes afterwards.

mod common;

use common::*;

#[test]
#[ignore = "needs root: creating network namespaces"]
fn paced_traffic_over_veth_between_namespaces_is_exact() {
    let _guard = traffic_lock();
    let lab = Lab::create("n", 203);
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
    assert_exact(&send, &sink);
    assert!(u(&send, "tx_packets") >= 39_000, "{send}");
}
