//! Which flags belong to one protocol: one table for `send`, `pair` and `sink`, read by one
//! check that each of them runs before anything starts, so a flag that would do nothing for the
//! chosen protocol is refused with one line naming the fix, never silently ignored. A flag not
//! in the table means the same for UDP and TCP (its `--help` says what it means for each).
//! `search` checks its own few protocol flags where it resolves (`resolve::search`).

use std::time::Duration;

use super::{
    RxWaitArg, SendArgs, SinkArgs, SinkTuning, Steer, TrafficArgs,
    tcp::{Proto, TcpSendArgs},
};
use crate::sender::payload::PayloadFill;

/// The parsed arguments a flag is read from, which says which commands have it.
enum Reads {
    /// The sender's traffic and TCP flags: `send` and `pair`.
    Sender(fn(&TrafficArgs, &TcpSendArgs) -> bool),
    /// The receive tuning: `sink` and `pair`.
    Tuning(fn(&SinkTuning) -> bool),
    /// `sink`'s own flags.
    Sink(fn(&SinkArgs) -> bool),
}

/// A flag only one protocol accepts: whether the command line gave it (a value other than its
/// default), why it applies to that protocol only (empty: it says so itself), and an example
/// of it for the table's test.
struct ProtocolFlag {
    flag: &'static str,
    only: Proto,
    reads: Reads,
    why: &'static str,
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the table's own test gives each example")
    )]
    example: &'static [&'static str],
}

