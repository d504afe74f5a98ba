//! Who gets a slot in the sink's session table (issue 24, part 3), with real datagrams between
//! two namespaces and the sink namespace's `Udp InDatagrams` as the observer: a sender run
//! without a control channel is one sender however many flows and source ports it uses, its
//! per-sender series equal the JSON's entries and add up to the sink's total; a flood of forged
//! headers (full and compact, random epochs, flows and source ports) never takes the slots of a
//! sender that said hello, and every forged datagram is counted as invalid or in the bounded
//! share, never as that sender's.

use std::{collections::BTreeMap, net::UdpSocket, time::Duration};

use ringblast::proto::header::Header;
use serde_json::Value;

use super::kit::*;

/// `ringblast_rx_sender_packets_total` of every sender in a scrape.
fn sender_series(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("ringblast_rx_sender_packets_total{sender=\""))
        .filter_map(|r| {
            let (name, rest) = r.split_once("\"}")?;
            Some((name.to_string(), rest.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// The JSON summary's senders, by name.
fn json_senders(sink: &Value) -> BTreeMap<String, u64> {
    sink["senders"]
        .as_array()
        .unwrap_or_else(|| panic!("no senders in {sink}"))
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), u(s, "rx_packets")))
        .collect()
}

#[test]
#[ignore = "needs root: network namespaces"]
fn runs_without_a_control_channel_are_one_sender_each_and_their_series_add_up() {
    require_root();
    let _guard = traffic_lock();
    let mut rig = Rig::new("an", 229);
    rig.start_sink(&["--no-gro", "--accept-unannounced"]);
    let before = snmp(&rig.lab.rx, "Udp", "InDatagrams");
    let mut sent = 0;
    for _ in 0..3 {
        let send = rig.send(&[
            "--control",
            "off",
            "--flows",
            "4",
            "--queues",
            "2",
            "--count",
            "4000",
            "--rate",
            "20kpps",
        ]);
        sent += u(&send, "tx_packets");
    }
    let delivered = snmp(&rig.lab.rx, "Udp", "InDatagrams") - before;
    assert_eq!(delivered, sent, "the kernel delivered every datagram sent");
    // Sessions are attributed once 2 s old: wait until the series hold every packet.
    let (ns, addr) = (rig.lab.rx.clone(), rig.metrics_addr());
    let mut series = BTreeMap::new();
    let settled = wait_until(Duration::from_secs(10), || {
        series = sender_series(&scrape(&ns, addr));
        series.values().sum::<u64>() == delivered
    });
    assert!(
        settled,
        "per-sender series {series:?}, delivered {delivered}"
    );
    let sink = rig.stop_sink(&[("ringblast_rx_packets_total", delivered)]);
    let senders = json_senders(&sink);
    row(
        "3 control-less runs x 4 flows x 2 queues: InDatagrams / sink rx_packets",
        delivered,
        u(&sink, "rx_packets"),
    );
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
    // The series hold the same books, labelled IP/run- and a keyed digest instead of the epoch
    // the JSON names (the epoch is what an off-path injector would need).
    let counts = |m: &BTreeMap<String, u64>| {
        let mut v: Vec<u64> = m.values().copied().collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        counts(&senders),
        counts(&series),
        "the JSON's senders are the series: {sink}"
    );
    for label in series.keys() {
        let (ip, digest) = label
            .split_once("/run-")
            .unwrap_or_else(|| panic!("{label}"));
        assert!(
            senders.keys().all(|name| name != &format!("{ip}/{digest}")),
            "a label publishes an epoch: {label}"
        );
    }
    assert_eq!(
        senders.len(),
        3,
        "one sender per run, not per port: {senders:?}"
    );
    for (name, n) in &senders {
        assert!(name.starts_with(&format!("10.{}.0.1/", rig.net)), "{name}");
        assert_eq!(*n, 4000, "{name}: {sink}");
    }
    assert_eq!(u(&sink, "rx_lost"), 0, "{sink}");
}

/// Sends `count` forged datagrams from the sender namespace to `to`, alternating full and
/// compact headers with random epochs, flows below 256 and sequence numbers, from 32 sockets on
/// different source ports, keeping the sink's socket below 1 MiB queued. Returns the count.
fn flood(rig: &mut Rig, count: u64) -> std::thread::JoinHandle<u64> {
    let (pid, port, to) = (rig.sink().pid(), rig.port, rig.to());
    let (ns, src) = (rig.lab.tx.clone(), format!("10.{}.0.1:0", rig.net));
    std::thread::spawn(move || {
        in_netns(&ns, move || {
            let socks: Vec<UdpSocket> = (0..32)
                .map(|_| {
                    let s = UdpSocket::bind(&src).unwrap();
                    s.connect(&to).unwrap();
                    s
                })
                .collect();
            let mut x: u64 = 0x2545_F491_4F6C_DD1D;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut payload = [0u8; 64];
            for i in 0..count {
                let r = next();
                let h = Header {
                    flags: 0,
                    failed: 0,
                    flow: (r % 256) as u32,
                    epoch: (r >> 32) as u32,
                    seq: next() % 1_000_000,
                    timestamp_ns: 0,
                };
                let sock = &socks[(next() % 32) as usize];
                if i % 2 == 0 {
                    payload[..32].copy_from_slice(&h.to_bytes());
                    sock.send(&payload).unwrap();
                } else {
                    sock.send(&h.to_compact_bytes()).unwrap();
                }
                if i % 200 == 0 && udp_socket_stats(pid, port).1 >= 1 << 20 {
                    let drained = wait_until(Duration::from_secs(10), || {
                        udp_socket_stats(pid, port).1 < 256 << 10
                    });
                    assert!(drained, "the sink stopped reading");
                }
                // About 40 kpps, so the flood overlaps the whole authenticated run.
                if i % 40 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            count
        })
    })
}

/// A flood from the test while an authenticated sender runs into a sink with `sink_args`;
/// returns (flood sent, sink summary, sender summary, the sink namespace's InDatagrams delta).
fn flood_beside_a_sender(tag: &str, net: u8, sink_args: &[&str]) -> (u64, Value, Value, u64) {
    let mut rig = Rig::new(tag, net);
    let mut args = vec![
        "--no-gro",
        "--max-sessions",
        "64",
        "--unannounced-grace",
        "1ms",
    ];
    args.extend_from_slice(sink_args);
    rig.start_sink(&args);
    let before = snmp(&rig.lab.rx, "Udp", "InDatagrams");
    let forged = flood(&mut rig, 40_000);
    let send = rig.send(&[
        "--name", "legit", "--count", "12000", "--rate", "10kpps", "--flows", "4",
    ]);
    let forged = forged.join().unwrap();
    let delivered = snmp(&rig.lab.rx, "Udp", "InDatagrams") - before;
    let sink = rig.stop_sink(&[]);
    (forged, sink, send, delivered)
}

fn assert_legit_exact(forged: u64, sink: &Value, send: &Value, delivered: u64) -> u64 {
    let tx = u(send, "tx_packets");
    assert_eq!(tx, 12_000, "{send}");
    assert_eq!(
        delivered,
        tx + forged,
        "the kernel delivered every datagram"
    );
    let verdict = verdict(send);
    assert_eq!(u(verdict, "rx_packets"), tx, "{send}");
    assert_eq!(u(verdict, "rx_lost"), 0, "{send}");
    assert_eq!(u(verdict, "rx_invalid"), 0, "{send}");
    let senders = json_senders(sink);
    assert_eq!(senders.get("legit"), Some(&tx), "{sink}");
    let legit = sink["senders"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "legit"))
        .unwrap();
    assert_eq!(u(legit, "rx_lost"), 0, "{sink}");
    // The forged datagrams booked in the unannounced share (counted, never as legit's).
    u(sink, "rx_packets") - tx
}

#[test]
#[ignore = "needs root: network namespaces"]
fn a_forged_flood_never_takes_an_authenticated_senders_slots_and_is_refused_in_full() {
    require_root();
    let _guard = traffic_lock();
    let (forged, sink, send, delivered) = flood_beside_a_sender("fl", 230, &[]);
    let booked = assert_legit_exact(forged, &sink, &send, delivered);
    let reasons = &sink["rx_invalid_by_reason"];
    row(
        "forged flood (secret): sent / invalid unannounced",
        forged,
        u(reasons, "unannounced"),
    );
    assert_eq!(
        booked, 0,
        "a sink with a secret books no forged datagram: {sink}"
    );
    assert_eq!(u(reasons, "unannounced"), forged, "{sink}");
    assert_eq!(u(reasons, "table_full"), 0, "{sink}");
    assert_eq!(u(&sink, "rx_invalid"), forged, "{sink}");
    assert_eq!(json_senders(&sink).len(), 1, "no phantom senders: {sink}");
}

#[test]
#[ignore = "needs root: network namespaces"]
fn a_forged_flood_accepted_keeps_to_its_share_and_is_counted_in_full() {
    require_root();
    let _guard = traffic_lock();
    let (forged, sink, send, delivered) = flood_beside_a_sender(
        "fa",
        231,
        &["--accept-unannounced", "--max-unannounced-sessions", "16"],
    );
    let booked = assert_legit_exact(forged, &sink, &send, delivered);
    let reasons = &sink["rx_invalid_by_reason"];
    let (table_full, unannounced) = (u(reasons, "table_full"), u(reasons, "unannounced"));
    row(
        "forged flood (accepted, 16 slots): sent / table_full + booked",
        forged,
        table_full + booked,
    );
    assert_eq!(unannounced, 0, "{sink}");
    assert_eq!(table_full + booked, forged, "{sink}");
    assert!(table_full > forged / 2, "the share is bounded: {sink}");
    let senders = json_senders(&sink);
    assert_eq!(
        senders.values().sum::<u64>(),
        u(&sink, "rx_packets"),
        "{sink}"
    );
}
