//! Start-up checks of what the kernel's io_uring supports, and the translation of ring set-up
//! failures into errors that name the fix.
//!
//! This is the one place that knows kernel gates: `IORING_REGISTER_PROBE` for opcodes (5.6),
//! multishot `RECV`/`RECVMSG` (6.0), provided-buffer rings (5.19), `SINGLE_ISSUER` (6.0) and
//! `DEFER_TASKRUN` (6.1), recv bundles (`IORING_FEAT_RECVSEND_BUNDLE`, 6.10) and the
//! `kernel.io_uring_disabled` sysctl (6.6). A missing feature is either refused with one line
//! naming the kernel that has it, or its fallback is a line of the start plan
//! ([`ring_setup_note`], `sink::tcp::RecvMode::note`).

use std::io;

use io_uring::{IoUring, Probe, opcode};

use super::{RingSize, SetupMode};
use crate::error::Error;

/// An opcode a role needs, with the name shown when it is missing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequiredOp {
    /// Kernel opcode number.
    pub(crate) code: u8,
    /// `IORING_OP_*` name.
    pub(crate) name: &'static str,
    /// Kernel release that introduced it.
    pub(crate) since: &'static str,
}

/// Opcodes the sender needs in its default mode.
pub(crate) const SEND_OPS: &[RequiredOp] = &[RequiredOp {
    code: opcode::WriteFixed::CODE,
    name: "IORING_OP_WRITE_FIXED",
    since: "5.1",
}];

/// Opcodes the sender needs with `--send-mode zc`.
pub(crate) const SEND_ZC_OPS: &[RequiredOp] = &[RequiredOp {
    code: opcode::SendZc::CODE,
    name: "IORING_OP_SEND_ZC",
    since: "6.0",
}];

/// Opcodes the sender needs with `--send-op send`.
pub(crate) const SEND_PLAIN_OPS: &[RequiredOp] = &[RequiredOp {
    code: opcode::Send::CODE,
    name: "IORING_OP_SEND",
    since: "5.6",
}];

/// Multishot `RECV` and `RECVMSG` (Linux 6.0) have no opcode or feature flag of their own: an
/// older kernel takes the opcodes and fails every multishot request with `EINVAL`, over and
/// over. `IORING_OP_SEND_ZC` came in the same release, so its opcode stands for them.
const MULTISHOT_RECEIVES: RequiredOp = RequiredOp {
    code: opcode::SendZc::CODE,
    name: "multishot receives (IORING_RECV_MULTISHOT)",
    since: "6.0",
};

/// Opcodes the sink needs: multishot receives, and sends for the answers to requests.
pub(crate) const SINK_OPS: &[RequiredOp] = &[
    RequiredOp {
        code: opcode::RecvMsgMulti::CODE,
        name: "IORING_OP_RECVMSG",
        since: "5.3 (multishot 6.0)",
    },
    MULTISHOT_RECEIVES,
    RequiredOp {
        code: opcode::Send::CODE,
        name: "IORING_OP_SEND",
        since: "5.6",
    },
];

/// Opcodes a UDP request/response sender needs: sends, and multishot receives of responses.
pub(crate) const EXCHANGE_OPS: &[RequiredOp] = &[
    RequiredOp {
        code: opcode::Send::CODE,
        name: "IORING_OP_SEND",
        since: "5.6",
    },
    RequiredOp {
        code: opcode::RecvMulti::CODE,
        name: "IORING_OP_RECV",
        since: "5.6 (multishot 6.0)",
    },
    MULTISHOT_RECEIVES,
];

/// Opcodes a TCP sender needs besides its send op: it connects and reads responses.
pub(crate) const TCP_CONNECT_OPS: &[RequiredOp] = &[
    RequiredOp {
        code: opcode::Connect::CODE,
        name: "IORING_OP_CONNECT",
        since: "5.5",
    },
    RequiredOp {
        code: opcode::RecvMulti::CODE,
        name: "IORING_OP_RECV",
        since: "5.6 (multishot 6.0)",
    },
    MULTISHOT_RECEIVES,
];

/// Opcodes a TCP sink needs: multishot accept, multishot receive, and sends for responses.
pub(crate) const TCP_SINK_OPS: &[RequiredOp] = &[
    RequiredOp {
        code: opcode::AcceptMulti::CODE,
        name: "IORING_OP_ACCEPT",
        since: "5.5 (multishot 5.19)",
    },
    RequiredOp {
        code: opcode::RecvMulti::CODE,
        name: "IORING_OP_RECV",
        since: "5.6 (multishot 6.0)",
    },
    RequiredOp {
        code: opcode::Send::CODE,
        name: "IORING_OP_SEND",
        since: "5.6",
    },
    MULTISHOT_RECEIVES,
];

