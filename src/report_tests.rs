//! Unit tests of the reporter's JSON summaries and interval lines.

use super::*;

#[test]
fn sender_line_has_the_shared_shape() {
    let mut now = TxSample::default();
    now.traffic.packets = 1_190_240;
    now.traffic.bytes = 1_190_240 * 60;
    let line = tx_line("q0 n0", &now, &TxSample::default(), 1.0);
    assert_eq!(line, "q0 n0  1.19 Mpps   571 Mbit/s  errors: 0");
}

#[test]
fn sink_line_adds_loss_fields() {
    let mut now = RxSample::default();
    now.traffic.packets = 10;
    now.traffic.bytes = 640;
    now.traffic.lost = 2;
    now.worker.invalid[1] = 3;
    now.worker.kernel_drops = 4;
    let line = rx_line("total", &now, &RxSample::default(), 2.0);
    assert_eq!(
        line,
        "total      5 pps  2.56 kbit/s  errors: 0 lost: 2 reordered: 0 dup: 0 invalid: 3 kdrops: 4"
    );
}

#[test]
fn summaries_carry_the_interface_fields() {
    let mut t = TxSample::default();
    t.traffic.packets = 100;
    t.traffic.bytes = 6400;
    let v = tx_summary_json(&t, 2.0, json!({"tx_packets": 1, "epoch": 7}));
    assert_eq!(v["tx_packets"], 100, "extra never overrides");
    assert_eq!(v["pps"], 50);
    assert_eq!(v["bps"], 25600);
    assert_eq!(v["epoch"], 7);
    let r = rx_summary_json(&RxSample::default(), 0.0, json!({}));
    for key in [
        "rx_packets",
        "rx_bytes",
        "rx_lost",
        "rx_reordered",
        "rx_duplicates",
        "rx_invalid",
        "rx_kernel_drops",
        "duration_s",
        "pps",
        "bps",
    ] {
        assert!(r.get(key).is_some(), "{key}");
    }
    assert_eq!(r["pps"], 0);
}

#[test]
fn a_verdict_that_cannot_be_true_is_named_and_never_printed_as_the_count() {
    let books = |packets, lost, late, send_failed| SessionCounters {
        packets,
        lost,
        late,
        send_failed,
        ..SessionCounters::default()
    };
    // True: 20 000 sent, 19 990 received in time, 10 lost, 3 of them came late.
    assert_eq!(
        impossible_verdict(&books(19_993, 10, 3, 0), 20_000, 0),
        None
    );
    assert_eq!(
        impossible_verdict(&books(19_990, 0, 0, 10), 19_990, 10),
        None
    );
    // The review's forged jump: 20 001 received and 10^12 lost of 20 000 sent.
    let why = impossible_verdict(&books(20_001, 999_999_999_850, 0, 0), 20_000, 0).unwrap();
    assert!(why.contains("20001 packets received of the 20000"), "{why}");
    let why = impossible_verdict(&books(20_000, u64::MAX - 1, 0, 0), 20_000, 0).unwrap();
    assert!(why.contains("only 0 of the 20000 sent"), "{why}");
    let why = impossible_verdict(&books(19_504, 0, 0, 496), 20_000, 0).unwrap();
    assert!(
        why.contains("496 failed sends, but this sender had 0"),
        "{why}"
    );

    let verdict = Ok((
        "s".to_string(),
        crate::control::msg::Verdict {
            totals: crate::control::msg::FlowVerdict::of(&books(20_001, 999_999_999_850, 0, 0)),
            ..Default::default()
        },
    ));
    let mut summary = json!({});
    let (line, failure) = attach_verdict(&mut summary, &verdict, 20_000, 0);
    assert!(
        line.contains("cannot be true") && !line.contains("999999999850"),
        "{line}"
    );
    assert!(failure.is_some());
    assert!(summary["sink"]["impossible"].is_string(), "{summary}");
}

#[test]
fn the_one_loss_figure_counts_kernel_drops_and_says_unknown_when_nothing_was_due() {
    // A --burst 8 run of the issue: nothing lost on the path, 97 791 dropped by the sink's
    // kernel, 1 156 000 received: 7.8 % never counted, not 0.
    let ratio = loss_ratio(1_156_000, 0, 97_791).unwrap();
    assert!((ratio - 97_791.0 / 1_253_791.0).abs() < 1e-15, "{ratio}");
    assert_eq!(
        loss_words(1_156_000, 0, 97_791),
        "loss 7.800% (lost 0, kernel drops 97791)"
    );
    assert_eq!(loss_words(9, 1, 0), "loss 10.000% (lost 1, kernel drops 0)");
    assert_eq!(loss_ratio(0, 0, 0), None);
    assert!(loss_words(0, 0, 0).starts_with("loss unknown"));
    // Sums never wrap: the largest counters still give a ratio within [0, 1].
    let r = loss_ratio(u64::MAX, u64::MAX, u64::MAX).unwrap();
    assert!((0.0..=1.0).contains(&r), "{r}");
}
