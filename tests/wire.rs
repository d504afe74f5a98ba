//! Wire-level honesty over a veth with a small MTU between two namespaces this test creates:
//! a `--size` that would fragment is refused with one line naming the MTU and the fix, and with
//! `--allow-fragments` the IP fragments sent equal the kernel's own `FragCreates` count.

mod common;

use std::process::Command;

use common::*;

#[test]
#[ignore = "needs root: network namespaces (the test command runs as root)"]
fn a_size_that_would_fragment_is_refused_and_allowed_fragments_are_counted() {
    let _guard = traffic_lock();
    let lab = Lab::create("mt", 205);
    let mtu_set = Command::new("ip")
        .args(["-n", &lab.tx, "link", "set", &lab.tx_dev, "mtu", "1280"])
        .status()
        .unwrap();
    assert!(mtu_set.success(), "set the veth MTU");
    let to = "10.205.0.2:7200";
    let refused = Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "send", "--to", to])
        .args(["--size", "1400", "--count", "10", "--control", "off"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the path MTU to 10.205.0.2 is 1280")
            && err.contains("2 IP fragments")
            && err.contains("use --size 1252 or less")
            && err.contains("--allow-fragments"),
        "{err}"
    );

    let before = snmp(&lab.tx, "Ip", "FragCreates");
    let (send, sink) = lab.run(
        7200,
        &["--listen", to, "--duration", "3s"],
        &[
            "--to",
            to,
            "--size",
            "1400",
            "--count",
            "3000",
            "--rate",
            "2kpps",
            "--allow-fragments",
        ],
    );
    let created = snmp(&lab.tx, "Ip", "FragCreates") - before;
    assert_eq!(u(&send, "tx_packets"), 3000, "{send}");
    assert_eq!(send["ip_fragments_per_datagram"], 2, "{send}");
    assert_eq!(
        u(&send, "ip_fragments"),
        created,
        "the kernel's FragCreates: {send}"
    );
    assert_exact(&send, &sink);
}
