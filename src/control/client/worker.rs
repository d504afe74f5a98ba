//! The sender's control thread: connect, authenticate, run the session, reconnect, finish.
//!
//! All state changes are reported through the event callback exactly once per change; the
//! shared [`Status`] lets `finish` classify a missing verdict even when the thread is busy.

use std::io::Read;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};

use super::{
    ClientConfig, ClientEvent, Cmd, FIRST_BACKOFF, Fail, NoVerdict, SenderView, Status, TICK,
};
use crate::clock;
use crate::control::DeadlineStream;
use crate::control::auth::{AuthError, client_handshake};
use crate::control::channel::Channel;
use crate::control::clock::{BURST, Estimator, Sample};
use crate::control::frame::FrameError;
use crate::control::msg::{
    ClockEstimate, ClockProbe, ClockReply, Goodbye, Heartbeat, Message, Verdict,
};

/// A clock probe unanswered for this long is given up (the next one goes out on schedule).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

struct Conn {
    stream: TcpStream,
    channel: Channel,
}

/// The clock exchanges of one connection.
struct Probing {
    /// The probe in flight: its `t1` and when it went out.
    pending: Option<(u64, Instant)>,
    /// Exchanges of the opening burst still to run.
    burst_left: u32,
    /// When the next probe is due after the burst.
    next: Instant,
    /// When the estimate was last sent on this connection (`None`: not yet).
    sent: Option<Instant>,
}

/// How a live connection's session ended.
enum Ended {
    /// `finish` was served, or the client is stopping.
    Done,
    /// An epoch ended with `end_epoch`; the connection waits for the next Hello.
    Epoch,
    /// The connection died, for this reason.
    Lost(String),
}

enum Goodbyed {
    Verdict(Box<Verdict>),
    Timeout,
    Lost(String),
}

#[derive(PartialEq)]
enum Shown {
    Connected,
    Unreachable,
    Refused,
    Busy,
    Lost,
}

pub(super) struct Worker {
    cfg: ClientConfig,
    view: Arc<dyn SenderView>,
    on_event: Box<dyn Fn(ClientEvent) + Send>,
    rx: Receiver<Cmd>,
    status: Arc<Mutex<Status>>,
    stop: Arc<AtomicBool>,
    connections: u32,
    shown: Option<Shown>,
    /// The sink's clock offset, over every connection of this client.
    clock: Estimator,
    /// Readable when a command was sent (non-blocking; one byte per command).
    wakeup: Option<UnixStream>,
}

impl Worker {
    pub(super) fn new(
        cfg: ClientConfig,
        view: Arc<dyn SenderView>,
        on_event: Box<dyn Fn(ClientEvent) + Send>,
        rx: Receiver<Cmd>,
        wakeup: Option<UnixStream>,
        status: Arc<Mutex<Status>>,
        stop: Arc<AtomicBool>,
    ) -> Worker {
        let (connections, shown) = (0, None);
        Worker {
            cfg,
            view,
            on_event,
            rx,
            status,
            stop,
            connections,
            shown,
            clock: Estimator::default(),
            wakeup,
        }
    }

