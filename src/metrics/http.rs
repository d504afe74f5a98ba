//! The metrics endpoint: a plain HTTP/1.1 listener on its own thread, never on a data-path
//! thread, that answers every GET with the exporter's text put into a stable order
//! (`exposition::sorted`), and one more thread for the exporter's periodic upkeep. Scrapes are
//! served one at a time, each with 5 s read and write timeouts, so a stuck client delays the next
//! scrape by at most that.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    thread,
    time::Duration,
};

use metrics_exporter_prometheus::PrometheusHandle;

use super::exposition;

/// Per-connection read and write timeout.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the exporter drains histogram samples when nobody scrapes (its own default).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// Longest request head read.
const MAX_REQUEST: usize = 8192;

/// Serves `handle` on `listener` and runs its upkeep, each on a thread of its own.
pub fn spawn(listener: TcpListener, handle: PrometheusHandle) -> std::io::Result<()> {
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
            for stream in listener.incoming().flatten() {
                // A client that goes away mid-request is its own problem, not the run's.
                let _ = answer(stream, &handle);
            }
        })?;
    Ok(())
}

/// Reads one request head and writes one response, then closes the connection.
fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_REQUEST {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let method = head.split(|&c| c == b' ').next().unwrap_or_default();
    let (status, body) = match method {
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
