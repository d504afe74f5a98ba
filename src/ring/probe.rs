//! Start-up checks of what the kernel's io_uring supports, and the translation of ring set-up
//! failures into errors that name the fix.
//!
//! This is the one place that knows kernel gates: `IORING_REGISTER_PROBE` for opcodes (5.6),
//! multishot `RECVMSG` (6.0), provided-buffer rings (5.19), `SINGLE_ISSUER` (6.0) and
//! `DEFER_TASKRUN` (6.1), and recv bundles (`IORING_FEAT_RECVSEND_BUNDLE`, 6.10).

use std::io;

use io_uring::{IoUring, Probe, opcode};

use crate::error::Error;

/// An opcode a role needs, with the name shown when it is missing.
#[derive(Clone, Copy, Debug)]
pub struct RequiredOp {
    /// Kernel opcode number.
    pub code: u8,
    /// `IORING_OP_*` name.
    pub name: &'static str,
    /// Kernel release that introduced it.
    pub since: &'static str,
}

/// Opcodes the sender needs in its default mode.
pub const SEND_OPS: &[RequiredOp] = &[RequiredOp {
    code: opcode::WriteFixed::CODE,
    name: "IORING_OP_WRITE_FIXED",
    since: "5.1",
}];

/// Opcodes the sender needs with `--send-mode zc`.
pub const SEND_ZC_OPS: &[RequiredOp] = &[RequiredOp {
    code: opcode::SendZc::CODE,
    name: "IORING_OP_SEND_ZC",
    since: "6.0",
}];

/// Opcodes the sender needs with `--send-op send`.
pub const SEND_PLAIN_OPS: &[RequiredOp] = &[RequiredOp {
    code: opcode::Send::CODE,
    name: "IORING_OP_SEND",
    since: "5.6",
}];

/// Opcodes the sink needs.
pub const SINK_OPS: &[RequiredOp] = &[RequiredOp {
    code: opcode::RecvMsgMulti::CODE,
    name: "IORING_OP_RECVMSG",
    since: "5.3 (multishot 6.0)",
}];

/// Opcodes a TCP sender needs besides its send op: it connects and reads responses.
pub const TCP_CONNECT_OPS: &[RequiredOp] = &[
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
];

/// Opcodes a TCP sink needs: multishot accept, multishot receive, and sends for responses.
pub const TCP_SINK_OPS: &[RequiredOp] = &[
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
];

/// Fails with the first opcode in `ops` that the kernel does not support.
pub fn require_ops(ring: &IoUring, ops: &[RequiredOp]) -> Result<(), Error> {
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| {
        Error::Unsupported(format!(
            "cannot probe io_uring opcodes ({e}); ringblast needs Linux 6.1 or newer"
        ))
    })?;
    match ops.iter().find(|op| !probe.is_supported(op.code)) {
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
pub fn recv_bundles() -> bool {
    IoUring::new(2).is_ok_and(|ring| ring.params().is_feature_recvsend_bundle())
}

/// Turns an `io_uring_setup` failure into an error that names the cause and the fix.
pub fn setup_error(err: io::Error) -> Error {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
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