/// Fails with the first opcode in `ops` that the kernel does not support.
pub(crate) fn require_ops(ring: &IoUring, ops: &[RequiredOp]) -> Result<(), Error> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        Error::Unsupported(format!(
            "cannot probe io_uring opcodes ({e}); ringblast needs Linux 6.1 or newer"
        ))
    })?;
    check_ops(ops, |code| probe.is_supported(code))
}

/// Fails with the first opcode in `ops` that `supported` says the kernel lacks.
fn check_ops(ops: &[RequiredOp], supported: impl Fn(u8) -> bool) -> Result<(), Error> {
    match ops.iter().find(|op| !supported(op.code)) {
        Some(op) => Err(Error::Unsupported(format!(
            "this kernel's io_uring lacks {} (added in Linux {}); upgrade the kernel",
            op.name, op.since
        ))),
        None => Ok(()),
    }
}

/// Whether this kernel's rings take recv bundles: a small ring is set up and its features
/// (`IORING_FEAT_RECVSEND_BUNDLE`, Linux 6.10) are read. No ring at all reads as no bundles;
/// the workers' own set-up reports that failure.
pub(crate) fn recv_bundles() -> bool {
    IoUring::new(2).is_ok_and(|ring| ring.params().is_feature_recvsend_bundle())
}

/// The start plan's line when this kernel refused the preferred ring set-up flags and the
/// workers' rings fell back (`None` where it takes `SINGLE_ISSUER|DEFER_TASKRUN`, and where no
/// ring can be set up at all: the workers report that). The workers' rings are built with the
/// same attempts, and a kernel answers them alike.
pub(crate) fn ring_setup_note() -> Option<&'static str> {
    let size = RingSize {
        sq_entries: 2,
        cq_entries: 4,
    };
    super::build_ring(size)
        .ok()
        .and_then(|(_ring, mode)| setup_note(mode))
}

fn setup_note(mode: SetupMode) -> Option<&'static str> {
    match mode {
        SetupMode::DeferTaskrun => None,
        SetupMode::CoopTaskrun => Some(
            "  rings: SINGLE_ISSUER|COOP_TASKRUN (this kernel refused DEFER_TASKRUN, Linux 6.1: completion work may interrupt a worker)\n",
        ),
        SetupMode::Plain => Some(
            "  rings: no set-up flags (this kernel refused SINGLE_ISSUER, Linux 6.0, and DEFER_TASKRUN, Linux 6.1)\n",
        ),
    }
}

/// `kernel.io_uring_disabled` (Linux 6.6): 0 lets everyone set up rings, 1 only members of
/// `kernel.io_uring_group`, 2 nobody. Older kernels (Debian 12's 6.1) have no such sysctl,
/// which reads as 0: nothing is disabled there.
fn io_uring_disabled() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0)
}

/// Turns an `io_uring_setup` failure into an error that names the cause and the fix.
pub(crate) fn setup_error(err: io::Error) -> Error {
    setup_error_with(err, io_uring_disabled())
}

