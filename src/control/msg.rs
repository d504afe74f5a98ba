//! The control-channel messages exchanged between a sender and a sink.
//!
//! Every payload is a JSON object (serde, unknown fields rejected); the frame's type byte is
//! derived from the [`Message`] variant by [`Message::kind`]. Decoded messages are checked by
//! [`Message::validate`]: flow lists are capped at [`MAX_FLOWS`], names at [`MAX_NAME`] bytes of
//! `[A-Za-z0-9._:/@-]`, free-text reasons at [`MAX_REASON`] printable bytes, boot ids at
//! [`MAX_BOOT_ID`] bytes of hex digits and dashes; a clock reply must not answer before it
//! received, and a clock estimate's bound must cover half its round trip.
//!
//! Protocol version 3 adds the clock exchange: [`ClockProbe`], [`ClockReply`] and
//! [`ClockEstimate`] (types 12 to 14, unknown in older frames), the sender's boot id in its
//! [`Hello`], and the sink's [`VerdictClock`] in its [`Verdict`]. Version 10 adds the sink's
//! latency and jitter cells ([`VerdictCells`]) and its late packets to a verdict, so a sender
//! reads a remote sink's verdict as fully as `pair` reads its in-process sink's.

use serde::{Deserialize, Serialize};

use crate::{figures::Figures, latency_clock::ClockKind};

mod hex;
mod reading;
use hex::{hex32, hex32_opt};

/// Most flows a Hello, Progress, Goodbye or Verdict may list.
pub(crate) const MAX_FLOWS: usize = 65_536;
/// Longest sender name or sink session id, in bytes.
pub(crate) const MAX_NAME: usize = 128;
/// Longest refusal reason, in bytes.
pub(crate) const MAX_REASON: usize = 512;
/// Most size classes a Verdict may list.
pub(crate) const MAX_SIZES: usize = 64;
/// Longest boot id, in bytes (the kernel's is a 36-byte UUID).
pub(crate) const MAX_BOOT_ID: usize = 64;
/// Longest round trip a clock estimate may carry (a control connection silent for 3 s is
/// dropped, so no exchange takes longer).
pub(crate) const MAX_CLOCK_RTT_NS: u64 = 60_000_000_000;
/// Largest error bound a clock estimate may carry (half the longest round trip plus an hour's
/// drift at far more than any clock's tolerance).
pub(crate) const MAX_CLOCK_BOUND_NS: u64 = 3_600_000_000_000;

/// Client's first handshake message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientHello {
    /// Fresh random client nonce.
    #[serde(with = "hex32")]
    pub(crate) nonce: [u8; 32],
    /// Whether the client has a secret.
    pub(crate) auth: bool,
}

/// Server's reply to [`ClientHello`], proving the secret when `auth` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerChallenge {
    /// Fresh random server nonce.
    #[serde(with = "hex32")]
    pub(crate) nonce: [u8; 32],
    /// Whether the server has a secret.
    pub(crate) auth: bool,
    /// HMAC over the sink label and both nonces; `None` in insecure mode.
    #[serde(with = "hex32_opt")]
    pub(crate) mac: Option<[u8; 32]>,
}

/// Client's proof of the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientAuth {
    /// HMAC over the sender label and both nonces; `None` in insecure mode.
    #[serde(with = "hex32_opt")]
    pub(crate) mac: Option<[u8; 32]>,
}

/// Server accepted the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthOk {
    /// The sink's session id.
    pub(crate) sink_session: String,
}

/// Either side refuses the connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Refused {
    /// One-line human-readable reason.
    pub(crate) reason: String,
}

/// One flow's state at (re)connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlowStart {
    /// Flow id.
    pub(crate) flow: u32,
    /// First sequence number the sender used for this flow.
    pub(crate) first_seq: u64,
    /// One past the highest sequence number sent.
    pub(crate) next_seq: u64,
    /// Sends of this flow that failed so far.
    pub(crate) failed: u64,
}

