//! Message caps, character sets and sums, and a property test of the JSON round trip.

use proptest::prelude::*;

use crate::control::frame::{FrameError, decode, encode};
use crate::control::msg::*;
use crate::latency_clock::ClockKind;

/// A version-3 frame of type `kind` with `payload` as it stands (no encoder in the way).
fn raw_frame(kind: u8, payload: &str) -> Vec<u8> {
    let len = (payload.len() + 2) as u32;
    [&len.to_be_bytes()[..], &[3, kind], payload.as_bytes()].concat()
}

#[test]
fn malformed_clock_frames_are_refused() {
    let malformed = [
        (12, r#"{}"#),
        (12, r#"{"t1_ns":-1}"#),
        (12, r#"{"t1_ns":1,"t2_ns":2}"#),
        (13, r#"{"t1_ns":1,"t2_ns":2}"#),
        (13, r#"{"t1_ns":1,"t2_ns":2,"t3_ns":"3"}"#),
        (
            14,
            r#"{"offset_ns":18446744073709551615,"error_bound_ns":1,"rtt_ns":1}"#,
        ),
        (14, r#"{"offset_ns":1.5,"error_bound_ns":1,"rtt_ns":1}"#),
        (14, r#"{"offset_ns":1,"error_bound_ns":1}"#),
    ];
    for (kind, payload) in malformed {
        let e = decode(&raw_frame(kind, payload)).unwrap_err();
        assert!(
            matches!(e, FrameError::Malformed { .. }),
            "{payload}: {e:?}"
        );
    }
    let invalid = [
        (
            13,
            r#"{"t1_ns":1,"t2_ns":9,"t3_ns":8}"#,
            "before it received",
        ),
        (
            14,
            r#"{"offset_ns":0,"error_bound_ns":49,"rtt_ns":100}"#,
            "half its round trip",
        ),
        (
            14,
            r#"{"offset_ns":0,"error_bound_ns":99999999999999,"rtt_ns":100}"#,
            "between",
        ),
        (
            14,
            r#"{"offset_ns":0,"error_bound_ns":60000000001,"rtt_ns":60000000001}"#,
            "exceeds",
        ),
    ];
    for (kind, payload, why) in invalid {
        let e = decode(&raw_frame(kind, payload)).unwrap_err().to_string();
        assert!(e.contains(why), "{payload}: {e}");
    }
    let ok = decode(&raw_frame(
        14,
        r#"{"offset_ns":-5,"error_bound_ns":50,"rtt_ns":100}"#,
    ));
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn malformed_hello_boot_ids_and_verdict_clocks_are_refused() {
    let hello = |boot_id: &str| {
        format!(
            r#"{{"name":"a","epoch":1,"flows":[],"size":64,"rate_pps":null,"elapsed_ns":0,"reconnect":0,"boot_id":{boot_id}}}"#
        )
    };
    assert!(decode(&raw_frame(6, &hello(r#""dd8301e1-b789""#))).is_ok());
    let long = format!("\"{}\"", "a".repeat(65));
    for bad in [r#""""#, r#""dd83 01""#, r#""zz""#, long.as_str()] {
        let e = decode(&raw_frame(6, &hello(bad))).unwrap_err();
        assert!(matches!(e, FrameError::Invalid { .. }), "{bad}: {e:?}");
    }
    let clock = |c: &str| {
        format!(
            r#"{{"sink_session":"s","name":"n","epoch":1,"totals":{{"rx_packets":0,"rx_bytes":0,"rx_lost":0,"rx_reordered":0,"rx_duplicates":0,"rx_invalid":0,"rx_kernel_drops":0,"rx_unconfirmed":0,"tx_failed":0}},"flows":[],"latency_p50_ns":0,"latency_p99_ns":0,"latency_max_ns":0,"clock":{c}}}"#
        )
    };
    let good = r#"{"kind":"same_clock","offset_ns":0,"error_bound_ns":0,"control_rtt_ns":null,"latency_unknown_packets":0,"latency_clamped_packets":0}"#;
    assert!(decode(&raw_frame(11, &clock(good))).is_ok());
    let invalid = [
        r#"{"kind":"unknown","offset_ns":0,"error_bound_ns":null,"control_rtt_ns":null,"latency_unknown_packets":0,"latency_clamped_packets":0,"reason":"x"}"#,
        r#"{"kind":"offset_corrected","offset_ns":null,"error_bound_ns":null,"control_rtt_ns":null,"latency_unknown_packets":0,"latency_clamped_packets":0}"#,
        r#"{"kind":"unknown","offset_ns":null,"error_bound_ns":null,"control_rtt_ns":null,"latency_unknown_packets":0,"latency_clamped_packets":0}"#,
        r#"{"kind":"same_clock","offset_ns":0,"error_bound_ns":0,"control_rtt_ns":null,"latency_unknown_packets":0,"latency_clamped_packets":0,"reason":"x"}"#,
        r#"{"kind":"unknown","offset_ns":null,"error_bound_ns":null,"control_rtt_ns":null,"latency_unknown_packets":0,"latency_clamped_packets":0,"reason":"a\nb"}"#,
    ];
    for c in invalid {
        let e = decode(&raw_frame(11, &clock(c))).unwrap_err();
        assert!(matches!(e, FrameError::Invalid { .. }), "{c}: {e:?}");
    }
    let guessed = good.replace("same_clock", "guessed");
    let e = decode(&raw_frame(11, &clock(&guessed))).unwrap_err();
    assert!(matches!(e, FrameError::Malformed { .. }), "{e:?}");
    let kind = serde_json::to_string(&ClockKind::SameClock).unwrap();
    assert_eq!(kind, r#""same_clock""#);
}

#[test]
fn names_are_checked() {
    assert!(check_name("name", "host-1.example:eth0/q@3_x").is_ok());
    assert!(check_name("name", "").is_err());
    assert!(check_name("name", "a b").is_err());
    assert!(check_name("name", &"a".repeat(129)).is_err());
    assert!(check_name("name", &"a".repeat(128)).is_ok());
}

#[test]
fn verdict_add_sums() {
    let mut a = FlowVerdict {
        rx_packets: 1,
        tx_failed: u64::MAX,
        ..Default::default()
    };
    a.add(&FlowVerdict {
        rx_packets: 2,
        tx_failed: 1,
        ..Default::default()
    });
    assert_eq!((a.rx_packets, a.tx_failed), (3, u64::MAX));
}

proptest! {
    #[test]
    fn clock_messages_round_trip(
        t1 in any::<u64>(),
        t2 in 0..u64::MAX / 2,
        hold in 0..u64::MAX / 2,
        offset in any::<i64>(),
        rtt in 0..MAX_CLOCK_RTT_NS,
        drift in 0..1_000_000_000u64,
    ) {
        let messages = [
            Message::ClockProbe(ClockProbe { t1_ns: t1 }),
            Message::ClockReply(ClockReply { t1_ns: t1, t2_ns: t2, t3_ns: t2 + hold }),
            Message::ClockEstimate(ClockEstimate {
                offset_ns: offset,
                error_bound_ns: rtt.div_ceil(2) + drift,
                rtt_ns: rtt,
            }),
        ];
        for m in messages {
            let bytes = encode(&m).unwrap();
            let (back, used) = decode(&bytes).unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(back, m);
        }
    }

    #[test]
    fn progress_json_round_trips(flows in proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u64>()), 0..40)) {
        let m = Message::Progress(Progress {
            flows: flows.into_iter().map(|(flow, next_seq, failed)| FlowProgress { flow, next_seq, failed }).collect(),
        });
        let back = Message::from_json(m.kind(), &m.to_json()).unwrap().unwrap();
        prop_assert_eq!(back, m);
    }
}