const fn udp(flag: &'static str, reads: Reads, example: &'static [&'static str]) -> ProtocolFlag {
    ProtocolFlag {
        flag,
        only: Proto::Udp,
        reads,
        why: "",
        example,
    }
}

const fn tcp(flag: &'static str, reads: Reads, example: &'static [&'static str]) -> ProtocolFlag {
    ProtocolFlag {
        flag,
        only: Proto::Tcp,
        reads,
        why: "",
        example,
    }
}

const fn because(mut f: ProtocolFlag, why: &'static str) -> ProtocolFlag {
    f.why = why;
    f
}

use Reads::{Sender, Sink, Tuning};

/// Every flag of `send`, `pair` and `sink` that only one protocol accepts.
const PROTOCOL_FLAGS: &[ProtocolFlag] = &[
    udp("--gso", Sender(|t, _| t.gso != 1), &["--gso", "8"]),
    udp(
        "--frame-size",
        Sender(|t, _| t.frame_size.is_some()),
        &["--frame-size", "128"],
    ),
    udp(
        "--allow-fragments",
        Sender(|t, _| t.allow_fragments),
        &["--allow-fragments"],
    ),
    udp("--wire-rate", Sender(|t, _| t.wire_rate), &["--wire-rate"]),
    udp(
        "--flows (use --conns)",
        Sender(|t, _| t.flows.is_some()),
        &["--flows", "4"],
    ),
    udp("--burst", Sender(|t, _| t.burst != 1), &["--burst", "8"]),
    udp(
        "--rate-steps",
        Sender(|t, _| t.rate_steps.is_some()),
        &["--rate-steps", "1kpps:1s"],
    ),
    udp(
        "--ramp",
        Sender(|t, _| t.ramp.is_some()),
        &["--ramp", "1kpps:2kpps:1s"],
    ),
    udp(
        "--tos/--dscp",
        Sender(|t, _| t.tos.is_some() || t.dscp.is_some()),
        &["--dscp", "10"],
    ),
    udp("--ttl", Sender(|t, _| t.ttl.is_some()), &["--ttl", "9"]),
    udp(
        "--src-ports/--dst-ports",
        Sender(|t, _| t.src_ports.is_some() || t.dst_ports.is_some()),
        &["--src-ports", "4000-4001"],
    ),
    udp(
        "--payload",
        Sender(|t, _| t.payload != PayloadFill::Zero),
        &["--payload", "random"],
    ),
    because(
        udp("--batch", Sender(|t, _| t.batch != 32), &["--batch", "8"]),
        "a TCP sender keeps one write in flight per connection",
    ),
    because(
        udp(
            "--window",
            Sender(|t, _| t.window.is_some()),
            &["--window", "8"],
        ),
        "a TCP sender keeps one write in flight per connection",
    ),
    tcp(
        "--conns",
        Sender(|_, p| p.conns.is_some()),
        &["--conns", "4"],
    ),
    udp(
        "--response-timeout",
        Sender(|_, p| p.response_timeout.is_some()),
        &["--pattern", "rr", "--response-timeout", "500ms"],
    ),
    udp("--no-gro", Tuning(|t| t.no_gro), &["--no-gro"]),
    because(
        udp(
            "--rx-wait inline",
            Tuning(|t| t.rx_wait == RxWaitArg::Inline),
            &["--rx-wait", "inline"],
        ),
        "a TCP sink waits with batch, spin or sleep",
    ),
    because(
        udp(
            "--arrival",
            Tuning(|t| t.arrival.is_some()),
            &["--arrival", "kernel"],
        ),
        "a TCP record's arrival is always the sink's read",
    ),
    udp(
        "--max-flows",
        Tuning(|t| t.max_flows != 256),
        &["--max-flows", "8"],
    ),
    udp(
        "--metrics-flows",
        Tuning(|t| t.metrics_flows != 16),
        &["--metrics-flows", "8"],
    ),
    because(
        udp(
            "--max-sessions",
            Tuning(|t| t.max_sessions != 4096),
            &["--max-sessions", "64"],
        ),
        "a TCP sink books connections; --max-conns caps them",
    ),
    udp(
        "--max-unannounced-sessions",
        Tuning(|t| t.max_unannounced_sessions.is_some()),
        &["--max-unannounced-sessions", "8"],
    ),
    udp(
        "--session-idle",
        Tuning(|t| t.session_idle != Duration::from_secs(10)),
        &["--session-idle", "3s"],
    ),
    because(
        udp(
            "--steer",
            Tuning(|t| t.steer != Steer::Flow),
            &["--steer", "hash"],
        ),
        "the kernel spreads a TCP sink's connections over its queues",
    ),
    because(
        udp(
            "--accept-unannounced",
            Sink(|s| s.accept_unannounced),
            &["--accept-unannounced"],
        ),
        "a TCP sink with a secret counts proven connections only",
    ),
    udp(
        "--unannounced-grace",
        Sink(|s| s.unannounced_grace != Duration::from_secs(6)),
        &["--unannounced-grace", "2s"],
    ),
    udp("--share-port", Sink(|s| s.share_port), &["--share-port"]),
    tcp(
        "--max-conns",
        Sink(|s| s.tcp.max_conns != 1024),
        &["--max-conns", "8"],
    ),
];

/// What one command line gave, for the table: its protocol and the parts it has.
struct Given<'a> {
    proto: Proto,
    sender: Option<(&'a TrafficArgs, &'a TcpSendArgs)>,
    tuning: Option<&'a SinkTuning>,
    sink: Option<&'a SinkArgs>,
}

impl ProtocolFlag {
    /// Whether `g` gave this flag (a command without it never does).
    fn given_in(&self, g: &Given) -> bool {
        match self.reads {
            Sender(given) => g.sender.is_some_and(|(t, p)| given(t, p)),
            Tuning(given) => g.tuning.is_some_and(given),
            Sink(given) => g.sink.is_some_and(given),
        }
    }

    /// The one line that refuses it, with the fix.
    fn refusal(&self) -> String {
        let why = if self.why.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.why)
        };
        match self.only {
            Proto::Udp => format!(
                "{} applies to UDP only{why}; drop it for --proto tcp",
                self.flag
            ),
            Proto::Tcp => format!("{} applies to TCP only{why}; add --proto tcp", self.flag),
        }
    }
}

/// Refuses the first flag of `g` its protocol does not accept, with the fix.
fn check(g: &Given) -> Result<(), String> {
    match PROTOCOL_FLAGS
        .iter()
        .find(|f| f.only != g.proto && f.given_in(g))
    {
        None => Ok(()),
        Some(f) => Err(f.refusal()),
    }
}

/// `ringblast send`'s flags against its `--proto`.
pub(crate) fn check_send(args: &SendArgs) -> Result<(), String> {
    check(&Given {
        proto: args.tcp.proto,
        sender: Some((&args.traffic, &args.tcp)),
        tuning: None,
        sink: None,
    })
}

/// `ringblast pair`'s flags (a sender's and a sink's) against its `--proto`.
pub(crate) fn check_pair(args: &super::PairArgs) -> Result<(), String> {
    check(&Given {
        proto: args.tcp.proto,
        sender: Some((&args.traffic, &args.tcp)),
        tuning: Some(&args.tuning),
        sink: None,
    })
}