/// The sender introduces itself after the handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hello {
    /// Sender name.
    pub(crate) name: String,
    /// Sender epoch (changes when the sender restarts).
    pub(crate) epoch: u32,
    /// Flows and their current state.
    pub(crate) flows: Vec<FlowStart>,
    /// Packet size in bytes.
    pub(crate) size: u32,
    /// Target rate, if paced.
    pub(crate) rate_pps: Option<f64>,
    /// Time since the sender's first send; 0 if none yet.
    pub(crate) elapsed_ns: u64,
    /// Number of reconnects before this connection.
    pub(crate) reconnect: u32,
    /// The step of a rate schedule this epoch is, from 1 for the second (protocol version 2):
    /// it continues its sender's run, so the sink counts it as no new session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) step: Option<u32>,
    /// The sender's `/proc/sys/kernel/random/boot_id` (protocol version 3): a sink with the
    /// same one runs on the same kernel, so the two share one realtime clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) boot_id: Option<String>,
    /// How far its paced flows can reach (protocol version 8): the sink refuses a datagram
    /// numbered beyond it as `implausible` (`proto::reach`). `None`: unpaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reach: Option<Reach>,
    /// What its data is (protocol version 8): a sink of the other protocol refuses the Hello
    /// with a reason starting [`PROTOCOL_MISMATCH`], so the sender stops at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) proto: Option<DataProto>,
}

/// What a sender's data is, as its Hello tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DataProto {
    /// UDP datagrams.
    Udp,
    /// TCP streams of records.
    Tcp,
}

impl DataProto {
    /// How a user names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DataProto::Udp => "UDP",
            DataProto::Tcp => "TCP",
        }
    }
}

/// How a sink's refusal of a sender of the other protocol starts.
pub(crate) const PROTOCOL_MISMATCH: &str = "protocol mismatch";

/// A paced run's pace, for the sink's bound on how far its sequence numbers can reach.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reach {
    /// The most datagrams per second any one of its flows is paced at (its fastest queue's
    /// peak rate).
    pub(crate) flow_pps: f64,
    /// Time since the run's first pacer started (not the step's or the trial's).
    pub(crate) run_elapsed_ns: u64,
}

/// The sink's reply to [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Welcome {
    /// The sink's session id.
    pub(crate) sink_session: String,
    /// Time since the sink's sockets were bound.
    pub(crate) uptime_ns: u64,
}

/// One flow's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlowProgress {
    /// Flow id.
    pub(crate) flow: u32,
    /// One past the highest sequence number sent.
    pub(crate) next_seq: u64,
    /// Sends of this flow that failed so far.
    pub(crate) failed: u64,
}

/// Periodic progress report from the sender.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Progress {
    /// Per-flow progress.
    pub(crate) flows: Vec<FlowProgress>,
}

/// Keep-alive, both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Heartbeat {}

/// The sender's final progress; the sink answers with a [`Verdict`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Goodbye {
    /// Final per-flow progress.
    pub(crate) flows: Vec<FlowProgress>,
}

/// The sink's counts for one flow (or the totals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub(crate) struct FlowVerdict {
    pub(crate) rx_packets: u64,
    pub(crate) rx_bytes: u64,
    pub(crate) rx_lost: u64,
    pub(crate) rx_reordered: u64,
    pub(crate) rx_duplicates: u64,
    pub(crate) rx_invalid: u64,
    pub(crate) rx_kernel_drops: u64,
    pub(crate) rx_unconfirmed: u64,
    pub(crate) tx_failed: u64,
    /// Packets later than the sink's reorder window, counted in `rx_packets` and, before they
    /// came, in `rx_lost` (protocol version 10; absent before, and when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) rx_late: u64,
}

