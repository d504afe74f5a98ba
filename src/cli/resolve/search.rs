//! `ringblast search` from the command line: the search's own parameters checked, and the one
//! sender its trials run on resolved as `ringblast send` with the search's destination, size,
//! queues, secret and exporter would be (its rate, length and count are each trial's).

use super::{reporting, udp_sender};
use crate::{
    cli::{Cli, Command, SearchArgs, SendArgs},
    error::Error,
    run::plan::{Plan, SearchPlan, TrialSendPlan},
    sender::mix::{SizePlan, SizeSpec},
};

/// `ringblast search`: checks the sender's options once here, so a bad one is one line, not a
/// failed trial.
pub(crate) fn search(args: SearchArgs) -> Result<Plan, Error> {
    let size: SizeSpec = args.size.parse().map_err(Error::Usage)?;
    let sizes = SizePlan::resolve(&size, None, args.to)?;
    let pps = |r: crate::config::units::Rate, what: &str| {
        r.packets_per_second_at(sizes.mean_payload())
            .ok_or_else(|| Error::Usage(format!("{what} needs a packet or bit rate, not max")))
    };
    let mut ratios = args.loss_ratios.clone();
    ratios.sort_by(f64::total_cmp);
    ratios.dedup();
    let plan = SearchPlan {
        loss_ratios: ratios,
        min_rate: pps(args.min_rate, "--min-rate")?,
        max_rate: args.max_rate.map(|r| pps(r, "--max-rate")).transpose()?,
        precision: args.precision,
        trial: args.trial,
        final_trial: args.final_trial,
        max_time: args.max_time,
        offered_tolerance: args.offered_tolerance,
        max_latency_p99: args.max_latency_p99,
        json: args.json,
    };
    Ok(Plan::Search(plan, trial_sender(trial_send_args(&args)?)?))
}

/// The `send` a search's trials are: `--to`, `--size` and `--queues`, with the search's secret
/// and exporter; every other option at `send`'s default.
fn trial_send_args(args: &SearchArgs) -> Result<SendArgs, Error> {
    let mut argv = vec![
        "ringblast".to_string(),
        "send".into(),
        "--to".into(),
        args.to.to_string(),
        "--size".into(),
        args.size.clone(),
        "--queues".into(),
        args.queues.to_string(),
    ];
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
        Ok(Command::Send(args)) => Ok(args),
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
    let (queues, configs, link) = udp_sender(&args, &mut notes)?;
    let link = link.ok_or_else(|| {
        Error::Usage("a search's trials need the sink's control channel for their verdicts".into())
    })?;
    Ok(TrialSendPlan {
        queues,
        configs,
        link,
        reporting: reporting(&args.common, args.common.metrics, notes),
    })
}
