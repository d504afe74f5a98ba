//! Worker threads: one per queue, pinned to its planned CPU, built on that thread (so the ring,
//! its memory and the arena's first touch are local to the CPU's node), then released together.
//!
//! Everything that can fail happens in the set-up closure. Each worker reports its set-up result
//! before a start barrier, with where its arena's pages are (measured on its own thread, before
//! it runs); if any failed, the others are told to stop and nothing runs.

use std::{
    sync::{
        Arc, Barrier,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::JoinHandle,
};

use nix::{sched::CpuSet, unistd::Pid};

use crate::{
    error::Error,
    mem::{Arena, MemoryPlacement},
};

/// Flags every worker of a run watches.
#[derive(Debug, Default)]
pub(crate) struct Control {
    stop: AtomicBool,
    drain: AtomicBool,
}

impl Control {
    /// Asks every worker to stop at its next loop iteration.
    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Asks sinks to stop once traffic has been quiet for a moment (senders are done).
    pub(crate) fn request_drain(&self) {
        self.drain.store(true, Ordering::Relaxed);
    }

    /// Whether a drain was requested.
    #[inline]
    pub(crate) fn drain_requested(&self) -> bool {
        self.drain.load(Ordering::Relaxed)
    }

    /// Whether a stop was requested.
    #[inline]
    pub(crate) fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Something a worker thread runs after set-up.
pub(crate) trait Job {
    /// What the job returns when it ends.
    type Output: Send + 'static;
    /// Runs until done or until `control` asks to stop.
    fn run(self, control: &Control) -> Self::Output;
    /// The packet memory the job set up.
    fn arena(&self) -> &Arena;
}

/// Pins the calling thread to `cpu`.
pub(crate) fn pin_to_cpu(cpu: u32) -> Result<(), Error> {
    let mut set = CpuSet::new();
    set.set(cpu as usize)
        .map_err(|e| Error::Usage(format!("CPU {cpu} is out of range: {e}")))?;
    nix::sched::sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| {
        Error::Usage(format!(
            "cannot pin a worker to CPU {cpu} ({e}); choose CPUs from `ringblast topo`"
        ))
    })
}

/// What a worker's run returns, as far as the session judges it.
pub(crate) trait Outcome {
    /// The worker's io_uring failed during the run.
    fn ring_failed(&self) -> bool;
    /// When its traffic began and ended (monotonic ns): a sender's run, a sink's first and last
    /// valid packet; `None` when it has none to tell.
    fn span(&self) -> Option<(u64, u64)>;
}

/// The span of a group's traffic: its workers' earliest start and latest end (`None` when no
/// worker tells one).
pub(crate) fn span<O: Outcome>(outcomes: &[Option<O>]) -> Option<(u64, u64)> {
    let spans = || outcomes.iter().flatten().filter_map(Outcome::span);
    Some((spans().map(|s| s.0).min()?, spans().map(|s| s.1).max()?))
}

/// A group of started worker threads, waiting at their start barrier.
pub(crate) struct Group<O> {
    handles: Vec<JoinHandle<Option<O>>>,
    barrier: Arc<Barrier>,
    memory: Vec<MemoryPlacement>,
}

/// Spawns one thread per `(cpu, setup)`; each pins itself, runs its set-up closure and waits.
/// Returns when every worker finished set-up; the first set-up error is returned after all
/// threads have been released and joined.
pub(crate) fn start<J, F>(
    name: &str,
    control: &Arc<Control>,
    workers: Vec<(u32, F)>,
) -> Result<Group<J::Output>, Error>
where
    J: Job,
    F: FnOnce() -> Result<J, Error> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(workers.len() + 1));
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<MemoryPlacement, Error>)>();
    let mut handles = Vec::with_capacity(workers.len());
    for (index, (cpu, setup)) in workers.into_iter().enumerate() {
        let barrier = Arc::clone(&barrier);
        let control = Arc::clone(control);
        let ready = ready_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{name}-q{index}"))
            .spawn(move || {
                let job = pin_to_cpu(cpu).and_then(|()| setup());
                let (status, job) = match job {
                    Ok(job) => (Ok(job.arena().placement()), Some(job)),
                    Err(e) => (Err(e), None),
                };
                let _ = ready.send((index, status));
                barrier.wait();
                match job {
                    Some(job) if !control.stop_requested() => Some(job.run(&control)),
                    _ => None,
                }
            })
            .map_err(|e| Error::io("spawn worker thread", e))?;
        handles.push(spawned);
    }
    drop(ready_tx);
    let mut first_error = None;
    let mut memory: Vec<Option<MemoryPlacement>> = vec![None; handles.len()];
    for (index, status) in ready_rx.iter().take(handles.len()) {
        match status {
            Ok(placement) => memory[index] = Some(placement),
            Err(e) if first_error.is_none() => first_error = Some(e),
            Err(_) => {}
        }
    }
    let group = Group {
        handles,
        barrier,
        memory: memory.into_iter().flatten().collect(),
    };
    match first_error {
        None => Ok(group),
        Some(e) => {
            control.request_stop();
            group.barrier.wait();
            for h in group.handles {
                let _ = h.join();
            }
            Err(e)
        }
    }
}