impl FlowVerdict {
    /// Adds `other` field by field (saturating).
    pub(crate) fn add(&mut self, other: &FlowVerdict) {
        self.rx_packets = self.rx_packets.saturating_add(other.rx_packets);
        self.rx_bytes = self.rx_bytes.saturating_add(other.rx_bytes);
        self.rx_lost = self.rx_lost.saturating_add(other.rx_lost);
        self.rx_reordered = self.rx_reordered.saturating_add(other.rx_reordered);
        self.rx_duplicates = self.rx_duplicates.saturating_add(other.rx_duplicates);
        self.rx_invalid = self.rx_invalid.saturating_add(other.rx_invalid);
        self.rx_kernel_drops = self.rx_kernel_drops.saturating_add(other.rx_kernel_drops);
        self.rx_unconfirmed = self.rx_unconfirmed.saturating_add(other.rx_unconfirmed);
        self.tx_failed = self.tx_failed.saturating_add(other.tx_failed);
        self.rx_late = self.rx_late.saturating_add(other.rx_late);
    }
}

/// The sender's clock probe (protocol version 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClockProbe {
    /// The sender's `CLOCK_REALTIME` when it sent the probe, in ns.
    pub(crate) t1_ns: u64,
}

/// The sink's answer to a [`ClockProbe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClockReply {
    /// The probe's `t1_ns`.
    pub(crate) t1_ns: u64,
    /// The sink's `CLOCK_REALTIME` when the probe arrived.
    pub(crate) t2_ns: u64,
    /// The sink's `CLOCK_REALTIME` when it answered.
    pub(crate) t3_ns: u64,
}

/// The sender's best estimate of the sink's clock, sent whenever it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClockEstimate {
    /// The sink's clock minus the sender's, in ns.
    pub(crate) offset_ns: i64,
    /// How far the true offset can be from `offset_ns`, in ns.
    pub(crate) error_bound_ns: u64,
    /// The round trip of the exchange the offset comes from, in ns.
    pub(crate) rtt_ns: u64,
}

/// What the sink knew of the sender's clock, in a [`Verdict`] (protocol version 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerdictClock {
    /// Same clock, offset corrected, or unknown (then the verdict's latency has no samples).
    pub(crate) kind: ClockKind,
    /// The sink's clock minus the sender's, in ns; `None` when unknown.
    pub(crate) offset_ns: Option<i64>,
    /// The offset's error bound, in ns; `None` when unknown.
    pub(crate) error_bound_ns: Option<u64>,
    /// The round trip of the exchange the offset comes from, if one completed.
    pub(crate) control_rtt_ns: Option<u64>,
    /// Full-header packets that gave no latency sample, for want of an estimate.
    pub(crate) latency_unknown_packets: u64,
    /// Samples whose corrected transit came out negative (the estimate's error): taken as 0.
    pub(crate) latency_clamped_packets: u64,
    /// Why the clock is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
}

/// The sink's final account of one sender.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Verdict {
    /// The sink's session id.
    pub(crate) sink_session: String,
    /// Sender name.
    pub(crate) name: String,
    /// Sender epoch.
    pub(crate) epoch: u32,
    /// Sum over all flows.
    pub(crate) totals: FlowVerdict,
    /// Per-flow counts.
    pub(crate) flows: Vec<(u32, FlowVerdict)>,
    /// Median one-way latency.
    pub(crate) latency_p50_ns: u64,
    /// 99th percentile latency.
    pub(crate) latency_p99_ns: u64,
    /// Largest latency.
    pub(crate) latency_max_ns: u64,
    /// 99.9th percentile latency (protocol version 5; absent before, and 0 without samples,
    /// like the others).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) latency_p999_ns: u64,
    /// Jitter: |D| of consecutive packets (protocol version 5; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jitter: Option<Box<VerdictJitter>>,
    /// One-way latency as figures (protocol version 7; absent before, and when unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) latency_figures: Option<Box<Figures>>,
    /// Jitter as figures (protocol version 7; absent before, and when unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) jitter_figures: Option<Box<Figures>>,
    /// The sink's size classes of this sender's packets (protocol version 2; absent before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sizes: Vec<SizeCount>,
    /// How the latency relates to the sender's clock (protocol version 3; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) clock: Option<VerdictClock>,
    /// Not every count was in when the sink answered: some of the run's sessions (UDP) or
    /// connections (TCP) were still open after the goodbye's wait, so the verdict counts what
    /// arrived so far (protocol version 9; absent before, and when every count was in).
    #[serde(default, skip_serializing_if = "is_false")]
    pub(crate) incomplete: bool,
    /// The sink's latency and jitter cells of this sender run (protocol version 10; absent
    /// before, and when the sink kept none), so the verdicts of a run's parts add up to the
    /// run's exactly instead of to the largest of their bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cells: Option<Box<VerdictCells>>,
}

