//! The metrics endpoint serves families and series in one sorted order, the same on every
//! scrape, so that `curl | diff` between two scrapes shows only values that changed; and it keeps
//! serving a run's final values for `--metrics-linger` also when a signal stopped the run.

mod common;

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::Command,
    time::{Duration, Instant},
};

use common::{bin, proc::Proc, traffic_lock};

fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    Some(body.to_string())
}

/// Every sample line without its value: the series in the order served.
fn series(body: &str) -> Vec<&str> {
    body.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').map_or(l, |(k, _)| k))
        .collect()
}

#[test]
fn two_scrapes_serve_the_same_sorted_order() {
    let _traffic = traffic_lock();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin());
    cmd.args([
        "pair",
        "--duration",
        "4s",
        "--rate",
        "10kpps",
        "--queues",
        "2",
    ])
    .args(["--flows", "20", "--metrics", &format!("127.0.0.1:{port}")]);
    let run = Proc::spawn(cmd);
    // Every series is registered before the workers start; wait until the process metrics,
    // collected last, are there too.
    let until = Instant::now() + Duration::from_secs(20);
    let first = loop {
        match scrape(port) {
            Some(body)
                if body.contains("ringblast_rx_packets_total{") && body.contains("process_") =>
            {
                break body;
            }
            _ if Instant::now() > until => panic!("no complete scrape on port {port} within 20 s"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    // The event for the second scrape: the sink's packet counter has moved since the first,
    // so the two scrapes straddle live traffic (the run is paced at 10 kpps).
    let received = |body: &str| -> u64 {
        let samples: Vec<u64> = body
            .lines()
            .filter(|l| l.starts_with("ringblast_rx_packets_total{"))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect();
        assert!(
            !samples.is_empty(),
            "no ringblast_rx_packets_total series in:\n{body}"
        );
        samples.iter().sum()
    };
    let before = received(&first);
    let until = Instant::now() + Duration::from_secs(3);
    let second = loop {
        let body = scrape(port).expect("second scrape");
        if received(&body) > before {
            break body;
        }
        assert!(
            Instant::now() < until,
            "ringblast_rx_packets_total stayed at {before} for 3 s of a 10 kpps run"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(run);

    assert_eq!(
        series(&first),
        series(&second),
        "series order changed between scrapes"
    );
    assert_ne!(
        first, second,
        "values should have moved while traffic flowed"
    );

    let families: Vec<&str> = first
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert!(families.len() > 30, "{families:?}");
    assert!(
        families.windows(2).all(|w| w[0] < w[1]),
        "families not sorted: {families:?}"
    );
    let helps: Vec<&str> = first
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert!(helps.windows(2).all(|w| w[0] < w[1]), "{helps:?}");

    // Series by labels, numbers as numbers: queue 0 before 1, flow 2 before 10, "other" last.
    let flows = |queue: &str| -> Vec<String> {
        series(&first)
            .into_iter()
            .filter(|s| s.starts_with("ringblast_rx_packets_total{") && s.contains(queue))
            .map(|s| {
                s.split("flow=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let mut expected: Vec<String> = (0..16).map(|f| f.to_string()).collect();
    expected.push("other".into());
    assert_eq!(flows("queue=\"0\""), expected);
    let queues: Vec<&str> = series(&first)
        .into_iter()
        .filter(|s| s.starts_with("ringblast_rx_packets_total{"))
        .map(|s| {
            s.split("queue=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    assert!(queues.windows(2).all(|w| w[0] <= w[1]), "{queues:?}");
    // Histogram buckets stay ascending within their series.
    let les: Vec<&str> = series(&first)
        .into_iter()
        .filter(|s| {
            s.starts_with("ringblast_rx_latency_seconds_bucket{") && s.contains("queue=\"0\"")
        })
        .map(|s| s.split("le=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(les.last(), Some(&"+Inf"), "{les:?}");
    let bounds: Vec<f64> = les[..les.len() - 1]
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{les:?}");
}

/// The sink's packets in a scrape, summed over its series.
fn scraped_rx_packets(body: &str) -> u64 {
    body.lines()
        .filter(|l| l.starts_with("ringblast_rx_packets_total{"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn a_run_stopped_by_sigint_lingers_and_the_next_signal_ends_the_linger() {
    let _traffic = traffic_lock();
    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut run = Proc::ringblast(
        None,
        &[
            "pair",
            "--duration",
            "60s",
            "--rate",
            "1kpps",
            "--json",
            "--interval",
            "0",
            "--metrics",
            &addr,
            "--metrics-linger",
            "60s",
        ],
    );
    // The event for the interrupt: the sink has counted traffic (the endpoint says so).
    let until = Instant::now() + Duration::from_secs(20);
    while scrape(port).is_none_or(|b| scraped_rx_packets(&b) == 0) {
        assert!(Instant::now() < until, "no traffic counted within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    run.interrupt();
    run.wait_line(
        "metrics: serving final values for 60s",
        Duration::from_secs(10),
    );
    // After the summaries the endpoint still answers, with the final count.
    let body = scrape(port).expect("the endpoint answers during the linger");
    let scraped = scraped_rx_packets(&body);
    // A second signal ends the linger at once, cleanly.
    let asked = Instant::now();
    run.interrupt();
    let (status, out, err) = run.finish();
    assert!(status.success(), "{status}: {err}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the linger outlived its signal by {:?}",
        asked.elapsed()
    );
    let sink = common::last_summary(&out, "sink");
    assert_eq!(common::u(&sink, "rx_packets"), scraped, "{sink}");
}
