//! How a TCP sink receives: multishot `RECV` bundles where the kernel has them (one completion
//! per batch of ready bytes, spread over consecutive provided buffers), a plain multishot
//! `RECV` (one completion per buffer) where it does not. `RINGBLAST_TCP_RECV=plain|bundle|auto`
//! forces a mode (tests run both); unset means `auto`.

use crate::{error::Error, ring::probe};

/// The environment variable that forces a receive mode.
pub(crate) const RECV_MODE_ENV: &str = "RINGBLAST_TCP_RECV";

/// How a TCP sink's connections receive once their first bytes were seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvMode {
    /// Multishot `RECV` bundles (Linux 6.10).
    Bundle,
    /// Plain multishot `RECV`, one buffer per completion.
    Plain,
}

impl RecvMode {
    /// The mode `RINGBLAST_TCP_RECV` asks for, checked against the kernel: `auto` (or unset)
    /// takes bundles where the kernel has them; `bundle` on a kernel without them is an
    /// environment error, any other value a usage error.
    pub(crate) fn choose() -> Result<RecvMode, Error> {
        let asked = std::env::var(RECV_MODE_ENV).unwrap_or_default();
        Self::choose_from(&asked, probe::recv_bundles())
    }

    /// As [`RecvMode::choose`], with `asked` for the variable and `bundles` for the probe.
    fn choose_from(asked: &str, bundles: bool) -> Result<RecvMode, Error> {
        match asked {
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
    pub(crate) fn note(self) -> &'static str {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_bundles_falls_back_and_the_plan_says_so() {
        // Linux 6.1 to 6.9 (Debian 12): no IORING_FEAT_RECVSEND_BUNDLE.
        for asked in ["", "auto", "plain"] {
            let mode = RecvMode::choose_from(asked, false).unwrap();
            assert_eq!(mode, RecvMode::Plain, "{asked:?}");
            assert!(
                mode.note()
                    .contains("plain multishot RECV (no bundle support)")
            );
        }
        let err = RecvMode::choose_from("bundle", false).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::EXIT_UNSUPPORTED);
        assert!(err.to_string().contains("Linux 6.10"), "{err}");
        assert_eq!(RecvMode::choose_from("", true).unwrap(), RecvMode::Bundle);
        assert_eq!(
            RecvMode::choose_from("plain", true).unwrap(),
            RecvMode::Plain
        );
        let usage = RecvMode::choose_from("fast", true).unwrap_err();
        assert_eq!(usage.exit_code(), crate::error::EXIT_USAGE);
    }
}
