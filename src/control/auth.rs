//! The shared secret and the HMAC-SHA256 mutual challenge–response handshake.
//!
//! The client sends `ClientHello{nonce_c}`; the server answers `ServerChallenge{nonce_s,
//! mac_s = HMAC(secret, "ringblast-sink\0" || version || auth || nonce_c || nonce_s)}`; the
//! client checks mac_s in constant time and answers `ClientAuth{mac_c = HMAC(secret,
//! "ringblast-send\0" || version || auth || nonce_s || nonce_c)}`; the server checks it in
//! constant time and sends `AuthOk` or `Refused`. `version` is the ClientHello's protocol
//! version byte and `auth` its credentials flag (1), so a relay that rewrites either fails the
//! handshake instead of downgrading it. Both nonces are 32 fresh random bytes per connection,
//! so a recorded handshake replayed later fails. Without a secret on both sides the same
//! exchange runs with no MACs (insecure mode); a secret on one side only is refused on both.
//! Secrets and MACs never appear in messages.
//!
//! A successful handshake yields the connection's [`Channel`]: with a secret, keys derived from
//! it and both nonces seal every later frame ([`super::seal`]), so a secret needs protocol
//! version [`SECRET_VERSION`] on both sides (sealed frames, and the version under the MACs) and
//! an older peer is refused with one line naming that version.
//!
//! A secret file must hold at least [`MIN_SECRET`] bytes (after its trailing whitespace), and
//! one that its group or others can read loads with one warning line.

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use thiserror::Error;

use zeroize::Zeroizing;

use super::channel::Channel;
use super::frame::{
    FrameError, VERSION, read_frame, read_frame_versioned, write_frame, write_frame_as,
};
use super::msg::{AuthOk, ClientAuth, ClientHello, Message, Refused, ServerChallenge};
use super::seal::{self, ChannelKeys, End};
use crate::error::Error;

const SINK_LABEL: &[u8] = b"ringblast-sink\0";
const SEND_LABEL: &[u8] = b"ringblast-send\0";
const WRONG_SECRET: &str = "wrong secret (check --secret-file on both sides)";
const SINK_NEEDS_SECRET: &str =
    "this sink requires --secret-file but the sender sent no credentials";
const SINK_HAS_NO_SECRET: &str = "this sink has no --secret-file but the sender sent credentials (give both sides the same --secret-file, or neither)";
/// How a reason in a `Refused` frame starts when the sink serves all the connections it can.
pub(crate) const BUSY: &str = "busy: ";
/// The one way this project tells a user to make a secret file.
const MAKE_SECRET: &str = "umask 077; head -c32 /dev/urandom | base64 >";

/// The oldest protocol version a secret works with: version 4 seals frames, version 6 puts the
/// version and the credentials flag under the handshake's MACs.
pub(crate) const SECRET_VERSION: u8 = 6;
/// The fewest bytes a secret file may hold (after its trailing whitespace).
pub(crate) const MIN_SECRET: usize = 16;

