//! The sink's sessions in time: an event when a session starts without a hello or ends (a
//! line for people, a `"type":"session"` record with `--json`), and the time during which any
//! session received packets (so rates never run across idle gaps).

use serde_json::{Value, json};

use super::{Inner, Registry};
use crate::sink::mailbox::CloseCause;

/// A session of the sink starting without a hello or ending, as the sink noticed it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SessionEvent {
    /// Packets of a sender run that never said hello (no control channel).
    Start { sender: String, epoch: u32 },
    /// A session ended by goodbye or idleness after `active_s` seconds of packets.
    End {
        sender: String,
        epoch: u32,
        goodbye: bool,
        active_s: f64,
    },
}

impl SessionEvent {
    /// The line for people.
    pub(crate) fn line(&self) -> String {
        match self {
            SessionEvent::Start { sender, epoch } => {
                format!("sink: new session of {sender} (epoch {epoch:08x}, no control channel)")
            }
            SessionEvent::End {
                sender,
                epoch,
                goodbye,
                active_s,
            } => {
                let why = if *goodbye {
                    "the sender said goodbye"
                } else {
                    "idle for --session-idle"
                };
                format!(
                    "sink: session of {sender} (epoch {epoch:08x}) ended: {why}; {active_s:.3}s active"
                )
            }
        }
    }

    /// The `"type":"session"` JSON record.
    pub(crate) fn json(&self) -> Value {
        match self {
            SessionEvent::Start { sender, epoch } => json!({"type": "session", "role": "sink",
                "event": "start", "sender": sender, "epoch": epoch, "hello": false}),
            SessionEvent::End {
                sender,
                epoch,
                goodbye,
                active_s,
            } => json!({"type": "session", "role": "sink", "event": "end", "sender": sender,
                "epoch": epoch, "cause": if *goodbye { "goodbye" } else { "idle" },
                "active_s": (active_s * 1000.0).round() / 1000.0}),
        }
    }
}

impl Registry {
    /// An event when a session ends by goodbye or idleness (not when the sink stops).
    pub(super) fn note_end(&self, inner: &mut Inner, epoch: u32, cause: CloseCause) {
        let goodbye = match cause {
            CloseCause::Goodbye => true,
            CloseCause::Idle => false,
            CloseCause::End => return,
        };
        if let Some(e) = inner.books.runs.get_mut(&epoch)
            && !e.own.ended
        {
            e.own.ended = true;
            let active_s = e.own.span.map_or(0, |(a, b)| b - a) as f64 / 1e9;
            inner.events.push(SessionEvent::End {
                sender: e.name.clone(),
                epoch,
                goodbye,
                active_s,
            });
        }
    }

    /// Nanoseconds during which any session received packets (idle gaps excluded).
    pub(crate) fn active_ns(&self) -> u64 {
        let inner = self.lock();
        let mut spans: Vec<(u64, u64)> = inner
            .books
            .runs
            .values()
            .filter_map(|e| e.own.span)
            .collect();
        spans.extend_from_slice(&inner.pruned_spans);
        spans.sort_unstable();
        let (mut total, mut open): (u64, Option<(u64, u64)>) = (0, None);
        for (a, b) in spans {
            open = match open {
                Some((x, y)) if a <= y => Some((x, y.max(b))),
                Some((x, y)) => {
                    total += y - x;
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        total + open.map_or(0, |(x, y)| y - x)
    }

    /// Sessions that started without a hello or ended since the last call.
    pub(crate) fn take_events(&self) -> Vec<SessionEvent> {
        let _ = self.rows(false);
        std::mem::take(&mut self.lock().events)
    }
}