/// `ringblast sink`'s flags against its `--proto`.
pub(crate) fn check_sink(args: &SinkArgs) -> Result<(), String> {
    check(&Given {
        proto: args.tcp.proto,
        sender: None,
        tuning: Some(&args.tuning),
        sink: Some(args),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{PROTOCOL_FLAGS, Reads};
    use crate::cli::{Cli, Command, tcp::Proto};

    /// Parses `argv` and runs its command's protocol check.
    fn checked(argv: &[&str]) -> Result<(), String> {
        let argv = ["ringblast"].iter().chain(argv);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Send(s) => super::check_send(&s),
            Command::Pair(p) => super::check_pair(&p),
            Command::Sink(s) => super::check_sink(&s),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// The commands that have a flag read from `reads`, each with its required arguments.
    fn commands(reads: &Reads) -> &'static [&'static [&'static str]] {
        const SEND: &[&str] = &["send", "--to", "127.0.0.1:9"];
        const PAIR: &[&str] = &["pair"];
        const SINK: &[&str] = &["sink", "--listen", "127.0.0.1:9"];
        match reads {
            Reads::Sender(_) => &[SEND, PAIR],
            Reads::Tuning(_) => &[SINK, PAIR],
            Reads::Sink(_) => &[SINK],
        }
    }

    /// `--help` files each flag of the table under its protocol's heading, and no other flag
    /// there, in every command that has it: what a heading says is what the check enforces.
    #[test]
    fn the_protocol_headings_of_help_hold_exactly_the_flags_of_the_table() {
        use crate::cli::heading;
        let cli = <Cli as clap::CommandFactory>::command();
        let mut wrong = Vec::new();
        for name in ["send", "sink", "pair"] {
            let command = cli.find_subcommand(name).unwrap();
            for arg in command.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                let flag = format!("--{long}");
                let only = PROTOCOL_FLAGS
                    .iter()
                    .find(|f| f.flag == flag)
                    .map(|f| f.only);
                let expected = match only {
                    Some(Proto::Udp) => Some(heading::UDP),
                    Some(Proto::Tcp) => Some(heading::TCP),
                    None => None,
                };
                let shown = arg
                    .get_help_heading()
                    .filter(|h| *h == heading::UDP || *h == heading::TCP);
                if shown != expected {
                    wrong.push(format!("{name} {flag}: {shown:?}, not {expected:?}"));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn every_flag_of_the_table_is_refused_for_the_other_protocol_and_accepted_for_its_own() {
        for f in PROTOCOL_FLAGS {
            for command in commands(&f.reads) {
                let own: &[&str] = match f.only {
                    Proto::Udp => &[],
                    Proto::Tcp => &["--proto", "tcp"],
                };
                let other: &[&str] = match f.only {
                    Proto::Udp => &["--proto", "tcp"],
                    Proto::Tcp => &[],
                };
                let with = |proto: &[&'static str]| [*command, proto, f.example].concat();
                assert_eq!(checked(&with(other)), Err(f.refusal()), "{:?}", with(other));
                assert_eq!(checked(&with(own)), Ok(()), "{:?}", with(own));
                assert!(!f.refusal().contains('\n'));
            }
        }
    }

    #[test]
    fn the_refusal_names_the_flag_the_protocol_and_the_fix() {
        assert_eq!(checked(&["send", "--to", "127.0.0.1:9"]), Ok(()));
        assert_eq!(
            checked(&[
                "send",
                "--to",
                "127.0.0.1:9",
                "--proto",
                "tcp",
                "--gso",
                "8"
            ]),
            Err("--gso applies to UDP only; drop it for --proto tcp".into())
        );
        assert_eq!(
            checked(&["sink", "--listen", "127.0.0.1:9", "--proto", "tcp", "--arrival", "read"]),
            Err("--arrival applies to UDP only (a TCP record's arrival is always the sink's read); drop it for --proto tcp".into())
        );
        assert_eq!(
            checked(&["sink", "--listen", "127.0.0.1:9", "--max-conns", "8"]),
            Err("--max-conns applies to TCP only; add --proto tcp".into())
        );
    }

    #[test]
    fn every_flag_in_the_table_exists_in_each_command_that_reads_it() {
        let cli = <Cli as clap::CommandFactory>::command();
        for f in PROTOCOL_FLAGS {
            for command in commands(&f.reads) {
                let sub = cli.find_subcommand(command[0]).unwrap();
                let longs: Vec<String> = sub
                    .get_arguments()
                    .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
                    .collect();
                for word in f
                    .flag
                    .split(['/', ' ', '(', ')'])
                    .filter(|w| w.starts_with("--"))
                {
                    assert!(
                        longs.iter().any(|l| l == word),
                        "{word} is not a {} flag",
                        command[0]
                    );
                }
            }
        }
    }
}
