//! The sender's side of the control channel, on its own thread.
//!
//! [`ControlClient::start`] returns at once; the thread connects (TCP_NODELAY, keepalive),
//! authenticates, sends a fresh Hello, then Progress every `progress_every` and a Heartbeat
//! whenever nothing else went out for `heartbeat`. Right after each connection it runs
//! [`clock::BURST`](super::clock::BURST) clock exchanges back to back, then one per
//! `progress_every`, and tells the sink its best offset estimate whenever that changes (at most
//! once per exchange). Three heartbeat periods without a frame from
//! the sink mean the connection is dead; it is rebuilt with capped exponential backoff. Each
//! state change is reported once through the event callback. A sink that is busy is retried
//! with the same backoff as an unreachable one. [`ControlClient::finish`] sends
//! the Goodbye (connecting once more if needed) and returns the sink's Verdict within `wait`.
//! A search runs many epochs on one connection: [`ControlClient::end_epoch`] gets one epoch's
//! verdict and keeps the connection, and [`ControlClient::begin_epoch`] says the next Hello on
//! it (a sink that closes after a verdict gets a fresh connection instead).

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::auth::Secret;
use super::clock::Estimate;
use super::msg::{Goodbye, Hello, Progress, Verdict};

mod worker;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest the thread sleeps in a socket read, so a `finish` is noticed promptly.
const TICK: Duration = Duration::from_millis(100);

/// How the sender reaches its sink.
#[derive(Debug, Clone)]
pub(crate) struct ClientConfig {
    /// The sink's control address.
    pub(crate) addr: SocketAddr,
    /// Shared secret, if any.
    pub(crate) secret: Option<Arc<Secret>>,
    /// TCP connect timeout (default 2 s).
    pub(crate) connect_timeout: Duration,
    /// Bound on the handshake and on each write (default 5 s).
    pub(crate) io_timeout: Duration,
    /// Heartbeat period (default 1 s); 3 periods of silence mean the sink is gone.
    pub(crate) heartbeat: Duration,
    /// Progress period (default 1 s).
    pub(crate) progress_every: Duration,
    /// Reconnect backoff cap (default 5 s).
    pub(crate) backoff_max: Duration,
}

impl ClientConfig {
    /// The defaults for `addr`, without a secret.
    pub(crate) fn new(addr: SocketAddr) -> Self {
        ClientConfig {
            addr,
            secret: None,
            connect_timeout: Duration::from_secs(2),
            io_timeout: Duration::from_secs(5),
            heartbeat: Duration::from_secs(1),
            progress_every: Duration::from_secs(1),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// What the sender's run exposes to the control thread.
pub(crate) trait SenderView: Send + Sync + 'static {
    /// The Hello to send, built fresh at each (re)connect.
    fn hello(&self, reconnect: u32) -> Hello;
    /// Current per-flow progress.
    fn progress(&self) -> Progress;
}

/// A change of the connection's state, reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientEvent {
    /// Handshake and Hello/Welcome done.
    Connected {
        /// The sink.
        addr: SocketAddr,
        /// The sink's session id.
        sink_session: String,
        /// Successful connections before this one.
        reconnect: u32,
    },
    /// The sink cannot be reached; retries continue.
    Unreachable {
        /// The sink.
        addr: SocketAddr,
        /// Why.
        reason: String,
        /// Delay before the next attempt.
        retry_in: Duration,
    },
    /// A live connection died; reconnecting.
    Lost {
        /// Why.
        reason: String,
    },
    /// The sink refused our credentials (wrong or missing secret, or a version it cannot
    /// serve with one).
    Refused {
        /// Why.
        reason: String,
    },
    /// The sink serves all the connections it can; retries continue with the usual backoff.
    Busy {
        /// The sink.
        addr: SocketAddr,
        /// Why, starting "the sink is busy: ".
        reason: String,
        /// Delay before the next attempt.
        retry_in: Duration,
    },
    /// A frame from the sink failed its seal or was cut short, so the connection was dropped
    /// (reported every time, unlike the state changes).
    Breach {
        /// The integrity label ([`super::frame::FrameError::integrity_label`]).
        reason: &'static str,
    },
    /// The clock estimate changed (and was sent to the sink).
    Clock {
        /// The best estimate now.
        estimate: Estimate,
        /// The smallest round trip of any clock exchange so far, in ns.
        min_rtt_ns: u64,
    },
}

/// Why `finish` has no verdict; `Display` is one line for the report's `sink_error` field.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum NoVerdict {
    /// No connection ever succeeded.
    #[error("never connected to the sink: {0}")]
    NeverConnected(String),
    /// The sink refused the connection.
    #[error("{0}")]
    Refused(String),
    /// The sink was busy at the last attempt.
    #[error("{0}")]
    Busy(String),
    /// The connection was lost and could not be rebuilt in time.
    #[error("lost the sink: {0}")]
    Lost(String),
    /// Connected, but no verdict arrived in time.
    #[error("timed out waiting for the sink's verdict")]
    Timeout,
}

