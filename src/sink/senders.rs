//! The sink's per-sender books, free of any protocol: the name each sender run (epoch) is
//! booked under, with the `--max-senders` cap and its `other` book, each run's clock, and each
//! sender's closed tally and runs. A protocol brings only its [`Tally`] (what a closed session
//! or connection adds to its sender) and what it keeps per run beside the name and clock (`R`);
//! the UDP registry and the TCP books are both this type over their own tallies, so a sender is
//! named, capped and clocked the same way whatever it sends. The books live behind their
//! owner's lock, on the reporter and control threads; never on a worker.

use std::{
    collections::{BTreeMap, HashMap, hash_map::Entry},
    time::{Duration, Instant},
};

use crate::latency_clock::LatencyClock;

/// The book of senders beyond `--max-senders`.
pub(crate) const OTHER: &str = "other";

/// What a protocol counts for a sender: added up when a session closes, and when a sender's
/// book is folded into `other`.
pub(crate) trait Tally: Default {
    /// Adds `other`'s counts into this one (saturating).
    fn add(&mut self, other: &Self);
}

/// One sender's book.
#[derive(Debug, Default)]
pub(crate) struct Sender<T> {
    /// What its closed sessions counted.
    pub(crate) closed: T,
    /// Its runs (epochs) still kept.
    pub(crate) epochs: Vec<u32>,
    /// It said hello: it keeps its name once `--max-senders` are known, and an unannounced
    /// sender's book is folded into `other` to make room for it.
    pub(crate) announced: bool,
}

/// One sender run (an epoch): the name it is booked under, its clock, and the protocol's own.
#[derive(Debug)]
pub(crate) struct Run<R> {
    /// The sender it is booked under (its own name, `other`, or an unannounced name).
    pub(crate) name: String,
    /// Its sender said hello for it (a run seen in data alone may be pruned once it ended).
    pub(crate) announced: bool,
    /// How its latency relates to its clock.
    pub(crate) clock: LatencyClock,
    /// What the protocol keeps per run.
    pub(crate) own: R,
}

/// How a hello was booked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Announced {
    /// The name it is booked under (its own, or `other`).
    pub(crate) name: String,
    /// That name had a book before.
    pub(crate) known: bool,
    /// The run is new to that book.
    pub(crate) new_run: bool,
    /// Runs in that book now.
    pub(crate) runs: usize,
}

/// The books of every sender of one sink.
#[derive(Debug)]
pub(crate) struct SenderBooks<T, R> {
    max_senders: usize,
    /// Each sender's book, by the name it is booked under.
    pub(crate) senders: BTreeMap<String, Sender<T>>,
    /// Each run, by epoch.
    pub(crate) runs: HashMap<u32, Run<R>>,
}

impl<T: Tally, R> SenderBooks<T, R> {
    /// Empty books; at most `max_senders` names (at least one) get books of their own.
    pub(crate) fn new(max_senders: usize) -> SenderBooks<T, R> {
        SenderBooks {
            max_senders: max_senders.max(1),
            senders: BTreeMap::new(),
            runs: HashMap::new(),
        }
    }

    /// The name to book `name` under: itself, or `other` once `--max-senders` are known.
    pub(crate) fn book_name(&self, name: &str) -> String {
        if self.senders.contains_key(name) || self.senders.len() < self.max_senders {
            name.to_string()
        } else {
            OTHER.to_string()
        }
    }

    /// The name run `epoch`'s books go under: its run's, or `unannounced()` for a run never
    /// seen, through the cap.
    pub(crate) fn sender_of(&self, epoch: u32, unannounced: impl FnOnce() -> String) -> String {
        match self.runs.get(&epoch) {
            Some(run) => self.book_name(&run.name),
            None => self.book_name(&unannounced()),
        }
    }

    /// Folds one unannounced sender's book into `other`, so an announced sender gets its own
    /// name within `--max-senders`; false when every named sender is announced.
    fn make_room(&mut self) -> bool {
        let Some(name) = self
            .senders
            .iter()
            .find(|(name, book)| !book.announced && name.as_str() != OTHER)
            .map(|(name, _)| name.clone())
        else {
            return false;
        };
        let Some(book) = self.senders.remove(&name) else {
            return false;
        };
        for run in self.runs.values_mut().filter(|r| r.name == name) {
            run.name = OTHER.to_string();
        }
        let other = self.senders.entry(OTHER.to_string()).or_default();
        other.closed.add(&book.closed);
        for e in book.epochs {
            if !other.epochs.contains(&e) {
                other.epochs.push(e);
            }
        }
        true
    }

    /// A sender said hello for run `epoch`: books the run under its name (making room among
    /// unannounced senders when the cap is reached, else under `other`) with its clock as the
    /// hello tells (a repeated hello keeps a known estimate); `own` makes the protocol's part
    /// of a run new to the books. A run already seen in data keeps the name it has.
    pub(crate) fn announce(
        &mut self,
        name: &str,
        epoch: u32,
        clock: LatencyClock,
        own: impl FnOnce() -> R,
    ) -> Announced {
        let mut booked = self.book_name(name);
        if booked == OTHER && name != OTHER && self.make_room() {
            booked = name.to_string();
        }
        let known = self.senders.contains_key(&booked);
        let book = self.senders.entry(booked.clone()).or_default();
        book.announced = true;
        let new_run = !book.epochs.contains(&epoch);
        if new_run {
            book.epochs.push(epoch);
        }
        let runs = book.epochs.len();
        let run = self.runs.entry(epoch).or_insert_with(|| Run {
            name: booked.clone(),
            announced: true,
            clock: clock.clone(),
            own: own(),
        });
        run.announced = true;
        run.clock = LatencyClock::at_hello(Some(&run.clock), clock);
        Announced {
            name: booked,
            known,
            new_run,
            runs,
        }
    }

