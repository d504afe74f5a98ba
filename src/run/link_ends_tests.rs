use std::sync::Mutex;

use super::*;
use crate::{control::msg::FlowVerdict, latency_clock::ClockKind};

/// A ledger that reports each part's flows as `part * 100 + flow` sent.
struct PartCounts;

impl SenderLedger for PartCounts {
    const PROTO: DataProto = DataProto::Udp;

    fn flows(&self, part: usize) -> Vec<FlowStart> {
        (0..2)
            .map(|flow| FlowStart {
                flow,
                first_seq: 5,
                next_seq: 5 + part as u64 * 100 + u64::from(flow),
                failed: u64::from(flow),
            })
            .collect()
    }
}

fn announce(epochs: &[u32]) -> Announce {
    Announce {
        name: "a/1q2f".into(),
        size: 64,
        epochs: Arc::from(epochs),
        part: 0,
        rate: Some(1000.0),
        flow_pps: Some(500.0),
        started_ns: clock::monotonic_ns(),
        paced_since_ns: clock::monotonic_ns().saturating_sub(2_000_000_000),
    }
}

#[test]
fn a_hello_announces_the_part_it_is_in() {
    let end = SenderEnd::new(announce(&[7, 8, 9]), PartCounts);
    let first = end.hello(0);
    assert_eq!((first.epoch, first.step), (7, None));
    assert_eq!(first.rate_pps, Some(1000.0));
    assert_eq!(first.proto, Some(DataProto::Udp));
    let reach = first.reach.expect("a paced run tells its reach");
    assert_eq!(reach.flow_pps, 500.0);
    assert!(reach.run_elapsed_ns >= 2_000_000_000, "{reach:?}");
    assert_eq!(first.flows[1].next_seq, 6);

    end.enter(2);
    end.announce_rate(Some(f64::NAN), Some(0.0));
    let third = end.hello(1);
    assert_eq!((third.epoch, third.step, third.reconnect), (9, Some(2), 1));
    assert_eq!(third.rate_pps, None, "a rate that is no rate is unpaced");
    assert!(third.reach.is_none());
    let progress = end.progress();
    assert_eq!(progress.flows[0].next_seq, 205);
    assert_eq!(progress.flows[1].failed, 1);
}

/// A ledger that records what it was told and counts 42 records in every run.
#[derive(Default)]
struct Recorder {
    told: Mutex<Vec<String>>,
}

impl SinkLedger for Recorder {
    const GONE_WITHOUT_GOODBYE: &'static str = "";

    fn hello(&self, hello: &Hello, _: &HelloFrom, clock: LatencyClock) -> (u64, String) {
        self.told
            .lock()
            .unwrap()
            .push(format!("hello {} {:?}", hello.epoch, clock.kind));
        (9, format!("sink: sender {}", hello.name))
    }

    fn progress(&self, epoch: u32, flows: &[FlowProgress]) {
        self.told
            .lock()
            .unwrap()
            .push(format!("progress {epoch} {}", flows.len()));
    }

    fn clock(&self, epoch: u32, e: &ClockEstimate) {
        self.told
            .lock()
            .unwrap()
            .push(format!("clock {epoch} {}", e.offset_ns));
    }

    fn goodbye(&self, epoch: u32, _: &Goodbye) -> Verdict {
        self.told.lock().unwrap().push(format!("goodbye {epoch}"));
        let totals = FlowVerdict {
            rx_packets: 42,
            ..FlowVerdict::default()
        };
        Verdict {
            totals,
            name: "forged by the ledger".into(),
            incomplete: true,
            ..Verdict::default()
        }
    }
}

#[test]
fn the_sink_end_names_each_verdict_and_passes_the_rest_to_its_ledger() {
    let end = SinkEnd::new(Recorder::default(), "sink/0000abcd".into());
    let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let hello = SenderEnd::new(announce(&[7]), PartCounts).hello(0);
    let from = HelloFrom {
        peer,
        version: 2,
        proof: None,
        connected_ns: clock::monotonic_ns(),
    };
    assert_eq!(end.hello(&hello, from), 9);
    let estimate = ClockEstimate {
        offset_ns: -3,
        error_bound_ns: 1,
        rtt_ns: 2,
    };
    end.clock(peer, "a", 7, &estimate);
    end.progress(peer, "a", 7, &Progress { flows: Vec::new() });
    let verdict = end.goodbye(peer, "a/1q2f", 7, &Goodbye { flows: Vec::new() });
    assert_eq!(verdict.sink_session, "sink/0000abcd");
    assert_eq!((verdict.name.as_str(), verdict.epoch), ("a/1q2f", 7));
    assert_eq!(verdict.totals.rx_packets, 42);
    assert!(
        verdict.incomplete,
        "the ledger's word that a count was still open is kept"
    );
    assert_eq!(
        *end.ledger.told.lock().unwrap(),
        [
            format!("hello 7 {:?}", ClockKind::Unknown),
            "clock 7 -3".to_string(),
            "progress 7 0".to_string(),
            "goodbye 7".to_string(),
        ],
        "a sender of control protocol version 2 has no clock exchange: its clock is unknown"
    );
}
