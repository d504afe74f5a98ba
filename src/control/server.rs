//! The sink's side of the control channel: one accept thread, one thread per connection.
//!
//! Each connection must finish the handshake within `handshake_timeout` (1 s), then send Hello
//! within three heartbeat periods (the sink answers Welcome), then Progress/Heartbeat frames
//! until its Goodbye, which the sink answers with the Verdict its books make. Unauthenticated
//! connections are capped in all and per address, and the oldest is evicted to make room for a
//! new one ([`admission`]), so silent connections never lock out a sender with the secret. A
//! clock probe is answered at once with the sink's receive and send times
//! (`clock::sink_realtime_ns`), and the sender's clock estimates go to the books. The sink sends
//! a Heartbeat every `heartbeat` and drops a connection that is silent for three periods.
//!
//! **Test hook**: `RINGBLAST_TEST_CONTROL_PLACES=N` (1 to 256, read when a sink starts its
//! control channel) lowers its 256 places to N, so a test can make it busy with N senders
//! (`tests/control_abuse.rs`); it is a test hook, not an option. Every bad connection (garbage, oversize
//! frames, wrong secret, replays, timeouts) costs one rate-limited log line, one counter bump
//! and its own connection, nothing else. Secrets and MACs are never logged.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use super::auth::Secret;
use super::msg::{ClockEstimate, DataProto, Goodbye, Hello, Progress, Verdict};
use crate::error::Error;
use crate::proto::proof::RunProof;

mod admission;
mod conn;

const POLL: Duration = Duration::from_millis(20);
const TICK: Duration = Duration::from_millis(100);
const LOG_PER_SEC: u32 = 20;

/// How the sink listens for senders.
#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    /// Control address to bind.
    pub(crate) listen: SocketAddr,
    /// Shared secret, if any.
    pub(crate) secret: Option<Arc<Secret>>,
    /// This sink's session id, sent in AuthOk and Welcome.
    pub(crate) sink_session: String,
    /// Most concurrent connections (default 256, or the test hook's [`places`]); more are
    /// refused as busy once that many are authenticated.
    pub(crate) max_connections: usize,
    /// Most unauthenticated connections at once (default 64); a newer one evicts one.
    pub(crate) max_unauthenticated: usize,
    /// Most unauthenticated connections at once from one address, or IPv6 /64 (default 8).
    pub(crate) max_unauthenticated_per_address: usize,
    /// Time allowed from the accept to the end of the handshake (default 1 s).
    pub(crate) handshake_timeout: Duration,
    /// Heartbeat period (default 1 s); 3 periods of silence drop the connection.
    pub(crate) heartbeat: Duration,
    /// What this sink counts (default UDP): a Hello of the other protocol is refused.
    pub(crate) proto: DataProto,
}

impl ServerConfig {
    /// The defaults, without a secret.
    pub(crate) fn new(listen: SocketAddr, sink_session: impl Into<String>) -> Self {
        ServerConfig {
            listen,
            secret: None,
            sink_session: sink_session.into(),
            max_connections: places(),
            max_unauthenticated: 64,
            max_unauthenticated_per_address: 8,
            handshake_timeout: Duration::from_secs(1),
            heartbeat: Duration::from_secs(1),
            proto: DataProto::Udp,
        }
    }
}

/// The environment variable of the test hook that lowers a sink's places.
const TEST_PLACES_ENV: &str = "RINGBLAST_TEST_CONTROL_PLACES";

/// The places a sink's control channel has: 256, or fewer where the test hook says so.
pub(crate) fn places() -> usize {
    const PLACES: usize = 256;
    std::env::var(TEST_PLACES_ENV)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| (1..=PLACES).contains(n))
        .unwrap_or(PLACES)
}

/// Where a Hello came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HelloFrom {
    /// The sender's address.
    pub(crate) peer: SocketAddr,
    /// The protocol version it speaks.
    pub(crate) version: u8,
    /// With a secret, the proof its run's datagrams carry.
    pub(crate) proof: Option<RunProof>,
    /// Monotonic ns when this sink took the connection: the sender built the Hello after it.
    pub(crate) connected_ns: u64,
}