/// The cells of a [`Verdict`] (protocol version 10), one per cell of the sink's latency
/// bounds (`stats::LATENCY_BOUNDS_NS`); a fixed length, so a frame cannot make it grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerdictCells {
    /// One-way latency samples per cell.
    pub(crate) latency: [u64; crate::stats::LATENCY_CELLS],
    /// Jitter (|D|) samples per cell.
    pub(crate) jitter: [u64; crate::stats::LATENCY_CELLS],
    /// The sum of the jitter samples per cell, in ns (for the mean).
    pub(crate) jitter_sum_ns: [u64; crate::stats::LATENCY_CELLS],
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A sender's jitter in a [`Verdict`] (protocol version 5): RFC 3550 section 6.4.1's |D|,
/// the difference between the transit times of consecutive packets of one session, over all
/// its sessions; quantiles as upper bounds of the sink's latency cells, like the latency's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerdictJitter {
    /// Differences counted (0: no jitter known).
    pub(crate) samples: u64,
    /// Mean |D|, rounded down.
    pub(crate) mean_ns: u64,
    /// Median.
    pub(crate) p50_ns: u64,
    /// 99th percentile.
    pub(crate) p99_ns: u64,
    /// 99.9th percentile.
    pub(crate) p999_ns: u64,
    /// Largest.
    pub(crate) max_ns: u64,
}

/// One size class of a [`Verdict`]: an exact payload length, or 0 for every other length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SizeCount {
    /// UDP payload length in bytes; 0: the lengths without a class of their own.
    pub(crate) payload: u32,
    /// Valid packets.
    pub(crate) packets: u64,
    /// Their payload bytes.
    pub(crate) bytes: u64,
}

/// Every control-channel message.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub(crate) enum Message {
    ClientHello(ClientHello),
    ServerChallenge(ServerChallenge),
    ClientAuth(ClientAuth),
    AuthOk(AuthOk),
    Refused(Refused),
    Hello(Hello),
    Welcome(Welcome),
    Progress(Progress),
    Heartbeat(Heartbeat),
    Goodbye(Goodbye),
    Verdict(Box<Verdict>),
    ClockProbe(ClockProbe),
    ClockReply(ClockReply),
    ClockEstimate(ClockEstimate),
}

/// Highest message type byte in use (types are `1..=LAST_KIND`).
pub(crate) const LAST_KIND: u8 = 14;

/// Highest message type byte a frame of protocol `version` may carry: the clock exchange
/// (types 12 to 14) is version 3.
pub(crate) fn last_kind(version: u8) -> u8 {
    if version >= 3 { LAST_KIND } else { 11 }
}

impl Message {
    /// The frame's message type byte.
    pub(crate) fn kind(&self) -> u8 {
        match self {
            Message::ClientHello(_) => 1,
            Message::ServerChallenge(_) => 2,
            Message::ClientAuth(_) => 3,
            Message::AuthOk(_) => 4,
            Message::Refused(_) => 5,
            Message::Hello(_) => 6,
            Message::Welcome(_) => 7,
            Message::Progress(_) => 8,
            Message::Heartbeat(_) => 9,
            Message::Goodbye(_) => 10,
            Message::Verdict(_) => 11,
            Message::ClockProbe(_) => 12,
            Message::ClockReply(_) => 13,
            Message::ClockEstimate(_) => 14,
        }
    }

