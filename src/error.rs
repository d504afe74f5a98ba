//! The crate-wide error type and its mapping to process exit codes.
//!
//! Every failure a user can cause or meet is one variant with a one-line message that names the
//! fix. `exit_code` gives each class its own status: 2 for usage errors (bad flags, config or
//! units), 3 for an environment that cannot run ringblast (no io_uring, seccomp, memlock, too
//! few file descriptors, a port in use, a missing NUMA node), 4 for input `report` cannot read
//! as ringblast JSON Lines, 5 for a sender that gave up on a sink whose control channel stayed
//! busy, 6 for a search whose sender could not offer the rates it had to try, 7 for a sender
//! whose credentials the sink refused, 8 for a sender and a sink of different protocols, 9 for
//! a sender whose sink's control channel never answered at its start, 1 for anything that
//! failed at run time. `Error::io` is the one constructor for OS errors, so an `EMFILE`/`ENFILE` from any call
//! site becomes the file-descriptor error with its fix instead of a bare "os error 24".

use std::io;

use thiserror::Error;

/// Exit status for a usage error (bad flag, value or config).
pub(crate) const EXIT_USAGE: i32 = 2;
/// Exit status for an environment that cannot run the job.
pub(crate) const EXIT_UNSUPPORTED: i32 = 3;
/// Exit status for input that `report` cannot read as ringblast JSON Lines.
pub(crate) const EXIT_BAD_INPUT: i32 = 4;
/// Exit status for a failure while running.
pub(crate) const EXIT_RUNTIME: i32 = 1;
/// Exit status for a sender that gave up on a sink whose control channel stayed busy.
pub(crate) const EXIT_SINK_BUSY: i32 = 5;
/// Exit status for a search that ended at the rate its own sender could offer, not at a bound
/// the device under test set.
pub(crate) const EXIT_SENDER_LIMITED: i32 = 6;
/// Exit status for a sender whose credentials (secret) the sink refused.
pub(crate) const EXIT_REFUSED: i32 = 7;
/// Exit status for a sender whose sink counts the other protocol (`--proto`).
pub(crate) const EXIT_PROTOCOL_MISMATCH: i32 = 8;
/// Exit status for a sender whose sink's control channel never answered at its start.
pub(crate) const EXIT_NO_SINK: i32 = 9;

/// Everything that can stop a ringblast run.
#[derive(Debug, Error)]
pub enum Error {
    /// A flag, unit or config value is wrong.
    #[error("{0}")]
    Usage(String),
    /// The input given to `report` is not the JSON Lines of a ringblast run.
    #[error("{0}")]
    BadInput(String),
    /// The kernel or the sandbox cannot run what was asked.
    #[error("{0}")]
    Unsupported(String),
    /// The sink's control channel was busy (all its places authenticated) until the sender
    /// gave up.
    #[error("{0}")]
    SinkBusy(String),
    /// The sink refused this sender's credentials.
    #[error("{0}")]
    Refused(String),
    /// The sender and the sink speak different protocols (`--proto`).
    #[error("{0}")]
    ProtocolMismatch(String),
    /// Nothing answered the sender's control channel at its start.
    #[error("{0}")]
    NoSink(String),
    /// A search's sender could not offer the rates the search had to try: its result is a
    /// lower bound on what the device under test passes, set by this host.
    #[error("{0}")]
    SenderLimited(String),
    /// Locked memory is too small for the buffers to register.
    #[error(
        "need {need} bytes of locked memory but RLIMIT_MEMLOCK is {limit} bytes and CAP_IPC_LOCK is missing; \
         raise it with `ulimit -l {need_kib}` (systemd: LimitMEMLOCK={need_kib}K) or grant CAP_IPC_LOCK"
    )]
    MemlockTooLow {
        /// Bytes the run needs to lock.
        need: u64,
        /// The current soft limit.
        limit: u64,
        /// `need` in KiB, rounded up, for the hint.
        need_kib: u64,
    },
    /// The process (`EMFILE`) or the system (`ENFILE`) ran out of file descriptors.
    #[error("{context}: {hint}")]
    NoFiles {
        /// What was being done, or what the run needs.
        context: String,
        /// The limit and how to raise it.
        hint: String,
    },
    /// A system call failed while running.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// Wraps an OS error with what was being attempted.
    ///
    /// Running out of file descriptors is an environment failure, not a run-time one: it
    /// becomes [`Error::NoFiles`] with the limit and the fix.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::EMFILE) => Error::NoFiles {
                context: context.into(),
                hint: format!("too many open files (EMFILE); {}", nofile_hint(None)),
            },
            Some(libc::ENFILE) => Error::NoFiles {
                context: context.into(),
                hint: "the system's file table is full (ENFILE); raise `sysctl fs.file-max` or stop what holds the files".into(),
            },
            _ => Error::Io {
                context: context.into(),
                source,
            },
        }
    }

    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => EXIT_USAGE,
            Error::BadInput(_) => EXIT_BAD_INPUT,
            Error::SinkBusy(_) => EXIT_SINK_BUSY,
            Error::Refused(_) => EXIT_REFUSED,
            Error::ProtocolMismatch(_) => EXIT_PROTOCOL_MISMATCH,
            Error::NoSink(_) => EXIT_NO_SINK,
            Error::SenderLimited(_) => EXIT_SENDER_LIMITED,
            Error::Unsupported(_) | Error::MemlockTooLow { .. } | Error::NoFiles { .. } => {
                EXIT_UNSUPPORTED
            }
            Error::Io { .. } => EXIT_RUNTIME,
        }
    }
}

/// The soft and hard `RLIMIT_NOFILE` of this process.
pub(crate) fn nofile_limits() -> (u64, u64) {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap_or((0, 0))
}

/// "too many open files (RLIMIT_NOFILE is 8, hard 8); raise it with `ulimit -n N` ...", with
/// `need` as N when known.
pub(crate) fn nofile_hint(need: Option<u64>) -> String {
    let (soft, hard) = nofile_limits();
    let n = need.map_or_else(|| "4096".to_string(), |n| n.to_string());
    format!(
        "RLIMIT_NOFILE is {soft} (hard limit {hard}); raise it with `ulimit -n {n}` (systemd: LimitNOFILE={n}, docker: --ulimit nofile={n})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emfile_from_any_call_site_is_exit_3_naming_the_fix() {
        let err = Error::io("socket", io::Error::from_raw_os_error(libc::EMFILE));
        assert_eq!(err.exit_code(), EXIT_UNSUPPORTED);
        let msg = err.to_string();
        assert!(msg.starts_with("socket: too many open files"), "{msg}");
        assert!(
            msg.contains("ulimit -n") && msg.contains("LimitNOFILE="),
            "{msg}"
        );
        let enfile = Error::io("accept", io::Error::from_raw_os_error(libc::ENFILE));
        assert_eq!(enfile.exit_code(), EXIT_UNSUPPORTED);
        assert!(enfile.to_string().contains("fs.file-max"));
    }

    #[test]
    fn other_os_errors_stay_run_time_failures() {
        let err = Error::io("bind", io::Error::from_raw_os_error(libc::EINVAL));
        assert_eq!(err.exit_code(), EXIT_RUNTIME);
    }
}
