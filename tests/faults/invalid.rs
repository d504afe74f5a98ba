//! Datagrams that are not ringblast's, sent from the sender's namespace by this test: foreign
//! payloads, zero-length, truncated and other-version headers, flow ids beyond `--max-flows`,
//! oversized (65 507-byte) datagrams, then 1 M random ones. The test classifies each datagram
//! as it makes it; the sink must count each one as invalid by that reason, exactly.

use std::{net::UdpSocket, time::Duration};

use super::kit::*;

use ringblast::proto::header::VERSION;

const MAGIC: [u8; 4] = *b"RBLS";
const REASONS: [&str; 4] = ["short", "magic", "version", "flow_id"];

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A valid-looking header for flow `flow`, version `version`.
fn header(version: u8, flow: u16, seq: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(32);
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&[version, 0]);
    h.extend_from_slice(&0u32.to_be_bytes());
    h.extend_from_slice(&flow.to_be_bytes());
    h.extend_from_slice(&7u32.to_be_bytes());
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend_from_slice(&0u64.to_be_bytes());
    h
}

/// The reason the sink must give (index into `REASONS`).
fn classify(d: &[u8]) -> usize {
    // Below 18 bytes even the compact header cannot fit; from there the magic decides (random
    // bytes never spell the compact magic "RBLC"), and the full header needs 32 bytes.
    assert!(
        d.len() < 4 || &d[..4] != b"RBLC",
        "the generator makes no compact header"
    );
    if d.len() < 18 {
        0
    } else if d[..4] != MAGIC {
        1
    } else if d.len() < 32 {
        0
    } else if d[4] != VERSION {
        2
    } else {
        let flow = u16::from_be_bytes(d[10..12].try_into().unwrap());
        assert!(flow >= 256, "the generator makes no valid header");
        3
    }
}

/// A random datagram: 0 to 96 bytes; a quarter start with the magic, half of those with
/// this build's version and a flow id of 256 or more.
fn random_datagram(rng: &mut XorShift, buf: &mut Vec<u8>) {
    buf.clear();
    let len = (rng.next() % 97) as usize;
    while buf.len() < len {
        buf.extend_from_slice(&rng.next().to_le_bytes());
    }
    buf.truncate(len);
    let r = rng.next();
    if len >= 4 && r.is_multiple_of(4) {
        buf[..4].copy_from_slice(&MAGIC);
        if len >= 12 && r.is_multiple_of(8) {
            buf[4] = VERSION;
            buf[10] |= 0x01;
        } else if len > 4 && buf[4] == VERSION {
            // Random bytes that happen to spell this version: keep them invalid by version.
            buf[4] ^= 0x80;
        }
    }
}

fn by_reason(text: &str, reason: &str) -> u64 {
    let label = format!("reason=\"{reason}\"");
    text.lines()
        .filter(|l| l.starts_with("ringblast_rx_invalid_packets_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn foreign_zero_length_truncated_oversized_and_random_datagrams_are_invalid_by_reason() {
    require_root();
    let _guard = traffic_lock();
    let mut rig = Rig::new("iv", 228);
    rig.start_sink(&[]);
    let (pid, port, to) = (rig.sink().pid(), rig.port, rig.to());
    let src = format!("10.{}.0.1:0", rig.net);
    let sent: [u64; 4] = in_netns(&rig.lab.tx, move || {
        let sock = UdpSocket::bind(&src).unwrap();
        sock.connect(&to).unwrap();
        let mut sent = [0u64; 4];
        let mut total = 0u64;
        let mut send = |d: &[u8], sent: &mut [u64; 4]| {
            sock.send(d).unwrap();
            sent[classify(d)] += 1;
            total += 1;
            // Keep the sink's socket from overflowing: wait while it holds 2 MiB or more.
            if total.is_multiple_of(500) && udp_socket_stats(pid, port).1 >= 2 << 20 {
                let drained = wait_until(Duration::from_secs(10), || {
                    udp_socket_stats(pid, port).1 < 512 << 10
                });
                assert!(drained, "the sink stopped reading");
            }
        };
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut buf = Vec::new();
        for i in 0..1000u64 {
            // Foreign: a DNS-looking query.
            let mut foreign = vec![0x12, 0x34, 0x01, 0x00, 0x00, 0x01];
            foreign.extend((0..90).map(|k| (i + k) as u8));
            send(&foreign, &mut sent);
            send(&[], &mut sent);
            send(&header(VERSION, 0, i)[..20], &mut sent);
            send(&header(VERSION, 0, i)[..31], &mut sent);
            send(&header(VERSION + 1, 0, i), &mut sent);
            send(&header(VERSION, 10_000, i), &mut sent);
        }
        let big = vec![0xA5u8; 65_507];
        for _ in 0..100 {
            send(&big, &mut sent);
        }
        for _ in 0..1_000_000 {
            random_datagram(&mut rng, &mut buf);
            send(&buf, &mut sent);
        }
        sent
    });
    let expect: Vec<(String, u64)> = REASONS
        .iter()
        .zip(sent)
        .map(|(r, n)| (r.to_string(), n))
        .collect();
    let total: u64 = sent.iter().sum();
    let (ns, addr) = (rig.lab.rx.clone(), rig.metrics_addr());
    let mut last = String::new();
    let counted = wait_until(Duration::from_secs(10), || {
        last = scrape(&ns, addr);
        expect.iter().all(|(r, n)| by_reason(&last, r) == *n)
    });
    let got: Vec<u64> = REASONS.iter().map(|r| by_reason(&last, r)).collect();
    assert!(counted, "metrics by reason {got:?}, sent {expect:?}");
    let sink = rig.stop_sink(&[("ringblast_rx_invalid_packets_total", total)]);
    for (reason, n) in &expect {
        row(
            &format!("invalid datagrams: sent / counted `{reason}`"),
            *n,
            u(&sink["rx_invalid_by_reason"], reason),
        );
        assert_eq!(
            u(&sink["rx_invalid_by_reason"], reason),
            *n,
            "{reason}: {sink}"
        );
    }
    assert_eq!(u(&sink, "rx_invalid"), total, "{sink}");
    assert_eq!(u(&sink, "rx_packets"), 0, "{sink}");
    assert_eq!(u(&sink, "rx_kernel_drops"), 0, "{sink}");
    assert_eq!(u(&sink, "rx_lost"), 0, "{sink}");
}
