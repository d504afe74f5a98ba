//! UDP's groups from the command line: the sender's traffic options checked and split into one
//! `SenderConfig` per queue (rate, count and flows shared out), and the sink's options into its
//! `SinkConfig`.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use crate::{
    cli::{SinkTuning, Steer, TrafficArgs},
    error::Error,
    proto::exchange::{MAX_RESPONSE, MIN_REQUEST, MIN_RESPONSE},
    sender::{SenderConfig, exchange::ExchangeShape, mix::SizePlan, pattern::RrLimits},
    sink::SinkConfig,
    sink::books::{Admission, MAX_SEND_LAG},
};

/// Largest UDP payload of one send (IPv4: 65535 − 20 − 8).
pub(crate) const MAX_SEND_BYTES: usize = 65_507;
/// Largest GSO segment count the kernel accepts per send (`UDP_MAX_SEGMENTS`).
pub(crate) const MAX_GSO_SEGMENTS: u16 = 128;

/// Checks the traffic options and returns the whole run's `SenderConfig` (its rate, count and
/// schedule over all queues) and its number of flows.
pub(crate) fn sender_config(
    to: SocketAddr,
    t: &TrafficArgs,
    queues: usize,
    default_duration: Option<Duration>,
    epoch: u32,
    hugepages: bool,
) -> Result<(SenderConfig, u32), Error> {
    let usage = |m: String| Err(Error::Usage(m));
    if queues == 0 {
        return usage("--queues must be at least 1".into());
    }
    let sizes = Arc::new(SizePlan::resolve(&t.size, t.frame_size, to)?);
    let size = sizes.max_payload();
    if sizes.is_mix() && t.gso > 1 {
        return usage(format!(
            "--gso {} sends trains of one size; a --size mix sends one packet per send: use --gso 1",
            t.gso
        ));
    }
    if sizes.is_mix() && t.allow_fragments {
        return usage(
            "--allow-fragments counts fragments for one size; send a --size mix without it (each class must fit the path MTU)".into(),
        );
    }
    // A sink that has not heard the stated start extends a first compact number next to 0,
    // which gives the true number only below 2^32; a start just below it still crosses 2^32.
    if sizes.has_compact() && t.first_seq > u64::from(u32::MAX) {
        return usage(format!(
            "--first-seq {} with packets below 32 bytes: their compact header carries 32 bits of sequence; use --first-seq below 4294967296",
            t.first_seq
        ));
    }
    if t.gso == 0 || t.gso > MAX_GSO_SEGMENTS {
        return usage(format!(
            "--gso {} is out of range; use 1 (off) to {MAX_GSO_SEGMENTS}",
            t.gso
        ));
    }
    let per_send = size * usize::from(t.gso);
    if per_send > MAX_SEND_BYTES {
        let fit = (MAX_SEND_BYTES / size).max(1);
        return usage(if t.gso > 1 {
            format!(
                "--gso {} × --size {} = {per_send} bytes per send exceeds {MAX_SEND_BYTES}; use --gso {fit} or less",
                t.gso, size
            )
        } else {
            format!(
                "--size {} exceeds the largest UDP payload {MAX_SEND_BYTES}",
                size
            )
        });
    }
    if t.batch == 0 || t.batch > 4096 {
        return usage(format!(
            "--batch {} is out of range; use 1 to 4096",
            t.batch
        ));
    }
    let window = t.window.unwrap_or(t.batch * 2);
    if window == 0 || window > 32768 {
        return usage(format!("--window {window} is out of range; use 1 to 32768"));
    }
    let lag = u64::from(window) * u64::from(t.gso);
    if lag > MAX_SEND_LAG {
        return usage(format!(
            "--window {window} × --gso {} keeps {lag} packets in flight; the sink attributes failed sends only within {MAX_SEND_LAG}: lower --window or --gso",
            t.gso
        ));
    }
    super::shape::check_burst(t.burst, t.gso, window)?;
    let flows = t.flows.unwrap_or(queues as u32);
    if (flows as usize) < queues {
        return usage(format!(
            "--flows {flows} is below --queues {queues}; every queue needs at least one flow"
        ));
    }
    if flows > 65_536 {
        return usage(format!("--flows {flows} is too many; use at most 65536"));
    }
    let fields = crate::net::fields::HeaderFields {
        tos: t.tos.or(t.dscp.map(|d| d << 2)),
        ttl: t.ttl,
        src_ports: t.src_ports,
        dst_ports: t.dst_ports,
    };
    fields.check(flows)?;
    crate::net::wire::check_path(to, size, t.allow_fragments)?;
    let schedule = super::shape::schedule(t, sizes.mean_payload())?.map(Arc::new);
    let total_pps = match &schedule {
        // The judge's target: the schedule's mean rate.
        Some(s) => Some(s.mean_rate(0, s.duration().as_nanos() as u64)),
        None => t.rate.packets_per_second_at(sizes.mean_payload()),
    };
    let part_epochs =
        crate::sender::parts::part_epochs(epoch, schedule.as_ref().map_or(1, |s| s.parts().len()));
    let duration = match &schedule {
        Some(s) => Some(s.duration()),
        None => super::run_length(t.duration, t.count, default_duration),
    };
    let run = SenderConfig {
        to,
        size,
        sizes,
        gso: t.gso,
        batch: t.batch,
        window,
        rate_pps: total_pps,
        count: t.count,
        duration,
        op: t.send_op.map_or(crate::sender::SendOp::Send, Into::into),
        epoch,
        hugepages,
        first_seq: t.first_seq,
        burst: t.burst,
        fields,
        payload: t.payload.clone(),
        schedule,
        part_epochs,
        trials: None,
        proof: None,
        exchange: None,
    };
    Ok((run, flows))
}