/// A shared secret; its `Debug` never shows the bytes, and they are wiped on drop.
#[derive(Clone)]
pub(crate) struct Secret(Zeroizing<Vec<u8>>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// A secret from raw bytes; `None` if empty.
    #[cfg(test)]
    pub(crate) fn new(bytes: impl Into<Vec<u8>>) -> Option<Secret> {
        let b = bytes.into();
        (!b.is_empty()).then_some(Secret(Zeroizing::new(b)))
    }

    /// Reads a secret file, dropping trailing whitespace (such as the newline `base64` adds);
    /// one the group or others can read loads with a warning line on stderr.
    pub(crate) fn from_file(path: impl AsRef<Path>) -> Result<Secret, Error> {
        let (secret, warning) = Secret::read(path.as_ref())?;
        if let Some(w) = warning {
            crate::output::error_line(format_args!("{w}"));
        }
        Ok(secret)
    }

    /// The secret in `path` and the warning its permissions call for, if any. Refuses a file
    /// that cannot be read, or holds fewer than [`MIN_SECRET`] bytes.
    pub(crate) fn read(path: &Path) -> Result<(Secret, Option<String>), Error> {
        let hint = format!("make one with `{MAKE_SECRET} {}`", path.display());
        let cannot = |e: std::io::Error| {
            Error::Usage(format!(
                "cannot read secret file {}: {e}; {hint}",
                path.display()
            ))
        };
        let mut file = std::fs::File::open(path).map_err(cannot)?;
        let mode = file.metadata().map_err(cannot)?.permissions().mode();
        let mut bytes = Zeroizing::new(Vec::new());
        file.read_to_end(&mut bytes).map_err(cannot)?;
        let keep = bytes.trim_ascii_end().len();
        bytes.truncate(keep);
        if bytes.is_empty() {
            return Err(Error::Usage(format!(
                "secret file {} is empty; {hint}",
                path.display()
            )));
        }
        if bytes.len() < MIN_SECRET {
            return Err(Error::Usage(format!(
                "secret file {} holds {} bytes, fewer than the {MIN_SECRET} a secret needs; {hint} and give both sides the new file",
                path.display(),
                bytes.len()
            )));
        }
        let warning = (mode & 0o044 != 0).then(|| {
            format!(
                "warning: secret file {} can be read by its group or others (mode {:04o}); make it private with `chmod 600 {}` (Kubernetes: defaultMode: 0400 on the secret's volume)",
                path.display(),
                mode & 0o7777,
                path.display()
            )
        });
        Ok((Secret(bytes), warning))
    }

    /// The key every data datagram's proof is derived from (`proto::proof`).
    pub(crate) fn data_key(&self) -> crate::proto::proof::DataKey {
        crate::proto::proof::DataKey::from_secret(&self.0)
    }

    /// `end`'s keys for the connection with these nonces.
    fn channel_keys(&self, nonce_c: &[u8; 32], nonce_s: &[u8; 32], end: End) -> ChannelKeys {
        seal::derive(&self.0, nonce_c, nonce_s, end)
    }

    fn mac(&self, label: &[u8], hello: Bound, a: &[u8; 32], b: &[u8; 32]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this never fails.
        let mut m =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length");
        m.update(label);
        m.update(&[hello.version, u8::from(hello.auth)]);
        m.update(a);
        m.update(b);
        m
    }

    fn tag(&self, label: &[u8], hello: Bound, a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
        self.mac(label, hello, a, b).finalize().into_bytes().into()
    }

    /// Constant-time check of `tag`.
    fn verify(
        &self,
        label: &[u8],
        hello: Bound,
        a: &[u8; 32],
        b: &[u8; 32],
        tag: &[u8; 32],
    ) -> bool {
        self.mac(label, hello, a, b).verify_slice(tag).is_ok()
    }
}

/// What of the ClientHello both MACs cover besides the nonces: its version byte and its
/// credentials flag.
#[derive(Clone, Copy)]
struct Bound {
    version: u8,
    auth: bool,
}

/// Why a handshake failed. Messages are one line and never contain secrets or MACs.
#[derive(Debug, Error)]
pub(crate) enum AuthError {
    /// The peer proved a different secret (or replayed an old handshake).
    #[error("{WRONG_SECRET}")]
    WrongSecret,
    /// Server side: the sender has no secret but this sink requires one.
    #[error("sent no credentials but this sink requires --secret-file")]
    MissingCredentials,
    /// Server side: the sender has a secret but this sink has none.
    #[error(
        "sent credentials but this sink has no --secret-file (give both sides the same --secret-file, or neither)"
    )]
    UnexpectedCredentials,
    /// Client side: the sink proved a secret while this sender has none, or the reverse.
    #[error("{0}")]
    Mismatch(String),
    /// The peer sent `Refused`.
    #[error("{0}")]
    Refused(String),
    /// Client side: the sink refused the connection because it serves all it can.
    #[error("the sink is busy: {0}")]
    Busy(String),
    /// The peer sent a message out of order.
    #[error("protocol error: expected {expected}, got {got}")]
    Unexpected {
        /// What the handshake needed.
        expected: &'static str,
        /// What arrived.
        got: &'static str,
    },
    /// The peer speaks a protocol version too old for authenticated frames.
    #[error(
        "the {peer} speaks control protocol version {version}, but --secret-file needs version {SECRET_VERSION} on both sides (every frame and the version authenticated): upgrade the {peer}"
    )]
    TooOld {
        /// "sender" or "sink".
        peer: &'static str,
        /// The version it speaks.
        version: u8,
    },
    /// The peer speaks a protocol version newer than this build's.
    #[error(
        "the sender speaks control protocol version {0}, this sink versions {OLDEST} to {VERSION}: upgrade the sink",
        OLDEST = super::frame::OLDEST_VERSION
    )]
    TooNew(u8),
    /// Client side: the sink closed the connection instead of answering the ClientHello.
    #[error(
        "the sink closed the connection instead of answering: it serves no control channel (a sink off loopback without --secret-file or --insecure-control; give both sides the same --secret-file, or this sender --control off) or is older than control protocol version {VERSION} (upgrade it)"
    )]
    ClosedAtHello,
    /// The handshake took longer than allowed.
    #[error("handshake timed out")]
    Timeout,
    /// Framing or I/O failed.
    #[error("{0}")]
    Frame(#[from] FrameError),
}

