//! Judges a sender run from its own counts, as a CI user needs it judged: the achieved rate
//! against the target (and `--min-rate-ratio`), the share of sends that failed, and whether
//! anything was listening at all. It also gives the one-time live notice of the first
//! ECONNREFUSED. A run that failed in one of these ways exits 1 after its full summary.

use std::net::SocketAddr;

use serde_json::{Value, json};

use crate::{
    host_time::{self, Cause, HostTime},
    pacing::{OFFERED_TOLERANCE, sender_limited},
    report::TxSample,
    stats::errno_class,
};
/// Windows in which "refused throughout" is judged.
const WINDOW_NS: u64 = 1_000_000_000;

/// The verdict on a finished sender run.
#[derive(Debug, Default)]
pub(crate) struct Judgement {
    /// Words for the summary line: the achieved share of the target, if paced.
    pub(crate) rate_words: String,
    /// Warning lines, printed after the summary.
    pub(crate) warnings: Vec<String>,
    /// Fields for the JSON summary.
    pub(crate) json: Value,
    /// Why the run failed (exit 1), if it did.
    pub(crate) failure: Option<String>,
}

/// Why a run that reached `ratio` of its target rate fails `--min-rate-ratio` (`min`), if it
/// does: the one judgement of the rate, for UDP and TCP alike.
pub(crate) fn below_min_rate_ratio(ratio: f64, min: Option<f64>) -> Option<String> {
    min.filter(|min| ratio < *min).map(|min| {
        format!(
            "the run reached {:.1}% of its target rate, below --min-rate-ratio {min}",
            ratio * 100.0
        )
    })
}

/// Watches a sender run on every reporter tick, then judges it.
#[derive(Debug)]
pub(crate) struct Judge {
    to: SocketAddr,
    target_pps: Option<f64>,
    min_ratio: Option<f64>,
    window_start_ns: u64,
    window_attempts: u64,
    window_refused: u64,
    windows_sending: u32,
    windows_refused: u32,
    refused_said: bool,
}

fn refused(total: &TxSample) -> u64 {
    total.traffic.errors[errno_class(libc::ECONNREFUSED)]
}

fn attempts(total: &TxSample) -> u64 {
    total.traffic.packets + total.errors()
}

impl Judge {
    /// A judge for a run to `to` with this target, started at monotonic `now_ns`.
    pub(crate) fn new(
        to: SocketAddr,
        target_pps: Option<f64>,
        min_ratio: Option<f64>,
        now_ns: u64,
    ) -> Judge {
        Judge {
            to,
            target_pps,
            min_ratio,
            window_start_ns: now_ns,
            window_attempts: 0,
            window_refused: 0,
            windows_sending: 0,
            windows_refused: 0,
            refused_said: false,
        }
    }

    /// Takes the run's totals on a reporter tick; returns a line to print (once per kind).
    pub(crate) fn tick(&mut self, now_ns: u64, total: &TxSample) -> Option<String> {
        if now_ns.saturating_sub(self.window_start_ns) >= WINDOW_NS {
            self.close_window(total);
            self.window_start_ns = now_ns;
        }
        if self.refused_said || refused(total) == 0 {
            return None;
        }
        self.refused_said = true;
        Some(format!(
            "send: ECONNREFUSED: nothing is listening at {} (start the sink first, or check --to)",
            self.to
        ))
    }

    fn close_window(&mut self, total: &TxSample) {
        if attempts(total) > self.window_attempts {
            self.windows_sending += 1;
            if refused(total) > self.window_refused {
                self.windows_refused += 1;
            }
        }
        self.window_attempts = attempts(total);
        self.window_refused = refused(total);
    }

    /// Judges the finished run from its totals and its duration in seconds.
    pub(crate) fn finish(mut self, total: &TxSample, duration_s: f64) -> Judgement {
        self.close_window(total);
        let mut j = Judgement::default();
        let mut failures = Vec::new();
        let achieved = if duration_s > 0.0 {
            total.traffic.packets as f64 / duration_s
        } else {
            0.0
        };
        if let Some(target) = self.target_pps.filter(|t| *t > 0.0) {
            let ratio = achieved / target;
            let limited = sender_limited(
                total.traffic.packets,
                target * duration_s,
                OFFERED_TOLERANCE,
            );
            j.rate_words = format!(" ({:.1}% of the {target:.0}pps target)", ratio * 100.0);
            j.json = json!({"achieved_ratio": (ratio * 1000.0).round() / 1000.0,
                "sender_limited": limited});
            if limited {
                j.warnings.push(format!(
                    "send: warning: sender-limited: it offered {achieved:.0}pps, {:.1}% of {target:.0}pps (more than {}% short), so its numbers are this host's limit; add --queues, use --gso N, or lower --rate",
                    ratio * 100.0,
                    OFFERED_TOLERANCE * 100.0
                ));
            }
            failures.extend(below_min_rate_ratio(ratio, self.min_ratio));
        }
        let (failed, tried) = (total.errors(), attempts(total));
        if self.windows_sending > 0 && self.windows_refused == self.windows_sending {
            failures.push(format!(
                "nothing was listening at {}: sends met ECONNREFUSED throughout the run",
                self.to
            ));
        } else if tried > 0 && failed * 2 >= tried {
            failures.push(format!("{failed} of {tried} sends failed"));
        }
        j.failure = (!failures.is_empty()).then(|| failures.join("; "));
        j
    }
}

