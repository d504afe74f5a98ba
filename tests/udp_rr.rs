//! UDP request/response (`--pattern rr`) between two network namespaces this test creates,
//! with nftables dropping requests on their way in to the sink and responses on their way back
//! in to the sender. The counts are held to the kernel's: each namespace's `Udp` counters
//! (every request and every response is one datagram) and the drop rules' own counters, which
//! say how many were lost in each direction.

mod common;

use common::*;

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn requests_and_responses_are_counted_exactly_with_loss_each_way() {
    let _guard = traffic_lock();
    assert!(is_root(), "this test needs root (namespaces, nftables)");
    let lab = Lab::create("rr", 232);
    // About 5 % of requests die on the sink's side, about 5 % of responses on the sender's.
    nft(
        &lab.rx,
        "table ip rbrr {\n chain in {\n type filter hook input priority 0; policy accept;\n udp dport 7100 numgen random mod 20 == 0 counter drop\n }\n}\n",
    );
    nft(
        &lab.tx,
        "table ip rbrr {\n chain in {\n type filter hook input priority 0; policy accept;\n udp sport 7100 numgen random mod 20 == 0 counter drop\n }\n}\n",
    );
    let (tx_before, rx_before) = (UdpSnmp::read(&lab.tx), UdpSnmp::read(&lab.rx));
    let (send, sink) = lab.run(
        7100,
        &["--listen", "10.232.0.2:7100", "--duration", "8s"],
        &[
            "--to",
            "10.232.0.2:7100",
            "--pattern",
            "rr",
            "--request-size",
            "100",
            "--response-size",
            "300",
            "--depth",
            "8",
            "--flows",
            "4",
            "--count",
            "6000",
            "--response-timeout",
            "50ms",
        ],
    );
    let tx = UdpSnmp::read(&lab.tx).since(tx_before);
    let rx = UdpSnmp::read(&lab.rx).since(rx_before);
    let lost_there = nft_rule_packets(&lab.rx, &["ruleset"])[0];
    let lost_back = nft_rule_packets(&lab.tx, &["ruleset"])[0];
    common::schema::assert_valid(&send);
    let rr = &send["rr"];
    let sent = u(&send, "tx_packets");
    assert_eq!(sent, 6000, "{send}");
    assert!(
        lost_there > 100 && lost_back > 100,
        "the drops took effect: {lost_there} requests, {lost_back} responses"
    );
    // The sender's namespace sent every request and took in every response that survived.
    assert_eq!(tx.out_datagrams, sent, "{tx:?}");
    assert_eq!(
        tx.in_datagrams,
        u(rr, "transactions") + u(rr, "unmatched_responses"),
        "{tx:?} {rr}"
    );
    assert_eq!(
        u(rr, "unmatched_responses"),
        0,
        "no response came later than 50 ms: {rr}"
    );
    // The sink's namespace took in every request that survived and answered each once.
    assert_eq!(rx.in_datagrams, sent - lost_there, "{rx:?}");
    assert_eq!(u(&sink, "rx_packets"), rx.in_datagrams, "{sink}");
    assert_eq!(
        rx.out_datagrams, rx.in_datagrams,
        "one answer per request: {rx:?}"
    );
    assert_eq!(u(&sink, "rx_answered"), rx.out_datagrams, "{sink}");
    assert_eq!(u(&sink, "rx_unanswered"), 0, "{sink}");
    assert_eq!(u(&sink, "rx_lost"), lost_there, "{sink}");
    // Each direction's loss is the rule's count, and nothing else timed out.
    assert_eq!(u(rr, "lost_requests"), lost_there, "{rr}");
    assert_eq!(u(rr, "lost_responses"), lost_back, "{rr}");
    assert_eq!(u(rr, "timeouts"), lost_there + lost_back, "{rr}");
    assert_eq!(u(rr, "transactions"), sent - lost_there - lost_back, "{rr}");
    assert_eq!(u(rr, "response_bytes"), 300 * u(rr, "transactions"), "{rr}");
    let rtt = &rr["rtt"];
    assert!(
        u(rtt, "min_ns") > 0
            && u(rtt, "min_ns") <= u(rtt, "p50_ns")
            && u(rtt, "p50_ns") <= u(rtt, "max_ns"),
        "{rtt}"
    );
}

