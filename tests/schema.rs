//! The published JSON Schema (docs/schema/ringblast-1.schema.json) against real output: every
//! record type ringblast writes (UDP and TCP intervals and summaries of both roles, rate steps,
//! search trials and results, the sink's session events) appears in runs over loopback, carries
//! the schema version and follows the schema; and the validator the other tests use rejects
//! records that break it, so their validation cannot pass by accident.

mod common;

use std::{
    collections::BTreeSet,
    process::{Command, Stdio},
};

use common::*;
use serde_json::{Value, json};

/// Every record of a run's stdout (each validated on the way in).
fn records(out: &std::process::Output) -> Vec<Value> {
    schema::records(&String::from_utf8_lossy(&out.stdout))
}

/// `type/role[/protocol]` of a record, e.g. `summary/send/tcp`.
fn kind(v: &Value) -> String {
    let mut k = v["type"].as_str().unwrap_or("?").to_string();
    for key in ["role", "protocol"] {
        if let Some(s) = v[key].as_str() {
            k = format!("{k}/{s}");
        }
    }
    k
}

fn sink(port: u16, extra: &[&str]) -> std::process::Child {
    let child = Command::new(bin())
        .args(["sink", "--listen", &format!("127.0.0.1:{port}"), "--json"])
        .args(["--interval", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bound(None, port);
    child
}

#[test]
fn every_record_type_appears_in_real_output_and_follows_the_schema() {
    let _guard = traffic_lock();
    let mut seen: Vec<Value> = Vec::new();

    // UDP: intervals and summaries of both roles, and a step per --rate-steps step.
    let out = ringblast(&[
        "pair",
        "--rate-steps",
        "5kpps:500ms,10kpps:500ms",
        "--interval",
        "400ms",
        "--json",
        "--no-metrics",
    ]);
    assert_ok(&out);
    seen.extend(records(&out));

    // TCP streams and request/response: intervals and summaries of both roles.
    for pattern in ["stream", "rr"] {
        let out = ringblast(&[
            "pair",
            "--proto",
            "tcp",
            "--pattern",
            pattern,
            "--duration",
            "1s",
            "--interval",
            "400ms",
            "--json",
            "--no-metrics",
        ]);
        assert_ok(&out);
        seen.extend(records(&out));
    }

    // The sink's session events: a sender without a control channel starts one (and ends it
    // by idleness), a paired one ends its own with a goodbye.
    let port = free_port();
    let to = format!("127.0.0.1:{port}");
    let rx = sink(port, &["--duration", "3s", "--session-idle", "300ms"]);
    for control in [&["--control", "off"][..], &[]] {
        let mut args = vec!["send", "--to", &to, "--count", "1000", "--rate", "10kpps"];
        args.extend_from_slice(control);
        args.push("--json");
        let out = ringblast(&args);
        assert_ok(&out);
        seen.extend(records(&out));
        std::thread::sleep(std::time::Duration::from_millis(700)); // past --session-idle
    }
    let out = rx.wait_with_output().unwrap();
    assert_ok(&out);
    seen.extend(records(&out));

    // A search: a trial per trial and the result; --max-time may run out (exit 1).
    let port = free_port();
    let mut rx = sink(port, &["--duration", "20s"]);
    let out = ringblast(&[
        "search",
        "--to",
        &format!("127.0.0.1:{port}"),
        "--min-rate",
        "2kpps",
        "--max-rate",
        "8kpps",
        "--trial",
        "200ms",
        "--final-trial",
        "300ms",
        "--max-time",
        "3s",
        "--json",
    ]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    seen.extend(records(&out));
    let _ = rx.kill();
    let _ = rx.wait();

    let version = schema::version();
    for v in &seen {
        assert_eq!(
            v["schema"], version,
            "every record carries its version: {v}"
        );
    }
    let kinds: BTreeSet<String> = seen.iter().map(kind).collect();
    for want in [
        "start/send/udp",
        "start/sink/udp",
        "start/pair/udp",
        "start/pair/tcp",
        "start/search/udp",
        "interval/send",
        "interval/sink",
        "summary/send",
        "summary/sink",
        "interval/send/tcp",
        "interval/sink/tcp",
        "summary/send/tcp",
        "summary/sink/tcp",
        "step/send",
        "trial",
        "search",
        "session/sink",
    ] {
        assert!(kinds.contains(want), "no {want} record in {kinds:?}");
    }
    let events: BTreeSet<String> = seen
        .iter()
        .filter(|v| v["type"] == "session")
        .map(|v| format!("{}/{}", v["event"], v["cause"]))
        .collect();
    for want in [r#""start"/null"#, r#""end"/"idle""#, r#""end"/"goodbye""#] {
        assert!(events.contains(want), "no session {want} in {events:?}");
    }
    // The schema lists every type the records use, and no other.
    let listed: BTreeSet<&str> = schema::schema()["properties"]["type"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let used: BTreeSet<&str> = seen.iter().filter_map(|v| v["type"].as_str()).collect();
    assert_eq!(listed, used);
}

/// A real UDP pair run's records: the send summary, the sink summary, a step and the start.
fn real_records() -> (Value, Value, Value, Value) {
    let _guard = traffic_lock();
    let out = ringblast(&[
        "pair",
        "--rate-steps",
        "5kpps:300ms",
        "--json",
        "--no-metrics",
    ]);
    assert_ok(&out);
    let all = records(&out);
    let find = |k: &str| all.iter().find(|v| kind(v) == k).cloned().unwrap();
    (
        find("summary/send"),
        find("summary/sink"),
        find("step/send"),
        find("start/pair/udp"),
    )
}

/// A change that breaks a valid record.
type Break = fn(&mut Value);

#[test]
fn the_validator_rejects_records_that_break_the_schema() {
    let (send, sink, step, start) = real_records();
    let broken: Vec<(&str, Value, Break)> = vec![
        ("no version", send.clone(), |v| {
            v.as_object_mut().unwrap().remove("schema");
        }),
        ("another version", send.clone(), |v| {
            v["schema"] = json!("ringblast/0");
        }),
        ("an unknown type", send.clone(), |v| {
            v["type"] = json!("bogus")
        }),
        ("no tx_packets", send.clone(), |v| {
            v.as_object_mut().unwrap().remove("tx_packets");
        }),
        ("a negative count", send.clone(), |v| {
            v["tx_packets"] = json!(-1)
        }),
        ("a count as a string", send.clone(), |v| {
            v["tx_packets"] = json!("2000")
        }),
        ("no sink.rx_packets", send.clone(), |v| {
            v["sink"].as_object_mut().unwrap().remove("rx_packets");
        }),
        ("sink.latency a number", send.clone(), |v| {
            v["sink"]["latency"] = json!(5)
        }),
        ("a null sink without sink_error", send.clone(), |v| {
            v["sink"] = Value::Null
        }),
        ("no senders[].name", sink.clone(), |v| {
            v["senders"][0].as_object_mut().unwrap().remove("name");
        }),
        ("a null senders[].rx_lost", sink.clone(), |v| {
            v["senders"][0]["rx_lost"] = Value::Null
        }),
        ("an unknown clock kind", sink.clone(), |v| {
            v["senders"][0]["latency_clock"]["kind"] = json!("guessed")
        }),
        ("loss unknown without saying why", step.clone(), |v| {
            v["loss"] = Value::Null
        }),
        ("a step of another role", step.clone(), |v| {
            v["role"] = json!("sink")
        }),
        ("a start without its time", start.clone(), |v| {
            v.as_object_mut().unwrap().remove("started_at");
        }),
        ("a start time that is not RFC 3339", start.clone(), |v| {
            v["started_at"] = json!("yesterday")
        }),
        ("a start without its host", start.clone(), |v| {
            v.as_object_mut().unwrap().remove("host");
        }),
        ("a start of a role that does not run", start.clone(), |v| {
            v["role"] = json!("topo")
        }),
    ];
    for (what, mut v, breaks) in broken {
        assert!(
            schema::violations(&v).is_empty(),
            "the real record is valid: {v}"
        );
        breaks(&mut v);
        assert!(
            !schema::violations(&v).is_empty(),
            "{what}: not rejected: {v}"
        );
        let line = v.to_string();
        let caught = std::panic::catch_unwind(|| schema::record(&line));
        assert!(caught.is_err(), "{what}: schema::record let it through");
    }
    // A null sink with its reason is how a sender says it got no verdict: valid.
    let mut v = send;
    v["sink"] = Value::Null;
    v["sink_error"] = json!("no answer");
    assert_eq!(schema::violations(&v), Vec::<String>::new());
}
