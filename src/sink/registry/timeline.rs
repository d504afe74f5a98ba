//! The sink's sessions in time, for people: one line when a session starts without a hello or
//! ends, and the time during which any session received packets (so rates never run across
//! idle gaps).

use super::{Inner, Registry};
use crate::sink::mailbox::CloseCause;

impl Registry {
    /// One line when a session ends by goodbye or idleness (not when the sink stops).
    pub(super) fn note_end(&self, inner: &mut Inner, epoch: u32, cause: CloseCause) {
        let why = match cause {
            CloseCause::Goodbye => "the sender said goodbye",
            CloseCause::Idle => "idle for --session-idle",
            CloseCause::End => return,
        };
        if let Some(e) = inner.epochs.get_mut(&epoch)
            && !e.ended
        {
            e.ended = true;
            let active = e.span.map_or(0, |(a, b)| b - a) as f64 / 1e9;
            let line = format!(
                "sink: session of {} (epoch {epoch:08x}) ended: {why}; {active:.3}s active",
                e.name
            );
            inner.events.push(line);
        }
    }

    /// Nanoseconds during which any session received packets (idle gaps excluded).
    pub(crate) fn active_ns(&self) -> u64 {
        let inner = self.lock();
        let mut spans: Vec<(u64, u64)> = inner.epochs.values().filter_map(|e| e.span).collect();
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

    /// Lines about sessions that started without a hello or ended since the last call.
    pub(crate) fn take_events(&self) -> Vec<String> {
        let _ = self.rows(false);
        std::mem::take(&mut self.lock().events)
    }
}