pub(super) enum Cmd {
    Finish {
        goodbye: Goodbye,
        deadline: Instant,
        reply: SyncSender<Result<Verdict, NoVerdict>>,
    },
    /// Like `Finish`, but the connection stays for the next epoch.
    EndEpoch {
        goodbye: Goodbye,
        deadline: Instant,
        reply: SyncSender<Result<Verdict, NoVerdict>>,
    },
    /// Says the view's Hello for its next epoch, on the same connection if the sink keeps it.
    BeginEpoch {
        deadline: Instant,
        reply: SyncSender<Result<(), NoVerdict>>,
    },
}

#[derive(Debug, Clone)]
pub(super) enum Fail {
    Unreachable(String),
    Refused(String),
    Busy(String),
    Lost(String),
}

#[derive(Default)]
pub(super) struct Status {
    pub(super) ever_connected: bool,
    pub(super) last: Option<Fail>,
}

impl Status {
    pub(super) fn no_verdict(&self) -> NoVerdict {
        match (&self.last, self.ever_connected) {
            (Some(Fail::Refused(r)), _) => NoVerdict::Refused(r.clone()),
            (Some(Fail::Busy(r)), _) => NoVerdict::Busy(r.clone()),
            (Some(Fail::Unreachable(r)), false) => NoVerdict::NeverConnected(r.clone()),
            (None, false) => {
                NoVerdict::NeverConnected("no connection attempt finished in time".into())
            }
            (Some(Fail::Unreachable(r) | Fail::Lost(r)), true) => NoVerdict::Lost(r.clone()),
            (Some(Fail::Lost(r)), false) => NoVerdict::Lost(r.clone()),
            (None, true) => NoVerdict::Timeout,
        }
    }
}

/// Handle to the sender's control thread.
pub(crate) struct ControlClient {
    tx: Sender<Cmd>,
    /// Wakes the thread from its wait on the socket when a command is sent.
    wake: Option<UnixStream>,
    status: Arc<Mutex<Status>>,
    stop: Arc<AtomicBool>,
}

impl ControlClient {
    /// Spawns the control thread and returns at once.
    pub(crate) fn start(
        config: ClientConfig,
        view: Arc<dyn SenderView>,
        on_event: Box<dyn Fn(ClientEvent) + Send>,
    ) -> ControlClient {
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(Mutex::new(Status::default()));
        let stop = Arc::new(AtomicBool::new(false));
        // Without the pair (no descriptors left) a command waits for the thread's next tick.
        let (wake, wakeup) = UnixStream::pair()
            .and_then(|(a, b)| {
                a.set_nonblocking(true)?;
                b.set_nonblocking(true)?;
                Ok((a, b))
            })
            .ok()
            .unzip();
        let mut w = worker::Worker::new(
            config,
            view,
            on_event,
            rx,
            wakeup,
            status.clone(),
            stop.clone(),
        );
        thread::Builder::new()
            .name("ctl-client".into())
            .spawn(move || w.run())
            .expect("spawning the control thread");
        ControlClient {
            tx,
            wake,
            status,
            stop,
        }
    }

    /// Sends the Goodbye and waits for the Verdict; returns within `wait` in every case.
    pub(crate) fn finish(self, goodbye: Goodbye, wait: Duration) -> Result<Verdict, NoVerdict> {
        self.ask(wait, |goodbye_deadline, reply| Cmd::Finish {
            goodbye,
            deadline: goodbye_deadline,
            reply,
        })
    }

    /// Ends the view's current epoch with `goodbye` and returns the sink's verdict for it,
    /// within `wait`; the connection stays for [`begin_epoch`](Self::begin_epoch).
    pub(crate) fn end_epoch(&self, goodbye: Goodbye, wait: Duration) -> Result<Verdict, NoVerdict> {
        self.ask(wait, |deadline, reply| Cmd::EndEpoch {
            goodbye,
            deadline,
            reply,
        })
    }

    /// Says the view's Hello for its next epoch and waits, within `wait`, for the sink's
    /// Welcome: on the same connection, or on a fresh one where the sink closed it.
    pub(crate) fn begin_epoch(&self, wait: Duration) -> Result<(), NoVerdict> {
        self.ask(wait, |deadline, reply| Cmd::BeginEpoch { deadline, reply })
    }

    /// Sends the command `make` builds and waits for its answer; within `wait` in every case.
    fn ask<T>(
        &self,
        wait: Duration,
        make: impl FnOnce(Instant, SyncSender<Result<T, NoVerdict>>) -> Cmd,
    ) -> Result<T, NoVerdict> {
        let deadline = Instant::now() + wait;
        let margin = (wait / 5).min(Duration::from_millis(200));
        let (reply, got) = mpsc::sync_channel(1);
        if self.tx.send(make(deadline - margin, reply)).is_ok()
            && self.wake.as_ref().is_none_or(|w| {
                // A full pipe already holds a wake-up: the byte is not needed.
                let _ = (&*w).write(&[1]);
                true
            })
            && let Ok(r) = got.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            return r;
        }
        self.stop.store(true, Ordering::Relaxed);
        Err(self
            .status
            .lock()
            .map(|s| s.no_verdict())
            .unwrap_or(NoVerdict::Timeout))
    }
}

impl Drop for ControlClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
