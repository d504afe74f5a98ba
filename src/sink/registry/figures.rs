//! The registry's latency and jitter figures: the workers' handed-back figure slots added into
//! their sender's figures (and, until its verdict, into its run's), and a sender's live
//! figures (its own plus its runs' slots still in use). A sender whose samples did not all go
//! into figures (a worker's pool had no slot for a run) has none: unknown, never a figure of
//! part of its samples. Memory: a sender holds two [`FigureCells`], and so does each run
//! waiting for its verdict, at most [`RUN_FIGURES`] of them (the quietest run's are dropped
//! first, and its verdict's figures are then unknown).

use super::{Inner, Registry};
use crate::{
    figures::{FigureCells, Figures},
    sink::{figure_pool::FigureSlot, mailbox::decode_source},
    stats::SessionCounters,
};

/// Runs whose figures are kept for their verdict at once.
const RUN_FIGURES: usize = 256;

/// Latency and jitter cells of a sender or a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct FigureBook {
    latency: FigureCells,
    jitter: FigureCells,
}

impl FigureBook {
    fn add_slot(&mut self, slot: &FigureSlot) {
        slot.latency.add_into(&mut self.latency);
        slot.jitter.add_into(&mut self.jitter);
    }

    pub(super) fn add(&mut self, other: &FigureBook) {
        self.latency.add(&other.latency);
        self.jitter.add(&other.jitter);
    }

    /// The figures of these cells, for books `counters`: none when some of their latency
    /// samples went into no figures.
    pub(crate) fn figures(&self, counters: &SessionCounters) -> SenderFigures {
        if counters.latency_unfigured > 0 {
            return SenderFigures::default();
        }
        SenderFigures {
            latency: self.latency.figures(),
            jitter: self.jitter.figures(),
        }
    }
}

/// Latency and jitter as figures (`None`: no samples, or unknown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SenderFigures {
    /// One-way latency.
    pub(crate) latency: Option<Figures>,
    /// |D| of consecutive packets.
    pub(crate) jitter: Option<Figures>,
}

impl Registry {
    /// Adds the workers' handed-back slots into their senders' figures, and into their runs'
    /// until the runs' verdicts.
    pub(super) fn harvest_figures(&self, inner: &mut Inner) {
        for worker in &self.workers {
            worker.figures.harvest(|epoch, slot| {
                let name = self.sender_of(inner, epoch, decode_source(slot.source()));
                inner
                    .books
                    .senders
                    .entry(name)
                    .or_default()
                    .closed
                    .figures
                    .get_or_insert_with(Box::default)
                    .add_slot(slot);
                let kept = inner
                    .books
                    .runs
                    .values()
                    .filter(|e| e.own.figures.is_some())
                    .count();
                if let Some(e) = inner.books.runs.get_mut(&epoch).map(|e| &mut e.own)
                    && e.answered.is_empty()
                {
                    if e.figures.is_none() && kept >= RUN_FIGURES {
                        e.figures_dropped = true;
                    }
                    if !e.figures_dropped {
                        e.figures.get_or_insert_with(Box::default).add_slot(slot);
                    }
                }
            });
        }
        let kept = inner
            .books
            .runs
            .values()
            .filter(|e| e.own.figures.is_some())
            .count();
        if kept > RUN_FIGURES
            && let Some(e) = inner
                .books
                .runs
                .values_mut()
                .map(|e| &mut e.own)
                .filter(|e| e.figures.is_some())
                .min_by_key(|e| e.span.map_or(0, |s| s.1))
        {
            e.figures = None;
            e.figures_dropped = true;
        }
    }

    /// Run `epoch`'s figures for its verdict, with its books `totals`; what was kept for it is
    /// let go.
    pub(super) fn run_figures(
        &self,
        inner: &mut Inner,
        epoch: u32,
        totals: &SessionCounters,
    ) -> SenderFigures {
        let Some(e) = inner.books.runs.get_mut(&epoch).map(|e| &mut e.own) else {
            return SenderFigures::default();
        };
        if e.figures_dropped {
            return SenderFigures::default();
        }
        let book = e.figures.take().unwrap_or_default();
        book.figures(totals)
    }

    /// Sender `name`'s figures now: its own plus its runs' slots still in use.
    pub(super) fn live_figures(
        &self,
        inner: &Inner,
        name: &str,
        counters: &SessionCounters,
    ) -> SenderFigures {
        let mut book = inner
            .books
            .senders
            .get(name)
            .and_then(|b| b.closed.figures.as_deref())
            .cloned()
            .unwrap_or_default();
        for worker in &self.workers {
            worker.figures.in_use(|epoch, slot| {
                if self.sender_of(inner, epoch, decode_source(slot.source())) == name {
                    book.add_slot(slot);
                }
            });
        }
        book.figures(counters)
    }
}