/// The sink's accounting, as the control channel sees it. Called from connection threads.
pub(crate) trait SinkBooks: Send + Sync + 'static {
    /// A sender said Hello (`from` says where and how); returns the uptime for Welcome.
    fn hello(&self, hello: &Hello, from: HelloFrom) -> u64;
    /// A sender reported progress.
    fn progress(&self, peer: SocketAddr, name: &str, epoch: u32, progress: &Progress);
    /// A sender told its estimate of this sink's clock offset.
    fn clock(&self, peer: SocketAddr, name: &str, epoch: u32, estimate: &ClockEstimate);
    /// A sender said Goodbye; returns its verdict (may block up to about a second).
    fn goodbye(&self, peer: SocketAddr, name: &str, epoch: u32, goodbye: &Goodbye) -> Verdict;
    /// A connection that had said Hello ended; `clean` after a Goodbye.
    fn disconnected(&self, peer: SocketAddr, name: &str, epoch: u32, clean: bool);
}

/// Connection counters.
#[derive(Debug, Default)]
pub(crate) struct ServerStats {
    /// Connections accepted.
    pub(crate) accepted: AtomicU64,
    /// Handshakes passed.
    pub(crate) authenticated: AtomicU64,
    /// Handshakes failed on credentials.
    pub(crate) auth_failed: AtomicU64,
    /// Connections dropped for bad frames or messages.
    pub(crate) protocol_errors: AtomicU64,
    /// Connections dropped for silence.
    pub(crate) timeouts: AtomicU64,
    /// Connections refused because `max_connections` were authenticated.
    pub(crate) rejected_busy: AtomicU64,
    /// Unauthenticated connections closed to make room for a newer one.
    pub(crate) evicted: AtomicU64,
    /// Connections dropped because a frame failed its authentication tag.
    pub(crate) bad_mac: AtomicU64,
    /// Connections dropped because a frame repeated a sequence number.
    pub(crate) replayed: AtomicU64,
    /// Connections dropped because a frame skipped a sequence number (dropped or swapped).
    pub(crate) out_of_order: AtomicU64,
    /// Connections dropped because they ended in the middle of a frame.
    pub(crate) truncated: AtomicU64,
}

pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Control connections accepted elsewhere (a TCP sink's data port tells them apart by their
/// first frame), each with the bytes already read from it.
pub(crate) trait Arrivals: Send + Sync + 'static {
    /// The next waiting connection, if any; never blocks.
    fn take(&self) -> Option<(TcpStream, Vec<u8>)>;
}

/// Where a control server's connections come from.
pub(super) enum Source {
    /// Its own listener.
    Listener(TcpListener),
    /// Handed over by whoever accepted them.
    Handed(Arc<dyn Arrivals>),
}

/// A bound, not yet serving, control listener.
pub(crate) struct ControlServer {
    source: Source,
    config: ServerConfig,
    stats: Arc<ServerStats>,
}

