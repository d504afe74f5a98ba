//! Helpers shared by the integration tests: run the real binary, read its JSON Lines summaries.
#![allow(dead_code)]

use std::{
    process::{Command, Output, Stdio},
    sync::{Mutex, MutexGuard},
};

use serde_json::Value;

/// Serialises tests that push traffic, so concurrent runs do not share the two CPUs.
static TRAFFIC: Mutex<()> = Mutex::new(());

pub fn traffic_lock() -> MutexGuard<'static, ()> {
    TRAFFIC.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ringblast")
}

pub fn ringblast(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ringblast")
}

/// The `"type":"summary"` lines of a run, keyed by role.
pub struct Summaries {
    pub send: Option<Value>,
    pub sink: Option<Value>,
    pub last_line: Value,
}

pub fn summaries(out: &Output) -> Summaries {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    let find = |role: &str| {
        lines
            .iter()
            .rev()
            .find(|v| v["type"] == "summary" && v["role"] == role)
            .cloned()
    };
    Summaries {
        send: find("send"),
        sink: find("sink"),
        last_line: lines.last().cloned().unwrap_or(Value::Null),
    }
}

pub fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing or not an integer in {v}"))
}

pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts the sink saw exactly what the sender sent: nothing lost, duplicated or invalid.
pub fn assert_exact(send: &Value, sink: &Value) {
    assert_eq!(u(send, "tx_errors"), 0, "{send}");
    assert!(u(send, "tx_packets") > 0, "{send}");
    assert_eq!(
        u(send, "tx_packets"),
        u(sink, "rx_packets"),
        "send {send}\nsink {sink}"
    );
    assert_eq!(
        u(send, "tx_bytes"),
        u(sink, "rx_bytes"),
        "send {send}\nsink {sink}"
    );
    for key in [
        "rx_lost",
        "rx_duplicates",
        "rx_invalid",
        "rx_kernel_drops",
        "rx_reordered",
    ] {
        assert_eq!(u(sink, key), 0, "{key} in {sink}");
    }
}

/// Asserts every sent packet is accounted for: received, dropped by the kernel, or lost.
pub fn assert_accounted(send: &Value, sink: &Value) {
    assert_eq!(u(send, "tx_errors"), 0, "{send}");
    assert_eq!(
        u(send, "tx_packets"),
        u(sink, "rx_packets") + u(sink, "rx_kernel_drops") + u(sink, "rx_lost"),
        "send {send}\nsink {sink}"
    );
    assert_eq!(u(sink, "rx_duplicates"), 0, "{sink}");
    assert_eq!(u(sink, "rx_invalid"), 0, "{sink}");
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    })
}
