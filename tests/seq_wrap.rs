//! Sequence numbers that wrap, end to end between two network namespaces this test creates:
//! a 32-bit compact-header sequence (18-byte payloads) that crosses 2^32, with and without a
//! control channel, and a full header's 64-bit sequence that crosses the 2^32 boundary at
//! 2^63. The start is set with `send --first-seq N`, a hidden option that exists for this
//! (documented in docs/testing.md): every flow's sequence numbers start at N. With packets
//! below 32 bytes it takes N below 2^32 (it took only N below 2^31, which made a compact
//! crossing untestable): a sink that has not heard the stated start (no control channel, or
//! a first packet before the hello) extends a first compact number next to 0, which is the
//! true number for any N below 2^32.
//!
//! With a control channel the sender's goodbye gives the sink each flow's true 64-bit end,
//! so a verdict of 0 lost also shows the sink's extended numbers really went past the boundary
//! (a sink that had not extended them would have a tail of about 2^32 to call lost).
//!
//! Each run's counts are exact against the kernel: the sink received every datagram the
//! sender sent and the kernel delivered (`Udp InDatagrams` of the sink's namespace), with
//! nothing lost, duplicated or reordered. An nft counter on the sink's input hook reads the
//! sequence field on the wire, so the test sees for itself that half of each flow's packets
//! went out before the boundary and half after it.

mod common;

use std::time::Duration;

use common::{proc::Proc, *};

const PORT: u16 = 7800;
const FLOWS: u64 = 2;
const COUNT: u64 = 20_000;
/// Packets of each flow before the boundary (and after it).
const HALF: u64 = COUNT / FLOWS / 2;

/// One wrap case: the payload size, the first sequence number, and the nft match for the
/// sequence field before and after the boundary (`@th` offsets are bits from the UDP header:
/// the compact header's 32-bit sequence is at payload byte 14, the full header's 64-bit
/// sequence at payload byte 16, its high half first).
struct Case {
    name: &'static str,
    size: u64,
    first_seq: u64,
    before: String,
    after: String,
    control: bool,
}

fn run(lab: &Lab, net: u8, case: &Case) {
    let to = format!("10.{net}.0.2:{PORT}");
    nft(
        &lab.rx,
        &format!(
            "table ip rbwrap {{\n counter before {{ }}\n counter after {{ }}\n chain in {{\n type filter hook input priority 0; policy accept;\n udp dport {PORT} {} counter name before\n udp dport {PORT} {} counter name after\n }}\n}}\n",
            case.before, case.after
        ),
    );
    // No secret: a proven run masks a compact header's numbers with its token
    // (`proto::proof`), and the nft counters read the numbers as they are on the wire.
    let mut sink = Proc::ringblast(
        Some(&lab.rx),
        &[
            "sink",
            "--json",
            "--listen",
            &to,
            "--insecure-control",
            "--accept-unannounced",
        ],
    );
    sink.wait_line("startup: workers released", Duration::from_secs(10));
    let before = snmp(&lab.rx, "Udp", "InDatagrams");
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "send", "--json"])
        .args(["--to", &to])
        .args(["--control", if case.control { "auto" } else { "off" }])
        .args(["--first-seq", &case.first_seq.to_string()])
        .args(["--size", &case.size.to_string()])
        .args(["--flows", &FLOWS.to_string()])
        .args(["--count", &COUNT.to_string(), "--rate", "20kpps"])
        .output()
        .unwrap();
    assert_ok(&out);
    wait_udp_drained(&lab.rx, PORT);
    sink.interrupt();
    let (status, sink_out, sink_err) = sink.finish();
    assert!(status.success(), "{sink_err}");
    let delivered = snmp(&lab.rx, "Udp", "InDatagrams") - before;
    let (crossing_before, _) = nft_named(&lab.rx, "ip", "rbwrap", "before");
    let (crossing_after, _) = nft_named(&lab.rx, "ip", "rbwrap", "after");
    nft(&lab.rx, "delete table ip rbwrap\n");
    let send = summaries(&out).send.unwrap();
    let sink = last_summary(&sink_out, "sink");
    let name = case.name;
    eprintln!(
        "{name}: sent {}, delivered {delivered}, on the wire {crossing_before} before and {crossing_after} after the boundary, sink received {} lost {}",
        u(&send, "tx_packets"),
        u(&sink, "rx_packets"),
        u(&sink, "rx_lost")
    );

    assert_eq!(
        (crossing_before, crossing_after),
        (FLOWS * HALF, FLOWS * HALF),
        "{name}: the sequence field on the wire crossed the boundary"
    );
    assert_eq!(u(&send, "tx_packets"), COUNT, "{name}: {send}");
    assert_eq!(u(&send, "tx_errors"), 0, "{name}: {send}");
    assert_eq!(
        delivered, COUNT,
        "{name}: Udp InDatagrams of the sink's namespace"
    );
    assert_eq!(u(&sink, "rx_packets"), delivered, "{name}: {sink}");
    assert_eq!(u(&sink, "rx_bytes"), COUNT * case.size, "{name}: {sink}");
    for key in [
        "rx_lost",
        "rx_duplicates",
        "rx_reordered",
        "rx_invalid",
        "rx_kernel_drops",
    ] {
        assert_eq!(u(&sink, key), 0, "{name}: {key} in {sink}");
    }
    if case.control {
        // The sink's verdict for this sender, which knew the stated start and the true end.
        let verdict = &send["sink"];
        assert_eq!(u(verdict, "rx_packets"), delivered, "{name}: {send}");
        assert_eq!(u(verdict, "rx_lost"), 0, "{name}: {send}");
    }
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn a_compact_headers_32_bit_sequence_crosses_2_pow_32_exactly() {
    let _guard = traffic_lock();
    let net = 245;
    let lab = Lab::create("sw", net);
    // The compact sequence field is at bits 176..208 from the UDP header.
    let first_seq = (1u64 << 32) - HALF;
    for control in [true, false] {
        run(
            &lab,
            net,
            &Case {
                name: if control {
                    "compact, control channel"
                } else {
                    "compact, --control off"
                },
                size: 18,
                first_seq,
                before: format!("@th,176,32 >= {}", first_seq as u32),
                after: format!("@th,176,32 < {HALF}"),
                control,
            },
        );
    }
}

#[test]
#[ignore = "needs root: network namespaces and nftables"]
fn a_full_headers_64_bit_sequence_crosses_a_2_pow_32_boundary_exactly() {
    let _guard = traffic_lock();
    let net = 246;
    let lab = Lab::create("sf", net);
    // 2^63 is a 2^32 boundary where the high half also turns over its top bit: the full
    // sequence's high 32 bits (bits 192..224 from the UDP header) go 0x7fffffff -> 0x80000000.
    run(
        &lab,
        net,
        &Case {
            name: "full, control channel",
            size: 64,
            first_seq: (1u64 << 63) - HALF,
            before: "@th,192,32 == 0x7fffffff".into(),
            after: "@th,192,32 == 0x80000000".into(),
            control: true,
        },
    );
}

#[test]
fn a_compact_start_beyond_32_bits_is_refused_naming_the_limit() {
    let out = ringblast(&[
        "send",
        "--to",
        "127.0.0.1:9",
        "--control",
        "off",
        "--count",
        "1",
        "--size",
        "18",
        "--first-seq",
        "4294967296",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("compact header carries 32 bits of sequence")
            && err.contains("use --first-seq below 4294967296"),
        "{err}"
    );
}
