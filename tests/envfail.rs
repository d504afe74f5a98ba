//! Environments that cannot run a job: each gives exit 3 and one stderr line that names the
//! fix, within a second. Too few file descriptors, and a UDP port held by another program or
//! by another ringblast (refused unless `--share-port`, whose split is counted exactly).

mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::{proc::Proc, *};

/// Runs `cmd` and checks: exit 3 at setup (a 10 s hang guard, not a speed test), exactly one
/// stderr line, holding every needle, no panic. Returns that line.
fn expect_refusal(mut cmd: Command, needles: &[&str]) -> String {
    let t0 = Instant::now();
    let out = cmd.output().expect("start the command");
    let took = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(3), "{cmd:?}\n{stderr}");
    assert!(took < Duration::from_secs(10), "took {took:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected:\n{stderr}");
    for n in needles {
        assert!(lines[0].contains(n), "{n:?} missing from {stderr}");
    }
    lines[0].to_string()
}

#[test]
fn too_few_file_descriptors_exit_3_naming_ulimit_and_limitnofile() {
    // prlimit sets soft and hard: a 16-flow pair cannot fit in 8 descriptors.
    let mut cmd = Command::new("prlimit");
    cmd.args([
        "--nofile=8",
        bin(),
        "pair",
        "--count",
        "1000",
        "--flows",
        "16",
    ])
    .arg("--no-metrics");
    expect_refusal(cmd, &["RLIMIT_NOFILE is 8", "ulimit -n", "LimitNOFILE="]);
    // A sink alone with one queue does not fit either.
    let mut cmd = Command::new("prlimit");
    let listen = format!("127.0.0.1:{}", free_port());
    cmd.args(["--nofile=8", bin(), "sink", "--listen", &listen]);
    expect_refusal(cmd, &["file descriptors", "ulimit -n"]);
}

#[test]
fn a_low_soft_limit_under_a_high_hard_limit_is_raised_and_the_run_is_exact() {
    let _traffic = traffic_lock();
    let out = Command::new("prlimit")
        .args([
            "--nofile=8:4096",
            bin(),
            "pair",
            "--count",
            "20000",
            "--flows",
            "16",
        ])
        .args(["--rate", "200kpps", "--json", "--no-metrics"])
        .output()
        .expect("prlimit (util-linux)");
    assert_ok(&out);
    let s = summaries(&out);
    let (send, sink) = (s.send.unwrap(), s.sink.unwrap());
    assert_eq!(u(&send, "flows"), 16, "{send}");
    assert_exact(&send, &sink);
}

#[test]
fn a_port_held_by_another_program_is_refused_with_or_without_reuseport() {
    // Without SO_REUSEPORT (the kernel would refuse the bind) ...
    let plain = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = plain.local_addr().unwrap().to_string();
    let mut cmd = Command::new(bin());
    cmd.args(["sink", "--listen", &addr]);
    let me = std::process::id().to_string();
    expect_refusal(
        cmd,
        &["already held by another program", &me, "--share-port"],
    );
    // ... and with it, as a second sink would hold it (the kernel would let us join).
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    sock.set_reuse_port(true).unwrap();
    sock.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    let addr = sock.local_addr().unwrap().as_socket().unwrap().to_string();
    let mut cmd = Command::new(bin());
    cmd.args(["sink", "--listen", &addr, "--queues", "2"]);
    expect_refusal(cmd, &["already held by another program", &me]);
}

fn start_sink(listen: &str, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(bin());
    cmd.args(["sink", "--json", "--listen", listen]).args(extra);
    let mut p = Proc::spawn(cmd);
    p.wait_line("startup: workers released", Duration::from_secs(5));
    p
}

fn stop(p: Proc) -> serde_json::Value {
    p.interrupt();
    let (status, stdout, stderr) = p.finish();
    assert!(status.success(), "{status:?}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let v = common::schema::record(last);
    assert_eq!(v["type"], "summary", "{v}");
    v
}

#[test]
fn a_second_ringblast_sink_is_refused_naming_the_first() {
    let listen = format!("127.0.0.1:{}", free_port());
    let first = start_sink(&listen, &["--queues", "2"]);
    let pid = first.pid();
    let mut cmd = Command::new(bin());
    cmd.args(["sink", "--listen", &listen]);
    expect_refusal(
        cmd,
        &[&format!("another ringblast (pid {pid})"), "--share-port"],
    );
    // A wildcard listen on the same port would take the same datagrams: refused too.
    let wild = listen.replace("127.0.0.1", "0.0.0.0");
    let mut cmd = Command::new(bin());
    cmd.args(["sink", "--insecure-control", "--listen", &wild]);
    expect_refusal(cmd, &["another ringblast"]);
    stop(first);
}

#[test]
fn share_port_splits_the_traffic_and_every_packet_is_counted_once() {
    let _traffic = traffic_lock();
    let listen = format!("127.0.0.1:{}", free_port());
    let first = start_sink(&listen, &[]);
    let mut second = start_sink(&listen, &["--share-port"]);
    second.wait_line("serves no control channel", Duration::from_secs(1));
    let out = ringblast(&[
        "send", "--json", "--to", &listen, "--flows", "16", "--count", "8000", "--rate", "40kpps",
    ]);
    assert_ok(&out);
    let send = summaries(&out).send.unwrap();
    let (a, b) = (stop(first), stop(second));
    let sent = u(&send, "tx_packets");
    assert_eq!(u(&send, "tx_errors"), 0, "{send}");
    eprintln!(
        "shares: first {} second {} of {sent}",
        u(&a, "rx_packets"),
        u(&b, "rx_packets")
    );
    assert_eq!(
        u(&a, "rx_packets")
            + u(&b, "rx_packets")
            + u(&a, "rx_kernel_drops")
            + u(&b, "rx_kernel_drops"),
        sent,
        "first {a}\nsecond {b}"
    );
    // Only the first sink hears the sender's goodbye: the other's share is loss to it.
    assert_eq!(
        u(&a, "rx_lost"),
        u(&b, "rx_packets") + u(&b, "rx_kernel_drops"),
        "first {a}\nsecond {b}"
    );
    for v in [&a, &b] {
        assert_eq!(u(v, "rx_invalid"), 0, "{v}");
        assert_eq!(u(v, "rx_duplicates"), 0, "{v}");
    }
}
