//! Forged TCP records change no number (issue 35, item 8). A TCP sink with `--secret-file`
//! counts a connection only when its first record carries the proof of its sender run (the
//! run's token, derived from the secret and the epoch). While an authenticated sender runs,
//! the test opens connections of its own to the same port and writes well-framed records that
//! carry the live run's epoch, learnt from the sink's own hello line: one connection with no
//! proof, one with a wrong proof. The injector's own count of connections shows up exactly as
//! `invalid_auth`; the sink's records and bytes, its per-sender books and the sender's verdict
//! all equal the 8 000 records of 100 bytes the test asked the sender for (`--count`), which
//! the sender wrote in full (it exits 0 only then).

mod common;

use std::{io::Write, net::TcpStream};

use common::{
    tcp::{WAIT, start_send, start_sink_with, stop_sink_with_err},
    u,
};

const SIZE: usize = 100;
const FORGED_RECORDS: u64 = 4_000;

/// A well-framed record of the live run (`epoch`), as `proto::record` lays it out; with
/// `proof`, the proof flag is set and the sequence field holds that (wrong) token.
fn record(epoch: u32, seq: u64, proof: Option<u64>) -> Vec<u8> {
    let mut r = vec![0u8; SIZE];
    r[0..4].copy_from_slice(b"RBLS");
    r[4] = 2;
    r[5] = 0x80 | if proof.is_some() { 0x08 } else { 0 };
    r[6..10].copy_from_slice(&(SIZE as u32).to_be_bytes());
    r[10..12].copy_from_slice(&7u16.to_be_bytes());
    r[12..16].copy_from_slice(&epoch.to_be_bytes());
    r[16..24].copy_from_slice(&proof.unwrap_or(seq).to_be_bytes());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    r[24..32].copy_from_slice(&now.to_be_bytes());
    r
}

/// Writes `FORGED_RECORDS` records of run `epoch` on a connection of its own, then closes it.
fn forge(port: u16, epoch: u32, proof: Option<u64>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_write_timeout(Some(WAIT)).unwrap();
    let mut bytes = Vec::with_capacity(SIZE * FORGED_RECORDS as usize);
    for seq in 0..FORGED_RECORDS {
        bytes.extend(record(epoch, seq, proof.filter(|_| seq == 0)));
    }
    // The sink closes the connection at its first record, so the rest may meet a reset.
    let _ = stream.write_all(&bytes);
}

#[test]
fn forged_tcp_records_with_a_live_runs_epoch_change_no_number() {
    let _lock = common::traffic_lock();
    let secret = common::secret_file();
    let secret = secret.path().to_str().unwrap();
    let port = common::free_port();
    let to = format!("127.0.0.1:{port}");
    let mut sink = start_sink_with(None, &to, &["--secret-file", secret]);
    let size = SIZE.to_string();
    let sender = start_send(
        None,
        &[
            "--to",
            &to,
            "--name",
            "victim",
            "--secret-file",
            secret,
            "--conns",
            "2",
            "--size",
            &size,
            "--rate",
            "4000pps",
            "--count",
            "8000",
        ],
    );
    let hello = sink.wait_line("said hello", WAIT);
    let run = hello
        .split("(epoch ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("no epoch in {hello:?}"));
    let epoch = u32::from_str_radix(run, 16).unwrap();
    forge(port, epoch, None);
    forge(port, epoch, Some(0x0123_4567_89ab_cdef));
    let (status, out, err) = sender.finish();
    assert!(status.success(), "sender failed: {status}\n{err}");
    let tx = common::last_summary(&out, "send");
    let (rx, _) = stop_sink_with_err(sink, 4);

    assert_eq!(u(&tx, "tx_records"), 8_000, "{tx}");
    let v = &tx["verdict"];
    assert_eq!(u(v, "rx_records"), 8_000, "the verdict: {tx}");
    assert_eq!(u(v, "rx_invalid"), 0, "the verdict: {tx}");
    assert_eq!(u(&rx, "rx_records"), 8_000, "the sink: {rx}");
    assert_eq!(u(&rx, "rx_bytes"), 8_000 * SIZE as u64, "the sink: {rx}");
    assert_eq!(u(&rx, "invalid_auth"), 2, "one per forged connection: {rx}");
    assert_eq!(u(&rx, "rx_invalid"), 2, "{rx}");
    let senders = rx["senders"].as_array().unwrap();
    assert_eq!(senders.len(), 1, "{rx}");
    assert_eq!(senders[0]["name"], "victim", "{rx}");
    assert_eq!(u(&senders[0], "rx_records"), 8_000, "{rx}");
    assert_eq!(u(&senders[0], "rx_invalid"), 0, "{rx}");
    assert_eq!(u(&rx, "unattributed_invalid"), 2, "{rx}");
}

/// Without a secret, anyone can write records of a live run (docs/security.md). A connection
/// that does so and stays open past the sender's goodbye leaves the run's count open: the
/// sink waits out its goodbye wait and answers with what arrived so far, and its verdict says
/// it is incomplete, so the sender's summary says so (`"complete": false`) instead of passing
/// off a count that can still change as final.
#[test]
fn a_connection_of_the_run_still_open_at_the_goodbye_makes_the_verdict_incomplete() {
    let _lock = common::traffic_lock();
    let port = common::free_port();
    let to = format!("127.0.0.1:{port}");
    let mut sink = start_sink_with(None, &to, &[]);
    let size = SIZE.to_string();
    let sender = start_send(
        None,
        &[
            "--to", &to, "--name", "held", "--size", &size, "--rate", "4000pps", "--count", "2000",
        ],
    );
    let hello = sink.wait_line("said hello", WAIT);
    let epoch = hello
        .split("(epoch ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|e| u32::from_str_radix(e, 16).ok())
        .unwrap_or_else(|| panic!("no epoch in {hello:?}"));
    let mut held = TcpStream::connect(("127.0.0.1", port)).unwrap();
    held.set_write_timeout(Some(WAIT)).unwrap();
    held.write_all(&record(epoch, 0, None)).unwrap();
    let (_, out, err) = sender.finish();
    let tx = common::last_summary(&out, "send");
    drop(held);
    let (_, sink_err) = stop_sink_with_err(sink, 2);

    assert_eq!(u(&tx, "tx_records"), 2_000, "{tx}");
    let v = &tx["verdict"];
    assert_eq!(v["complete"], false, "the verdict: {tx}");
    assert!(
        err.contains("incomplete") || out.contains("incomplete"),
        "{out}\n{err}"
    );
    assert!(
        sink_err.contains("sink: sender held said goodbye with counts still open"),
        "{sink_err}"
    );
}
