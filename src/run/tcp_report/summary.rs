//! The end-of-run summaries of a TCP run: one JSON line (`--json`) and one human line per
//! role, the sender's carrying the sink's verdict and the sink's its per-sender books.

use serde_json::{Map, Value, json};

use super::{Snapshot, TcpReport, rate, si};
use crate::{
    run::tcp_control::{self, TcpVerdictResult},
    say,
    stats::{LATENCY_BOUNDS_NS, LATENCY_CELLS, latency_quantile_bound},
};

impl TcpReport {
    pub(super) fn send_summary(
        &self,
        snap: &Snapshot,
        seconds: f64,
        ctx: (Option<u64>, Option<u64>),
        verdict: Option<&TcpVerdictResult>,
    ) {
        let tx = &snap.tx;
        let bytes = tx.tx_bytes;
        let records = tx.tx_records;
        let mut line = tx.json();
        line.insert("type".into(), json!("summary"));
        line.insert("role".into(), json!("send"));
        line.insert("protocol".into(), json!("tcp"));
        line.insert(
            "stamps".into(),
            crate::timestamps::stamps_json(true, None, false),
        );
        line.insert("duration_s".into(), json!(seconds));
        line.insert("bps".into(), json!(rate(bytes * 8, seconds) as u64));
        line.insert("records_per_s".into(), json!(rate(records, seconds) as u64));
        if let Some(t) = self.target_rps.filter(|t| *t > 0.0) {
            line.insert("target_records_per_s".into(), json!(t));
            let ratio = rate(records, seconds) / t;
            line.insert(
                "achieved_ratio".into(),
                json!((ratio * 1000.0).round() / 1000.0),
            );
        }
        // The smallest round trip of the sender's clock exchanges; null without them.
        line.insert(
            "control_rtt_ns".into(),
            json!(self.link.as_ref().and_then(|l| l.control_rtt_ns())),
        );
        if let Some(link) = &self.link {
            line.insert("control_integrity_failures".into(), link.integrity_json());
        }
        super::info_json(&mut line, &self.last_info);
        if let Some(placement) = &self.placement.0 {
            line.insert("placement".into(), placement.clone());
        }
        if self.rr {
            self.rr_summary(&mut line, snap, seconds, ctx);
        }
        let verdict_line = verdict.map(|v| tcp_control::attach_verdict(&mut line, v, records));
        if self.json {
            crate::output::json_line(&Value::Object(line));
        }
        if let Some(v) = verdict_line {
            say!("{v}");
        }
        say!(
            "send summary: {bytes} bytes, {records} records in {seconds:.2} s = {:.3} Gbit/s, {} rec/s; connects {}, reconnects {}, connect failures {}, resets {}, short writes {}",
            rate(bytes * 8, seconds) / 1e9,
            si(rate(records, seconds)),
            tx.connects,
            tx.reconnects,
            tx.connect_failures,
            tx.resets,
            tx.short_writes,
        );
    }

    fn rr_summary(
        &self,
        line: &mut Map<String, Value>,
        snap: &Snapshot,
        seconds: f64,
        (process, machine): (Option<u64>, Option<u64>),
    ) {
        let n = snap.tx.transactions;
        let per = |c: Option<u64>| c.filter(|_| n > 0).map(|c| c as f64 / n as f64);
        let q = |x| crate::sender::rtt::quantile(&snap.tx.rtt_cells, x);
        let fields = [
            ("tps", json!(rate(n, seconds).round() as u64)),
            ("rtt_p50_ns", json!(q(0.5))),
            ("rtt_p99_ns", json!(q(0.99))),
            ("rtt_p999_ns", json!(q(0.999))),
            ("rtt_max_ns", json!(q(1.0))),
            ("ctx_switches", json!(process)),
            (
                "ctx_switches_per_s",
                json!(process.map(|p| rate(p, seconds))),
            ),
            ("ctx_switches_per_transaction", json!(per(process))),
            ("machine_ctx_switches", json!(machine)),
            (
                "machine_ctx_switches_per_s",
                json!(machine.map(|m| rate(m, seconds))),
            ),
            ("machine_ctx_switches_per_transaction", json!(per(machine))),
        ];
        for (k, v) in fields {
            line.insert(k.into(), v);
        }
        let text = |v: Option<f64>| v.map_or("unknown".into(), |v| format!("{v:.2}"));
        say!(
            "rr summary: {n} transactions = {} trans/s; rtt p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns (cell bounds, within 12.5 %); ctx switches per transaction: process {}, machine {}",
            si(rate(n, seconds)),
            q(0.5),
            q(0.99),
            q(0.999),
            q(1.0),
            text(per(process)),
            text(per(machine)),
        );
    }

    pub(super) fn sink_summary(&self, snap: &Snapshot, active_s: f64, run_s: f64) {
        let rx = &snap.rx;
        let bytes = rx.rx_bytes;
        let records = rx.rx_records;
        let cells: [u64; LATENCY_CELLS] = snap.rx.latency_cells;
        let mut line = rx.json();
        line.insert("type".into(), json!("summary"));
        line.insert("role".into(), json!("sink"));
        line.insert("protocol".into(), json!("tcp"));
        line.insert(
            "stamps".into(),
            crate::timestamps::stamps_json(true, Some(crate::timestamps::Arrival::Read), false),
        );
        line.insert("duration_s".into(), json!(run_s));
        line.insert("active_s".into(), json!(active_s));
        line.insert("bps".into(), json!(rate(bytes * 8, active_s) as u64));
        // Corrected samples only; null without any, and a lower bound in the open top cell.
        for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
            let (le, at_least) = match latency_quantile_bound(&cells, q) {
                0 => (None, None),
                u64::MAX => (None, LATENCY_BOUNDS_NS.last().copied()),
                b => (Some(b), None),
            };
            line.insert(format!("latency_{name}_ns_le"), json!(le));
            if let Some(b) = at_least {
                line.insert(format!("latency_{name}_ns_at_least"), json!(b));
            }
        }
        if let Some(placement) = &self.placement.1 {
            line.insert("placement".into(), placement.clone());
        }
        if let Some(b) = &self.books {
            line.insert("senders".into(), tcp_control::senders_json(&b.rows()));
            line.insert(
                "unattributed_invalid".into(),
                json!(b.unattributed_invalid()),
            );
        }
        if self.json {
            crate::output::json_line(&Value::Object(line));
        }
        say!(
            "sink summary: {bytes} bytes, {records} records, {:.3} Gbit/s over {active_s:.2} s active; accepted {}, invalid {} (sequence {}, magic {}, version {}, length {}, truncated {}, depth {}, auth {}), refused {}",
            rate(bytes * 8, active_s) / 1e9,
            rx.accepts,
            rx.rx_invalid,
            rx.invalid_sequence,
            rx.invalid_magic,
            rx.invalid_version,
            rx.invalid_length,
            rx.invalid_truncated,
            rx.invalid_depth,
            rx.invalid_auth,
            rx.refused,
        );
    }
}
