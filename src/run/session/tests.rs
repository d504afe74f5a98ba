//! The session driven by a fake protocol and a fake clock: the order of release, drain, join,
//! final flush and summaries; the intervals' snapshots; interrupts; the drain bound; and how a
//! failed ring or a panicked worker fails the run.

use std::{
    cell::{Cell, RefCell},
    rc::Rc,
    sync::atomic::AtomicBool,
};

use super::*;
use crate::run::ticker::FakeClock;

const MS: u64 = 1_000_000;

/// What the fake run did, in order, and how many ticks it has seen.
#[derive(Default)]
struct World {
    log: Vec<String>,
    ticks: u64,
    snapshots: u64,
    intervals: Vec<(Span, u64, u64)>,
}

type Shared = Rc<RefCell<World>>;

fn say(world: &Shared, what: &str) {
    world.borrow_mut().log.push(what.to_string());
}

#[derive(Clone, Copy)]
struct FakeOutcome {
    ring_failed: bool,
}

impl Outcome for FakeOutcome {
    fn ring_failed(&self) -> bool {
        self.ring_failed
    }
    fn span(&self) -> Option<(u64, u64)> {
        None
    }
}

/// A worker group that ends after `end_after` ticks, when stopped, or (if it `drains`) when
/// asked to drain.
struct FakeGroup {
    name: &'static str,
    world: Shared,
    control: Arc<Control>,
    end_after: Option<u64>,
    drains: bool,
    outcomes: Vec<Option<FakeOutcome>>,
}

impl Workers for FakeGroup {
    type Outcome = FakeOutcome;

    fn release(&self) {
        say(&self.world, &format!("release {}", self.name));
    }

    fn finished(&self) -> bool {
        self.control.stop_requested()
            || self.drains && self.control.drain_requested()
            || self
                .end_after
                .is_some_and(|n| self.world.borrow().ticks >= n)
    }

    fn join(&mut self) -> Vec<Option<FakeOutcome>> {
        say(&self.world, &format!("join {}", self.name));
        std::mem::take(&mut self.outcomes)
    }
}

struct FakeSeries(Shared);

impl Series for FakeSeries {
    fn flush(&mut self) {
        say(&self.0, "flush");
    }
}

/// A protocol whose snapshots count themselves; `DRAIN` is its row's drain-after-interrupt.
struct FakeProto<const DRAIN: bool> {
    world: Shared,
    senders: Option<FakeGroup>,
    sinks: Option<FakeGroup>,
    failure: Option<&'static str>,
}

/// The baseline snapshot, told apart from every counted one.
const BASELINE: u64 = 1_000;

impl<const DRAIN: bool> Proto for FakeProto<DRAIN> {
    type Senders = FakeGroup;
    type Sinks = FakeGroup;
    type Snapshot = u64;
    type Series = FakeSeries;

    const DRAIN_AFTER_INTERRUPT: bool = DRAIN;
    const DRAIN_BOUND: Option<Duration> = Some(Duration::from_millis(100));

    fn senders(&self) -> Option<&FakeGroup> {
        self.senders.as_ref()
    }
    fn senders_mut(&mut self) -> Option<&mut FakeGroup> {
        self.senders.as_mut()
    }
    fn sinks(&self) -> Option<&FakeGroup> {
        self.sinks.as_ref()
    }
    fn sinks_mut(&mut self) -> Option<&mut FakeGroup> {
        self.sinks.as_mut()
    }
    fn before_senders(&mut self) {
        say(&self.world, "before_senders");
    }
    fn released(&mut self, _start_ns: u64) {
        say(&self.world, "released");
    }
    fn senders_ended(&mut self, _now_ns: u64) {
        say(&self.world, "senders_ended");
    }
    fn snapshot(&self) -> u64 {
        let mut w = self.world.borrow_mut();
        w.snapshots += 1;
        w.snapshots
    }
    fn baseline(&self) -> u64 {
        BASELINE
    }
    fn tick(&mut self, _now_ns: u64, _snapshot: &u64) {
        self.world.borrow_mut().ticks += 1;
    }
    fn interval(&mut self, span: Span, now: &u64, before: &u64) {
        self.world
            .borrow_mut()
            .intervals
            .push((span, *now, *before));
    }
    fn conclude(&mut self) {
        say(&self.world, "conclude");
    }
    fn summaries(self, last: u64, (send, sink): Outcomes<Self>) -> Result<(), Error> {
        say(
            &self.world,
            &format!(
                "summaries of {} senders, {} sinks",
                send.map_or(0, |o| o.len()),
                sink.map_or(0, |o| o.len())
            ),
        );
        // The last snapshot is taken after every worker was joined.
        assert_eq!(last, self.world.borrow().snapshots);
        match self.failure {
            Some(why) => Err(Error::Usage(why.to_string())),
            None => Ok(()),
        }
    }
}