impl AuthError {
    /// Whether this is a credentials problem (as opposed to a transport or protocol one).
    pub(crate) fn is_auth(&self) -> bool {
        matches!(
            self,
            AuthError::WrongSecret
                | AuthError::MissingCredentials
                | AuthError::UnexpectedCredentials
                | AuthError::Mismatch(_)
                | AuthError::Refused(_)
                | AuthError::TooOld { .. }
        )
    }
}

impl From<AuthError> for Error {
    fn from(e: AuthError) -> Error {
        Error::Unsupported(format!("control handshake failed: {e}"))
    }
}

impl From<std::io::Error> for AuthError {
    fn from(e: std::io::Error) -> AuthError {
        AuthError::Frame(FrameError::Io(e))
    }
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    rand::rng().fill(&mut n);
    n
}

fn refuse<S: Write + ?Sized>(s: &mut S, reason: &str) {
    refuse_as(s, super::frame::VERSION, reason);
}

fn refuse_as<S: Write + ?Sized>(s: &mut S, version: u8, reason: &str) {
    // Best effort: the connection is being dropped anyway.
    let _ = write_frame_as(
        s,
        &Message::Refused(Refused {
            reason: reason.to_string(),
        }),
        version,
    );
}

/// Runs the client side; returns the sink's session id and the connection's channel.
///
/// The caller sets the stream's per-read timeouts; `io_timeout` additionally bounds the whole
/// exchange (checked after each step).
pub(crate) fn client_handshake<S: Read + Write + ?Sized>(
    stream: &mut S,
    secret: Option<&Secret>,
    io_timeout: Duration,
) -> Result<(String, Channel), AuthError> {
    let deadline = Instant::now() + io_timeout;
    let late = || Instant::now() > deadline;
    let nonce_c = nonce();
    write_frame(
        stream,
        &Message::ClientHello(ClientHello {
            nonce: nonce_c,
            auth: secret.is_some(),
        }),
    )?;
    let (challenge, version) = match read_frame_versioned(stream) {
        Ok((Message::ServerChallenge(c), v)) => (c, v),
        Ok((Message::Refused(r), _)) => {
            return Err(match r.reason.strip_prefix(BUSY) {
                Some(why) => AuthError::Busy(why.to_string()),
                None => AuthError::Refused(r.reason),
            });
        }
        Err(FrameError::Closed) => return Err(AuthError::ClosedAtHello),
        Err(e) => return Err(e.into()),
        Ok((m, _)) => {
            return Err(AuthError::Unexpected {
                expected: "ServerChallenge",
                got: m.name(),
            });
        }
    };
    if late() {
        return Err(AuthError::Timeout);
    }
    if secret.is_some() && challenge.auth && version < SECRET_VERSION {
        let e = AuthError::TooOld {
            peer: "sink",
            version,
        };
        refuse(stream, &e.to_string());
        return Err(e);
    }
    // What this client sent, not what the sink says it read: a rewritten hello fails here.
    let sent = Bound {
        version: VERSION,
        auth: secret.is_some(),
    };
    let mac_c = match (secret, challenge.auth, challenge.mac) {
        (Some(s), true, Some(mac_s)) => {
            if !s.verify(SINK_LABEL, sent, &nonce_c, &challenge.nonce, &mac_s) {
                refuse(stream, WRONG_SECRET);
                return Err(AuthError::WrongSecret);
            }
            Some((
                s.tag(SEND_LABEL, sent, &challenge.nonce, &nonce_c),
                s.channel_keys(&nonce_c, &challenge.nonce, End::Sender),
            ))
        }
        (None, false, None) => None,
        (Some(_), _, _) => {
            refuse(stream, SINK_HAS_NO_SECRET);
            return Err(AuthError::Mismatch(
                "the sink has no --secret-file but this sender has one (give both sides the same --secret-file, or neither)"
                    .into(),
            ));
        }
        (None, _, _) => {
            refuse(stream, SINK_NEEDS_SECRET);
            return Err(AuthError::Mismatch(
                "the sink requires a secret but this sender has no --secret-file".into(),
            ));
        }
    };
    let (mac_c, keys) = mac_c.unzip();
    write_frame(stream, &Message::ClientAuth(ClientAuth { mac: mac_c }))?;
    let ok = match read_frame(stream)? {
        Message::AuthOk(ok) => ok,
        Message::Refused(r) => return Err(AuthError::Refused(r.reason)),
        m => {
            return Err(AuthError::Unexpected {
                expected: "AuthOk",
                got: m.name(),
            });
        }
    };
    if late() {
        return Err(AuthError::Timeout);
    }
    Ok((ok.sink_session, Channel::new(VERSION, keys)))
}