    /// A run seen in data before (or without) a hello: booked under `name` through the cap,
    /// its clock unknown, and counted among its sender's runs. A run already in the books keeps
    /// its name.
    pub(crate) fn seen(
        &mut self,
        epoch: u32,
        name: String,
        own: impl FnOnce() -> R,
    ) -> &mut Run<R> {
        let name = self.book_name(&name);
        match self.runs.entry(epoch) {
            Entry::Occupied(run) => run.into_mut(),
            Entry::Vacant(slot) => {
                let book = self.senders.entry(name.clone()).or_default();
                if !book.epochs.contains(&epoch) {
                    book.epochs.push(epoch);
                }
                slot.insert(Run {
                    name,
                    announced: false,
                    clock: LatencyClock::default(),
                    own: own(),
                })
            }
        }
    }

    /// Run `epoch`'s estimate of the sink's clock offset; true when it changed the run's
    /// correction (false for a run not in the books).
    pub(crate) fn estimate(
        &mut self,
        epoch: u32,
        offset_ns: i64,
        error_bound_ns: u64,
        rtt_ns: u64,
    ) -> bool {
        self.runs
            .get_mut(&epoch)
            .is_some_and(|run| run.clock.estimated(offset_ns, error_bound_ns, rtt_ns))
    }

    /// Run `epoch`'s clock correction (ns), when known.
    pub(crate) fn correction(&self, epoch: u32) -> Option<i64> {
        self.runs.get(&epoch).and_then(|r| r.clock.correction_ns())
    }

    /// Run `epoch`'s clock (unknown for a run not in the books).
    pub(crate) fn clock_of(&self, epoch: u32) -> LatencyClock {
        self.runs
            .get(&epoch)
            .map(|r| r.clock.clone())
            .unwrap_or_default()
    }

    /// Books what a closed session of run `epoch` counted under sender `name`.
    pub(crate) fn book_closed(&mut self, name: String, epoch: u32, tally: &T) {
        let book = self.senders.entry(name).or_default();
        book.closed.add(tally);
        if !book.epochs.contains(&epoch) {
            book.epochs.push(epoch);
        }
    }

    /// Sender `name`'s clock: its latest run's with a known clock.
    pub(crate) fn sender_clock(&self, name: &str) -> LatencyClock {
        let epochs = self.senders.get(name).map(|b| b.epochs.as_slice());
        LatencyClock::latest(
            epochs
                .unwrap_or_default()
                .iter()
                .filter_map(|e| self.runs.get(e).map(|r| &r.clock)),
        )
    }
}

/// Polls `attempt` every 5 ms for at most `wait` (a goodbye waiting for a run's last
/// sessions). The last attempt is told so (`true`) and answers with what there is; should it
/// still decline, the answer is `V::default()`.
pub(crate) fn poll_until<V: Default>(
    wait: Duration,
    mut attempt: impl FnMut(bool) -> Option<V>,
) -> V {
    let until = Instant::now() + wait;
    loop {
        let last = Instant::now() >= until;
        match attempt(last) {
            Some(v) => return v,
            None if last => return V::default(),
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Count(u64);

    impl Tally for Count {
        fn add(&mut self, other: &Count) {
            self.0 = self.0.saturating_add(other.0);
        }
    }

    #[test]
    fn the_cap_folds_an_unannounced_sender_into_other_to_name_an_announced_one() {
        let mut books: SenderBooks<Count, ()> = SenderBooks::new(2);
        books.seen(1, "10.0.0.1/00000001".into(), || ());
        books.book_closed(books.sender_of(1, String::new), 1, &Count(5));
        let a = books.announce("a", 2, LatencyClock::same_clock(), || ());
        assert_eq!(
            (a.name.as_str(), a.known, a.new_run, a.runs),
            ("a", false, true, 1)
        );
        // The cap is full (the unannounced sender and a): b makes room.
        let b = books.announce("b", 3, LatencyClock::default(), || ());
        assert_eq!(b.name, "b");
        assert_eq!(books.senders[OTHER].closed, Count(5));
        assert_eq!(books.runs[&1].name, OTHER);
        // No unannounced sender is left to fold: c is booked under other.
        let c = books.announce("c", 4, LatencyClock::default(), || ());
        assert_eq!(c.name, OTHER);
        let again = books.announce("a", 2, LatencyClock::default(), || ());
        assert_eq!((again.known, again.new_run), (true, false));
        assert_eq!(books.sender_clock("a"), LatencyClock::same_clock());
    }

    #[test]
    fn an_estimate_reaches_only_a_run_in_the_books_and_a_repeated_hello_keeps_it() {
        let mut books: SenderBooks<Count, ()> = SenderBooks::new(8);
        assert!(!books.estimate(9, 5, 1, 2), "no such run");
        books.announce("a", 9, LatencyClock::default(), || ());
        assert_eq!(books.correction(9), None);
        assert!(books.estimate(9, -5_000, 40, 80));
        books.announce("a", 9, LatencyClock::default(), || ());
        assert_eq!(books.correction(9), Some(-5_000));
        assert_eq!(books.clock_of(9), LatencyClock::corrected(-5_000, 40, 80));
    }

    #[test]
    fn poll_until_answers_at_once_or_on_its_last_attempt() {
        assert_eq!(poll_until(Duration::from_secs(5), |_| Some(1)), 1);
        let mut calls = 0;
        let v = poll_until(Duration::from_millis(20), |last| {
            calls += 1;
            last.then_some(calls)
        });
        assert!(v >= 2, "it polled until its last attempt");
        assert_eq!(poll_until(Duration::ZERO, |_| None::<u32>), 0);
    }
}
