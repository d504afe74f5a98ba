//! The fault suite's tools: namespaces (the shared `Lab`), ringblast processes that can be
//! signalled by PID, the injectors' own counters (nft named counters, `/proc/net/snmp` of a
//! namespace, tc statistics) and a metrics scraper that runs inside a namespace.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{Receiver, channel},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use nix::{
    sys::signal::{Signal, kill},
    unistd::Pid,
};
use serde_json::Value;

pub use crate::common::*;

/// The fault cases are `#[ignore = "needs root: ..."]`: a plain `cargo test` lists them as
/// ignored, and run (the test command runs them as root) every prerequisite must be there.
pub fn require_root() {
    assert!(
        is_root(),
        "the fault suite needs root (network namespaces, nft, tc): run it as root"
    );
}

/// Runs `args`, asserts success, returns stdout.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e} (is it installed?)"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Packets counted by the named nft counter `name` of table `ip table` in `ns`.
pub fn nft_counter(ns: &str, table: &str, name: &str) -> u64 {
    let text = sh(&[
        "ip", "netns", "exec", ns, "nft", "list", "counter", "ip", table, name,
    ]);
    text.split("packets ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no packet count in {text}"))
}

/// One HTTP GET of `/metrics` at `addr` from the current thread's namespace (5 s at most).
pub fn get_metrics(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    if !body.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!(
            "not 200: {}",
            body.lines().next().unwrap_or("")
        )));
    }
    Ok(body)
}

/// Scrapes the metrics endpoint `addr` inside `ns`.
pub fn scrape(ns: &str, addr: SocketAddr) -> String {
    in_netns(ns, move || get_metrics(addr))
        .unwrap_or_else(|e| panic!("metrics endpoint {addr} does not answer: {e}"))
}

/// The sum of every series of metric `name` in a scrape. Every series is registered before
/// the workers start, so a name with no series (renamed, or never registered) fails the test
/// with that name instead of reading as 0; so does a sample that is not a number.
pub fn metric(text: &str, name: &str) -> u64 {
    let samples: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("series of {name} with no numeric value: {l:?}"))
        })
        .collect();
    assert!(
        !samples.is_empty(),
        "no series {name} in the scrape:\n{text}"
    );
    samples.iter().sum::<f64>() as u64
}

/// A ringblast process (run with `ip netns exec`, which execs, so the PID is ringblast's).
pub struct Rb {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stdout: Option<JoinHandle<String>>,
}

impl Rb {
    /// Starts `ringblast ARGS` in namespace `ns`.
    pub fn spawn(ns: &str, args: &[&str]) -> Rb {
        Rb::start(ns, bin(), args)
    }

    /// Starts `program ARGS` in namespace `ns`.
    pub fn start(ns: &str, program: &str, args: &[&str]) -> Rb {
        Rb::start_with_env(ns, program, args, &[])
    }

    /// Starts `program ARGS` in namespace `ns` with `env` added to its environment.
    pub fn start_with_env(ns: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> Rb {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        let (tx, lines) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = Some(std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        }));
        Rb {
            child,
            lines,
            seen: Vec::new(),
            stdout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to this process (by PID).
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), sig).expect("kill");
    }

    /// The process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits (at most `timeout`) for a stderr line containing `needle`.
    pub fn wait_line(&mut self, needle: &str, timeout: Duration) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        let until = Instant::now() + timeout;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => break,
            }
        }
        panic!(
            "no line with {needle:?} within {timeout:?}; saw:\n{}",
            self.seen.join("\n")
        );
    }

    /// Waits until the process state in `/proc/PID/stat` is `state` (e.g. 'T': stopped).
    pub fn wait_state(&self, state: char) {
        let path = format!("/proc/{}/stat", self.pid());
        let reached = wait_until(Duration::from_secs(5), || {
            std::fs::read_to_string(&path)
                .is_ok_and(|s| s.rsplit(") ").next().is_some_and(|r| r.starts_with(state)))
        });
        assert!(
            reached,
            "process {} never reached state {state}",
            self.pid()
        );
    }

    /// Waits for the exit; returns the status, stdout and stderr lines.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let status = self.child.wait().unwrap();
        let out = self.stdout.take().unwrap().join().unwrap();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(line);
        }
        (status, out, self.seen.join("\n"))
    }

    /// Waits for a successful exit; returns the last summary of `role`.
    pub fn summary(self, role: &str) -> Value {
        self.records(role).0
    }

    /// Waits for a successful exit; returns the last summary of `role` and every JSON record.
    pub fn records(self, role: &str) -> (Value, Vec<Value>) {
        let (status, out, err) = self.finish();
        assert!(status.success(), "{role} exit {status:?}\n{err}\n{out}");
        let records = out
            .lines()
            .filter_map(crate::common::schema::parsed)
            .collect();
        (last_json(&out, role), records)
    }
}