impl<O> Group<O> {
    /// Where each worker's packet memory is, in queue order, as measured at set-up.
    pub(crate) fn memory(&self) -> &[MemoryPlacement] {
        &self.memory
    }

    /// Releases the workers.
    pub(crate) fn release(&self) {
        self.barrier.wait();
    }

    /// Whether every worker thread has ended.
    pub(crate) fn finished(&self) -> bool {
        self.handles.iter().all(|h| h.is_finished())
    }

    /// Waits for every worker; a worker that panicked yields `None`. A second join finds none.
    pub(crate) fn join(&mut self) -> Vec<Option<O>> {
        std::mem::take(&mut self.handles)
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Setup = Box<dyn FnOnce() -> Result<Count, Error> + Send>;

    struct Count(u32, Arena);
    impl Job for Count {
        type Output = u32;
        fn run(self, _control: &Control) -> u32 {
            self.0 * 2
        }
        fn arena(&self) -> &Arena {
            &self.1
        }
    }

    fn count(n: u32) -> Result<Count, Error> {
        Ok(Count(
            n,
            Arena::allocate_on_node(4096 * n as usize, 0, false).unwrap(),
        ))
    }

    #[test]
    fn runs_each_job_once_after_release() {
        let control = Arc::new(Control::default());
        let workers: Vec<(u32, Setup)> =
            vec![(0, Box::new(|| count(1))), (0, Box::new(|| count(2)))];
        let mut group = start("t", &control, workers).unwrap();
        // Each worker's arena, in queue order: one and two pages, all resident on node 0.
        let pages: Vec<_> = group
            .memory()
            .iter()
            .map(|m| m.pages.clone().unwrap().by_node)
            .collect();
        assert_eq!(pages, vec![[(0, 1)].into(), [(0, 2)].into()]);
        group.release();
        let out: Vec<_> = group.join().into_iter().map(Option::unwrap).collect();
        assert_eq!(out, vec![2, 4]);
    }

    #[test]
    fn a_failed_setup_stops_the_group() {
        let control = Arc::new(Control::default());
        let workers: Vec<(u32, Setup)> = vec![
            (0, Box::new(|| count(1))),
            (0, Box::new(|| Err(Error::Usage("boom".into())))),
        ];
        let err = start("t", &control, workers).err().unwrap();
        assert_eq!(err.to_string(), "boom");
        assert!(control.stop_requested());
    }

    #[test]
    fn pinning_to_a_missing_cpu_is_a_usage_error() {
        assert_eq!(pin_to_cpu(100_000).unwrap_err().exit_code(), 2);
    }

    struct Spanned(Option<(u64, u64)>);

    impl Outcome for Spanned {
        fn ring_failed(&self) -> bool {
            false
        }
        fn span(&self) -> Option<(u64, u64)> {
            self.0
        }
    }

    #[test]
    fn a_groups_span_runs_from_its_earliest_start_to_its_latest_end() {
        let outcomes = [
            Some(Spanned(Some((5, 9)))),
            None,
            Some(Spanned(None)),
            Some(Spanned(Some((3, 7)))),
        ];
        assert_eq!(span(&outcomes), Some((3, 9)));
        assert_eq!(span(&[Some(Spanned(None)), None]), None);
    }
}