const OK: Option<FakeOutcome> = Some(FakeOutcome { ring_failed: false });

fn group(world: &Shared, name: &'static str, control: &Arc<Control>) -> FakeGroup {
    FakeGroup {
        name,
        world: Rc::clone(world),
        control: Arc::clone(control),
        end_after: None,
        drains: true,
        outcomes: vec![OK, OK],
    }
}

/// A pair whose senders end after `send_ticks` ticks, its session, and its world.
fn pair<const DRAIN: bool>(
    send_ticks: u64,
    interval: Duration,
) -> (
    Session<FakeProto<DRAIN>>,
    Shared,
    Arc<Control>,
    Arc<Control>,
) {
    let world = Shared::default();
    let (send, sink) = (Arc::new(Control::default()), Arc::new(Control::default()));
    let proto = FakeProto {
        world: Rc::clone(&world),
        senders: Some(FakeGroup {
            end_after: Some(send_ticks),
            ..group(&world, "send", &send)
        }),
        sinks: Some(group(&world, "sink", &sink)),
        failure: None,
    };
    let exporter = Exporter::new(FakeSeries(Rc::clone(&world)));
    let session = Session::new(proto, (Arc::clone(&send), Arc::clone(&sink)), interval)
        .exporting(Some(exporter), None);
    (session, world, send, sink)
}

fn run<P: Proto>(session: Session<P>, signal: bool) -> Ended {
    session.run(&AtomicBool::new(signal), &FakeClock(Cell::new(1_000 * MS)))
}

/// The log without the flushes of the 20 ms cadence, which follows the real clock.
fn events(world: &Shared) -> Vec<String> {
    let log = &world.borrow().log;
    let last_flush = log.iter().rposition(|l| l == "flush");
    log.iter()
        .enumerate()
        .filter(|(i, l)| *l != "flush" || Some(*i) == last_flush)
        .map(|(_, l)| l.clone())
        .collect()
}

#[test]
fn a_pair_releases_its_sinks_first_and_flushes_after_the_join_before_its_summaries() {
    let (session, world, send, sink) = pair::<true>(10, Duration::ZERO);
    let ended = run(session, false);
    assert!(ended.result.is_ok());
    assert!(!ended.interrupted);
    assert_eq!(
        events(&world),
        [
            "release sink",
            "before_senders",
            "release send",
            "released",
            "senders_ended",
            "join send",
            "join sink",
            "conclude",
            "flush",
            "summaries of 2 senders, 2 sinks"
        ]
    );
    // The senders ended on their own; the sinks were asked to drain, never stopped.
    assert!(!send.stop_requested());
    assert!(sink.drain_requested() && !sink.stop_requested());
}

#[test]
fn sinks_the_transport_released_are_not_released_again() {
    let (session, world, ..) = pair::<true>(3, Duration::ZERO);
    let ended = run(session.sinks_released(), false);
    assert!(ended.result.is_ok());
    let log = events(&world);
    assert_eq!(log[..3], ["before_senders", "release send", "released"]);
    assert!(!log.iter().any(|l| l == "release sink"));
}

