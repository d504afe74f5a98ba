//! Pre-flight check of locked-memory limits before anything is registered with io_uring.
//!
//! Without `CAP_IPC_LOCK`, ring memory and registered buffers are charged to `RLIMIT_MEMLOCK`
//! (per user), and registration fails with a bare ENOMEM. This module turns that into a message
//! that names the bytes needed, the limit, and the fix.

use crate::error::Error;

/// Bit of `CAP_IPC_LOCK` in the capability sets of `/proc/self/status`.
const CAP_IPC_LOCK_BIT: u32 = 14;

/// Whether the effective capability set of this process holds `CAP_IPC_LOCK`.
pub(crate) fn has_cap_ipc_lock() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| cap_eff_from_status(&s))
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK_BIT) != 0)
}

fn cap_eff_from_status(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// The soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` when unlimited).
pub(crate) fn memlock_limit() -> u64 {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _hard)) => soft,
        Err(_) => 0,
    }
}

/// Fails when `need` bytes cannot be locked: no `CAP_IPC_LOCK` and a limit below `need`.
pub(crate) fn check_memlock(need: u64) -> Result<(), Error> {
    check(need, memlock_limit(), has_cap_ipc_lock())
}

fn check(need: u64, limit: u64, cap_ipc_lock: bool) -> Result<(), Error> {
    if cap_ipc_lock || limit == u64::MAX || need <= limit {
        return Ok(());
    }
    Err(Error::MemlockTooLow {
        need,
        limit,
        need_kib: need.div_ceil(1024),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_or_limit_allows() {
        assert!(check(1 << 30, 8 << 20, true).is_ok());
        assert!(check(1 << 20, 8 << 20, false).is_ok());
        assert!(check(1 << 30, u64::MAX, false).is_ok());
    }

    #[test]
    fn too_low_names_bytes_limit_and_fix() {
        let err = check(16 << 20, 8 << 20, false).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("16777216"), "{msg}");
        assert!(msg.contains("8388608"), "{msg}");
        assert!(msg.contains("ulimit -l 16384"), "{msg}");
        assert!(msg.contains("LimitMEMLOCK="), "{msg}");
        assert!(msg.contains("CAP_IPC_LOCK"), "{msg}");
        assert_eq!(err.exit_code(), crate::error::EXIT_UNSUPPORTED);
    }

    #[test]
    fn parses_cap_eff() {
        let s = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert_eq!(cap_eff_from_status(s), Some(0x1ff_ffff_ffff));
        assert_eq!(cap_eff_from_status("nothing"), None);
    }
}
