//! Where a run says its packet memory is, checked against the kernel's own view of the
//! process: the mappings with a `bind:` policy in `/proc/PID/numa_maps` (their `N<node>=` page
//! counts and page size) and their sizes in `/proc/PID/maps`, read while the run is up. The
//! start-up `memory (ROLE): qN ...` lines, the JSON summary's `placement[].memory` and the
//! `ringblast_queue_memory_*` gauges must all agree with it; `--hugepages` must say it fell
//! back exactly when `/proc/meminfo` has no free hugepages.

mod common;

use std::{collections::BTreeMap, net::UdpSocket, time::Duration};

use common::{proc::Proc, *};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(15);

/// One mapping of `/proc/PID/numa_maps` with an `MPOL_BIND` policy.
#[derive(Debug)]
struct BoundMapping {
    /// The node of `bind:N`.
    node: u32,
    /// `N<node>=<pages>` entries: resident pages per node.
    pages: BTreeMap<u32, u64>,
    /// `kernelpagesize_kB` × 1024.
    page_size: u64,
    /// The mapping's length (from `/proc/PID/maps`) in pages.
    total_pages: u64,
}

/// Every `bind:` mapping of process `pid` now.
fn bound_mappings(pid: u32) -> Vec<BoundMapping> {
    let numa = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let length = |start: &str| -> u64 {
        let range = maps
            .lines()
            .map(|l| l.split_whitespace().next().unwrap())
            .find(|r| r.split('-').next() == Some(start))
            .unwrap_or_else(|| panic!("no mapping at {start} in:\n{maps}"));
        let (a, b) = range.split_once('-').unwrap();
        u64::from_str_radix(b, 16).unwrap() - u64::from_str_radix(a, 16).unwrap()
    };
    numa.lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.starts_with("bind:"))
        })
        .map(|l| {
            let mut fields = l.split_whitespace();
            let start = fields.next().unwrap();
            let node = fields.next().unwrap()["bind:".len()..].parse().unwrap();
            let mut pages = BTreeMap::new();
            let mut page_size = 0;
            for f in fields {
                if let Some((k, v)) = f.split_once('=') {
                    if let Some(n) = k.strip_prefix('N').and_then(|n| n.parse().ok()) {
                        pages.insert(n, v.parse().unwrap());
                    } else if k == "kernelpagesize_kB" {
                        page_size = v.parse::<u64>().unwrap() * 1024;
                    }
                }
            }
            assert!(page_size > 0, "no kernelpagesize_kB in {l}");
            BoundMapping {
                node,
                pages,
                page_size,
                total_pages: length(start) / page_size,
            }
        })
        .collect()
}

/// `placement[queue].memory` of a summary.
fn memory(summary: &Value, queue: usize) -> &Value {
    let m = &summary["placement"][queue]["memory"];
    assert!(m.is_object(), "no placement[{queue}].memory in {summary}");
    m
}

/// `pages_by_node` of a memory object as numbers.
fn pages_by_node(memory: &Value) -> BTreeMap<u32, u64> {
    memory["pages_by_node"]
        .as_object()
        .unwrap_or_else(|| panic!("pages_by_node unknown in {memory}"))
        .iter()
        .map(|(n, c)| (n.parse().unwrap(), c.as_u64().unwrap()))
        .collect()
}

/// The start-up line a memory object must have been printed as (all pages on the bound node).
fn expected_line(role: &str, queue: usize, memory: &Value, pages_text: &str) -> String {
    let node = u(memory, "bound_node");
    format!(
        "memory ({role}): q{queue} bound to node {node}: {} pages on node {node}, {} not resident; {pages_text}",
        pages_by_node(memory)[&(node as u32)],
        u(memory, "not_resident_pages")
    )
}

fn hugepages_free() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("HugePages_Free in /proc/meminfo")
}

