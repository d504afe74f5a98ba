//! What a sender's control channel found out, for its summary and its start: whether the sink
//! refused it or was still busy when it gave up, the best control round trip, integrity failures, and whether its first hello has
//! an answer yet. The control client's events update it (and the sender's control metrics).

use std::{
    sync::{
        Condvar, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// How long a sender that talks to a sink tries to get in at its start, busy or unreachable,
/// before it gives up without sending (or, once sending, stops): 2 s, as iperf3 gives up on a
/// server at once.
pub(crate) const START_WINDOW: Duration = Duration::from_secs(2);

use crate::{
    control::{client::ClientEvent, msg::PROTOCOL_MISMATCH},
    error::Error,
    metrics::names,
    say,
};

/// What a sender's control channel found out, for its summary.
#[derive(Debug)]
pub(crate) struct LinkState {
    /// The sink refused this sender's credentials (the run exits 7).
    pub(crate) refused: AtomicBool,
    /// The sink counts the other protocol, as its refusal says (the run exits 8).
    mismatch: Mutex<Option<String>>,
    /// The sink's last answer was busy: no connection got in since (the run exits 5).
    busy: Mutex<Option<String>>,
    /// Why the last attempt found no sink (connection refused, no route, a timeout): no
    /// connection got in since.
    unreachable: Mutex<Option<String>>,
    /// A connection got in (hello answered) at least once.
    connected: AtomicBool,
    /// When the link started: a sender that has not got in [`START_WINDOW`] after it, busy or
    /// unreachable throughout, gives up (exit 5 or 9).
    started: Instant,
    /// The smallest round trip of any clock exchange, in ns (`u64::MAX`: none).
    control_rtt_ns: AtomicU64,
    /// Connections dropped because a frame from the sink failed its integrity check, in the
    /// order of [`INTEGRITY_REASONS`].
    integrity_failures: [AtomicU64; INTEGRITY_REASONS.len()],
    /// The sender's first connection attempt has an outcome (hello answered, refused or
    /// unreachable); set with `awaits` by a sender that talks to a sink.
    answered: Mutex<bool>,
    answered_now: Condvar,
    awaits: AtomicBool,
}

/// The integrity failures a sender counts (`FrameError::integrity_label`).
const INTEGRITY_REASONS: [&str; 4] = ["bad_mac", "replayed", "out_of_order", "truncated"];

impl Default for LinkState {
    fn default() -> LinkState {
        LinkState {
            refused: AtomicBool::new(false),
            mismatch: Mutex::new(None),
            busy: Mutex::new(None),
            unreachable: Mutex::new(None),
            connected: AtomicBool::new(false),
            started: Instant::now(),
            control_rtt_ns: AtomicU64::new(u64::MAX),
            integrity_failures: Default::default(),
            answered: Mutex::new(false),
            answered_now: Condvar::new(),
            awaits: AtomicBool::new(false),
        }
    }
}

impl LinkState {
    /// The smallest control round trip measured, if any clock exchange completed.
    pub(crate) fn control_rtt_ns(&self) -> Option<u64> {
        Some(self.control_rtt_ns.load(Ordering::Relaxed)).filter(|&ns| ns != u64::MAX)
    }

    /// Whether the sink refused this sender's credentials.
    pub(crate) fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether the sink refused this sender for the other protocol.
    fn mismatched(&self) -> bool {
        self.mismatch.lock().is_ok_and(|m| m.is_some())
    }

    /// Whether the sink refused this sender for good (its credentials, or the other
    /// protocol), or it found no sink to take it within [`START_WINDOW`] of its start: nothing
    /// it sends could be counted, so its senders stop at once.
    pub(crate) fn stops_run(&self) -> bool {
        self.refused() || self.mismatched() || self.start_fault().is_some()
    }

    /// Why the sender gave up on its sink at its start, if it did: its verdict is not asked
    /// for (nothing would answer).
    pub(crate) fn gave_up_at_start(&self) -> Option<String> {
        self.start_fault().map(|e| e.to_string())
    }

    /// A sender that talks to a sink and got in nowhere within [`START_WINDOW`] of its start:
    /// the sink's busy answer ([`Error::SinkBusy`]) or why none answered ([`Error::NoSink`]).
    fn start_fault(&self) -> Option<Error> {
        if !self.awaits.load(Ordering::Relaxed)
            || self.connected.load(Ordering::Relaxed)
            || self.started.elapsed() < START_WINDOW
        {
            return None;
        }
        let lock = |m: &Mutex<Option<String>>| m.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(busy) = lock(&self.busy) {
            return Some(Error::SinkBusy(format!(
                "{busy}; it stopped before sending: run again later, or spread the senders over more sinks"
            )));
        }
        lock(&self.unreachable).map(|why| {
            Error::NoSink(format!(
                "{why}, for {:.0} s since the start: start the sink first, or check --to and --control",
                START_WINDOW.as_secs_f64()
            ))
        })
    }

    /// Waits, at the start, until the sender got in, was refused, or gave up on the sink
    /// ([`START_WINDOW`] after the link started): a busy or unreachable first answer is
    /// retried by the control client meanwhile. Says so when no answer came at all (a sink
    /// with a secret counts datagrams only after the sender's hello). At once without a link.
    pub(crate) fn wait_start(&self) {
        if !self.awaits.load(Ordering::Relaxed) {
            return;
        }
        if !self.wait_first_answer(START_WINDOW) {
            say!(
                "control: no answer from the sink within {START_WINDOW:?}; sending anyway (a sink with a secret counts datagrams only after this sender's hello)"
            );
            return;
        }
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let left = START_WINDOW.saturating_sub(self.started.elapsed());
            let settled =
                self.connected.load(Ordering::Relaxed) || self.refused() || self.mismatched();
            if settled || left.is_zero() {
                return;
            }
            answered = self
                .answered_now
                .wait_timeout(answered, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The summary's `control_integrity_failures`: connections dropped per reason.
    pub(crate) fn integrity_json(&self) -> serde_json::Value {
        INTEGRITY_REASONS
            .iter()
            .zip(&self.integrity_failures)
            .map(|(reason, n)| ((*reason).to_string(), n.load(Ordering::Relaxed).into()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// Marks that the sender waits for its first connection attempt's outcome
    /// ([`LinkState::wait_first_answer`]): it talks to a sink over the control channel.
    pub(crate) fn expect_answer(&self) {
        self.awaits.store(true, Ordering::Relaxed);
    }

    fn answer(&self) {
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        *answered = true;
        self.answered_now.notify_all();
    }

    /// Waits up to `limit` for the sender's first connection attempt, so its hello reaches the
    /// sink before its first datagram (a sink with a secret counts only the datagrams of senders
    /// that said hello). Returns false when it gave up waiting; true at once without a link.
    pub(crate) fn wait_first_answer(&self, limit: Duration) -> bool {
        if !self.awaits.load(Ordering::Relaxed) {
            return true;
        }
        let answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        let (answered, _) = self
            .answered_now
            .wait_timeout_while(answered, limit, |a| !*a)
            .unwrap_or_else(|e| e.into_inner());
        *answered
    }
}

/// Why a run whose sink refused or stayed busy fails, if it did: [`Error::ProtocolMismatch`]
/// (exit 8) for a sink of the other protocol and [`Error::Refused`] (exit 7) for its
/// credentials, whatever else went wrong (the cause of it: a UDP sink's port refuses a TCP
/// sender's connections, a TCP sink's port a UDP sender's datagrams); and for a run that
/// otherwise `ran_ok`, [`Error::SinkBusy`] (exit 5) when it gave up on a sink still busy.
pub(crate) fn refusal(state: Option<&LinkState>, ran_ok: bool) -> Option<Error> {
    let state = state?;
    if let Some(why) = state
        .mismatch
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
    {
        return Some(Error::ProtocolMismatch(why));
    }
    if state.refused() {
        return Some(Error::Refused(
            "the sink refused this sender's credentials: give both sides the same --secret-file"
                .into(),
        ));
    }
    if let Some(e) = state.start_fault() {
        return Some(e);
    }
    if !ran_ok {
        return None;
    }
    let busy = state.busy.lock().unwrap_or_else(|e| e.into_inner()).take();
    busy.map(|reason| {
        Error::SinkBusy(format!(
            "{reason}; no verdict: run again later, or spread the senders over more sinks"
        ))
    })
}

/// Records a control client event in `state`, the control metrics and the log.
pub(crate) fn event(e: ClientEvent, state: &LinkState) {
    // Answered once what the answer says is recorded, so the sender's start sees it.
    let answers = !matches!(e, ClientEvent::Clock { .. });
    record(e, state);
    if answers {
        state.answer();
    }
}

fn record(e: ClientEvent, state: &LinkState) {
    match e {
        ClientEvent::Connected {
            addr,
            sink_session,
            reconnect,
        } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(1.0);
            *state.busy.lock().unwrap_or_else(|e| e.into_inner()) = None;
            *state.unreachable.lock().unwrap_or_else(|e| e.into_inner()) = None;
            state.connected.store(true, Ordering::Relaxed);
            if reconnect > 0 {
                metrics::counter!(names::TX_CONTROL_RECONNECTS).increment(1);
            }
            say!(
                "control: connected to sink {sink_session} at {addr} (connection {})",
                reconnect + 1
            );
        }
        ClientEvent::Unreachable {
            addr,
            reason,
            retry_in,
        } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(0.0);
            say!(
                "control: cannot reach the sink at {addr}: {reason}; retrying (next in {:.1}s)",
                retry_in.as_secs_f64()
            );
            *state.unreachable.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                "nothing answered the control channel at {addr} ({reason})"
            ));
        }
        ClientEvent::Busy {
            addr,
            reason,
            retry_in,
        } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(0.0);
            say!(
                "control: {reason} (sink at {addr}); retrying (next in {:.1}s)",
                retry_in.as_secs_f64()
            );
            *state.busy.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        }
        ClientEvent::Lost { reason } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(0.0);
            say!("control: lost the sink: {reason}; sending anyway, reconnecting");
        }
        ClientEvent::Refused { reason } => {
            metrics::gauge!(names::TX_CONTROL_CONNECTED).set(0.0);
            say!("control: {reason}");
            match reason.split_once(PROTOCOL_MISMATCH) {
                Some((_, why)) => {
                    *state.mismatch.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("the sink refused this sender{}", why.trim_end()));
                }
                None => state.refused.store(true, Ordering::Relaxed),
            }
        }
        ClientEvent::Breach { reason } => {
            if let Some(i) = INTEGRITY_REASONS.iter().position(|r| *r == reason) {
                state.integrity_failures[i].fetch_add(1, Ordering::Relaxed);
            }
            metrics::counter!(names::TX_CONTROL_INTEGRITY, "reason" => reason).increment(1);
        }
        ClientEvent::Clock { min_rtt_ns, .. } => {
            let min = state
                .control_rtt_ns
                .fetch_min(min_rtt_ns, Ordering::Relaxed)
                .min(min_rtt_ns);
            metrics::gauge!(names::TX_CONTROL_RTT).set(min as f64 / 1e9);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EXIT_SINK_BUSY;

    fn busy() -> ClientEvent {
        ClientEvent::Busy {
            addr: ([127, 0, 0, 1], 9).into(),
            reason:
                "the sink is busy: this sink already serves 256 authenticated control connections"
                    .into(),
            retry_in: Duration::from_millis(200),
        }
    }

    #[test]
    fn a_sender_that_gives_up_on_a_busy_sink_exits_5_and_one_that_got_in_later_does_not() {
        let state = LinkState::default();
        event(busy(), &state);
        assert!(!state.refused(), "busy is not a credentials problem");
        let e = refusal(Some(&state), true).unwrap();
        assert_eq!(e.exit_code(), EXIT_SINK_BUSY);
        assert_eq!(
            e.to_string(),
            "the sink is busy: this sink already serves 256 authenticated control connections; no verdict: run again later, or spread the senders over more sinks"
        );
        let state = LinkState::default();
        event(busy(), &state);
        event(
            ClientEvent::Connected {
                addr: ([127, 0, 0, 1], 9).into(),
                sink_session: "s".into(),
                reconnect: 0,
            },
            &state,
        );
        assert!(refusal(Some(&state), true).is_none());
    }
}
