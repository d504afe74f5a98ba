//! The request/response part of a UDP sender's summary (`--pattern rr`): transactions and
//! their rate, the round trip as figures from the workers' HDR histograms, the requests that
//! timed out split by direction where the sink's verdict tells (a request the sink never
//! counted was lost on the way there; one it counted and whose answer never came, on the way
//! back or unanswered by the sink), unmatched responses, and context switches per transaction.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::{
    control::msg::Verdict,
    metrics::ctx::CtxSample,
    report::ns_text,
    sender::{SenderOutcome, SenderShared, exchange::ExchangeCounters},
};

/// The summary's rr line and JSON object, or `None` for a stream.
pub(super) fn exchange_summary(
    shared: &[Arc<SenderShared>],
    outcomes: &[Option<SenderOutcome>],
    seconds: f64,
    requests_sent: u64,
    verdict: Option<&Verdict>,
    ctx: (Option<u64>, Option<u64>),
) -> Option<(String, Value)> {
    let mut rtt: Option<hdrhistogram::Histogram<u64>> = None;
    for h in outcomes
        .iter()
        .flatten()
        .filter_map(|o| o.round_trips.as_ref())
    {
        match &mut rtt {
            Some(all) => all.add(h).ok()?,
            None => rtt = Some(h.clone()),
        }
    }
    let rtt = rtt?;
    let queues: Vec<ExchangeCounters> = shared.iter().map(|s| s.exchange.load()).collect();
    let mut c = ExchangeCounters::default();
    for q in &queues {
        c.add(q);
    }
    // The extremes are each queue's own: the smallest and largest of them, never their sums.
    c.rtt_min_ns = queues
        .iter()
        .map(|q| q.rtt_min_ns)
        .filter(|&m| m > 0)
        .min()
        .unwrap_or(0);
    c.rtt_max_ns = queues.iter().map(|q| q.rtt_max_ns).max().unwrap_or(0);
    let n = c.transactions;
    let rate = if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    };
    // Requests the sink never counted were lost on the way there (its kernel's drops
    // included: they never reached its books); the rest of the timeouts had no answer in time.
    let directions = verdict.map(|v| {
        let counted = v.totals.rx_packets.saturating_sub(v.totals.rx_late);
        let there = requests_sent.saturating_sub(counted).min(c.timeouts);
        (there, c.timeouts - there)
    });
    let per = |switches: Option<u64>| switches.filter(|_| n > 0).map(|s| s as f64 / n as f64);
    let figures = (n > 0).then(|| {
        json!({"min_ns": c.rtt_min_ns, "mean_ns": c.rtt_sum_ns / n,
            "p50_ns": rtt.value_at_quantile(0.5), "p99_ns": rtt.value_at_quantile(0.99),
            "p999_ns": rtt.value_at_quantile(0.999), "max_ns": c.rtt_max_ns})
    });
    let json = json!({
        "transactions": n,
        "transactions_per_s": rate.round() as u64,
        "response_bytes": c.response_bytes,
        "timeouts": c.timeouts,
        "lost_requests": directions.map(|d| d.0),
        "lost_responses": directions.map(|d| d.1),
        "unmatched_responses": c.unmatched,
        "rtt": figures,
        "ctx_switches_per_transaction": per(ctx.0),
        "machine_ctx_switches_per_transaction": per(ctx.1),
    });
    let rtt_words = if let Some(mean) = c.rtt_sum_ns.checked_div(n) {
        format!(
            "rtt min {} mean {} p50 {} p99 {} p99.9 {} max {}",
            ns_text(c.rtt_min_ns),
            ns_text(mean),
            ns_text(rtt.value_at_quantile(0.5)),
            ns_text(rtt.value_at_quantile(0.99)),
            ns_text(rtt.value_at_quantile(0.999)),
            ns_text(c.rtt_max_ns)
        )
    } else {
        "rtt unknown (no transaction completed)".to_string()
    };
    let lost_words = match directions {
        Some((there, back)) => format!(
            "{} timed out ({there} requests lost on the way, {back} without an answer)",
            c.timeouts
        ),
        None => format!(
            "{} timed out (direction unknown: no verdict from the sink)",
            c.timeouts
        ),
    };
    let ctx_words = |v: Option<f64>| v.map_or_else(|| "unknown".to_string(), |v| format!("{v:.2}"));
    let line = format!(
        "send rr: {n} transactions = {}; {rtt_words}; {lost_words}; {} unmatched responses; ctx switches per transaction: process {}, machine {}",
        crate::report::per_second(rate, "trans/s"),
        c.unmatched,
        ctx_words(per(ctx.0)),
        ctx_words(per(ctx.1)),
    );
    Some((line, json))
}

/// The context switches since `start`, for the summary.
pub(super) fn ctx_since(start: &CtxSample) -> (Option<u64>, Option<u64>) {
    crate::metrics::ctx::delta(start, &crate::metrics::ctx::sample())
}