    /// A short name for logs.
    pub(crate) fn name(&self) -> &'static str {
        kind_name(self.kind())
    }

    /// The JSON payload.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let r = match self {
            Message::ClientHello(m) => serde_json::to_vec(m),
            Message::ServerChallenge(m) => serde_json::to_vec(m),
            Message::ClientAuth(m) => serde_json::to_vec(m),
            Message::AuthOk(m) => serde_json::to_vec(m),
            Message::Refused(m) => serde_json::to_vec(m),
            Message::Hello(m) => serde_json::to_vec(m),
            Message::Welcome(m) => serde_json::to_vec(m),
            Message::Progress(m) => serde_json::to_vec(m),
            Message::Heartbeat(m) => serde_json::to_vec(m),
            Message::Goodbye(m) => serde_json::to_vec(m),
            Message::Verdict(m) => serde_json::to_vec(m),
            Message::ClockProbe(m) => serde_json::to_vec(m),
            Message::ClockReply(m) => serde_json::to_vec(m),
            Message::ClockEstimate(m) => serde_json::to_vec(m),
        };
        // Plain structs of strings and numbers always serialize (non-finite floats become null).
        r.unwrap_or_default()
    }

    /// Parses a payload of type `kind`; `None` for an unknown type.
    pub(crate) fn from_json(
        kind: u8,
        payload: &[u8],
    ) -> Option<Result<Message, serde_json::Error>> {
        fn p<'a, T: Deserialize<'a>>(
            b: &'a [u8],
            f: fn(T) -> Message,
        ) -> Result<Message, serde_json::Error> {
            serde_json::from_slice(b).map(f)
        }
        Some(match kind {
            1 => p(payload, Message::ClientHello),
            2 => p(payload, Message::ServerChallenge),
            3 => p(payload, Message::ClientAuth),
            4 => p(payload, Message::AuthOk),
            5 => p(payload, Message::Refused),
            6 => p(payload, Message::Hello),
            7 => p(payload, Message::Welcome),
            8 => p(payload, Message::Progress),
            9 => p(payload, Message::Heartbeat),
            10 => p(payload, Message::Goodbye),
            11 => p(payload, |v| Message::Verdict(Box::new(v))),
            12 => p(payload, Message::ClockProbe),
            13 => p(payload, Message::ClockReply),
            14 => p(payload, Message::ClockEstimate),
            _ => return None,
        })
    }

    /// Checks the caps and character sets; the error is one line.
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self {
            Message::AuthOk(m) => check_name("sink_session", &m.sink_session),
            Message::Refused(m) => check_reason(&m.reason),
            Message::Hello(m) => {
                check_name("name", &m.name)?;
                check_flows(m.flows.len())?;
                if let Some(id) = &m.boot_id {
                    check_boot_id(id)?;
                }
                if let Some(r) = m.reach
                    && !(r.flow_pps.is_finite() && r.flow_pps > 0.0)
                {
                    return Err(format!(
                        "reach.flow_pps {} is not a finite positive number",
                        r.flow_pps
                    ));
                }
                match m.rate_pps {
                    Some(r) if !(r.is_finite() && r >= 0.0) => {
                        Err(format!("rate_pps {r} is not a finite non-negative number"))
                    }
                    _ => Ok(()),
                }
            }
            Message::Welcome(m) => check_name("sink_session", &m.sink_session),
            Message::Progress(m) => check_flows(m.flows.len()),
            Message::Goodbye(m) => check_flows(m.flows.len()),
            Message::Verdict(m) => {
                check_name("sink_session", &m.sink_session)?;
                check_name("name", &m.name)?;
                if m.sizes.len() > MAX_SIZES {
                    return Err(format!(
                        "{} size classes listed, the cap is {MAX_SIZES}",
                        m.sizes.len()
                    ));
                }
                if let Some(c) = &m.clock {
                    check_verdict_clock(c)?;
                }
                check_flows(m.flows.len())
            }
            Message::ClockReply(m) if m.t3_ns < m.t2_ns => Err(format!(
                "clock reply answered (t3 {}) before it received (t2 {})",
                m.t3_ns, m.t2_ns
            )),
            Message::ClockEstimate(m) => check_estimate(m),
            Message::ClientHello(_)
            | Message::ServerChallenge(_)
            | Message::ClientAuth(_)
            | Message::Heartbeat(_)
            | Message::ClockProbe(_)
            | Message::ClockReply(_) => Ok(()),
        }
    }
}

