//! The file-descriptor budget of a run, checked before any worker starts.
//!
//! A run opens one socket per sender flow, one socket per sink queue, one ring per queue, the
//! control channel (a listener and one connection per sender at a sink) and the exporter's
//! runtime. When the soft `RLIMIT_NOFILE` is below that and the hard limit allows more, the soft
//! limit is raised to the hard one (as the Go runtime does); otherwise the run stops with exit 3
//! and one line naming `ulimit -n` and `LimitNOFILE=`. The count is an estimate with headroom;
//! an `EMFILE` that still happens later is turned into the same error by `Error::io`.

use nix::sys::resource::{Resource, setrlimit};

use crate::error::{Error, nofile_hint, nofile_limits};

/// Descriptors every run holds besides its workers: stdio, the signal pipe, the control client
/// or listener, `/proc` reads, and headroom.
const BASE: u64 = 16;
/// The exporter's runtime (epoll, eventfd), its listener and a few scrapes at once.
const EXPORTER: u64 = 16;

/// What a run opens.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Needs {
    /// Sender flows (one socket each).
    pub(crate) sender_flows: u64,
    /// Sender queues (one ring each).
    pub(crate) sender_queues: u64,
    /// Sink queues (one socket and one ring each).
    pub(crate) sink_queues: u64,
    /// Control connections a sink accepts at once.
    pub(crate) sink_senders: u64,
    /// Whether the exporter runs.
    pub(crate) exporter: bool,
}

impl Needs {
    /// Descriptors the run is expected to hold at its peak.
    pub(crate) fn total(&self) -> u64 {
        BASE + self.sender_flows
            + self.sender_queues
            + 2 * self.sink_queues
            + self.sink_senders
            + if self.exporter { EXPORTER } else { 0 }
    }
}

/// Makes sure `needs` fits under `RLIMIT_NOFILE`, raising the soft limit when the hard one allows.
pub(crate) fn ensure(needs: &Needs) -> Result<(), Error> {
    let need = needs.total();
    let (soft, hard) = nofile_limits();
    match plan(need, soft, hard) {
        Plan::Fits => Ok(()),
        Plan::Raise(to) => setrlimit(Resource::RLIMIT_NOFILE, to, hard).or_else(|_| {
            // Raising failed (a sandbox may forbid it): only a real shortfall is an error.
            if soft >= need {
                Ok(())
            } else {
                Err(too_few(need))
            }
        }),
        Plan::TooFew => Err(too_few(need)),
    }
}

fn too_few(need: u64) -> Error {
    Error::NoFiles {
        context: format!("this run needs about {need} file descriptors"),
        hint: nofile_hint(Some(need.next_power_of_two().max(1024))),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Fits,
    Raise(u64),
    TooFew,
}

fn plan(need: u64, soft: u64, hard: u64) -> Plan {
    if soft >= need {
        Plan::Fits
    } else if hard >= need {
        Plan::Raise(hard)
    } else {
        Plan::TooFew
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_raises_or_refuses() {
        assert_eq!(plan(40, 1024, 4096), Plan::Fits);
        assert_eq!(plan(40, 8, 4096), Plan::Raise(4096));
        assert_eq!(plan(40, 8, 8), Plan::TooFew);
    }

    #[test]
    fn counts_every_socket_ring_and_connection() {
        let n = Needs {
            sender_flows: 16,
            sender_queues: 2,
            sink_queues: 2,
            sink_senders: 65,
            exporter: true,
        };
        assert_eq!(n.total(), BASE + 16 + 2 + 4 + 65 + EXPORTER);
    }

    #[test]
    fn refusal_is_exit_3_naming_ulimit_and_systemd() {
        let err = too_few(100);
        assert_eq!(err.exit_code(), crate::error::EXIT_UNSUPPORTED);
        let msg = err.to_string();
        assert!(msg.contains("needs about 100 file descriptors"), "{msg}");
        assert!(
            msg.contains("ulimit -n 1024") && msg.contains("LimitNOFILE=1024"),
            "{msg}"
        );
    }
}