/// Scrapes until the memory gauges are registered (they are set once, at set-up).
fn scrape_memory_gauges(port: u16) -> String {
    let until = std::time::Instant::now() + WAIT;
    loop {
        let text = scrape_local(port);
        if text.contains("ringblast_queue_memory_bound_node{") {
            return text;
        }
        assert!(
            std::time::Instant::now() < until,
            "no memory gauges:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A paced one-queue sender to a plain socket that never reads; returns the running sender.
fn start_sender(extra: &[&str]) -> (Proc, UdpSocket) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = rx.local_addr().unwrap().to_string();
    let mut args = vec![
        "send",
        "--to",
        &to,
        "--control",
        "off",
        "--queues",
        "1",
        "--rate",
        "2kpps",
        "--duration",
        "2s",
        "--json",
    ];
    args.extend_from_slice(extra);
    (Proc::ringblast(None, &args), rx)
}

/// What one bounded sender run showed: its memory line, its bound mappings in numa_maps (read
/// while it ran), its memory gauges, its JSON summary and its stderr.
struct Observed {
    line: String,
    err: String,
    seen: Vec<BoundMapping>,
    scrape: String,
    summary: Value,
}

/// Runs a sender with `extra` arguments and a metrics endpoint, and observes it while it runs.
fn observe_sender(extra: &[&str]) -> Observed {
    let port = free_port().to_string();
    let metrics = format!("127.0.0.1:{port}");
    let args: Vec<&str> = extra
        .iter()
        .copied()
        .chain(["--metrics", &metrics])
        .collect();
    let (mut send, _rx) = start_sender(&args);
    let line = send.wait_line("memory (send): q0 ", WAIT);
    let seen = bound_mappings(send.pid());
    let scrape = scrape_memory_gauges(port.parse().unwrap());
    let (status, out, err) = send.finish();
    assert!(status.success(), "{err}");
    let summary = last_summary(&out, "send");
    Observed {
        line,
        err,
        seen,
        scrape,
        summary,
    }
}

#[test]
fn a_sender_says_where_its_memory_is_as_numa_maps_sees_it() {
    let _guard = traffic_lock();
    let Observed {
        line,
        err,
        seen,
        scrape,
        summary,
    } = observe_sender(&[]);
    let m = memory(&summary, 0);

    // One queue, one arena: the one mapping bound to a node.
    assert_eq!(seen.len(), 1, "{seen:?}");
    let arena = &seen[0];
    assert_eq!(u(m, "bound_node"), u64::from(arena.node), "{m}");
    assert_eq!(
        u(&summary["placement"][0], "node"),
        u64::from(arena.node),
        "{summary}"
    );
    assert_eq!(pages_by_node(m), arena.pages, "{m} vs {arena:?}");
    assert_eq!(u(m, "page_size_bytes"), arena.page_size, "{m}");
    // Registration pins every page of the sender's slots: all resident.
    assert_eq!(u(m, "not_resident_pages"), 0, "{m}");
    assert_eq!(arena.pages.values().sum::<u64>(), arena.total_pages);
    assert_eq!(m["hugepages"], "not_requested", "{m}");
    assert_eq!(m["all_on_node"], true, "{m}");
    assert!(m["pages_unknown_reason"].is_null(), "{m}");
    assert_eq!(line, expected_line("send", 0, m, "4 KiB pages"));
    assert!(!err.contains("packet memory is not all on"), "{err}");

    // The gauges, set once at set-up, say the same.
    let q = "role=\"send\",queue=\"0\"";
    assert_eq!(
        series_value(
            &scrape,
            &format!("ringblast_queue_memory_bound_node{{{q}}}")
        ),
        u64::from(arena.node)
    );
    assert_eq!(
        series_value(&scrape, &format!("ringblast_queue_memory_hugepages{{{q}}}")),
        0
    );
    for (node, pages) in &arena.pages {
        assert_eq!(
            series_value(
                &scrape,
                &format!("ringblast_queue_memory_pages{{{q},node=\"{node}\"}}")
            ),
            *pages
        );
    }
}

#[test]
fn an_idle_sink_counts_its_sparse_memory_as_numa_maps_does() {
    let _guard = traffic_lock();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut sink = Proc::ringblast(
        None,
        &[
            "sink",
            "--listen",
            &listen,
            "--queues",
            "2",
            "--duration",
            "1s",
            "--json",
        ],
    );
    let lines = [
        sink.wait_line("memory (sink): q0 ", WAIT),
        sink.wait_line("memory (sink): q1 ", WAIT),
    ];
    // Nothing is sent, so nothing faults in more of the receive buffers while this reads.
    let seen = bound_mappings(sink.pid());
    let (status, out, err) = sink.finish();
    assert!(status.success(), "{err}");
    let summary = last_summary(&out, "sink");
    assert_eq!(u(&summary, "rx_packets"), 0, "{summary}");

    // Two arenas; the kernel may merge two adjacent ones with one policy into one mapping, so
    // the totals per node are compared.
    let mut said: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut not_resident, mut total) = (0, 0);
    for (q, line) in lines.iter().enumerate() {
        let m = memory(&summary, q);
        assert_eq!(*line, expected_line("sink", q, m, "4 KiB pages"));
        assert_eq!(m["all_on_node"], true, "{m}");
        assert_eq!(u(m, "page_size_bytes"), 4096, "{m}");
        let pages = pages_by_node(m);
        // The buffers are faulted in sparsely: most pages are not resident yet.
        assert!(
            u(m, "not_resident_pages") > pages.values().sum::<u64>(),
            "{m}"
        );
        total += pages.values().sum::<u64>() + u(m, "not_resident_pages");
        not_resident += u(m, "not_resident_pages");
        for (node, count) in pages {
            *said.entry(node).or_default() += count;
        }
    }
    let mut kernel: BTreeMap<u32, u64> = BTreeMap::new();
    for mapping in &seen {
        assert_eq!(mapping.page_size, 4096, "{mapping:?}");
        for (node, count) in &mapping.pages {
            *kernel.entry(*node).or_default() += count;
        }
    }
    assert_eq!(said, kernel, "{seen:?}");
    assert_eq!(total, seen.iter().map(|m| m.total_pages).sum::<u64>());
    assert_eq!(
        not_resident,
        total - kernel.values().sum::<u64>(),
        "{seen:?}"
    );
}

#[test]
fn hugepages_fall_back_exactly_when_none_are_free() {
    let _guard = traffic_lock();
    let free = hugepages_free();
    let Observed {
        line,
        seen,
        scrape,
        summary,
        ..
    } = observe_sender(&["--hugepages"]);
    let m = memory(&summary, 0);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let arena = &seen[0];
    assert_eq!(u(m, "page_size_bytes"), arena.page_size, "{m} vs {arena:?}");
    assert_eq!(pages_by_node(m), arena.pages, "{m} vs {arena:?}");
    let gauge = series_value(
        &scrape,
        "ringblast_queue_memory_hugepages{role=\"send\",queue=\"0\"}",
    );
    if free == 0 {
        assert_eq!(m["hugepages"], "fell_back", "HugePages_Free is 0: {m}");
        assert_eq!(arena.page_size, 4096, "{arena:?}");
        assert_eq!(
            line,
            expected_line(
                "send",
                0,
                m,
                "4 KiB pages (hugepages unavailable: fell back)"
            )
        );
        assert_eq!(gauge, 0);
    } else {
        // The sender's slots fit in one hugepage, and one is free.
        assert_eq!(m["hugepages"], "used", "HugePages_Free is {free}: {m}");
        assert_eq!(arena.page_size, 2 << 20, "{arena:?}");
        assert_eq!(line, expected_line("send", 0, m, "2 MiB hugepages"));
        assert_eq!(gauge, 1);
    }
}

#[test]
fn tcp_summaries_say_where_each_role_s_memory_is() {
    let _guard = traffic_lock();
    let out = ringblast(&[
        "pair",
        "--proto",
        "tcp",
        "--duration",
        "300ms",
        "--json",
        "--no-metrics",
    ]);
    assert_ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let runs = summaries(&out);
    for (role, summary) in [("send", runs.send.unwrap()), ("sink", runs.sink.unwrap())] {
        assert_eq!(summary["protocol"], "tcp", "{summary}");
        let place = &summary["placement"][0];
        let m = memory(&summary, 0);
        assert_eq!(u(m, "bound_node"), u(place, "node"), "{summary}");
        assert_eq!(m["hugepages"], "not_requested", "{m}");
        assert_eq!(m["all_on_node"], true, "{m}");
        let line = expected_line(role, 0, m, "4 KiB pages");
        assert!(err.lines().any(|l| l == line), "no {line:?} in:\n{err}");
    }
}
