//! `ringblast search` from the command line: the search's own parameters checked, and the
//! sender its trials run on resolved as `ringblast send` with the search's protocol,
//! destination, size, queues, connections, secret and exporter would be (its rate, length and
//! count are each trial's).

use super::{reporting, udp_sender};
use crate::{
    cli::{Cli, Command, SearchArgs, SendArgs, tcp::Proto},
    control::msg::DataProto,
    error::Error,
    run::plan::{Plan, SearchPlan, TrialPlan, TrialSendPlan},
    sender::mix::{SizePlan, SizeSpec},
};

/// `search`'s flags that do nothing over TCP, and why.
const NOT_OVER_TCP: &[(&str, &str)] = &[
    (
        "--metrics",
        "a TCP search serves no metrics yet (each trial is a sender run of its own); watch the sink's --metrics instead",
    ),
    (
        "--auth-data",
        "a TCP connection proves its run in its first record with --secret-file, and TCP guards the rest of the stream",
    ),
];

/// Refuses each flag that would do nothing for the search's protocol, in one line.
fn check_protocol(args: &SearchArgs) -> Result<(), Error> {
    if args.proto == Proto::Udp {
        for (given, flag) in [
            (args.conns.is_some(), "--conns"),
            (args.drain.is_some(), "--drain"),
        ] {
            if given {
                return Err(Error::Usage(format!(
                    "{flag} applies to --proto tcp only; leave it off a UDP search"
                )));
            }
        }
        return Ok(());
    }
    let given = [args.metrics.is_some(), args.auth_data];
    match NOT_OVER_TCP.iter().zip(given).find(|(_, g)| *g) {
        Some(((flag, why), _)) => Err(Error::Usage(format!(
            "{flag} does not apply to --proto tcp: {why}"
        ))),
        None => Ok(()),
    }
}

/// `ringblast search`: checks the sender's options once here, so a bad one is one line, not a
/// failed trial.
pub(crate) fn search(args: SearchArgs) -> Result<Plan, Error> {
    check_protocol(&args)?;
    let tcp = args.proto == Proto::Tcp;
    let size_arg = args
        .size
        .clone()
        .unwrap_or_else(|| if tcp { "128000" } else { "64" }.to_string());
    let size: SizeSpec = size_arg.parse().map_err(Error::Usage)?;
    let sizes = SizePlan::resolve(&size, None, args.to)?;
    let unit = if tcp { "a record" } else { "a packet" };
    let pps = |r: crate::config::units::Rate, what: &str| {
        r.packets_per_second_at(sizes.mean_payload())
            .ok_or_else(|| Error::Usage(format!("{what} needs {unit} or bit rate, not max")))
    };
    let mut ratios = args.loss_ratios.clone();
    ratios.sort_by(f64::total_cmp);
    ratios.dedup();
    let plan = SearchPlan {
        loss_ratios: ratios,
        min_rate: match args.min_rate {
            Some(rate) => pps(rate, "--min-rate")?,
            None if tcp => pps(crate::config::units::Rate::BitsPerSecond(1e6), "--min-rate")?,
            None => 1000.0,
        },
        max_rate: args.max_rate.map(|r| pps(r, "--max-rate")).transpose()?,
        precision: args.precision,
        trial: args.trial,
        final_trial: args.final_trial,
        max_time: args.max_time,
        offered_tolerance: args.offered_tolerance,
        max_latency_p99: args.max_latency_p99,
        json: args.json,
        proto: if tcp { DataProto::Tcp } else { DataProto::Udp },
    };
    let send = trial_send_args(&args, &size_arg)?;
    let trials = if tcp {
        match super::tcp::send(send)? {
            Plan::Tcp(run, reporting) => TrialPlan::Tcp {
                side: run
                    .senders
                    .ok_or_else(|| Error::Usage("a search's trials are sends".into()))?,
                reporting,
                drain: args.drain,
            },
            _ => return Err(Error::Usage("a search's trials are sends".into())),
        }
    } else {
        TrialPlan::Udp(trial_sender(send)?)
    };
    Ok(Plan::Search(plan, trials))
}

/// The `send` a search's trials are: `--proto`, `--to`, `--size`, `--queues` and `--conns`,
/// with the search's secret, exporter and start time; every other option at `send`'s default.
fn trial_send_args(args: &SearchArgs, size: &str) -> Result<SendArgs, Error> {
    let mut argv = vec![
        "ringblast".to_string(),
        "send".into(),
        "--proto".into(),
        if args.proto == Proto::Tcp {
            "tcp"
        } else {
            "udp"
        }
        .into(),
        "--to".into(),
        args.to.to_string(),
        "--size".into(),
        size.to_string(),
        "--queues".into(),
        args.queues.to_string(),
    ];
    if let Some(conns) = args.conns {
        argv.extend(["--conns".to_string(), conns.to_string()]);
    }
    if let Some(secret) = &args.secret_file {
        argv.push("--secret-file".into());
        argv.push(secret.display().to_string());
    }
    if args.auth_data {
        argv.push("--auth-data".into());
    }
    if let Some(metrics) = args.metrics {
        argv.extend([
            "--metrics".to_string(),
            metrics.to_string(),
            "--metrics-linger".into(),
            format!("{}ms", args.metrics_linger.as_millis()),
        ]);
    }
    match <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.command) {
        Ok(Command::Send(mut send)) => {
            // The search's own (`--start-at`, or RINGBLAST_START_AT): its first trial starts on it.
            send.common.start_at = args.start_at;
            Ok(send)
        }
        Ok(_) => Err(Error::Usage("a search's trials are sends".into())),
        Err(e) => {
            let text = e.to_string();
            Err(Error::Usage(text.lines().next().unwrap_or("").to_string()))
        }
    }
}

/// The trial sender: `send`'s configs, placement and control channel (each trial sets its own
/// rate and length).
fn trial_sender(args: SendArgs) -> Result<TrialSendPlan, Error> {
    let mut notes = String::new();
    let (send, link) = udp_sender(&args, &mut notes)?;
    let link = link.ok_or_else(|| {
        Error::Usage("a search's trials need the sink's control channel for their verdicts".into())
    })?;
    Ok(TrialSendPlan {
        send,
        link,
        reporting: reporting(&args.common, args.common.metrics, notes)?,
    })
}
