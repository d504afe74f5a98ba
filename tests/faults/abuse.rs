//! The sink's metrics endpoint under abuse while a paced run is counted: 1000 idle
//! connections, slowloris clients that dribble a header byte every 100 ms (each must be closed
//! at the request head's 5 s deadline), clients that send garbage bytes, and 1 MiB headers. Every scrape during the run must answer within 5 s, the
//! run must stay exact (the sink namespace's `Udp InDatagrams`), and the endpoint must answer
//! afterwards with the run's counts.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
    thread::JoinHandle,
    time::Duration,
};

use super::kit::*;

/// Runs `f` on a new thread inside namespace `ns`.
fn spawn_in(ns: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    let ns = ns.to_string();
    std::thread::spawn(move || in_netns(&ns, f))
}

#[test]
#[ignore = "needs root: network namespaces, nft, tc and NFQUEUE (the test command runs it as root)"]
fn a_metrics_endpoint_under_abuse_answers_and_the_run_stays_exact() {
    require_root();
    let _guard = traffic_lock();
    let mut rig = Rig::new("ab", 229);
    rig.start_sink(&["--no-gro"]);
    let addr: SocketAddr = rig.metrics_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let idle_open = Arc::new(AtomicU64::new(0));
    let mut abusers = Vec::new();
    // 1000 idle connections, held until the end.
    {
        let (stop, open) = (stop.clone(), idle_open.clone());
        abusers.push(spawn_in(&rig.lab.tx, move || {
            let mut held = Vec::new();
            for _ in 0..1000 {
                if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    held.push(s);
                    open.fetch_add(1, Relaxed);
                }
            }
            while !stop.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }));
    }
    // 20 slowloris clients: a header byte every 100 ms, until the endpoint closes them. Each
    // records how long after its connect the endpoint answered 408 or closed it; the head's
    // deadline is 5 s from the accept, however often a byte comes.
    let slow_closed: Arc<std::sync::Mutex<Vec<Option<Duration>>>> = Arc::default();
    {
        let closed = slow_closed.clone();
        abusers.push(spawn_in(&rig.lab.tx, move || {
            let mut conns: Vec<(TcpStream, std::time::Instant, Option<Duration>)> = (0..20)
                .filter_map(|_| {
                    let c = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
                    c.set_nonblocking(true).unwrap();
                    Some((c, std::time::Instant::now(), None))
                })
                .collect();
            for (c, _, _) in &mut conns {
                let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ");
            }
            // Bounded: 150 rounds of 100 ms, 15 s, three times the deadline.
            for _ in 0..150 {
                let mut open = 0;
                for (c, since, gone) in &mut conns {
                    if gone.is_some() {
                        continue;
                    }
                    let mut answer = [0u8; 256];
                    match c.read(&mut answer) {
                        // An answer (408) or the close itself ends the dribble.
                        Ok(_) => *gone = Some(since.elapsed()),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            let _ = c.write_all(b"a");
                            open += 1;
                        }
                        Err(_) => *gone = Some(since.elapsed()),
                    }
                }
                if open == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            *closed.lock().unwrap() = conns.into_iter().map(|(_, _, gone)| gone).collect();
        }));
    }
    // Garbage bytes and 1 MiB headers, over and over while the run lasts (bounded).
    {
        let stop = stop.clone();
        abusers.push(spawn_in(&rig.lab.tx, move || {
            let mut rng = 0x2545_F491_4F6C_DD1Du64;
            let garbage: Vec<u8> = (0..4096)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng as u8
                })
                .collect();
            let mut huge = b"GET /metrics HTTP/1.1\r\nX-Huge: ".to_vec();
            huge.resize(huge.len() + (1 << 20), b'h');
            huge.extend_from_slice(b"\r\n\r\n");
            for round in 0..2000 {
                if stop.load(Relaxed) {
                    break;
                }
                if let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                    let _ = c.write_all(if round % 10 == 0 { &huge } else { &garbage });
                    let mut sink = [0u8; 4096];
                    let _ = c.read(&mut sink);
                }
            }
        }));
    }
    let open = idle_open.clone();
    assert!(
        wait_until(Duration::from_secs(20), || open.load(Relaxed) == 1000),
        "1000 idle connections opened: {}",
        idle_open.load(Relaxed)
    );
    let before = snmp(&rig.lab.rx, "Udp", "InDatagrams");
    let mut sender = rig.spawn_send(&["--rate", "10kpps", "--count", "20000"]);
    let mut scrapes = 0;
    let tx = rig.lab.tx.clone();
    while sender.alive() {
        let text = in_netns(&tx, move || get_metrics(addr))
            .unwrap_or_else(|e| panic!("a scrape under abuse failed: {e}"));
        assert!(text.contains("ringblast_rx_packets_total"));
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let send = sender.summary("send");
    stop.store(true, Relaxed);
    for a in abusers {
        a.join().unwrap();
    }
    let slow = slow_closed.lock().unwrap().clone();
    assert_eq!(slow.len(), 20, "20 slowloris clients connected");
    for (k, gone) in slow.iter().enumerate() {
        let gone =
            gone.unwrap_or_else(|| panic!("slowloris client {k} was never closed: {slow:?}"));
        // The deadline is 5 s; 1.5 s more for this loop's 100 ms period and a loaded host.
        assert!(
            gone >= Duration::from_millis(4_900) && gone <= Duration::from_millis(6_500),
            "slowloris client {k} closed after {gone:?}, not at the 5 s deadline: {slow:?}"
        );
    }
    let delivered = snmp(&rig.lab.rx, "Udp", "InDatagrams") - before;
    let sink = rig.stop_sink(&[("ringblast_rx_packets_total", u(&send, "tx_packets"))]);
    row(
        "metrics endpoint abuse + paced run: InDatagrams / rx_packets",
        delivered,
        u(&sink, "rx_packets"),
    );
    eprintln!("abuse: {scrapes} scrapes answered during the run");
    assert!(scrapes >= 5, "the endpoint was scraped during the run");
    assert_eq!(u(&send, "tx_packets"), 20_000, "{send}");
    assert_eq!(u(&sink, "rx_packets"), delivered, "{sink}");
    assert_exact(&send, &sink);
}
