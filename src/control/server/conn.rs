//! The sink's accept loop and per-connection protocol: handshake, Hello/Welcome, session.
//!
//! Every failure ends only its own connection, with one rate-limited log line and one counter;
//! the accept loop places each connection ([`super::admission`]) and logs an eviction.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::admission::{Admitted, Ticket};
use super::{HelloFrom, POLL, Shared, Source, TICK, bump};
use crate::clock;
use crate::control::DeadlineStream;
use crate::control::auth::{AuthError, BUSY, server_handshake};
use crate::control::channel::Channel;
use crate::control::frame::{FrameError, write_frame};
use crate::control::msg::{
    ClockReply, DataProto, Heartbeat, Hello, Message, PROTOCOL_MISMATCH, Refused, Welcome,
};

/// The next connection from `source`, its peer and the bytes read from it already.
fn next(source: &Source) -> io::Result<(TcpStream, SocketAddr, Vec<u8>)> {
    match source {
        Source::Listener(l) => l.accept().map(|(s, peer)| (s, peer, Vec::new())),
        Source::Handed(arrivals) => match arrivals.take() {
            Some((s, first)) => {
                let peer = s.peer_addr()?;
                Ok((s, peer, first))
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        },
    }
}

pub(super) fn accept_loop(source: &Source, sh: &Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u64;
    while !sh.stop.load(Ordering::Relaxed) {
        match next(source) {
            Ok((stream, peer, first)) => {
                bump(&sh.stats.accepted);
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                let id = next_id;
                next_id += 1;
                let Ok(handle) = stream.try_clone() else {
                    continue;
                };
                let ticket = match sh.admission.admit(id, peer, handle) {
                    Admitted::In(ticket, evicted) => {
                        if let Some(old) = evicted {
                            bump(&sh.stats.evicted);
                            sh.log.line(format!(
                                "control: {old}: dropped: unauthenticated, evicted for a newer connection (at most {} at once, {} per address)",
                                sh.config.max_unauthenticated,
                                sh.config.max_unauthenticated_per_address
                            ));
                        }
                        ticket
                    }
                    Admitted::Busy => {
                        bump(&sh.stats.rejected_busy);
                        let _ = stream.set_write_timeout(Some(TICK));
                        let reason = format!(
                            "{BUSY}this sink already serves {} authenticated control connections",
                            sh.config.max_connections
                        );
                        sh.log.line(format!("control: {peer}: refused: {reason}"));
                        let _ = write_frame(&mut &stream, &Message::Refused(Refused { reason }));
                        continue;
                    }
                };
                if let (Ok(clone), Ok(mut conns)) = (stream.try_clone(), sh.conns.lock()) {
                    conns.insert(id, clone);
                }
                let sh2 = sh.clone();
                let place = ticket.clone();
                let spawned = thread::Builder::new()
                    .name("ctl-conn".into())
                    .spawn(move || {
                        serve(&sh2, &stream, peer, first, &place);
                        let _ = stream.shutdown(Shutdown::Both);
                        if let Ok(mut conns) = sh2.conns.lock() {
                            conns.remove(&id);
                        }
                        let _ = sh2.admission.leave(&place);
                    });
                match spawned {
                    Ok(h) => workers.push(h),
                    Err(e) => {
                        let _ = sh.admission.leave(&ticket);
                        if let Ok(mut conns) = sh.conns.lock() {
                            conns.remove(&id);
                        }
                        sh.log.line(format!(
                            "control: {peer}: cannot start a connection thread: {e}"
                        ));
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(e) => {
                sh.log.line(format!("control: accept failed: {e}"));
                thread::sleep(POLL);
            }
        }
        workers.retain(|h| !h.is_finished());
        sh.log.flush();
    }
    if let Ok(conns) = sh.conns.lock() {
        for s in conns.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
    for h in workers {
        let _ = h.join();
    }
}

/// One line for a failed handshake, and which counter it bumps.
fn handshake_failure<'a>(
    sh: &'a Shared,
    peer: SocketAddr,
    e: &AuthError,
) -> (String, &'a AtomicU64) {
    let st = &sh.stats;
    match e {
        AuthError::MissingCredentials => (
            format!(
                "control: {peer}: refused: sender {peer} sent no credentials but this sink requires --secret-file"
            ),
            &st.auth_failed,
        ),
        AuthError::WrongSecret => (
            format!("control: {peer}: refused: wrong secret"),
            &st.auth_failed,
        ),
        e if e.is_auth() => (
            format!("control: {peer}: refused: sender {e}"),
            &st.auth_failed,
        ),
        AuthError::Timeout | AuthError::Frame(FrameError::Timeout) => (
            format!(
                "control: {peer}: dropped: no handshake within {:?}",
                sh.config.handshake_timeout
            ),
            &st.timeouts,
        ),
        AuthError::Frame(FrameError::Closed) => (
            format!("control: {peer}: closed before completing the handshake"),
            &st.protocol_errors,
        ),
        e => (
            format!("control: {peer}: handshake failed: {e}"),
            &st.protocol_errors,
        ),
    }
}

fn serve(sh: &Shared, stream: &TcpStream, peer: SocketAddr, first: Vec<u8>, ticket: &Ticket) {
    // Before this side of the handshake, so before the sender can have built a Hello.
    let connected_ns = clock::monotonic_ns();
    if sh.config.proto == DataProto::Udp
        && first.starts_with(&crate::proto::header::MAGIC.to_be_bytes())
    {
        // A TCP sender's data connection: its records start with the magic a control frame's
        // length never has.
        bump(&sh.stats.protocol_errors);
        return sh.log.line(format!(
            "control: {peer}: a TCP sender (--proto tcp) connected to this UDP sink's port: start the sink with --proto tcp, or the sender without it"
        ));
    }
    let cfg = &sh.config;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(cfg.handshake_timeout));
    let mut ds =
        DeadlineStream::new(stream, Instant::now() + cfg.handshake_timeout).with_prefix(first);
    let mut channel = match server_handshake(&mut ds, cfg.secret.as_deref(), &cfg.sink_session) {
        Ok(c) if sh.admission.authenticated(ticket) => c,
        // Evicted: logged and counted when it was closed.
        Ok(_) => return,
        Err(_) if sh.admission.leave(ticket) => return,
        Err(e) => {
            if !sh.stop.load(Ordering::Relaxed) {
                let (line, counter) = handshake_failure(sh, peer, &e);
                bump(counter);
                sh.log.line(line);
            }
            return;
        }
    };
    bump(&sh.stats.authenticated);
    // Authenticated: the Hello may take as long as any silence the session allows.
    let silence = cfg.heartbeat * 3;
    let _ = stream.set_write_timeout(Some(silence));
    ds.extend(Instant::now() + silence);
    let hello = match channel.recv(&mut ds) {
        Ok(Message::Hello(h)) => h,
        Ok(m) => return protocol_error(sh, peer, &format!("expected Hello, got {}", m.name())),
        Err(FrameError::Timeout) => {
            bump(&sh.stats.timeouts);
            return sh.log.line(format!(
                "control: {peer}: dropped: no Hello within {silence:?} of its handshake"
            ));
        }
        Err(e) => return frame_error(sh, peer, &e),
    };
    if ds.prefix_left() > 0 || channel.buffered() > 0 {
        // Its first read held more than its first frame: it did not wait for the handshake.
        return protocol_error(sh, peer, "sent frames before the sink answered");
    }
    let mut hello = hello;
    loop {
        if let Some(theirs) = hello.proto.filter(|p| *p != cfg.proto) {
            let reason = format!(
                "{PROTOCOL_MISMATCH}: the sink counts {} and this sender sends {}: give both the same --proto",
                cfg.proto.name(),
                theirs.name()
            );
            sh.log.line(format!(
                "control: {peer}: refused: a {} sender said hello to this {} sink: start the sink with --proto {}, or the sender with --proto {}",
                theirs.name(),
                cfg.proto.name(),
                theirs.name().to_lowercase(),
                cfg.proto.name().to_lowercase()
            ));
            let _ = channel.send(&mut ds, &Message::Refused(Refused { reason }));
            return;
        }
        let proof = cfg.secret.as_ref().map(|s| s.data_key().run(hello.epoch));
        let from = HelloFrom {
            peer,
            version: channel.version(),
            proof,
            connected_ns,
        };
        let uptime_ns = sh.books.hello(&hello, from);
        let welcome = Welcome {
            sink_session: cfg.sink_session.clone(),
            uptime_ns,
        };
        let clean = match channel.send(&mut ds, &Message::Welcome(welcome)) {
            Ok(()) => session(sh, stream, peer, &hello, &mut channel),
            Err(e) => {
                sh.log
                    .line(format!("control: {peer}: sending Welcome failed: {e}"));
                false
            }
        };
        sh.books.disconnected(peer, &hello.name, hello.epoch, clean);
        if !clean {
            return;
        }
        // A sender may go on with its next epoch (a search's next trial) on this connection.
        match next_hello(sh, stream, peer, &mut channel) {
            Some(next) => hello = next,
            None => return,
        }
    }
}

/// After a verdict: the sender's next Hello on the same connection, or `None` when it closes
/// (what a sender does after its only epoch) or stays silent for three heartbeat periods.
fn next_hello(
    sh: &Shared,
    stream: &TcpStream,
    peer: SocketAddr,
    channel: &mut Channel,
) -> Option<Hello> {
    let silence = sh.config.heartbeat * 3;
    let mut until = Instant::now() + silence;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || sh.stop.load(Ordering::Relaxed) {
            return None;
        }
        stream.set_read_timeout(Some(left.min(TICK))).ok()?;
        match channel.poll(&mut &*stream) {
            Ok(None) => {}
            Ok(Some(Message::Heartbeat(_))) => until = Instant::now() + silence,
            Ok(Some(Message::Hello(h))) => return Some(h),
            Ok(Some(m)) => {
                protocol_error(sh, peer, &format!("expected Hello, got {}", m.name()));
                return None;
            }
            Err(FrameError::Closed) => return None,
            Err(e) => {
                frame_error(sh, peer, &e);
                return None;
            }
        }
    }
}

/// Ends a connection whose frame could not be read: an integrity failure (a breached seal or a
/// cut frame) is counted under its own result, anything else as a protocol error.
fn frame_error(sh: &Shared, peer: SocketAddr, e: &FrameError) {
    let st = &sh.stats;
    let counter = match e.integrity_label() {
        Some("bad_mac") => &st.bad_mac,
        Some("replayed") => &st.replayed,
        Some("out_of_order") => &st.out_of_order,
        Some(_) => &st.truncated,
        None => return protocol_error(sh, peer, &e.to_string()),
    };
    bump(counter);
    sh.log.line(format!("control: {peer}: dropped: {e}"));
}

fn protocol_error(sh: &Shared, peer: SocketAddr, what: &str) {
    bump(&sh.stats.protocol_errors);
    sh.log
        .line(format!("control: {peer}: protocol error: {what}"));
}

/// The post-Hello loop; true when it ended with a Goodbye answered.
/// Every answer is written in the sender's protocol version, sealed when the channel is.
fn session(
    sh: &Shared,
    stream: &TcpStream,
    peer: SocketAddr,
    hello: &Hello,
    channel: &mut Channel,
) -> bool {
    let hb = sh.config.heartbeat;
    let silence = hb * 3;
    let _ = stream.set_write_timeout(Some(silence));
    let (name, epoch) = (hello.name.as_str(), hello.epoch);
    let version = channel.version();
    let now = Instant::now();
    let (mut last_rx, mut next_hb) = (now, now + hb);
    loop {
        if sh.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= next_hb {
            next_hb = now + hb;
            if let Err(e) = channel.send(&mut &*stream, &Message::Heartbeat(Heartbeat {})) {
                sh.log
                    .line(format!("control: {peer}: sender {name} lost: {e}"));
                return false;
            }
        }
        if now >= last_rx + silence {
            bump(&sh.stats.timeouts);
            sh.log.line(format!(
                "control: {peer}: sender {name} silent for {silence:?}, dropped"
            ));
            return false;
        }
        let wake = next_hb.min(last_rx + silence);
        let t = wake
            .saturating_duration_since(now)
            .clamp(Duration::from_millis(1), TICK);
        if stream.set_read_timeout(Some(t)).is_err() {
            return false;
        }
        let msg = match channel.poll(&mut &*stream) {
            Ok(None) => continue,
            Ok(Some(m)) => m,
            Err(_) if sh.stop.load(Ordering::Relaxed) => return false,
            Err(FrameError::Closed) => {
                sh.log.line(format!(
                    "control: {peer}: sender {name} disconnected without Goodbye"
                ));
                return false;
            }
            Err(e) => {
                frame_error(sh, peer, &e);
                return false;
            }
        };
        // The probe's arrival, as close to the read as the loop gets.
        let t2 = clock::sink_realtime_ns();
        last_rx = Instant::now();
        match msg {
            Message::Heartbeat(_) => {}
            Message::ClockProbe(p) => {
                let reply = ClockReply {
                    t1_ns: p.t1_ns,
                    t2_ns: t2,
                    t3_ns: clock::sink_realtime_ns().max(t2),
                };
                if let Err(e) = channel.send(&mut &*stream, &Message::ClockReply(reply)) {
                    sh.log
                        .line(format!("control: {peer}: sender {name} lost: {e}"));
                    return false;
                }
            }
            Message::ClockEstimate(e) => sh.books.clock(peer, name, epoch, &e),
            Message::Progress(p) => sh.books.progress(peer, name, epoch, &p),
            Message::Goodbye(g) => {
                let mut verdict = sh.books.goodbye(peer, name, epoch, &g);
                // Size classes are protocol version 2, the clock version 3: an older sender
                // rejects the fields.
                if version < 2 {
                    verdict.sizes.clear();
                }
                if version < 3 {
                    verdict.clock = None;
                }
                // p99.9 and jitter are version 5.
                if version < 5 {
                    verdict.latency_p999_ns = 0;
                    verdict.jitter = None;
                }
                // Latency and jitter as figures are version 7.
                if version < 7 {
                    verdict.latency_figures = None;
                    verdict.jitter_figures = None;
                }
                // An incomplete verdict is said from version 9.
                if version < 9 {
                    verdict.incomplete = false;
                }
                // The cells and the late packets are version 10.
                if version < 10 {
                    verdict.cells = None;
                    verdict.totals.rx_late = 0;
                    for (_, f) in &mut verdict.flows {
                        f.rx_late = 0;
                    }
                }
                return match channel.send(&mut &*stream, &Message::Verdict(Box::new(verdict))) {
                    Ok(()) => true,
                    Err(e) => {
                        sh.log.line(format!(
                            "control: {peer}: sending the verdict to {name} failed: {e}"
                        ));
                        false
                    }
                };
            }
            m => {
                protocol_error(sh, peer, &format!("unexpected {} after Hello", m.name()));
                return false;
            }
        }
    }
}
