//! Which sender flags belong to one protocol: one table, read by one check that every `send`
//! and `pair` runs before anything starts. A flag not in the table means the same for UDP and
//! TCP (its `--help` says what it means for each).

use super::{
    TrafficArgs,
    tcp::{Pattern, Proto, TcpSendArgs},
};
use crate::sender::payload::PayloadFill;

/// The sender's arguments a flag is read from.
type Given = fn(&TrafficArgs, &TcpSendArgs) -> bool;

/// A flag only one protocol accepts, and whether the command line gave it (a value other than
/// its default).
struct ProtocolFlag {
    flag: &'static str,
    only: Proto,
    given: Given,
}

const fn flag(flag: &'static str, only: Proto, given: Given) -> ProtocolFlag {
    ProtocolFlag { flag, only, given }
}

/// Every flag of `send` and `pair` that only one protocol accepts.
const PROTOCOL_FLAGS: &[ProtocolFlag] = &[
    flag("--gso", Proto::Udp, |t, _| t.gso != 1),
    flag("--frame-size", Proto::Udp, |t, _| t.frame_size.is_some()),
    flag("--allow-fragments", Proto::Udp, |t, _| t.allow_fragments),
    flag("--wire-rate", Proto::Udp, |t, _| t.wire_rate),
    flag("--flows (use --conns)", Proto::Udp, |t, _| {
        t.flows.is_some()
    }),
    flag("--burst", Proto::Udp, |t, _| t.burst != 1),
    flag("--rate-steps", Proto::Udp, |t, _| t.rate_steps.is_some()),
    flag("--ramp", Proto::Udp, |t, _| t.ramp.is_some()),
    flag("--tos/--dscp", Proto::Udp, |t, _| {
        t.tos.is_some() || t.dscp.is_some()
    }),
    flag("--ttl", Proto::Udp, |t, _| t.ttl.is_some()),
    flag("--src-ports/--dst-ports", Proto::Udp, |t, _| {
        t.src_ports.is_some() || t.dst_ports.is_some()
    }),
    flag("--payload", Proto::Udp, |t, _| {
        t.payload != PayloadFill::Zero
    }),
    flag("--conns", Proto::Tcp, |_, p| p.conns.is_some()),
    flag("--pattern", Proto::Tcp, |_, p| p.pattern != Pattern::Stream),
    flag("--request-size", Proto::Tcp, |_, p| {
        p.request_size.is_some()
    }),
    flag("--response-size", Proto::Tcp, |_, p| {
        p.response_size.is_some()
    }),
    flag("--depth", Proto::Tcp, |_, p| p.depth.is_some()),
];

/// Refuses the first flag the sender's protocol does not accept, with the fix.
pub(crate) fn check(traffic: &TrafficArgs, tcp: &TcpSendArgs) -> Result<(), String> {
    let wrong = PROTOCOL_FLAGS
        .iter()
        .find(|f| f.only != tcp.proto && (f.given)(traffic, tcp));
    match wrong {
        None => Ok(()),
        Some(f) if f.only == Proto::Udp => Err(format!(
            "{} applies to UDP only; drop it for --proto tcp",
            f.flag
        )),
        Some(f) => Err(format!("{} applies to TCP only; add --proto tcp", f.flag)),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn checked(args: &[&str]) -> Result<(), String> {
        let argv = ["ringblast", "send", "--to", "127.0.0.1:9"]
            .iter()
            .chain(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Send(s) => super::check(&s.traffic, &s.tcp),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn each_protocol_refuses_the_others_flags_and_names_the_fix() {
        assert_eq!(checked(&[]), Ok(()));
        assert_eq!(checked(&["--proto", "tcp", "--conns", "4"]), Ok(()));
        assert_eq!(checked(&["--gso", "8", "--ttl", "9"]), Ok(()));
        assert_eq!(
            checked(&["--proto", "tcp", "--gso", "8"]),
            Err("--gso applies to UDP only; drop it for --proto tcp".into())
        );
        assert_eq!(
            checked(&["--proto", "tcp", "--dscp", "10"]),
            Err("--tos/--dscp applies to UDP only; drop it for --proto tcp".into())
        );
        assert_eq!(
            checked(&["--conns", "4"]),
            Err("--conns applies to TCP only; add --proto tcp".into())
        );
        assert_eq!(
            checked(&["--request-size", "100"]),
            Err("--request-size applies to TCP only; add --proto tcp".into())
        );
    }

    #[test]
    fn every_flag_in_the_table_exists() {
        let send = <Cli as clap::CommandFactory>::command();
        let send = send.find_subcommand("send").unwrap();
        let longs: Vec<String> = send
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for f in super::PROTOCOL_FLAGS {
            for word in f
                .flag
                .split(['/', ' ', '(', ')'])
                .filter(|w| w.starts_with("--"))
            {
                assert!(longs.iter().any(|l| l == word), "{word} is not a send flag");
            }
        }
    }
}
