//! Which clock readings a run's latency comes from: where each datagram's or record's send time
//! and arrival time are taken. The sink's arrival is chosen here (`--arrival`), probed against
//! the kernel once, and said in the start plan and the summaries, so a figure never rests on a
//! stamp the run did not have.

use std::{os::fd::OwnedFd, sync::OnceLock};

use nix::sys::socket::{AddressFamily, SockFlag, SockType, setsockopt, socket, sockopt};

/// Where a UDP sink takes a datagram's arrival time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Arrival {
    /// The kernel's software receive stamp (`SO_TIMESTAMPNS`, one control message with each
    /// datagram): the time a datagram waited for a busy sink is its queue's queueing delay,
    /// not latency.
    Kernel,
    /// When the sink reads the datagram: no control message for the stamp, but latency
    /// includes the sink's own wait and queueing delay is unknown.
    Read,
}

impl Arrival {
    /// The arrival a sink gets when it asks for `self`: a kernel that refuses receive stamps
    /// leaves the arrival at the sink's read.
    pub(crate) fn granted(self) -> Arrival {
        match self {
            Arrival::Kernel if kernel_receive_stamps() => Arrival::Kernel,
            _ => Arrival::Read,
        }
    }

    /// The name in the JSON summaries (`"arrival"`).
    pub(crate) fn json_name(self) -> &'static str {
        match self {
            Arrival::Kernel => "kernel_receive_stamp",
            Arrival::Read => "sink_read",
        }
    }

    /// The start plan's line for a UDP sink that asked for `asked` and got `self`.
    pub(crate) fn plan_line(self, asked: Arrival) -> &'static str {
        match (asked, self) {
            (_, Arrival::Kernel) => {
                "  stamps: a datagram's arrival is the kernel's software receive stamp (SO_TIMESTAMPNS); its wait from there to the sink's read is the queue's queueing delay, not latency\n"
            }
            (Arrival::Read, _) => {
                "  stamps: a datagram's arrival is the sink's read (--arrival read): latency includes the sink's own wait, and queueing delay is unknown\n"
            }
            (Arrival::Kernel, Arrival::Read) => {
                "  stamps: this kernel refused receive stamps (SO_TIMESTAMPNS), so a datagram's arrival is the sink's read: latency includes the sink's own wait, and queueing delay is unknown\n"
            }
        }
    }
}

/// The start plan's line for a UDP sender: its datagrams carry a user-space stamp, and its own
/// lag from that stamp to the kernel's transmit is sampled where the kernel reports transmit
/// stamps.
pub(crate) fn udp_send_plan_line() -> &'static str {
    if kernel_transmit_stamps() {
        "  stamps: a datagram's send time is the sender's clock when its batch is submitted (user space); its lag to the kernel's software transmit stamp is sampled every 1 ms per queue (one SENDMSG asking for SO_TIMESTAMPING, read from the error queue)\n"
    } else {
        "  stamps: a datagram's send time is the sender's clock when its batch is submitted (user space); its lag to the kernel's transmit is unknown: this kernel reports no software transmit stamps (SO_TIMESTAMPING)\n"
    }
}

/// The start plan's line for TCP, sender or sink: a byte stream has no per-record kernel stamp.
pub(crate) const TCP_PLAN_LINE: &str = "  stamps: a TCP record's send time is the sender's clock when its write is submitted, its arrival the sink's read of its last byte (a byte stream has no per-record kernel stamp): latency includes both ends' socket buffers, and queueing delay is unknown\n";

/// The `"stamps"` object of a summary: where each datagram's (`tcp`: record's) send time and
/// arrival come from (`arrival`: `None` for a sender, which does not know the sink's), and where
/// the sender's lag from its stamp to the kernel's transmit comes from (`transmit_lag`: sampled
/// kernel transmit stamps; null where it is not measured: unknown).
pub(crate) fn stamps_json(
    tcp: bool,
    arrival: Option<Arrival>,
    transmit_lag: bool,
) -> serde_json::Value {
    serde_json::json!({
        "send": if tcp { "sender_write" } else { "sender_batch_submit" },
        "arrival": arrival.map(Arrival::json_name),
        "transmit_lag": transmit_lag.then_some("kernel_transmit_stamp"),
    })
}

/// Whether this kernel reports software stamps on a UDP socket (probed once).
fn kernel_transmit_stamps() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| udp_socket_takes(crate::net::report_software_stamps))
}

/// Whether this kernel sets `SO_TIMESTAMPNS` on a UDP socket (probed once).
fn kernel_receive_stamps() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| {
        udp_socket_takes(|fd| setsockopt(fd, sockopt::ReceiveTimestampns, &true).is_ok())
    })
}

/// Whether `set` succeeds on a fresh UDP socket.
fn udp_socket_takes(set: impl FnOnce(&OwnedFd) -> bool) -> bool {
    socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .is_ok_and(|fd| set(&fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_grants_receive_stamps_and_the_plan_says_which_arrival_a_sink_got() {
        assert_eq!(Arrival::Kernel.granted(), Arrival::Kernel, "Linux 6.18");
        assert_eq!(Arrival::Read.granted(), Arrival::Read);
        assert!(
            Arrival::Read
                .plan_line(Arrival::Kernel)
                .contains("this kernel refused")
        );
        assert!(
            Arrival::Read
                .plan_line(Arrival::Read)
                .contains("--arrival read")
        );
        assert!(
            Arrival::Kernel
                .plan_line(Arrival::Kernel)
                .contains("SO_TIMESTAMPNS")
        );
    }
}
