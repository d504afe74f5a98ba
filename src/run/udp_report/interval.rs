//! A run's interval lines: per queue and role, with totals over several queues and the wire
//! rate where one is asked for, as human text and (with `--json`) JSON lines.

use super::UdpReport;
use crate::report::{self, RxSample, TxSample};

impl UdpReport {
    /// Prints one interval: a line per queue and role (and totals over several queues), in
    /// the pktgen style, and with `--json` one interval line per role, the sink's with each
    /// sender's part (`senders`).
    pub(super) fn print_interval(
        &mut self,
        elapsed: f64,
        seconds: f64,
        header: bool,
        (tx, rx): (&[TxSample], &[RxSample]),
        (tx0, rx0): (&[TxSample], &[RxSample]),
        wire_l1: Option<&[u64]>,
    ) {
        let mut lines = String::new();
        if header {
            lines += &report::interval_header();
            lines.push('\n');
        }
        let start = (elapsed - seconds).max(0.0);
        let prefix = |role: &str| {
            if self.prefix_roles {
                format!("{role} ")
            } else {
                String::new()
            }
        };
        let label = |role: &str, queue: &str| {
            report::interval_label(start, elapsed, &format!("{}{queue}", prefix(role)))
        };
        if let Some(s) = &self.senders {
            for (q, (n, b)) in s.queues.iter().zip(tx.iter().zip(tx0)) {
                let label = label("send", &report::queue_label(q));
                let window = n.window_s(b, seconds);
                lines += &report::tx_line(&label, n, b, window);
                if let Some(l1) = wire_l1 {
                    lines += &report::wire_text(report::l1_bytes_sent(l1, n, b), window);
                }
                if s.burst > 1 {
                    lines += &format!(" burst {}", s.burst);
                }
                if s.exchange {
                    lines += &report::exchange_text(n, b, window);
                }
                lines.push('\n');
            }
            if s.queues.len() > 1 {
                let (all, all0) = (report::total_tx(tx), report::total_tx(tx0));
                let window = report::total_window_s(tx, tx0, seconds);
                lines += &report::tx_line(&label("send", "total"), &all, &all0, window);
                if s.exchange {
                    lines += &report::exchange_text(&all, &all0, window);
                }
                lines.push('\n');
            }
            if self.json {
                crate::output::json_line(&report::tx_interval_json(
                    elapsed, &s.queues, tx, tx0, seconds,
                ));
            }
        }
        if let Some(s) = &self.sinks {
            for (q, (n, b)) in s.queues.iter().zip(rx.iter().zip(rx0)) {
                let label = label("sink", &report::queue_label(q));
                lines += &report::rx_line(&label, n, b, seconds);
                lines.push('\n');
            }
            if s.queues.len() > 1 {
                lines += &report::rx_line(
                    &label("sink", "total"),
                    &report::total_rx(rx),
                    &report::total_rx(rx0),
                    seconds,
                );
                lines.push('\n');
            }
            if self.json {
                let mut record = report::rx_interval_json(elapsed, &s.queues, rx, rx0, seconds);
                let rows = s.registry.rows(false);
                record["senders"] = self.state.sender_intervals.json(&rows);
                crate::output::json_line(&record);
            }
        }
        crate::output::human_text(&lines);
    }
}
