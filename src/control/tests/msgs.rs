//! Message caps, character sets and sums, and a property test of the JSON round trip.

use proptest::prelude::*;

use crate::control::msg::*;

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
    fn progress_json_round_trips(flows in proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u64>()), 0..40)) {
        let m = Message::Progress(Progress {
            flows: flows.into_iter().map(|(flow, next_seq, failed)| FlowProgress { flow, next_seq, failed }).collect(),
        });
        let back = Message::from_json(m.kind(), &m.to_json()).unwrap().unwrap();
        prop_assert_eq!(back, m);
    }
}