/// The message name for a type byte ("message" for an unknown one).
pub(crate) fn kind_name(kind: u8) -> &'static str {
    const NAMES: [&str; LAST_KIND as usize] = [
        "ClientHello",
        "ServerChallenge",
        "ClientAuth",
        "AuthOk",
        "Refused",
        "Hello",
        "Welcome",
        "Progress",
        "Heartbeat",
        "Goodbye",
        "Verdict",
        "ClockProbe",
        "ClockReply",
        "ClockEstimate",
    ];
    NAMES
        .get(usize::from(kind).wrapping_sub(1))
        .copied()
        .unwrap_or("message")
}

/// Checks a sender name or session id: 1 to [`MAX_NAME`] bytes of `[A-Za-z0-9._:/@-]`.
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "{what} must be 1 to {MAX_NAME} bytes, got {}",
            name.len()
        ));
    }
    match name.bytes().find(|&c| !name_byte_allowed(c)) {
        Some(c) => Err(format!(
            "{what} contains byte 0x{c:02x}; allowed are [A-Za-z0-9._:/@-]"
        )),
        None => Ok(()),
    }
}

/// Whether a sender name or session id may contain byte `c`: `[A-Za-z0-9._:/@-]`.
pub(crate) fn name_byte_allowed(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"._:/@-".contains(&c)
}

fn check_reason(reason: &str) -> Result<(), String> {
    if reason.len() > MAX_REASON {
        return Err(format!(
            "reason is {} bytes, the cap is {MAX_REASON}",
            reason.len()
        ));
    }
    if reason.chars().any(char::is_control) {
        return Err("reason contains control characters".to_string());
    }
    Ok(())
}

fn check_boot_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_BOOT_ID {
        return Err(format!(
            "boot_id must be 1 to {MAX_BOOT_ID} bytes, got {}",
            id.len()
        ));
    }
    match id.bytes().find(|&c| !(c.is_ascii_hexdigit() || c == b'-')) {
        Some(c) => Err(format!(
            "boot_id contains byte 0x{c:02x}; allowed are hex digits and -"
        )),
        None => Ok(()),
    }
}

fn check_estimate(m: &ClockEstimate) -> Result<(), String> {
    if m.rtt_ns > MAX_CLOCK_RTT_NS {
        return Err(format!(
            "clock estimate round trip {} ns exceeds {MAX_CLOCK_RTT_NS} ns",
            m.rtt_ns
        ));
    }
    if m.error_bound_ns < m.rtt_ns.div_ceil(2) || m.error_bound_ns > MAX_CLOCK_BOUND_NS {
        return Err(format!(
            "clock estimate bound {} ns is not between half its round trip ({} ns) and {MAX_CLOCK_BOUND_NS} ns",
            m.error_bound_ns, m.rtt_ns
        ));
    }
    Ok(())
}

fn check_verdict_clock(c: &VerdictClock) -> Result<(), String> {
    let unknown = c.kind == ClockKind::Unknown;
    if unknown != c.offset_ns.is_none() || unknown != c.error_bound_ns.is_none() {
        return Err(format!(
            "a {} clock must {}carry an offset and its bound",
            c.kind.name(),
            if unknown { "not " } else { "" }
        ));
    }
    if unknown != c.reason.is_some() {
        return Err("a clock has a reason exactly when it is unknown".into());
    }
    c.reason.as_deref().map_or(Ok(()), check_reason)
}

fn check_flows(n: usize) -> Result<(), String> {
    if n > MAX_FLOWS {
        return Err(format!("{n} flows listed, the cap is {MAX_FLOWS}"));
    }
    Ok(())
}
