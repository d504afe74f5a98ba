//! The end-of-run summaries of a TCP run: one JSON line (`--json`) and one human line per
//! role, the sender's carrying the sink's verdict and the sink's its per-sender books.

use serde_json::{Map, Value, json};

use super::{Snapshot, TcpReport, rate};
use crate::{
    report,
    run::{link_ends::SinkVerdict, tcp_control},
    say,
    stats::{LATENCY_BOUNDS_NS, LATENCY_CELLS, latency_quantile_bound},
};

impl TcpReport {
    pub(super) fn send_summary(
        &self,
        snap: &Snapshot,
        seconds: f64,
        ctx: (Option<u64>, Option<u64>),
        verdict: Option<&SinkVerdict>,
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
        let rr_line = self
            .rr
            .then(|| self.rr_summary(&mut line, snap, seconds, ctx));
        let verdict_line = verdict.map(|v| tcp_control::attach_verdict(&mut line, v, records));
        if self.json {
            crate::output::json_line(&Value::Object(line));
        }
        say!(
            "send summary: {records} records, {bytes} bytes in {seconds:.3}s: {} {}{}; connects {}, reconnects {}, connect failures {}, resets {}, short writes {}",
            report::per_second(rate(records, seconds), "rec/s"),
            report::bit_rate(rate(bytes * 8, seconds)),
            self.target_rps
                .filter(|t| *t > 0.0)
                .map_or(String::new(), |t| format!(
                    " ({:.1}% of the {t:.0}rec/s target)",
                    rate(records, seconds) / t * 100.0
                )),
            tx.connects,
            tx.reconnects,
            tx.connect_failures,
            tx.resets,
            tx.short_writes,
        );
        if let Some(v) = verdict_line {
            say!("{v}");
        }
        if let Some(rr) = rr_line {
            say!("{rr}");
        }
    }

    fn rr_summary(
        &self,
        line: &mut Map<String, Value>,
        snap: &Snapshot,
        seconds: f64,
        (process, machine): (Option<u64>, Option<u64>),
    ) -> String {
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
        let rtt = if n == 0 {
            "rtt unknown (no transaction completed)".to_string()
        } else {
            format!(
                "rtt p50 <={} p99 <={} p99.9 <={} max <={} (cell bounds, at most 12.5 % above)",
                report::ns_text(q(0.5)),
                report::ns_text(q(0.99)),
                report::ns_text(q(0.999)),
                report::ns_text(q(1.0)),
            )
        };
        format!(
            "send rr: {n} transactions = {}; {rtt}; ctx switches per transaction: process {}, machine {}",
            report::per_second(rate(n, seconds), "trans/s"),
            text(per(process)),
            text(per(machine)),
        )
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
        let rows = self.books.as_ref().map(|b| b.rows()).unwrap_or_default();
        let firsts: Vec<(u64, &str)> = rows
            .iter()
            .filter_map(|r| Some((r.first_ns?, r.name.as_str())))
            .collect();
        let spread = report::start_spread(&firsts, "records");
        if let Some(b) = &self.books {
            line.insert("senders".into(), tcp_control::senders_json(&rows));
            line.insert(
                "start_spread".into(),
                json!(spread.as_ref().map(|(_, json)| json)),
            );
            line.insert(
                "unattributed_invalid".into(),
                json!(b.unattributed_invalid()),
            );
        }
        if self.json {
            crate::output::json_line(&Value::Object(line));
        }
        say!(
            "sink summary: {records} records, {bytes} bytes in {active_s:.3}s active: {} {}; accepted {}, invalid {} (sequence {}, magic {}, version {}, length {}, truncated {}, depth {}, auth {}), refused {}; {}",
            report::per_second(rate(records, active_s), "rec/s"),
            report::bit_rate(rate(bytes * 8, active_s)),
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
            latency_bounds_text(&cells),
        );
        for r in &rows {
            say!(
                "  sender {}: {} records, {} bytes, invalid {}, sessions {}, connections {} open and {} closed; {}",
                r.name,
                r.tally.records,
                r.tally.bytes,
                r.tally.invalid,
                r.sessions,
                r.conns_open,
                r.conns_closed,
                report::latency_only_text(&r.latency(), &r.clock)
            );
        }
        if let Some((line, _)) = &spread {
            say!("{line}");
        }
    }
}

/// The sink's latency as its cells bound it (`latency p50 <=20us p99 <=100us`), in the words
/// of the UDP sink's bounds; unknown without a corrected sample.
fn latency_bounds_text(cells: &[u64; LATENCY_CELLS]) -> String {
    if cells.iter().all(|c| *c == 0) {
        return "latency unknown (no corrected samples)".to_string();
    }
    format!(
        "latency p50 {} p99 {}",
        report::bound_text(latency_quantile_bound(cells, 0.5)),
        report::bound_text(latency_quantile_bound(cells, 0.99))
    )
}
