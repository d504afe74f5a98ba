//! How a run's sender and sink find and name each other, for either protocol: the link a plan
//! asks for (in process, serve, connect, off), where a sender's control channel goes and the
//! name it gives, and the default names of senders and sink sessions (the hostname and a
//! suffix, always a valid control-channel name).

use std::{net::SocketAddr, sync::Arc};

use crate::control::{
    auth::Secret,
    msg::{MAX_NAME, name_byte_allowed},
};

/// How this run's sender and sink talk.
pub(crate) enum Link {
    /// `pair`: the sender says hello and goodbye to the sink's registry directly.
    InProcess,
    /// A sink serving the control channel.
    Serve {
        listen: SocketAddr,
        secret: Option<Arc<Secret>>,
        /// `--share-port`: a control port held by the other sink is not an error.
        share: bool,
    },
    /// A sender talking to a sink.
    Connect(SenderLink),
    /// A sender with `--control off`.
    Off,
}

/// Where a sender's control channel goes, and how it introduces itself (either protocol).
pub(crate) struct SenderLink {
    /// The sink's control address: `--control ADDR:PORT`, or the sink's own (`--to`).
    pub(crate) addr: SocketAddr,
    /// The shared secret from `--secret-file`, if any.
    pub(crate) secret: Option<Arc<Secret>>,
    /// `--name`, checked, or the hostname and the queue plan.
    pub(crate) name: String,
}

/// The longest suffix a default name puts after the hostname: a sender's `/{queues}q{flows}f`
/// (two counts of at most 20 digits) is longer than a sink session's `/{random:08x}`.
const MAX_NAME_SUFFIX: usize = "/qf".len() + 2 * 20;

/// Bytes of the hostname a default name keeps, so that hostname and suffix fit [`MAX_NAME`].
const MAX_HOST_PART: usize = MAX_NAME - MAX_NAME_SUFFIX;

/// The default `--name` of a sender: the hostname and its queue plan.
pub(crate) fn default_sender_name(queues: usize, flows: usize) -> String {
    sender_name_on(&hostname(), queues, flows)
}

/// A fresh sink session id: the hostname and 32 random bits.
pub(crate) fn sink_session_id() -> String {
    session_id_on(&hostname(), rand::random::<u32>())
}

fn sender_name_on(host: &str, queues: usize, flows: usize) -> String {
    format!("{host}/{queues}q{flows}f")
}

fn session_id_on(host: &str, random: u32) -> String {
    format!("{host}/{random:08x}")
}

/// This host's name as the first part of default sender names and sink session ids: always a
/// valid control-channel name part (see [`name_part`]), whatever the kernel holds (`(none)` on
/// hosts that never set one).
fn hostname() -> String {
    name_part(&std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default())
}

/// `raw` made fit for a control-channel name: every byte outside `[A-Za-z0-9._:/@-]` becomes
/// `-`, and it is cut to [`MAX_HOST_PART`] bytes; `localhost` when nothing but `-` is left.
fn name_part(raw: &str) -> String {
    let part: String = raw
        .trim()
        .bytes()
        .take(MAX_HOST_PART)
        .map(|b| {
            if name_byte_allowed(b) {
                char::from(b)
            } else {
                '-'
            }
        })
        .collect();
    if part.bytes().all(|b| b == b'-') {
        "localhost".into()
    } else {
        part
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::msg::check_name;

    /// Every default name built on `host` passes the control channel's check.
    fn assert_default_names_valid(host: &str) {
        for name in [
            sender_name_on(host, 1, 1),
            sender_name_on(host, usize::MAX, usize::MAX),
            session_id_on(host, u32::MAX),
        ] {
            check_name("default name", &name).unwrap_or_else(|e| panic!("{name:?}: {e}"));
        }
    }

    #[test]
    fn the_kernel_default_hostname_becomes_a_valid_name() {
        assert_eq!(name_part("(none)\n"), "-none-");
        assert_default_names_valid(&name_part("(none)"));
        assert_eq!(sender_name_on(&name_part("(none)"), 2, 8), "-none-/2q8f");
    }

    #[test]
    fn a_long_hostname_is_cut_so_every_default_name_fits() {
        let long = "h".repeat(200);
        let part = name_part(&long);
        assert_eq!(part.len(), MAX_HOST_PART);
        assert!(long.starts_with(&part));
        assert_default_names_valid(&part);
        assert_eq!(
            sender_name_on(&part, usize::MAX, usize::MAX).len(),
            MAX_NAME,
            "the longest queue plan fills the name exactly"
        );
    }

    #[test]
    fn an_empty_or_all_foreign_hostname_falls_back_to_localhost() {
        for raw in ["", "\n", "   ", "()", "日本", "--"] {
            assert_eq!(name_part(raw), "localhost", "{raw:?}");
        }
        // Cut to dashes only: a long run of foreign bytes before the first allowed one.
        assert_eq!(name_part(&format!("{}a", "(".repeat(300))), "localhost");
    }

    #[test]
    fn a_utf8_hostname_keeps_its_ascii_and_maps_every_other_byte() {
        // 'é' is two bytes in UTF-8, each one becomes '-'.
        assert_eq!(name_part("héllo-wörld"), "h--llo-w--rld");
        assert_eq!(name_part("host_1 lab"), "host_1-lab");
        assert_eq!(name_part("edge-7.example.net"), "edge-7.example.net");
        assert_default_names_valid(&name_part("日本のホスト.example"));
    }
}