    pub(super) fn run(&mut self) {
        let mut backoff = FIRST_BACKOFF;
        let mut live: Option<Conn> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let conn = match live.take() {
                Some(conn) => Ok(conn),
                None => self.connect(None),
            };
            let wait = match conn {
                Ok(mut conn) => {
                    backoff = FIRST_BACKOFF;
                    match self.session(&mut conn) {
                        Ended::Lost(reason) => {
                            self.failed(Fail::Lost(reason), FIRST_BACKOFF);
                            FIRST_BACKOFF
                        }
                        Ended::Done => return,
                        Ended::Epoch => match self.between(Some(conn)) {
                            Some(next) => {
                                live = Some(next);
                                continue;
                            }
                            None => return,
                        },
                    }
                }
                Err(Fail::Refused(r)) => {
                    self.failed(Fail::Refused(r), self.cfg.backoff_max);
                    self.cfg.backoff_max
                }
                Err(f) => {
                    let wait = backoff;
                    backoff = (backoff * 2).min(self.cfg.backoff_max);
                    self.failed(f, wait);
                    wait
                }
            };
            match self.rx.recv_timeout(wait) {
                Ok(Cmd::Finish {
                    goodbye,
                    deadline,
                    reply,
                }) => {
                    let _ = reply.send(self.finish(None, goodbye, deadline));
                    return;
                }
                Ok(Cmd::EndEpoch {
                    goodbye,
                    deadline,
                    reply,
                }) => {
                    let _ = reply.send(self.finish(None, goodbye, deadline));
                    match self.between(None) {
                        Some(next) => live = Some(next),
                        None => return,
                    }
                }
                Ok(Cmd::BeginEpoch { deadline, reply }) => match self.begin(None, deadline) {
                    Ok(next) => {
                        let _ = reply.send(Ok(()));
                        live = Some(next);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                },
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Between two epochs: keeps `conn` (if any) alive with heartbeats until the next Hello is
    /// asked for; the connection that carries it, or `None` once the client is done.
    fn between(&mut self, mut conn: Option<Conn>) -> Option<Conn> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            match self.rx.recv_timeout(self.cfg.heartbeat) {
                Ok(Cmd::BeginEpoch { deadline, reply }) => {
                    match self.begin(conn.take(), deadline) {
                        Ok(next) => {
                            let _ = reply.send(Ok(()));
                            return Some(next);
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e));
                        }
                    }
                }
                Ok(Cmd::Finish {
                    goodbye,
                    deadline,
                    reply,
                }) => {
                    let _ = reply.send(self.finish(conn.as_mut(), goodbye, deadline));
                    return None;
                }
                Ok(Cmd::EndEpoch { reply, .. }) => {
                    // The epoch already ended: there is no second verdict for it.
                    let _ = reply.send(Err(NoVerdict::Timeout));
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(c) = &mut conn
                        && c.channel
                            .send(&mut &c.stream, &Message::Heartbeat(Heartbeat {}))
                            .is_err()
                    {
                        conn = None;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Says the view's Hello for a new epoch: on `conn` when the sink kept it, else on a fresh
    /// connection, before `deadline`.
    fn begin(&mut self, conn: Option<Conn>, deadline: Instant) -> Result<Conn, NoVerdict> {
        if let Some(mut c) = conn
            && self.rehello(&mut c, deadline).is_ok()
        {
            return Ok(c);
        }
        let mut backoff = FIRST_BACKOFF;
        while Instant::now() < deadline {
            match self.connect(Some(deadline)) {
                Ok(c) => return Ok(c),
                Err(Fail::Refused(r)) => {
                    self.failed(Fail::Refused(r.clone()), Duration::ZERO);
                    return Err(NoVerdict::Refused(r));
                }
                Err(f) => self.failed(f, backoff),
            }
            thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
            backoff = (backoff * 2).min(self.cfg.backoff_max);
        }
        Err(self
            .status
            .lock()
            .map(|s| s.no_verdict())
            .unwrap_or(NoVerdict::Timeout))
    }

    /// Sends a fresh Hello on a live connection and waits for the Welcome until `deadline`.
    fn rehello(&self, conn: &mut Conn, deadline: Instant) -> Result<(), String> {
        let mut hello = self.view.hello(self.connections.saturating_sub(1));
        hello.boot_id = clock::boot_id().map(String::from);
        conn.channel
            .send(&mut &conn.stream, &Message::Hello(hello))
            .map_err(|e| e.to_string())?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("no Welcome in time".into());
            }
            conn.stream
                .set_read_timeout(Some(left.min(TICK)))
                .map_err(|e| e.to_string())?;
            match conn.channel.poll(&mut &conn.stream) {
                Ok(Some(Message::Welcome(_))) => return Ok(()),
                Ok(None | Some(Message::Heartbeat(_) | Message::ClockReply(_))) => {}
                Ok(Some(m)) => return Err(format!("expected Welcome, got {}", m.name())),
                Err(e) => {
                    self.check_integrity(&e);
                    return Err(e.to_string());
                }
            }
        }
    }

    fn emit(&self, e: ClientEvent) {
        (self.on_event)(e);
    }

    /// Reports a frame error that is an integrity failure (it ends the connection either way).
    fn check_integrity(&self, e: &FrameError) {
        if let Some(reason) = e.integrity_label() {
            self.emit(ClientEvent::Breach { reason });
        }
    }

    /// Records a failure and reports it if it is a change of state.
    fn failed(&mut self, f: Fail, retry_in: Duration) {
        let (shown, event) = match &f {
            Fail::Lost(reason) => (
                Shown::Lost,
                ClientEvent::Lost {
                    reason: reason.clone(),
                },
            ),
            Fail::Refused(reason) => (
                Shown::Refused,
                ClientEvent::Refused {
                    reason: reason.clone(),
                },
            ),
            Fail::Busy(reason) => (
                Shown::Busy,
                ClientEvent::Busy {
                    addr: self.cfg.addr,
                    reason: reason.clone(),
                    retry_in,
                },
            ),
            Fail::Unreachable(reason) => (
                Shown::Unreachable,
                ClientEvent::Unreachable {
                    addr: self.cfg.addr,
                    reason: reason.clone(),
                    retry_in,
                },
            ),
        };
        if self.shown.as_ref() != Some(&shown) {
            self.shown = Some(shown);
            self.emit(event);
        }
        if let Ok(mut s) = self.status.lock() {
            s.last = Some(f);
        }
    }

    /// Connects, authenticates and exchanges Hello/Welcome, all before `deadline` if given.
    fn connect(&mut self, deadline: Option<Instant>) -> Result<Conn, Fail> {
        let addr = self.cfg.addr;
        let cap = |d: Duration| match deadline {
            Some(dl) => d
                .min(dl.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
            None => d,
        };
        let unreachable =
            |e: std::io::Error| Fail::Unreachable(format!("cannot connect to sink at {addr}: {e}"));
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(unreachable)?;
        let ka = TcpKeepalive::new()
            .with_time(Duration::from_secs(10))
            .with_interval(Duration::from_secs(5))
            .with_retries(3);
        sock.set_tcp_keepalive(&ka).map_err(unreachable)?;
        sock.set_tcp_nodelay(true).map_err(unreachable)?;
        sock.connect_timeout(&SockAddr::from(addr), cap(self.cfg.connect_timeout))
            .map_err(unreachable)?;
        let stream = TcpStream::from(sock);
        let io = cap(self.cfg.io_timeout);
        stream.set_write_timeout(Some(io)).map_err(unreachable)?;
        let mut ds = DeadlineStream::new(&stream, Instant::now() + io);
        let secret = self.cfg.secret.as_deref();
        let (_, mut channel) = client_handshake(&mut ds, secret, io).map_err(|e| match e {
            AuthError::Busy(_) => Fail::Busy(e.to_string()),
            e if e.is_auth() => Fail::Refused(format!("sink at {addr} refused: {e}")),
            e => Fail::Unreachable(format!("handshake with sink at {addr} failed: {e}")),
        })?;
        let lost = |e: String| Fail::Unreachable(format!("sink at {addr}: {e}"));
        let mut hello = self.view.hello(self.connections);
        hello.boot_id = clock::boot_id().map(String::from);
        channel
            .send(&mut ds, &Message::Hello(hello))
            .map_err(|e| lost(e.to_string()))?;
        // The Welcome's session id, not the handshake's: the Welcome is sealed.
        let sink_session = match channel.recv(&mut ds) {
            Ok(Message::Welcome(w)) => w.sink_session,
            Ok(Message::Refused(r)) => {
                return Err(Fail::Refused(format!(
                    "sink at {addr} refused: {}",
                    r.reason
                )));
            }
            Ok(m) => return Err(lost(format!("expected Welcome, got {}", m.name()))),
            Err(e) => {
                self.check_integrity(&e);
                return Err(lost(e.to_string()));
            }
        };
        self.emit(ClientEvent::Connected {
            addr,
            sink_session,
            reconnect: self.connections,
        });
        self.shown = Some(Shown::Connected);
        self.connections += 1;
        if let Ok(mut s) = self.status.lock() {
            s.ever_connected = true;
        }
        Ok(Conn { stream, channel })
    }

    /// Runs a live connection until a command ends it or the connection dies.
    fn session(&mut self, conn: &mut Conn) -> Ended {
        let addr = self.cfg.addr;
        let (hb, every) = (self.cfg.heartbeat, self.cfg.progress_every);
        let silence = hb * 3;
        let now = Instant::now();
        let (mut last_rx, mut next_hb, mut next_progress) = (now, now + hb, now + every);
        let mut probing = Probing {
            pending: None,
            burst_left: BURST,
            next: now,
            sent: None,
        };
        loop {
            match self.rx.try_recv() {
                Ok(Cmd::Finish {
                    goodbye,
                    deadline,
                    reply,
                }) => {
                    let _ = reply.send(self.finish(Some(conn), goodbye, deadline));
                    return Ended::Done;
                }
                Ok(Cmd::EndEpoch {
                    goodbye,
                    deadline,
                    reply,
                }) => {
                    let _ = reply.send(self.finish(Some(conn), goodbye, deadline));
                    return Ended::Epoch;
                }
                Ok(Cmd::BeginEpoch { reply, .. }) => {
                    // An epoch is already open on this connection.
                    let _ = reply.send(Ok(()));
                }
                Err(TryRecvError::Disconnected) => return Ended::Done,
                Err(TryRecvError::Empty) => {}
            }
            if self.stop.load(Ordering::Relaxed) {
                return Ended::Done;
            }
            let now = Instant::now();
            let out = if now >= next_progress {
                next_progress = now + every;
                next_hb = now + hb;
                Some(Message::Progress(self.view.progress()))
            } else if now >= next_hb {
                next_hb = now + hb;
                Some(Message::Heartbeat(Heartbeat {}))
            } else {
                None
            };
            if let Some(m) = out
                && let Err(e) = conn.channel.send(&mut &conn.stream, &m)
            {
                return Ended::Lost(format!("sending to sink at {addr} failed: {e}"));
            }
            if let Err(e) = self.probe(conn, &mut probing, now) {
                return Ended::Lost(format!("sending to sink at {addr} failed: {e}"));
            }
            if now >= last_rx + silence {
                return Ended::Lost(format!("no heartbeat from sink at {addr} for {silence:?}"));
            }
            let probe_due = match probing.pending {
                Some((_, at)) => at + PROBE_TIMEOUT,
                None => probing.next,
            };
            let wake = next_progress
                .min(next_hb)
                .min(last_rx + silence)
                .min(probe_due);
            let t = wake
                .saturating_duration_since(now)
                .clamp(Duration::from_millis(1), TICK);
            // A command (a search's trial ending) is served at once, not after the wait.
            if conn.channel.buffered() == 0 && !self.readable(&conn.stream, t) {
                continue;
            }
            if let Err(e) = conn.stream.set_read_timeout(Some(t)) {
                return Ended::Lost(format!("connection to sink at {addr} failed: {e}"));
            }
            match conn.channel.poll(&mut &conn.stream) {
                Ok(None) => {}
                Ok(Some(Message::Heartbeat(_))) => last_rx = Instant::now(),
                Ok(Some(Message::ClockReply(r))) => {
                    let t4 = clock::realtime_ns();
                    last_rx = Instant::now();
                    if let Err(e) = self.answered(conn, &mut probing, &r, t4) {
                        return Ended::Lost(format!("sending to sink at {addr} failed: {e}"));
                    }
                }
                Ok(Some(Message::Refused(r))) => {
                    return Ended::Lost(format!("sink at {addr} closed the session: {}", r.reason));
                }
                Ok(Some(m)) => {
                    return Ended::Lost(format!("sink at {addr} sent an unexpected {}", m.name()));
                }
                Err(e) => {
                    self.check_integrity(&e);
                    return Ended::Lost(format!("connection to sink at {addr} lost: {e}"));
                }
            }
        }
    }

    /// Waits up to `t` for `stream` to be readable or for a command's wake-up byte; true when
    /// the stream is readable (or the wait failed: the read will say why).
    fn readable(&self, stream: &TcpStream, t: Duration) -> bool {
        let Some(wakeup) = &self.wakeup else {
            return true;
        };
        let timeout = PollTimeout::try_from(t.as_millis().max(1)).unwrap_or(PollTimeout::MAX);
        let mut fds = [
            PollFd::new(stream.as_fd(), PollFlags::POLLIN),
            PollFd::new(wakeup.as_fd(), PollFlags::POLLIN),
        ];
        if poll(&mut fds, timeout).is_err() {
            return true;
        }
        let [sock, wake] = fds.map(|f| f.revents().is_some_and(|r| !r.is_empty()));
        if wake {
            let mut drain = [0u8; 16];
            while matches!((&*wakeup).read(&mut drain), Ok(n) if n > 0) {}
        }
        sock
    }

    /// Sends a clock probe when one is due: back to back during the opening burst, then one
    /// per progress period; a probe unanswered for [`PROBE_TIMEOUT`] is given up.
    fn probe(&self, conn: &mut Conn, p: &mut Probing, now: Instant) -> std::io::Result<()> {
        if let Some((_, at)) = p.pending {
            if now < at + PROBE_TIMEOUT {
                return Ok(());
            }
            p.pending = None;
        }
        if p.burst_left == 0 && now < p.next {
            return Ok(());
        }
        if p.burst_left > 0 {
            p.burst_left -= 1;
        } else {
            p.next = now + self.cfg.progress_every;
        }
        let t1 = clock::realtime_ns();
        p.pending = Some((t1, now));
        conn.channel.send(
            &mut &conn.stream,
            &Message::ClockProbe(ClockProbe { t1_ns: t1 }),
        )
    }

    /// Takes the sink's answer to the probe in flight (answers to older probes are ignored)
    /// and sends the estimate when it changed, or once per progress period.
    fn answered(
        &mut self,
        conn: &mut Conn,
        p: &mut Probing,
        r: &ClockReply,
        t4: u64,
    ) -> std::io::Result<()> {
        if p.pending.map(|(t1, _)| t1) != Some(r.t1_ns) {
            return Ok(());
        }
        p.pending = None;
        if p.burst_left == 0 && p.next < Instant::now() {
            p.next = Instant::now() + self.cfg.progress_every;
        }
        let Some(sample) = Sample::from_times(r.t1_ns, r.t2_ns, r.t3_ns, t4) else {
            return Ok(());
        };
        let now_ns = clock::monotonic_ns();
        let changed = self.clock.add(sample, now_ns);
        let due = p
            .sent
            .is_none_or(|at| at.elapsed() >= self.cfg.progress_every);
        let (Some(estimate), Some(min_rtt_ns)) =
            (self.clock.estimate(now_ns), self.clock.min_rtt_ns())
        else {
            return Ok(());
        };
        if !(changed || due) {
            return Ok(());
        }
        p.sent = Some(Instant::now());
        let msg = Message::ClockEstimate(ClockEstimate {
            offset_ns: estimate.offset_ns,
            error_bound_ns: estimate.error_bound_ns,
            rtt_ns: estimate.rtt_ns,
        });
        conn.channel.send(&mut &conn.stream, &msg)?;
        self.emit(ClientEvent::Clock {
            estimate,
            min_rtt_ns,
        });
        Ok(())
    }

    /// Sends `goodbye` and waits for the verdict until `deadline`.
    fn goodbye(&self, conn: &mut Conn, goodbye: &Goodbye, deadline: Instant) -> Goodbyed {
        let addr = self.cfg.addr;
        if let Err(e) = conn
            .channel
            .send(&mut &conn.stream, &Message::Goodbye(goodbye.clone()))
        {
            return Goodbyed::Lost(format!("sending Goodbye to sink at {addr} failed: {e}"));
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Goodbyed::Timeout;
            }
            if let Err(e) = conn.stream.set_read_timeout(Some(left.min(TICK))) {
                return Goodbyed::Lost(e.to_string());
            }
            match conn.channel.poll(&mut &conn.stream) {
                Ok(Some(Message::Verdict(v))) => return Goodbyed::Verdict(v),
                Ok(None | Some(Message::Heartbeat(_) | Message::ClockReply(_))) => {}
                Ok(Some(m)) => {
                    return Goodbyed::Lost(format!(
                        "sink at {addr} sent {} instead of a Verdict",
                        m.name()
                    ));
                }
                Err(e) => {
                    self.check_integrity(&e);
                    return Goodbyed::Lost(format!(
                        "connection to sink at {addr} lost before the verdict: {e}"
                    ));
                }
            }
        }
    }

    /// Gets the verdict: on `live` if given, else (or if it fails) on fresh connections.
    fn finish(
        &mut self,
        live: Option<&mut Conn>,
        goodbye: Goodbye,
        deadline: Instant,
    ) -> Result<Verdict, NoVerdict> {
        if let Some(conn) = live {
            match self.goodbye(conn, &goodbye, deadline) {
                Goodbyed::Verdict(v) => return Ok(*v),
                Goodbyed::Timeout => return Err(NoVerdict::Timeout),
                Goodbyed::Lost(r) => self.failed(Fail::Lost(r), Duration::ZERO),
            }
        }
        let mut backoff = FIRST_BACKOFF;
        while Instant::now() < deadline {
            match self.connect(Some(deadline)) {
                Ok(mut conn) => match self.goodbye(&mut conn, &goodbye, deadline) {
                    Goodbyed::Verdict(v) => return Ok(*v),
                    Goodbyed::Timeout => return Err(NoVerdict::Timeout),
                    Goodbyed::Lost(r) => self.failed(Fail::Lost(r), Duration::ZERO),
                },
                Err(Fail::Refused(r)) => {
                    self.failed(Fail::Refused(r.clone()), Duration::ZERO);
                    return Err(NoVerdict::Refused(r));
                }
                Err(f) => self.failed(f, backoff),
            }
            thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
            backoff = (backoff * 2).min(self.cfg.backoff_max);
        }
        Err(self
            .status
            .lock()
            .map(|s| s.no_verdict())
            .unwrap_or(NoVerdict::Timeout))
    }
}
