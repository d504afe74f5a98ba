//! The crate-wide error type and its mapping to process exit codes.
//!
//! Every failure a user can cause or meet is one variant with a one-line message that names the
//! fix. `exit_code` gives each class its own status: 2 for usage errors (bad flags, config or
//! units), 3 for an environment that cannot run ringblast (no io_uring, seccomp, memlock, a port in
//! use, a missing NUMA node), 1 for anything that failed at run time.

use std::io;

use thiserror::Error;

/// Exit status for a usage error (bad flag, value or config).
pub const EXIT_USAGE: i32 = 2;
/// Exit status for an environment that cannot run the job.
pub const EXIT_UNSUPPORTED: i32 = 3;
/// Exit status for a failure while running.
pub const EXIT_RUNTIME: i32 = 1;

/// Everything that can stop a ringblast run.
#[derive(Debug, Error)]
pub enum Error {
    /// A flag, unit or config value is wrong.
    #[error("{0}")]
    Usage(String),
    /// The kernel or the sandbox cannot run what was asked.
    #[error("{0}")]
    Unsupported(String),
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
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => EXIT_USAGE,
            Error::Unsupported(_) | Error::MemlockTooLow { .. } => EXIT_UNSUPPORTED,
            Error::Io { .. } => EXIT_RUNTIME,
        }
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
