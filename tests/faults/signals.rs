//! SIGSTOP/SIGCONT and SIGKILL of either side. The truth for what reached the sink is the sink
//! namespace's `Udp InDatagrams` (datagrams read from its sockets; the sinks run `--no-gro`,
//! so one per datagram).

use std::time::Duration;

use nix::sys::signal::Signal;

use super::kit::*;

/// How long a stopped process stays stopped: the length of the fault, not a synchronisation.
const STOPPED: Duration = Duration::from_millis(300);

fn rx_metric(rig: &Rig) -> u64 {
    metric(&rig.scrape(), "ringblast_rx_packets_total")
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn stopping_the_sink_or_the_sender_loses_nothing() {
    require_root();
    let _guard = traffic_lock();
    let mut rig = Rig::new("ss", 251);
    rig.start_sink(&["--no-gro"]);
    let before = snmp(&rig.lab.rx, "Udp", "InDatagrams");
    let mut sender = rig.spawn_send(&["--rate", "10kpps", "--count", "30000"]);
    rig.sink().wait_line("sink: sender", Duration::from_secs(5));
    // The sink stops until its socket holds 512 KiB (event), the buffer holds it all.
    rig.sink().signal(Signal::SIGSTOP);
    rig.sink().wait_state('T');
    let (pid, port) = (rig.sink().pid(), rig.port);
    let queued = wait_until(Duration::from_secs(10), || {
        udp_socket_stats(pid, port).1 >= 512 << 10
    });
    rig.sink().signal(Signal::SIGCONT);
    assert!(queued, "datagrams queued while the sink was stopped");
    // Then the sender stops once the sink has counted 20 000.
    assert!(wait_until(Duration::from_secs(10), || rx_metric(&rig) >= 20_000));
    sender.signal(Signal::SIGSTOP);
    sender.wait_state('T');
    std::thread::sleep(STOPPED);
    sender.signal(Signal::SIGCONT);
    assert!(sender.alive());
    let send = sender.summary("send");
    let sent = u(&send, "tx_packets");
    let sink = rig.stop_sink(&[("ringblast_rx_packets_total", sent)]);
    let delivered = snmp(&rig.lab.rx, "Udp", "InDatagrams") - before;
    row(
        "SIGSTOP/SIGCONT sink, then sender: InDatagrams / rx_packets",
        delivered,
        u(&sink, "rx_packets"),
    );
    assert_eq!(sent, 30_000, "{send}");
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
    assert_exact(&send, &sink);
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn a_killed_sender_leaves_no_false_loss_and_a_new_one_is_exact() {
    require_root();
    let _guard = traffic_lock();
    let mut rig = Rig::new("sk", 252);
    rig.start_sink(&["--no-gro"]);
    let before = snmp(&rig.lab.rx, "Udp", "InDatagrams");
    let first = rig.spawn_send(&["--rate", "10kpps", "--count", "100000", "--name", "a"]);
    rig.sink()
        .wait_line("sink: sender a", Duration::from_secs(5));
    assert!(wait_until(Duration::from_secs(10), || rx_metric(&rig) >= 5_000));
    first.signal(Signal::SIGKILL);
    let (status, _, _) = first.finish();
    assert_eq!(status.code(), None, "killed by a signal");
    let second = rig.send(&["--rate", "10kpps", "--count", "5000", "--name", "b"]);
    assert_eq!(u(&second, "tx_packets"), 5_000, "{second}");
    assert_eq!(u(verdict(&second), "rx_packets"), 5_000, "{second}");
    assert_eq!(u(verdict(&second), "rx_lost"), 0, "{second}");
    let delivered = snmp(&rig.lab.rx, "Udp", "InDatagrams") - before;
    let sink = rig.stop_sink(&[("ringblast_rx_packets_total", delivered)]);
    row(
        "SIGKILL sender + new sender: InDatagrams / rx_packets",
        delivered,
        u(&sink, "rx_packets"),
    );
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
    assert_eq!(
        u(&sink, "rx_lost"),
        0,
        "the killed sender's unseen tail is not loss: {sink}"
    );
    for key in [
        "rx_duplicates",
        "rx_invalid",
        "rx_kernel_drops",
        "rx_reordered",
    ] {
        assert_eq!(u(&sink, key), 0, "{key}: {sink}");
    }
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn a_killed_sink_is_replaced_and_the_new_one_counts_exactly() {
    require_root();
    let _guard = traffic_lock();
    let mut rig = Rig::new("sj", 253);
    rig.start_sink(&["--no-gro"]);
    let sender = rig.spawn_send(&["--rate", "10kpps", "--count", "40000"]);
    rig.sink().wait_line("sink: sender", Duration::from_secs(5));
    assert!(wait_until(Duration::from_secs(10), || rx_metric(&rig) >= 5_000));
    let first = rig.sink.take().unwrap();
    first.signal(Signal::SIGKILL);
    let (status, _, _) = first.finish();
    assert_eq!(status.code(), None, "killed by a signal");
    // From here on only the new sink's socket can read datagrams in this namespace.
    let before = snmp(&rig.lab.rx, "Udp", "InDatagrams");
    rig.start_sink(&["--no-gro"]);
    let send = sender.summary("send");
    let delivered = snmp(&rig.lab.rx, "Udp", "InDatagrams") - before;
    let sink = rig.stop_sink(&[("ringblast_rx_packets_total", delivered)]);
    row(
        "SIGKILL sink + new sink: InDatagrams / new sink rx_packets",
        delivered,
        u(&sink, "rx_packets"),
    );
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
    assert_eq!(
        u(&sink, "rx_lost"),
        0,
        "the new sink counts nothing before it joined: {sink}"
    );
    assert_eq!(
        u(&send, "tx_packets") + u(&send, "tx_errors"),
        40_000,
        "every send either went or failed: {send}"
    );
    assert!(delivered > 1_000, "the new sink received traffic: {sink}");
}