/// An injector sniffs the sender's one request off the namespace's loopback and answers it
/// from the sink's address and port, as an off-path attacker who guessed the epoch and the
/// sequence number would: 50 responses with the request's header but not its proof, and 50
/// with its proof but another epoch. The sink never sees the request (nft drops it), so the
/// only responses are forged: none may complete a transaction, every one is unmatched, and
/// the request is lost on its way there.
#[test]
#[ignore = "needs root: a network namespace, nftables, an AF_PACKET sniffer and a raw socket"]
fn a_forged_response_completes_no_transaction() {
    use std::{
        net::{Ipv4Addr, SocketAddrV4},
        time::Duration,
    };

    use common::{inject, proc::Proc};

    let _guard = traffic_lock();
    assert!(is_root(), "this test needs root");
    let ns = Netns::create("rrf");
    nft(
        &ns.0,
        "table ip rbrrf {\n chain in {\n type filter hook input priority 0; policy accept;\n udp dport 7101 counter drop\n }\n}\n",
    );
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap().to_string();
    let mut sink = Proc::ringblast(
        Some(&ns.0),
        &[
            "sink",
            "--listen",
            "127.0.0.1:7101",
            "--json",
            "--secret-file",
            &secret,
        ],
    );
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    let before = UdpSnmp::read(&ns.0);
    let injector = spawn_in_netns(&ns.0, move || {
        let (sender, request) = inject::sniff(7101, |p| p[5] & 0x02 != 0);
        let raw = inject::raw_socket();
        let from = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7101);
        let mut response = request[..64].to_vec();
        response[5] = (response[5] & !0x02) | 0x04;
        for i in 0..100 {
            let mut forged = response.clone();
            if i % 2 == 0 {
                // The request's header, not its proof.
                forged[32] ^= 0xff;
            } else {
                // Its proof, another epoch.
                forged[15] ^= 0x01;
            }
            inject::spoof(&raw, from, sender, &forged);
            std::thread::sleep(Duration::from_millis(2));
        }
        100u64
    });
    let send = Proc::ringblast(
        Some(&ns.0),
        &[
            "send",
            "--to",
            "127.0.0.1:7101",
            "--json",
            "--secret-file",
            &secret,
            "--pattern",
            "rr",
            "--response-timeout",
            "3s",
            "--duration",
            "2s",
        ],
    );
    let injected = injector.join().expect("the injector");
    let (status, out, err) = send.finish();
    sink.interrupt();
    let (sink_status, _, sink_err) = sink.finish();
    assert!(status.success(), "the sender: {status}\n{err}");
    assert!(sink_status.success(), "the sink: {sink_status}\n{sink_err}");
    let kernel = UdpSnmp::read(&ns.0).since(before);
    let send = last_summary(&out, "send");
    let rr = &send["rr"];
    let ctx = format!("{kernel:?}\n{send}");
    // One request, waiting its 3 s; the rule dropped it before the sink's socket.
    assert_eq!(u(&send, "tx_packets"), 1, "{ctx}");
    assert_eq!(nft_rule_packets(&ns.0, &["ruleset"])[0], 1, "{ctx}");
    // Every datagram the namespace took in was a forgery, and each is unmatched.
    assert_eq!(kernel.in_datagrams, injected, "{ctx}");
    assert_eq!(u(rr, "unmatched_responses"), injected, "{ctx}");
    assert_eq!(u(rr, "transactions"), 0, "{ctx}");
    assert_eq!(
        (
            u(rr, "timeouts"),
            u(rr, "lost_requests"),
            u(rr, "lost_responses")
        ),
        (1, 1, 0),
        "{ctx}"
    );
    assert!(rr["rtt"].is_null(), "{ctx}");
}

/// A sink that knows a sender neither by a hello nor by a proof (`--control off`, no secret)
/// answers no longer than the request: a spoofed source could make it amplify nothing. nft
/// counts the answers' bytes on the sink's way out.
#[test]
#[ignore = "needs root: a network namespace and nftables"]
fn an_unannounced_sender_gets_answers_no_longer_than_its_requests() {
    use std::time::Duration;

    use common::proc::Proc;

    let _guard = traffic_lock();
    assert!(is_root(), "this test needs root");
    let ns = Netns::create("rra");
    nft(
        &ns.0,
        "table ip rbrra {\n counter answers {}\n chain out {\n type filter hook output priority 0; policy accept;\n udp sport 7102 counter name \"answers\"\n }\n}\n",
    );
    let mut sink = Proc::ringblast(
        Some(&ns.0),
        &["sink", "--listen", "127.0.0.1:7102", "--json"],
    );
    sink.wait_line("control: listening on tcp", Duration::from_secs(10));
    let args = |control: &'static str| {
        [
            "send",
            "--to",
            "127.0.0.1:7102",
            "--json",
            "--pattern",
            "rr",
            "--request-size",
            "64",
            "--response-size",
            "1000",
            "--count",
            "2000",
            "--control",
            control,
        ]
    };
    let off = Proc::ringblast(Some(&ns.0), &args("off")).finish();
    let (packets, bytes) = nft_named(&ns.0, "ip", "rbrra", "answers");
    let on = Proc::ringblast(Some(&ns.0), &args("auto")).finish();
    let (all_packets, all_bytes) = nft_named(&ns.0, "ip", "rbrra", "answers");
    sink.interrupt();
    let _ = sink.finish();
    assert!(off.0.success() && on.0.success(), "{}\n{}", off.2, on.2);
    let (off, on) = (last_summary(&off.1, "send"), last_summary(&on.1, "send"));
    // IPv4 and UDP headers are 28 bytes a datagram.
    assert_eq!(packets, u(&off["rr"], "transactions"), "{off}");
    assert_eq!(
        bytes,
        packets * (28 + 64),
        "answers as long as the requests: {off}"
    );
    assert_eq!(u(&off["rr"], "response_bytes"), 64 * packets, "{off}");
    let announced = all_packets - packets;
    assert_eq!(announced, u(&on["rr"], "transactions"), "{on}");
    assert_eq!(
        all_bytes - bytes,
        announced * (28 + 1000),
        "full answers: {on}"
    );
}
