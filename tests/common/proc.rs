//! A child process whose stderr lines can be waited for (events, not sleeps), whose stdout is
//! collected, and which can be interrupted by PID.

use std::{
    io::{BufRead, BufReader, Read},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{Receiver, channel},
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// A started child.
pub struct Proc {
    child: Child,
    lines: Receiver<String>,
    /// Every stderr line read so far.
    pub seen: Vec<String>,
    stdout: Option<JoinHandle<String>>,
}

impl Proc {
    /// Starts `ringblast ARGS`, inside network namespace `ns` when given.
    pub fn ringblast(ns: Option<&str>, args: &[&str]) -> Proc {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, super::bin()]);
                c
            }
            None => Command::new(super::bin()),
        };
        cmd.args(args);
        Proc::spawn(cmd)
    }

    /// Starts `cmd` with stdout and stderr piped.
    pub fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the process");
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
        Proc {
            child,
            lines,
            seen: Vec::new(),
            stdout,
        }
    }

    /// Waits (at most `timeout`) for a stderr line containing `needle`; returns it.
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

    /// Waits (at most `timeout`) until the stderr lines seen so far satisfy `done`; returns
    /// the last line read. For conditions over several lines, such as interval counts that
    /// add up.
    pub fn wait_lines(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[String]) -> bool,
    ) -> String {
        let until = Instant::now() + timeout;
        loop {
            if done(&self.seen) {
                return self.seen.last().cloned().unwrap_or_default();
            }
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                break;
            };
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => break,
            }
        }
        panic!(
            "{what}: not seen within {timeout:?}; saw:\n{}",
            self.seen.join("\n")
        );
    }

    /// Waits until a TCP sink's interval lines (its `total` lines when it has several queues)
    /// have counted `accepted` connections in all and the latest says `open` are open.
    pub fn wait_tcp_sink_conns(&mut self, accepted: u64, open: u64, timeout: Duration) {
        let what = format!("a TCP sink with {accepted} connections accepted and {open} open");
        self.wait_lines(&what, timeout, |seen| {
            let lines: Vec<&String> = seen.iter().filter(|l| l.contains("conns open: ")).collect();
            let lines: Vec<&String> = if lines.iter().any(|l| l.contains(" total ")) {
                lines
                    .into_iter()
                    .filter(|l| l.contains(" total "))
                    .collect()
            } else {
                lines
            };
            let sum: u64 = lines.iter().map(|l| count_after(l, "accepted: ")).sum();
            sum >= accepted
                && lines
                    .last()
                    .is_some_and(|l| count_after(l, "conns open: ") == open)
        });
    }

    /// The child's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGINT to the child (a clean stop: it prints its summary).
    pub fn interrupt(&self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
    }

    /// Waits for the exit; returns the status, stdout and every stderr line.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let status = self.child.wait().unwrap();
        let out = self.stdout.take().unwrap().join().unwrap();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(line);
        }
        (status, out, self.seen.join("\n"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.stdout.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The number right after `key` in `line` (0 when there is none).
pub fn count_after(line: &str, key: &str) -> u64 {
    line.split(key)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