/// What a UDP datagram can carry of a request/response shape.
const UDP_RR: RrLimits = RrLimits {
    request: MIN_REQUEST..=MAX_SEND_BYTES,
    request_why: "a request carries the 32-byte header, the proof and the response length",
    response: MIN_RESPONSE..=MAX_RESPONSE,
    over: " over UDP",
    per: "flow",
};

/// The UDP request/response shape from `--pattern rr` and its options, checked: `None` for a
/// stream. The stream's shaping options have no meaning for a closed loop and are refused, and
/// a request waits `--response-timeout` for its answer.
pub(crate) fn exchange_shape(
    p: &crate::cli::tcp::TcpSendArgs,
    t: &TrafficArgs,
) -> Result<Option<ExchangeShape>, Error> {
    let usage = |m: String| Err(Error::Usage(m));
    if p.pattern == crate::cli::tcp::Pattern::Rr {
        for (given, flag) in [
            (t.gso > 1, "--gso"),
            (t.rate_steps.is_some(), "--rate-steps"),
            (t.ramp.is_some(), "--ramp"),
            (t.burst > 1, "--burst"),
            (t.window.is_some(), "--window"),
        ] {
            if given {
                return usage(format!(
                    "{flag} shapes a stream; --pattern rr keeps --depth requests outstanding per flow: drop {flag}"
                ));
            }
        }
    }
    let Some(rr) = super::rr_shape(p, &UDP_RR)? else {
        if p.response_timeout.is_some() {
            return usage("--response-timeout needs --pattern rr".into());
        }
        return Ok(None);
    };
    let timeout_ns = p
        .response_timeout
        .unwrap_or(Duration::from_secs(1))
        .as_nanos() as u64;
    if !(1_000_000..=60_000_000_000).contains(&timeout_ns) {
        return usage("--response-timeout must be 1ms to 60s".into());
    }
    Ok(Some(ExchangeShape { rr, timeout_ns }))
}

/// Provided buffers per UDP sink queue, 64 KiB each, when `--rx-buffers` is not given.
pub(crate) const UDP_RX_BUFFERS: u16 = 512;

/// `--rx-buffers`, checked, or `default` when not given.
pub(crate) fn rx_buffers(given: Option<u16>, default: u16) -> Result<u16, Error> {
    match given {
        None => Ok(default),
        Some(n) if n.is_power_of_two() && (8..=32768).contains(&n) => Ok(n),
        Some(n) => Err(Error::Usage(format!(
            "--rx-buffers {n} must be a power of two from 8 to 32768"
        ))),
    }
}

/// Checks the sink options and returns the per-queue config.
pub(crate) fn sink_config(
    listen: SocketAddr,
    t: &SinkTuning,
    duration: Option<Duration>,
    hugepages: bool,
    refuse_unannounced_from_ns: u64,
    compact_needs_proof: bool,
) -> Result<SinkConfig, Error> {
    let buffers = rx_buffers(t.rx_buffers, UDP_RX_BUFFERS)?;
    if t.max_flows == 0 || t.max_flows > 65_536 {
        return Err(Error::Usage(format!(
            "--max-flows {} is out of range; use 1 to 65536",
            t.max_flows
        )));
    }
    if t.max_sessions == 0 || t.max_sessions > 1 << 20 {
        return Err(Error::Usage(format!(
            "--max-sessions {} is out of range; use 1 to 1048576",
            t.max_sessions
        )));
    }
    let max_unannounced = t
        .max_unannounced_sessions
        .unwrap_or(t.max_sessions.div_ceil(2));
    if max_unannounced > t.max_sessions {
        return Err(Error::Usage(format!(
            "--max-unannounced-sessions {max_unannounced} is more than --max-sessions {}; use 0 to {} (the rest are reserved for senders that said hello)",
            t.max_sessions, t.max_sessions
        )));
    }
    Ok(SinkConfig {
        max_sessions: t.max_sessions,
        admission: Admission {
            max_unannounced,
            refuse_unannounced_from_ns,
            compact_needs_proof,
        },
        session_idle: t.session_idle,
        listen,
        gro: !t.no_gro,
        arrival: super::asked_arrival(t).granted(),
        wait: t.rx_wait.into(),
        buffers,
        max_flows: t.max_flows,
        duration,
        hugepages,
        steer_by_flow: t.steer == Steer::Flow,
        steer_queues: None,
        sizes: Arc::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::rx_buffers;

    #[test]
    fn rx_buffers_default_when_not_given_and_checked_when_given() {
        assert_eq!(rx_buffers(None, 64).unwrap(), 64);
        assert_eq!(rx_buffers(Some(8), 64).unwrap(), 8);
        assert_eq!(rx_buffers(Some(32768), 64).unwrap(), 32768);
        for bad in [0, 4, 100, 65535] {
            let err = rx_buffers(Some(bad), 64).unwrap_err().to_string();
            assert!(err.contains("power of two from 8 to 32768"), "{err}");
        }
    }
}