/// Runs the server side; returns the connection's channel, which answers in the protocol
/// version the client speaks. The caller bounds it with the stream's read timeouts.
pub(crate) fn server_handshake<S: Read + Write + ?Sized>(
    stream: &mut S,
    secret: Option<&Secret>,
    sink_session: &str,
) -> Result<Channel, AuthError> {
    let (hello, version) = match read_frame_versioned(stream) {
        Ok((Message::ClientHello(h), v)) => (h, v),
        Err(FrameError::UnknownVersion(v)) if v > VERSION => {
            let e = AuthError::TooNew(v);
            refuse(stream, &e.to_string());
            return Err(e);
        }
        Err(e) => return Err(e.into()),
        Ok((m, _)) => {
            return Err(AuthError::Unexpected {
                expected: "ClientHello",
                got: m.name(),
            });
        }
    };
    match (secret.is_some(), hello.auth) {
        (true, false) => {
            refuse_as(stream, version, SINK_NEEDS_SECRET);
            return Err(AuthError::MissingCredentials);
        }
        (false, true) => {
            refuse_as(stream, version, SINK_HAS_NO_SECRET);
            return Err(AuthError::UnexpectedCredentials);
        }
        (true, true) if version < SECRET_VERSION => {
            let e = AuthError::TooOld {
                peer: "sender",
                version,
            };
            refuse_as(stream, version, &e.to_string());
            return Err(e);
        }
        _ => {}
    }
    let nonce_s = nonce();
    let read = Bound {
        version,
        auth: hello.auth,
    };
    let mac_s = secret.map(|s| s.tag(SINK_LABEL, read, &hello.nonce, &nonce_s));
    write_frame_as(
        stream,
        &Message::ServerChallenge(ServerChallenge {
            nonce: nonce_s,
            auth: secret.is_some(),
            mac: mac_s,
        }),
        version,
    )?;
    let auth = match read_frame(stream)? {
        Message::ClientAuth(a) => a,
        // The client found our MAC wrong: a different secret.
        Message::Refused(r) if r.reason == WRONG_SECRET => return Err(AuthError::WrongSecret),
        Message::Refused(r) => return Err(AuthError::Refused(r.reason)),
        m => {
            return Err(AuthError::Unexpected {
                expected: "ClientAuth",
                got: m.name(),
            });
        }
    };
    let good = match (secret, auth.mac) {
        (Some(s), Some(mac_c)) => s.verify(SEND_LABEL, read, &nonce_s, &hello.nonce, &mac_c),
        (None, None) => true,
        _ => false,
    };
    if !good {
        refuse_as(stream, version, WRONG_SECRET);
        return Err(AuthError::WrongSecret);
    }
    write_frame_as(
        stream,
        &Message::AuthOk(AuthOk {
            sink_session: sink_session.to_string(),
        }),
        version,
    )?;
    let keys = secret.map(|s| s.channel_keys(&hello.nonce, &nonce_s, End::Sink));
    Ok(Channel::new(version, keys))
}
