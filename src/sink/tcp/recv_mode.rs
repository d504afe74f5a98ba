//! How a TCP sink receives: multishot `RECV` bundles where the kernel has them (one completion
//! per batch of ready bytes, spread over consecutive provided buffers), a plain multishot
//! `RECV` (one completion per buffer) where it does not. `RINGBLAST_TCP_RECV=plain|bundle|auto`
//! forces a mode (tests run both); unset means `auto`.

use crate::{error::Error, ring::probe};

/// The environment variable that forces a receive mode.
pub const RECV_MODE_ENV: &str = "RINGBLAST_TCP_RECV";

/// How a TCP sink's connections receive once their first bytes were seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvMode {
    /// Multishot `RECV` bundles (Linux 6.10).
    Bundle,
    /// Plain multishot `RECV`, one buffer per completion.
    Plain,
}

impl RecvMode {
    /// The mode `RINGBLAST_TCP_RECV` asks for, checked against the kernel: `auto` (or unset)
    /// takes bundles where the kernel has them; `bundle` on a kernel without them is an
    /// environment error, any other value a usage error.
    pub fn choose() -> Result<RecvMode, Error> {
        let asked = std::env::var(RECV_MODE_ENV).unwrap_or_default();
        let bundles = probe::recv_bundles();
        match asked.as_str() {
            "" | "auto" if bundles => Ok(RecvMode::Bundle),
            "" | "auto" | "plain" => Ok(RecvMode::Plain),
            "bundle" if bundles => Ok(RecvMode::Bundle),
            "bundle" => Err(Error::Unsupported(format!(
                "{RECV_MODE_ENV}=bundle: this kernel's io_uring has no recv bundles (Linux 6.10); unset it or use auto"
            ))),
            other => Err(Error::Usage(format!(
                "{RECV_MODE_ENV}={other:?} is not a receive mode; use plain, bundle or auto"
            ))),
        }
    }

    /// The line `topo` and the sink's start-up notes show.
    pub fn note(self) -> &'static str {
        match self {
            RecvMode::Bundle => {
                "  tcp sink: SO_REUSEPORT listener per queue, multishot ACCEPT, multishot RECV bundles into the provided-buffer ring\n"
            }
            RecvMode::Plain => {
                "  tcp sink: SO_REUSEPORT listener per queue, multishot ACCEPT, plain multishot RECV (no bundle support) into the provided-buffer ring\n"
            }
        }
    }
}
