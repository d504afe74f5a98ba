//! Context-switch counts the reporter samples (never a worker): the process's voluntary and
//! involuntary switches from `getrusage(RUSAGE_SELF)`, and the whole machine's from the `ctxt`
//! line of `/proc/stat`. Either is `None` when it cannot be read, never a made-up zero.

/// One sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CtxSample {
    /// The process's voluntary + involuntary switches so far.
    pub(crate) process: Option<u64>,
    /// The machine's switches since boot.
    pub(crate) machine: Option<u64>,
}

/// Samples both counts now.
pub(crate) fn sample() -> CtxSample {
    use nix::sys::resource::{UsageWho, getrusage};
    let process = getrusage(UsageWho::RUSAGE_SELF)
        .ok()
        .map(|u| (u.voluntary_context_switches() + u.involuntary_context_switches()).max(0) as u64);
    let machine = std::fs::read_to_string("/proc/stat").ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("ctxt "))
            .and_then(|n| n.trim().parse().ok())
    });
    CtxSample { process, machine }
}

/// Switches between two samples: (process, machine).
pub(crate) fn delta(before: &CtxSample, after: &CtxSample) -> (Option<u64>, Option<u64>) {
    let d = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    (
        d(before.process, after.process),
        d(before.machine, after.machine),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_counts_are_read_and_grow() {
        let a = sample();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = sample();
        let (p, m) = delta(&a, &b);
        assert!(
            p.is_some_and(|p| p >= 1),
            "sleeping switches at least once: {a:?} {b:?}"
        );
        assert!(m.is_some_and(|m| m >= 1), "{a:?} {b:?}");
    }
}