/// As [`setup_error`], with `kernel.io_uring_disabled` read as `disabled`.
fn setup_error_with(err: io::Error, disabled: u32) -> Error {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => Error::Unsupported(
            "this kernel has no io_uring (io_uring_setup: ENOSYS); ringblast needs Linux 6.1 or newer".into(),
        ),
        Some(libc::EPERM) if disabled > 0 => Error::Unsupported(format!(
            "io_uring is disabled by sysctl kernel.io_uring_disabled={disabled}; set it to 0 (or 1 and add this user to kernel.io_uring_group)"
        )),
        Some(libc::EPERM) => Error::Unsupported(
            "io_uring_setup was denied (EPERM): a seccomp profile blocks io_uring, as Docker 25+ and containerd 2.0 do by default; \
             run with deploy/compose/seccomp-io_uring.json or the Kubernetes Localhost profile in deploy/kubernetes"
                .into(),
        ),
        Some(libc::ENOMEM) => Error::Unsupported(format!(
            "io_uring_setup failed with ENOMEM: locked memory is exhausted (RLIMIT_MEMLOCK {} bytes); raise `ulimit -l`, set LimitMEMLOCK= or grant CAP_IPC_LOCK",
            crate::mem::limits::memlock_limit()
        )),
        _ => Error::io("io_uring_setup", err),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn this_kernel_has_every_needed_op() {
        let ring = IoUring::new(8).unwrap();
        require_ops(&ring, SEND_OPS).unwrap();
        require_ops(&ring, SEND_ZC_OPS).unwrap();
        require_ops(&ring, SINK_OPS).unwrap();
        require_ops(&ring, TCP_CONNECT_OPS).unwrap();
        require_ops(&ring, TCP_SINK_OPS).unwrap();
    }

    /// The running kernel's (major, minor) release, from /proc/sys/kernel/osrelease.
    pub(crate) fn kernel_release() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut parts = release
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    /// Bundles came with 6.10: the probe says so on every kernel, the lab's 6.1 guest included.
    #[test]
    fn recv_bundles_follow_the_kernel_release() {
        let release = kernel_release();
        assert_eq!(recv_bundles(), release >= (6, 10), "Linux {release:?}");
    }

    #[test]
    fn missing_op_is_named() {
        let ring = IoUring::new(8).unwrap();
        let fake = [RequiredOp {
            code: 250,
            name: "IORING_OP_FROM_THE_FUTURE",
            since: "99.0",
        }];
        let err = require_ops(&ring, &fake).unwrap_err().to_string();
        assert!(err.contains("IORING_OP_FROM_THE_FUTURE"), "{err}");
        assert!(err.contains("99.0"), "{err}");
    }

    /// A kernel whose probe says it has every opcode but `unsupported`.
    fn kernel_without(unsupported: u8) -> impl Fn(u8) -> bool {
        move |code| code != unsupported
    }

    #[test]
    fn a_kernel_before_6_0_is_refused_naming_the_release() {
        // Linux 5.19: every opcode up to URING_CMD, neither SEND_ZC nor multishot receives.
        let before_6_0 = kernel_without(opcode::SendZc::CODE);
        for ops in [SINK_OPS, TCP_SINK_OPS, TCP_CONNECT_OPS] {
            let err = check_ops(ops, &before_6_0).unwrap_err();
            assert_eq!(err.exit_code(), crate::error::EXIT_UNSUPPORTED);
            let msg = err.to_string();
            assert!(msg.contains("multishot receives"), "{msg}");
            assert!(msg.contains("Linux 6.0"), "{msg}");
        }
        let msg = check_ops(SEND_ZC_OPS, &before_6_0).unwrap_err().to_string();
        assert!(
            msg.contains("IORING_OP_SEND_ZC") && msg.contains("Linux 6.0"),
            "{msg}"
        );
        check_ops(SEND_PLAIN_OPS, &before_6_0).unwrap();
        check_ops(SEND_OPS, &before_6_0).unwrap();
    }

    #[test]
    fn ring_set_up_fallbacks_are_noted_with_their_release() {
        assert_eq!(setup_note(SetupMode::DeferTaskrun), None);
        let coop = setup_note(SetupMode::CoopTaskrun).unwrap();
        assert!(coop.contains("DEFER_TASKRUN, Linux 6.1"), "{coop}");
        let plain = setup_note(SetupMode::Plain).unwrap();
        assert!(plain.contains("SINGLE_ISSUER, Linux 6.0"), "{plain}");
        for note in [coop, plain] {
            assert!(note.starts_with("  ") && note.ends_with('\n'), "{note:?}");
            assert_eq!(note.lines().count(), 1, "{note:?}");
        }
        assert_eq!(ring_setup_note(), None, "Linux 6.18 takes DEFER_TASKRUN");
    }

    #[test]
    fn an_absent_io_uring_disabled_sysctl_means_enabled() {
        // Debian 12's 6.1 has no kernel.io_uring_disabled: EPERM is then a seccomp profile.
        let absent = setup_error_with(io::Error::from_raw_os_error(libc::EPERM), 0).to_string();
        assert!(absent.contains("seccomp"), "{absent}");
        let set = setup_error_with(io::Error::from_raw_os_error(libc::EPERM), 2).to_string();
        assert!(set.contains("kernel.io_uring_disabled=2"), "{set}");
    }

    #[test]
    fn setup_errors_name_the_fix() {
        let eperm = setup_error(io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(eperm.exit_code(), crate::error::EXIT_UNSUPPORTED);
        let msg = eperm.to_string();
        assert!(
            msg.contains("seccomp") || msg.contains("io_uring_disabled"),
            "{msg}"
        );
        let enosys = setup_error(io::Error::from_raw_os_error(libc::ENOSYS)).to_string();
        assert!(enosys.contains("ENOSYS"), "{enosys}");
    }
}