#[test]
fn each_interval_is_measured_from_the_snapshot_at_the_last_ones_end() {
    let (session, world, ..) = pair::<true>(25, Duration::from_millis(200));
    run(session, false);
    let w = world.borrow();
    let start = 1_000 * MS;
    // Ticks of 20 ms: intervals end at 200 and 400 ms, and the last, partial, at the run's
    // end (the 27th tick, 540 ms).
    assert_eq!(w.intervals.len(), 3);
    let (first, now1, before1) = w.intervals[0];
    assert_eq!(
        first,
        Span {
            run_start_ns: start,
            from_ns: start,
            to_ns: start + 200 * MS
        }
    );
    assert_eq!(before1, BASELINE);
    let (second, _, before2) = w.intervals[1];
    assert_eq!(second.from_ns, first.to_ns);
    assert_eq!(before2, now1);
    assert!((second.start_s() - 0.2).abs() < 1e-9 && (second.seconds() - 0.2).abs() < 1e-9);
    let (last, _, before3) = w.intervals[2];
    assert_eq!(last.from_ns, second.to_ns);
    assert_eq!(last.to_ns, start + 540 * MS);
    assert!((last.seconds() - 0.14).abs() < 1e-9);
    assert_ne!(before3, before2);
}

#[test]
fn a_failed_ring_or_a_panicked_worker_fails_the_run_after_its_summaries() {
    for bad in [Some(FakeOutcome { ring_failed: true }), None] {
        let (mut session, world, ..) = pair::<true>(2, Duration::ZERO);
        session.proto.sinks.as_mut().unwrap().outcomes[1] = bad;
        let ended = run(session, false);
        let error = ended.result.unwrap_err().to_string();
        assert!(error.contains("io_uring failed"), "{error}");
        assert!(events(&world).last().unwrap().starts_with("summaries"));
    }
}

#[test]
fn the_protocols_own_failure_is_the_one_reported() {
    let (mut session, ..) = pair::<true>(2, Duration::ZERO);
    session.proto.failure = Some("the sink saw loss");
    session.proto.senders.as_mut().unwrap().outcomes[0] = None;
    let error = run(session, false).result.unwrap_err().to_string();
    assert!(error.contains("the sink saw loss"), "{error}");
}

#[test]
fn an_interrupt_stops_the_senders_and_drains_or_stops_a_pairs_sinks_by_the_protocols_row() {
    let (session, _, send, sink) = pair::<true>(u64::MAX, Duration::ZERO);
    assert!(run(session, true).interrupted);
    assert!(send.stop_requested());
    assert!(sink.drain_requested() && !sink.stop_requested());

    let (session, _, send, sink) = pair::<false>(u64::MAX, Duration::ZERO);
    assert!(run(session, true).interrupted);
    assert!(send.stop_requested() && sink.stop_requested());
}

#[test]
fn a_sink_alone_is_stopped_by_an_interrupt_and_never_told_its_senders_ended() {
    let world = Shared::default();
    let sink = Arc::new(Control::default());
    let proto = FakeProto::<true> {
        world: Rc::clone(&world),
        senders: None,
        sinks: Some(group(&world, "sink", &sink)),
        failure: None,
    };
    let session = Session::new(proto, (Arc::default(), Arc::clone(&sink)), Duration::ZERO);
    let ended = run(session, true);
    assert!(ended.interrupted && ended.result.is_ok());
    assert!(sink.stop_requested());
    assert_eq!(
        events(&world),
        [
            "release sink",
            "released",
            "join sink",
            "conclude",
            "summaries of 0 senders, 2 sinks"
        ]
    );
}

#[test]
fn sinks_that_do_not_drain_are_stopped_once_the_drain_bound_has_passed() {
    let (mut session, world, _, sink) = pair::<true>(10, Duration::ZERO);
    session.proto.sinks.as_mut().unwrap().drains = false;
    assert!(run(session, false).result.is_ok());
    assert!(sink.stop_requested());
    // The senders are seen ended at tick 11; the bound (100 ms) has passed at tick 17, when
    // the stop is asked; the sinks are seen ended at tick 18.
    assert_eq!(world.borrow().ticks, 18);
}