impl Drop for Rb {
    fn drop(&mut self) {
        if self.stdout.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn last_json(stdout: &str, role: &str) -> Value {
    stdout
        .lines()
        .filter_map(crate::common::schema::parsed)
        .rfind(|v| v["type"] == "summary" && v["role"] == role)
        .unwrap_or_else(|| panic!("no {role} summary in:\n{stdout}"))
}

/// Polls `cond` every 10 ms for at most `timeout`; returns whether it came true.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A lab (two namespaces on a veth pair) with a sink running in the sink namespace, its
/// metrics endpoint at `10.<net>.0.2:9977` and traffic on `10.<net>.0.2:<port>`.
pub struct Rig {
    pub lab: Lab,
    pub net: u8,
    pub port: u16,
    pub secret: tempfile::NamedTempFile,
    pub sink: Option<Rb>,
}

impl Rig {
    pub fn new(tag: &str, net: u8) -> Rig {
        let lab = Lab::create(tag, net);
        for ns in [&lab.tx, &lab.rx] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        Rig {
            lab,
            net,
            port: 7000,
            secret: secret_file(),
            sink: None,
        }
    }

    pub fn secret(&self) -> &str {
        self.secret.path().to_str().unwrap()
    }

    pub fn to(&self) -> String {
        format!("10.{}.0.2:{}", self.net, self.port)
    }

    pub fn metrics_addr(&self) -> SocketAddr {
        format!("10.{}.0.2:9977", self.net).parse().unwrap()
    }

    /// Starts the sink (`extra` appended) and waits until its control port listens.
    pub fn start_sink(&mut self, extra: &[&str]) {
        self.start_sink_with_env(extra, &[]);
    }

    /// [`Rig::start_sink`] with `env` added to the sink's environment (a test hook).
    pub fn start_sink_with_env(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        let (to, metrics) = (self.to(), self.metrics_addr().to_string());
        let mut args = vec![
            "sink",
            "--listen",
            &to,
            "--json",
            "--metrics",
            &metrics,
            "--secret-file",
            self.secret(),
        ];
        // Quiet unless `extra` asks for intervals.
        if !extra.contains(&"--interval") {
            args.extend_from_slice(&["--interval", "0"]);
        }
        args.extend_from_slice(extra);
        let mut sink = Rb::start_with_env(&self.lab.rx, bin(), &args, env);
        // A TCP sink serves its control channel on the data port.
        let ready = if extra.contains(&"tcp") {
            "control: served on the data port"
        } else {
            "control: listening"
        };
        sink.wait_line(ready, Duration::from_secs(5));
        self.sink = Some(sink);
    }

    pub fn sink(&mut self) -> &mut Rb {
        self.sink.as_mut().expect("a sink")
    }

    /// Starts a sender to the sink (`extra` appended).
    pub fn spawn_send(&self, extra: &[&str]) -> Rb {
        let to = self.to();
        let mut args = vec![
            "send",
            "--to",
            &to,
            "--json",
            "--interval",
            "0",
            "--secret-file",
            self.secret(),
        ];
        args.extend_from_slice(extra);
        Rb::spawn(&self.lab.tx, &args)
    }

    /// Runs a sender to completion and returns its summary.
    pub fn send(&self, extra: &[&str]) -> Value {
        self.spawn_send(extra).summary("send")
    }

    /// Scrapes the sink's metrics.
    pub fn scrape(&self) -> String {
        scrape(&self.lab.rx, self.metrics_addr())
    }

    /// Checks the sink survived and its endpoint answers with each `(metric, value)` of
    /// `expect` (waiting for the exporter's flush), then stops it cleanly and returns its
    /// summary.
    pub fn stop_sink(&mut self, expect: &[(&str, u64)]) -> Value {
        self.stop_sink_records(expect).0
    }

    /// As [`Rig::stop_sink`], with every JSON record the sink printed (its intervals).
    pub fn stop_sink_records(&mut self, expect: &[(&str, u64)]) -> (Value, Vec<Value>) {
        assert!(self.sink().alive(), "the sink survived");
        let (ns, addr) = (self.lab.rx.clone(), self.metrics_addr());
        let mut last = String::new();
        let answered = wait_until(Duration::from_secs(5), || {
            last = scrape(&ns, addr);
            expect.iter().all(|(m, v)| metric(&last, m) == *v)
        });
        let got: Vec<(&str, u64)> = expect.iter().map(|(m, _)| (*m, metric(&last, m))).collect();
        assert!(answered, "metrics {got:?}, expected {expect:?}");
        let sink = self.sink.take().unwrap();
        sink.signal(Signal::SIGINT);
        sink.records("sink")
    }
}

/// The summary of the sender's verdict: the sink's counts as sent back to it.
pub fn verdict(send: &Value) -> &Value {
    &send["sink"]
}

/// Prints one row of the fault table (`cargo test --test faults -- --nocapture | grep '^fault|'`).
pub fn row(fault: &str, injector: u64, ringblast: u64) {
    eprintln!(
        "fault| {fault} | {injector} | {ringblast} | {}",
        if injector == ringblast { "yes" } else { "NO" }
    );
}

/// The inode of `pid`'s UDP socket bound to local `port` (`/proc/PID/net/udp`).
fn udp_inode(pid: u32, port: u16) -> String {
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/udp")).unwrap();
    let needle = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.get(1).is_some_and(|a| a.ends_with(&needle)))
        .map(|c| c[9].to_string())
        .unwrap_or_else(|| panic!("no UDP socket on port {port} in {table}"))
}

/// The kernel's drop count and queued bytes of `pid`'s UDP socket on `port`.
pub fn udp_socket_stats(pid: u32, port: u16) -> (u64, u64) {
    let inode = udp_inode(pid, port);
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/udp")).unwrap();
    let cols: Vec<String> = table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|c| c.get(9) == Some(&inode))
        .unwrap();
    let rx_queue = u64::from_str_radix(cols[4].split(':').nth(1).unwrap(), 16).unwrap();
    (cols.last().unwrap().parse().unwrap(), rx_queue)
}

/// Shrinks the receive buffer of `pid`'s UDP socket on `port` from outside: the socket is
/// taken with `pidfd_getfd` and `SO_RCVBUF` set on the copy (the same socket). Returns the
/// buffer size the kernel now reports.
pub fn shrink_rcvbuf(pid: u32, port: u16, bytes: i32) -> i32 {
    let inode = format!("socket:[{}]", udp_inode(pid, port));
    let fd: i32 = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_str() == Some(&inode)))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .unwrap_or_else(|| panic!("no fd of {pid} holds {inode}"));
    // SAFETY: plain syscalls on integers; every returned fd is checked and closed here.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) as i32;
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        let sock = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as i32;
        assert!(
            sock >= 0,
            "pidfd_getfd: {}",
            std::io::Error::last_os_error()
        );
        let set = libc::setsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const i32).cast(),
            4,
        );
        assert_eq!(set, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let (mut got, mut len) = (0i32, 4u32);
        libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut i32).cast(),
            &mut len,
        );
        libc::close(sock);
        libc::close(pidfd);
        got
    }
}