impl ControlServer {
    /// Binds `config.listen` (SO_REUSEADDR, no SO_REUSEPORT, IPv6 v6-only).
    pub(crate) fn bind(config: ServerConfig) -> Result<ControlServer, Error> {
        let addr = config.listen;
        let ctx = |what: &str| format!("{what} control socket {addr}");
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| Error::io(ctx("creating"), e))?;
        sock.set_reuse_address(true)
            .map_err(|e| Error::io(ctx("configuring"), e))?;
        if addr.is_ipv6() {
            sock.set_only_v6(true)
                .map_err(|e| Error::io(ctx("configuring"), e))?;
        }
        sock.bind(&addr.into()).map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => Error::Unsupported(format!(
                "port {} is in use by another process (is another ringblast sink running? stop it or pick another --listen port)",
                addr.port()
            )),
            _ => Error::io(ctx("binding"), e),
        })?;
        sock.listen(128)
            .map_err(|e| Error::io(ctx("listening on"), e))?;
        sock.set_nonblocking(true)
            .map_err(|e| Error::io(ctx("configuring"), e))?;
        Ok(ControlServer {
            source: Source::Listener(sock.into()),
            config,
            stats: Arc::default(),
        })
    }

    /// A server for connections accepted on `config.listen` by someone else.
    pub(crate) fn handed(config: ServerConfig, arrivals: Arc<dyn Arrivals>) -> ControlServer {
        ControlServer {
            source: Source::Handed(arrivals),
            config,
            stats: Arc::default(),
        }
    }

    /// The bound address (useful with port 0).
    #[cfg(test)]
    pub(crate) fn local_addr(&self) -> SocketAddr {
        match &self.source {
            Source::Listener(l) => l.local_addr().unwrap_or(self.config.listen),
            Source::Handed(_) => self.config.listen,
        }
    }

    /// Starts the accept thread.
    pub(crate) fn start(
        self,
        books: Arc<dyn SinkBooks>,
        log: Box<dyn Fn(String) + Send + Sync>,
    ) -> RunningServer {
        #[cfg(test)]
        let addr = self.local_addr();
        let caps = admission::Caps {
            total: self.config.max_connections,
            unauthenticated: self.config.max_unauthenticated,
            per_address: self.config.max_unauthenticated_per_address,
        };
        let shared = Arc::new(Shared {
            config: self.config,
            stats: self.stats,
            books,
            log: Limiter {
                sink: log,
                state: Mutex::new((Instant::now(), 0, 0)),
            },
            stop: AtomicBool::new(false),
            admission: admission::Admission::new(caps),
            conns: Mutex::new(HashMap::new()),
        });
        let sh = shared.clone();
        let source = self.source;
        let accept = thread::Builder::new()
            .name("ctl-accept".into())
            .spawn(move || conn::accept_loop(&source, &sh))
            .expect("spawning the control accept thread");
        RunningServer {
            shared,
            accept: Some(accept),
            #[cfg(test)]
            addr,
        }
    }
}

/// A serving control listener; dropping it stops it too.
pub(crate) struct RunningServer {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    #[cfg(test)]
    addr: SocketAddr,
}

impl RunningServer {
    /// The counters.
    pub(crate) fn stats(&self) -> Arc<ServerStats> {
        self.shared.stats.clone()
    }

    #[cfg(test)]
    /// The bound address.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes every connection and joins the threads.
    pub(crate) fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Rate-limited log: at most [`LOG_PER_SEC`] lines a second, then one count of the rest.
pub(super) struct Limiter {
    sink: Box<dyn Fn(String) + Send + Sync>,
    /// (window start, lines in window, lines suppressed in window)
    state: Mutex<(Instant, u32, u64)>,
}

impl Limiter {
    pub(super) fn line(&self, msg: String) {
        self.emit(Some(msg));
    }

    pub(super) fn flush(&self) {
        self.emit(None);
    }

    fn emit(&self, msg: Option<String>) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let now = Instant::now();
        if now.duration_since(st.0) >= Duration::from_secs(1) {
            if st.2 > 0 {
                (self.sink)(format!(
                    "control: {} more connection errors suppressed",
                    st.2
                ));
            }
            *st = (now, 0, 0);
        }
        if let Some(m) = msg {
            if st.1 < LOG_PER_SEC {
                st.1 += 1;
                (self.sink)(m);
            } else {
                st.2 += 1;
            }
        }
    }
}

pub(super) struct Shared {
    pub(super) config: ServerConfig,
    pub(super) stats: Arc<ServerStats>,
    pub(super) books: Arc<dyn SinkBooks>,
    pub(super) log: Limiter,
    pub(super) stop: AtomicBool,
    pub(super) admission: admission::Admission,
    pub(super) conns: Mutex<HashMap<u64, TcpStream>>,
}