impl Judgement {
    /// Names what held a sender-limited run back, from what the host gave its workers: the
    /// JSON's `sender_limited_cause` (null when unknown) and a line after the warning.
    pub(crate) fn name_the_limit(&mut self, workers: &[HostTime]) {
        if self.json["sender_limited"] != true {
            return;
        }
        let worst = host_time::most_limited(workers);
        let cause = worst.and_then(HostTime::cause);
        self.json["sender_limited_cause"] = json!(cause.map(Cause::word));
        let Some(w) = worst else { return };
        let why = match cause {
            Some(Cause::CpuWait) => {
                "it waited for its CPU: another task, or a cgroup's CPU quota, had it (pin the sender apart with --cpus, or lift the quota)"
            }
            Some(Cause::CpuBusy) => {
                "its CPU was busy all along: one core's worth is this queue's limit (add --queues, or --gso N)"
            }
            Some(Cause::Completions) => {
                "it was idle, waiting for its sends to complete: the kernel or the NIC held them (a larger --window, or a faster path)"
            }
            None => "the cause is unknown",
        };
        self.warnings.push(format!(
            "send: the limit was this host: {}; {why}",
            w.words()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ERRNO_CLASSES;

    const SEC: u64 = 1_000_000_000;

    fn with_errors(packets: u64, errno: i32, n: u64) -> TxSample {
        let mut s = TxSample::default();
        s.traffic.packets = packets;
        let mut errors = [0; ERRNO_CLASSES];
        errors[errno_class(errno)] = n;
        s.traffic.errors = errors;
        s
    }

    fn judge(target: Option<f64>, min: Option<f64>) -> Judge {
        Judge::new("127.0.0.1:9".parse().unwrap(), target, min, 0)
    }

    #[test]
    fn a_shortfall_warns_and_fails_only_below_the_ratio() {
        let total = with_errors(300, libc::ENOBUFS, 0);
        let j = judge(Some(1000.0), None).finish(&total, 1.0);
        assert_eq!(j.rate_words, " (30.0% of the 1000pps target)");
        assert_eq!(j.warnings.len(), 1, "{:?}", j.warnings);
        assert!(j.failure.is_none());
        let j = judge(Some(1000.0), Some(0.5)).finish(&total, 1.0);
        assert!(j.failure.unwrap().contains("below --min-rate-ratio 0.5"));
        assert_eq!(j.json["sender_limited"], true);
        let j = judge(Some(300.0), Some(0.99)).finish(&total, 1.0);
        assert!(j.warnings.is_empty() && j.failure.is_none());
        assert_eq!(j.json["sender_limited"], false);
        // The one test: more than 1 % short is sender-limited, 1 % is not.
        let j = judge(Some(303.0), None).finish(&total, 1.0);
        assert_eq!(j.json["sender_limited"], false, "{:?}", j.warnings);
        let j = judge(Some(304.0), None).finish(&total, 1.0);
        assert_eq!(j.json["sender_limited"], true);
        assert!(j.warnings[0].starts_with("send: warning: sender-limited:"));
    }

    #[test]
    fn a_limited_run_names_its_cause_from_its_workers_time() {
        let total = with_errors(300, libc::ENOBUFS, 0);
        let waited = HostTime {
            queue: 1,
            wall_ns: SEC,
            time: Some(host_time::ThreadTime {
                cpu_ns: SEC / 10,
                wait_ns: SEC * 8 / 10,
            }),
        };
        let mut j = judge(Some(1000.0), None).finish(&total, 1.0);
        j.name_the_limit(&[waited]);
        assert_eq!(j.json["sender_limited_cause"], "cpu_wait");
        assert_eq!(
            j.warnings[1],
            "send: the limit was this host: queue 1's worker ran 10.0% of its 1.00 s and waited 80.0% for a CPU; it waited for its CPU: another task, or a cgroup's CPU quota, had it (pin the sender apart with --cpus, or lift the quota)"
        );
        let unknown = HostTime {
            time: None,
            ..waited
        };
        let mut j = judge(Some(1000.0), None).finish(&total, 1.0);
        j.name_the_limit(&[unknown]);
        assert_eq!(j.json["sender_limited_cause"], Value::Null);
        // A run that kept its rate names nothing.
        let mut j = judge(Some(300.0), None).finish(&total, 1.0);
        j.name_the_limit(&[waited]);
        assert!(j.json.get("sender_limited_cause").is_none());
        assert!(j.warnings.is_empty());
    }

    #[test]
    fn refused_throughout_fails_and_is_said_once() {
        let mut j = judge(None, None);
        let mut said = 0;
        for s in 1..=3 {
            let total = with_errors(s * 500, libc::ECONNREFUSED, s * 500);
            said += usize::from(j.tick(s * SEC, &total).is_some());
        }
        assert_eq!(said, 1);
        let j = j.finish(&with_errors(1500, libc::ECONNREFUSED, 1500), 3.0);
        assert!(
            j.failure
                .unwrap()
                .contains("nothing was listening at 127.0.0.1:9")
        );
    }

    #[test]
    fn a_refusal_that_stopped_is_not_nothing_listening() {
        let mut j = judge(None, None);
        j.tick(SEC, &with_errors(500, libc::ECONNREFUSED, 1));
        j.tick(2 * SEC, &with_errors(1500, libc::ECONNREFUSED, 1));
        let j = j.finish(&with_errors(2500, libc::ECONNREFUSED, 1), 3.0);
        assert!(j.failure.is_none(), "{:?}", j.failure);
    }

    #[test]
    fn half_the_sends_failing_fails_the_run() {
        let j = judge(None, None).finish(&with_errors(100, libc::ENOBUFS, 100), 1.0);
        assert_eq!(j.failure.as_deref(), Some("100 of 200 sends failed"));
        let j = judge(None, None).finish(&with_errors(101, libc::ENOBUFS, 99), 1.0);
        assert!(j.failure.is_none());
    }
}
