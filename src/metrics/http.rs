//! The metrics endpoint: a plain HTTP/1.1 listener on its own thread, never on a data-path
//! thread, that answers every GET with the exporter's text put into a stable order
//! (`exposition::sorted`), and one more thread for the exporter's periodic upkeep. Each
//! connection gets a small thread of its own; its whole request head must arrive within 5 s of
//! the accept (a slowloris client that dribbles a byte at a time is closed then, with 408) and
//! the response is written with a 5 s timeout, so idle, slow or garbage clients never hold up a
//! real scrape; past [`MAX_CONNECTIONS`] at once a client gets 503 at once. A request head over
//! 8 KiB gets 431.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering::Relaxed},
    },
    thread,
    time::{Duration, Instant},
};

use metrics_exporter_prometheus::PrometheusHandle;

use super::exposition;

/// How long a client has to send its whole request head, and the response's write timeout.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the exporter drains histogram samples when nobody scrapes. The exporter buffers
/// every observation until a drain (a flush records a latency cell's count as that many
/// samples), so at 20 kpps the sink's three latency and jitter histograms held up to 300 000
/// samples at its own 5 s default, and the soak saw the sink's RSS step by 4 MiB whenever that
/// peak first came; each second keeps it a fifth of that.
const UPKEEP_EVERY: Duration = Duration::from_secs(1);
/// Longest request head read.
const MAX_REQUEST: usize = 8192;
/// Connections served at once; more are answered 503 and closed.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// Stack of a connection thread (rendering allocates on the heap).
const CONNECTION_STACK: usize = 128 * 1024;

/// Serves `handle` on `listener` and runs its upkeep, each on a thread of its own.
pub(crate) fn spawn(listener: TcpListener, handle: PrometheusHandle) -> std::io::Result<()> {
    let upkeep = handle.clone();
    thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                thread::sleep(UPKEEP_EVERY);
                upkeep.run_upkeep();
            }
        })?;
    thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            let active = Arc::new(AtomicUsize::new(0));
            for mut stream in listener.incoming().flatten() {
                if active.load(Relaxed) >= MAX_CONNECTIONS {
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = stream.write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    continue;
                }
                active.fetch_add(1, Relaxed);
                let (handle, done) = (handle.clone(), Arc::clone(&active));
                let spawned = thread::Builder::new()
                    .name("metrics-conn".into())
                    .stack_size(CONNECTION_STACK)
                    .spawn(move || {
                        // A client that goes away mid-request is its own problem, not the run's.
                        let _ = answer(stream, &handle);
                        done.fetch_sub(1, Relaxed);
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Relaxed);
                }
            }
        })?;
    Ok(())
}

/// Reads one request head and writes one response, then closes the connection.
fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let deadline = Instant::now() + IO_TIMEOUT;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let mut too_large = false;
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        // Each read waits only for what is left of the head's deadline, so a client that
        // sends a byte every so often cannot stretch it.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return late(stream);
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return late(stream);
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        if head.len() + n > MAX_REQUEST {
            too_large = true;
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let method = head.split(|&c| c == b' ').next().unwrap_or_default();
    let (status, body) = match method {
        _ if too_large => (
            "431 Request Header Fields Too Large",
            "request head over 8 KiB\n".to_string(),
        ),
        b"GET" | b"HEAD" => ("200 OK", exposition::sorted(&handle.render())),
        _ => ("405 Method Not Allowed", "use GET\n".to_string()),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != b"HEAD" {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

/// Answers a client whose request head did not arrive in time, and closes the connection.
fn late(mut stream: TcpStream) -> std::io::Result<()> {
    stream.write_all(
        b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )?;
    stream.flush()
}
