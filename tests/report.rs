//! `ringblast report` end to end: real runs on loopback (a pair with short intervals, a stepped
//! pair, and a search against a local sink) write their JSON Lines, `report` turns each into one
//! HTML file, and Debian's headless chromium loads it in a fresh network namespace (`unshare
//! -n`, so nothing can be fetched, with a dead proxy besides). The DOM chromium builds must hold
//! one point element per JSON record of each series: an interval line per point of the rate and
//! loss series, a step line per bar, a trial line per ladder point, and the NDR as a rule. A
//! screenshot of each page is kept as a test artefact under `target/tmp/report-test/`, not in the
//! repository. Bad input exits 4 with one line naming the fix.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use common::*;
use serde_json::Value;

/// Where the JSON, the pages and the screenshots are kept (under target/, not the repository).
fn artefacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-test");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn records(jsonl: &str) -> Vec<Value> {
    jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn how_many(records: &[Value], kind: &str, role: Option<&str>) -> usize {
    records
        .iter()
        .filter(|r| r["type"] == kind && role.is_none_or(|role| r["role"] == role))
        .count()
}

/// Runs `ringblast report JSONL -o HTML` and returns the page.
fn report(jsonl: &Path, html: &Path) -> String {
    let out = ringblast(&[
        "report",
        jsonl.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_ok(&out);
    let page = std::fs::read_to_string(html).unwrap();
    assert!(
        !page.contains("<script") && !page.contains(" src=") && !page.contains(" href="),
        "the page must load nothing: {}",
        html.display()
    );
    assert!(page.contains("Content-Security-Policy"), "no CSP");
    page
}

/// Chromium, headless, in a new network namespace with no interface up and a dead proxy.
fn chromium(args: &[&str], profile: &Path) -> std::process::Output {
    let browser = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .expect("chromium is not installed: apt-get install chromium (scripts/test.sh does)");
    Command::new("timeout")
        .args(["120", "unshare", "-n", browser])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run chromium")
}

/// Loads `html` in chromium: returns the DOM it built, and writes `png`, a screenshot.
fn browse(html: &Path, png: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", html.display());
    let dom = chromium(&["--dump-dom", &url], profile.path());
    assert!(
        dom.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8(dom.stdout).unwrap();
    assert!(dom.contains("</main>"), "chromium built no page: {dom}");
    let _ = std::fs::remove_file(png);
    let shot = chromium(
        &[
            "--window-size=1000,2600",
            &format!("--screenshot={}", png.display()),
            &url,
        ],
        profile.path(),
    );
    assert!(
        shot.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let image = std::fs::read(png).unwrap();
    assert!(
        image.starts_with(b"\x89PNG\r\n\x1a\n") && image.len() > 20_000,
        "{} is not a screenshot of the page ({} bytes)",
        png.display(),
        image.len()
    );
    dom
}

/// The point elements of `series` in the DOM chromium built.
fn points(dom: &str, series: &str) -> usize {
    dom.matches(&format!("class=\"pt\" data-series=\"{series}\""))
        .count()
}

fn run_to_file(args: &[&str], file: &Path) -> String {
    let out = ringblast(args);
    assert_ok(&out);
    let stdout = String::from_utf8(out.stdout).unwrap();
    std::fs::write(file, &stdout).unwrap();
    stdout
}

fn assert_root_for_browser() {
    assert!(
        is_root(),
        "this test loads the page in chromium inside `unshare -n`: run it as root"
    );
}

#[test]
#[ignore = "needs root and chromium: it loads the pages in headless chromium inside a new network namespace (unshare -n)"]
fn a_pair_run_in_the_browser_has_one_point_per_interval_line() {
    assert_root_for_browser();
    let dir = artefacts();
    let jsonl = dir.join("pair.jsonl");
    let stdout = {
        let _guard = traffic_lock();
        run_to_file(
            &[
                "pair",
                "--rate",
                "20kpps",
                "--duration",
                "2s",
                "--interval",
                "200ms",
                "--json",
                "--no-metrics",
            ],
            &jsonl,
        )
    };
    let records = records(&stdout);
    let sent = how_many(&records, "interval", Some("send"));
    let received = how_many(&records, "interval", Some("sink"));
    assert!(
        sent >= 8 && received >= 8,
        "{sent} and {received} intervals"
    );
    report(&jsonl, &dir.join("pair.html"));
    let dom = browse(&dir.join("pair.html"), &dir.join("pair.png"));
    // The header is the run's start record.
    let start = records.iter().find(|r| r["type"] == "start").unwrap();
    let title = format!(
        "<h1>ringblast pair udp over 127.0.0.1, started {}</h1>",
        start["started_at"].as_str().unwrap()
    );
    assert!(dom.contains(&title), "{title} not in the page");
    for fact in [
        &start["host"]["name"],
        &start["host"]["kernel"],
        &start["commit"],
    ] {
        assert!(
            dom.contains(fact.as_str().unwrap()),
            "{fact} not in the page"
        );
    }
    assert_eq!(points(&dom, "sent"), sent, "sent");
    assert_eq!(points(&dom, "target"), sent, "target (20 kpps, paced)");
    assert_eq!(points(&dom, "received"), received, "received");
    for series in ["lost", "kernel-drops", "reordered", "duplicates"] {
        assert_eq!(points(&dom, series), received, "{series}");
    }
    // Counts get whole ticks: the loss chart's y axis (its ticks are anchored at their end)
    // never reads 0.2 packets.
    let loss = dom.split("id=\"loss-chart\"").nth(1).unwrap();
    let loss = loss.split("</svg>").next().unwrap();
    let ticks: Vec<&str> = loss
        .split("class=\"tick\"")
        .skip(1)
        .filter(|t| {
            t.split('>')
                .next()
                .is_some_and(|a| a.contains("text-anchor=\"end\""))
        })
        .filter_map(|t| t.split('>').nth(1)?.split('<').next())
        .collect();
    assert!(
        !ticks.is_empty() && ticks.iter().all(|t| !t.contains('.')),
        "the loss chart's ticks: {ticks:?}"
    );
    assert!(
        points(&dom, "latency") >= 3,
        "latency percentiles: {}",
        points(&dom, "latency")
    );
    let senders = &records
        .iter()
        .rev()
        .find(|r| r["type"] == "summary" && r["role"] == "sink")
        .unwrap()["senders"];
    let rows = dom.split("<table class=\"senders\">").nth(1).unwrap();
    let rows = rows.split("</table>").next().unwrap();
    assert_eq!(
        rows.matches("<tr>").count() - 1,
        senders.as_array().unwrap().len(),
        "one row per sender"
    );
    // The sink's books of its one sender carry jitter: the page draws its CDF and never says
    // it is unknown.
    assert!(
        senders[0]["jitter"]["p50_ns"].is_u64(),
        "the sink's books: {senders}"
    );
    assert!(
        points(&dom, "jitter-1") >= 5,
        "{}",
        points(&dom, "jitter-1")
    );
    assert!(
        points(&dom, "latency-1") >= 5,
        "{}",
        points(&dom, "latency-1")
    );
    assert!(
        !dom.contains("jitter: unknown"),
        "the page contradicts its JSON"
    );
    // Latency over time: a point per sink interval whose sender part carries a latency, for its
    // p50 and its p99.
    assert_latency_over_time(&records, &dom);
}

#[test]
#[ignore = "needs root and chromium: it loads the pages in headless chromium inside a new network namespace (unshare -n)"]
fn a_tcp_pair_in_the_browser_shows_tcps_own_figures() {
    assert_root_for_browser();
    let dir = artefacts();
    let jsonl = dir.join("tcp.jsonl");
    let stdout = {
        let _guard = traffic_lock();
        run_to_file(
            &[
                "pair",
                "--proto",
                "tcp",
                "--rate",
                "500pps",
                "--size",
                "1000",
                "--duration",
                "2s",
                "--interval",
                "250ms",
                "--json",
                "--no-metrics",
            ],
            &jsonl,
        )
    };
    let records = records(&stdout);
    let with_info = records
        .iter()
        .filter(|r| r["type"] == "interval" && r["role"] == "send")
        .filter(|r| r["srtt_us_max"].is_u64())
        .count();
    assert!(with_info >= 5, "{with_info} sender intervals with TCP_INFO");
    report(&jsonl, &dir.join("tcp.html"));
    let dom = browse(&dir.join("tcp.html"), &dir.join("tcp.png"));
    // The rate chart is in records/s with the run's target, as a UDP page is in pps.
    let sent = how_many(&records, "interval", Some("send"));
    assert_eq!(points(&dom, "sent"), sent, "sent");
    assert_eq!(
        points(&dom, "target"),
        sent,
        "target (500 records/s, paced)"
    );
    assert!(
        dom.contains("rate (records per second)"),
        "the rate chart's unit"
    );
    assert!(dom.contains(" s: 500 rec/s</title>"), "the target's tip");
    assert_eq!(points(&dom, "srtt-max"), with_info, "srtt over time");
    assert_eq!(
        points(&dom, "retransmits"),
        with_info,
        "retransmits over time"
    );
    // The TCP table holds the summaries' own counts.
    let send = records
        .iter()
        .rfind(|r| r["type"] == "summary" && r["role"] == "send")
        .unwrap();
    let table = dom.split("<table class=\"tcp\">").nth(1).unwrap();
    let table = table.split("</table>").next().unwrap();
    let written = send["tx_records"].as_u64().unwrap();
    assert!(written >= 900, "{send}");
    assert!(
        table
            .replace('\u{2009}', "")
            .contains(&format!("<td>{written}</td>")),
        "records written {written} in {table}"
    );
    // The per-sender table is the TCP sink's books, with nothing n/a.
    let rows = dom.split("<table class=\"senders\">").nth(1).unwrap();
    let rows = rows.split("</table>").next().unwrap();
    assert!(rows.contains("<th>records</th>"), "{rows}");
    assert!(!rows.contains("n/a"), "{rows}");
    // Its latency: the books' cell bounds (one clock, so known).
    assert!(rows.contains("<th>latency p50</th>"), "{rows}");
    assert_eq!(
        rows.matches("<td>≤ ").count(),
        2,
        "p50 and p99 bounds: {rows}"
    );
    // Latency over time, as a UDP run's: a p50 and a p99 point per sink interval whose sender
    // part carries a latency.
    assert_latency_over_time(&records, &dom);
}

#[test]
#[ignore = "needs root and chromium: it loads the pages in headless chromium inside a new network namespace (unshare -n)"]
fn a_stepped_run_in_the_browser_has_one_bar_per_step_line() {
    assert_root_for_browser();
    let dir = artefacts();
    let jsonl = dir.join("steps.jsonl");
    let stdout = {
        let _guard = traffic_lock();
        run_to_file(
            &[
                "pair",
                "--rate-steps",
                "10kpps:1s,20kpps:1s,30kpps:1s",
                "--interval",
                "250ms",
                "--json",
                "--no-metrics",
            ],
            &jsonl,
        )
    };
    let records = records(&stdout);
    let steps = how_many(&records, "step", None);
    assert_eq!(steps, 3);
    let sent = how_many(&records, "interval", Some("send"));
    report(&jsonl, &dir.join("steps.html"));
    let dom = browse(&dir.join("steps.html"), &dir.join("steps.png"));
    for series in [
        "step_target",
        "step_achieved",
        "step_lost",
        "step_reordered",
        "step_duplicates",
    ] {
        assert_eq!(points(&dom, series), steps, "{series}");
    }
    assert_eq!(points(&dom, "sent"), sent);
    assert_eq!(points(&dom, "target"), sent, "a target for every interval");
    assert_eq!(
        points(&dom, "received"),
        how_many(&records, "interval", Some("sink"))
    );
}

#[test]
#[ignore = "needs root and chromium: it loads the pages in headless chromium inside a new network namespace (unshare -n)"]
fn a_search_in_the_browser_has_its_trial_ladder_and_ndr() {
    assert_root_for_browser();
    let dir = artefacts();
    let jsonl = dir.join("search.jsonl");
    let secret = secret_file();
    let port = free_port();
    let to = format!("127.0.0.1:{port}");
    let stdout = {
        let _guard = traffic_lock();
        let mut sink = Command::new(bin())
            .args(["sink", "--listen", &to, "--interval", "0", "--secret-file"])
            .arg(secret.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_bound(None, port);
        let out = Command::new(bin())
            .args(["search", "--json", "--to", &to, "--secret-file"])
            .arg(secret.path())
            .args([
                "--min-rate",
                "5kpps",
                "--max-rate",
                "40kpps",
                "--precision",
                "0.2",
                "--trial",
                "200ms",
                "--final-trial",
                "300ms",
                "--max-time",
                "60s",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        sink.kill().unwrap();
        sink.wait().unwrap();
        assert_ok(&out);
        let stdout = String::from_utf8(out.stdout).unwrap();
        std::fs::write(&jsonl, &stdout).unwrap();
        stdout
    };
    let records = records(&stdout);
    let trials = how_many(&records, "trial", None);
    assert!(trials >= 2, "{trials} trials");
    report(&jsonl, &dir.join("search.html"));
    let dom = browse(&dir.join("search.html"), &dir.join("search.png"));
    assert_eq!(points(&dom, "trial_rate"), trials);
    let search = records.iter().find(|r| r["type"] == "search").unwrap();
    let found = search["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["lower_pps"].is_number());
    let ndr = found.clone().filter(|r| r["loss_ratio"] == 0.0).count();
    assert_eq!(dom.matches("data-rule=\"ndr\"").count(), ndr, "NDR rule");
    assert_eq!(
        dom.matches("data-rule=\"pdr\"").count(),
        found.count() - ndr,
        "PDR rules"
    );
}

#[test]
fn bad_input_is_one_line_naming_the_fix_with_exit_4() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.jsonl", "", "is empty"),
        (
            "text.jsonl",
            "send summary: 3 packets, 0 errors\n",
            "not JSON",
        ),
        (
            "other.jsonl",
            "{\"type\":\"other\"}\n{\"a\":1}\n",
            "no ringblast records",
        ),
    ];
    for (name, text, says) in cases {
        let input = dir.path().join(name);
        std::fs::write(&input, text).unwrap();
        let out = ringblast(&[
            "report",
            input.to_str().unwrap(),
            "-o",
            dir.path().join("out.html").to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("--json"),
            "{name}: {stderr}"
        );
        assert!(
            !dir.path().join("out.html").exists(),
            "{name}: wrote a page"
        );
    }
    let missing = ringblast(&["report", "/nonexistent/run.jsonl", "-o", "-"]);
    assert_eq!(missing.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read"));
}

#[test]
fn without_o_the_page_is_the_input_named_html_and_standard_input_needs_o() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("run.jsonl");
    let line =
        r#"{"type":"interval","role":"send","elapsed_s":1.0,"interval_s":1.0,"pps":10,"bps":5120}"#;
    std::fs::write(&input, format!("{line}\n")).unwrap();
    let out = ringblast(&["report", input.to_str().unwrap()]);
    assert_ok(&out);
    let page = std::fs::read_to_string(dir.path().join("run.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run.html"));

    let out = Command::new(bin())
        .args(["report", "-"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("-o OUT.html"), "{err}");
}

#[test]
fn report_reads_standard_input_and_help_shows_it() {
    let line = r#"{"type":"interval","role":"send","elapsed_s":1.0,"interval_s":1.0,"pps":10,"bps":5120,"future_field":1}"#;
    let mut child = Command::new(bin())
        .args(["report", "-", "-o", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{line}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_ok(&out);
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert_eq!(points(&page, "sent"), 1);
    assert!(page.contains("target: unknown"), "no target: said unknown");

    let help = ringblast(&["report", "--help"]);
    assert_ok(&help);
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("--output") && help.contains("ringblast report run.jsonl -o run.html"));
    let top = String::from_utf8(ringblast(&["--help"]).stdout).unwrap();
    assert!(top.contains("report"), "{top}");
}

/// A p50 and a p99 point per sink interval whose sender part carries a latency, and no word of
/// unknown latency over time on the page.
fn assert_latency_over_time(records: &[Value], dom: &str) {
    let with_latency = records
        .iter()
        .filter(|r| r["type"] == "interval" && r["role"] == "sink")
        .filter(|r| r["senders"][0]["latency"]["p50_ns_at_most"].is_u64())
        .count();
    assert!(with_latency >= 5, "{with_latency} intervals with a latency");
    assert_eq!(points(dom, "latency-time-1"), with_latency, "p50 over time");
    assert_eq!(
        points(dom, "latency-time-p99-1"),
        with_latency,
        "p99 over time"
    );
    assert!(
        !dom.contains("latency over time: unknown"),
        "the page contradicts its JSON"
    );
}
