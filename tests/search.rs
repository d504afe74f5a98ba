//! `ringblast search` against a known bottleneck: a tbf qdisc at 20 Mbit/s on the sender's veth
//! between two namespaces this test creates. With 64-byte payloads tbf sees 106-byte frames, so
//! the true limit is 20e6 / 8 / 106 ≈ 23 585 pps; the NDR found must lie within 5 % below it
//! (tbf's 8 KiB bucket lets a trial run a little above it), the PDR at or above the NDR, and the
//! whole search must finish within 60 s with short trials. `--max-time` running out exits 1.
//! With `--metrics`, each trial serves its one-step verdict, scraped from the sink's side.

mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

fn search(lab: &Lab, secret: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "search", "--json"])
        .args(["--to", "10.213.0.2:7600", "--secret-file", secret])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn the_search_finds_the_tbf_rate_as_ndr_and_a_pdr_above_it() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    let _guard = traffic_lock();
    let lab = Lab::create("se", 213);
    let tbf = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.tx,
            "tc",
            "qdisc",
            "add",
            "dev",
            &lab.tx_dev,
        ])
        .args([
            "root", "tbf", "rate", "20mbit", "burst", "8kb", "limit", "8kb",
        ])
        .status()
        .unwrap();
    assert!(tbf.success(), "tc qdisc add tbf");
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap().to_string();
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &lab.rx, bin(), "sink", "--interval", "0"])
        .args(["--listen", "10.213.0.2:7600", "--secret-file", &secret])
        .args(["--duration", "100s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_bound(Some(&lab.rx), 7600);

    let out = search(&lab, &secret, &["--trial", "500ms", "--final-trial", "1s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(
        last["type"], "search",
        "the last line is the summary: {last}"
    );
    let trials = lines.iter().filter(|v| v["type"] == "trial").count() as u64;
    assert_eq!(u(last, "trials"), trials, "{last}");
    assert!(last["duration_s"].as_f64().unwrap() < 60.0, "{last}");
    let results = last["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "NDR and PDR: {last}");
    let tbf_pps = 20e6 / 8.0 / 106.0;
    let ndr = u(&results[0], "lower_pps") as f64;
    let pdr = u(&results[1], "lower_pps") as f64;
    assert_eq!(results[0]["loss_ratio"], 0.0);
    assert!(
        ndr >= 0.95 * tbf_pps && ndr <= 1.01 * tbf_pps,
        "NDR {ndr} against tbf {tbf_pps}: {last}\n{stderr}"
    );
    assert!(pdr >= ndr, "PDR {pdr} below NDR {ndr}: {last}");
    assert!(u(&results[0], "upper_pps") as f64 >= ndr, "{last}");
    // Trials above the bottleneck are refused at the sender's qdisc: reported as such.
    assert!(
        lines
            .iter()
            .any(|v| v["type"] == "trial" && v["sender_limited"] == true),
        "{stdout}"
    );

    let out = search(&lab, &secret, &["--trial", "300ms", "--max-time", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--max-time ran out"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "search", "{stdout}");
    let results = last["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "every ratio is reported: {last}");
    assert!(results.iter().all(|r| r["converged"] == false), "{last}");
    let _ = sink.kill();
    let _ = sink.wait();
}

#[test]
fn bad_search_options_exit_2() {
    for (args, needle) in [
        (vec!["--loss-ratios", "2"], "not a loss ratio"),
        (vec!["--size", "64:0"], "not a whole number from 1"),
        (vec!["--min-rate", "max"], "not max"),
    ] {
        let mut all = vec!["search", "--to", "127.0.0.1:9"];
        all.extend(args.iter().copied());
        let out = ringblast(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// The sum of the labelled series of `name` whose labels contain `label` in a Prometheus text
/// scrape; `None` when there is none.
fn series(text: &str, name: &str, label: &str) -> Option<u64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with('{')) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() as u64)
}

#[test]
fn with_metrics_each_trial_serves_its_step_verdict_while_it_lingers() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    let _guard = traffic_lock();
    let lab = Lab::create("sm", 214);
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap().to_string();
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &lab.rx, bin(), "sink", "--interval", "0"])
        .args(["--listen", "10.214.0.2:7601", "--secret-file", &secret])
        .args(["--duration", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_bound(Some(&lab.rx), 7601);
    let metrics = "10.214.0.1:9981";
    let search = Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "search", "--json"])
        .args(["--to", "10.214.0.2:7601", "--secret-file", &secret])
        .args([
            "--min-rate",
            "5kpps",
            "--max-rate",
            "20kpps",
            "--trial",
            "300ms",
        ])
        .args([
            "--max-time",
            "1s",
            "--metrics",
            metrics,
            "--metrics-linger",
            "3s",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The first trial's verdict, scraped from the sink's side (as a Prometheus elsewhere would)
    // while the trial's process lingers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let scraped = loop {
        let out = Command::new("ip")
            .args(["netns", "exec", &lab.rx, "curl", "-sf", "--max-time", "2"])
            .arg(format!("http://{metrics}/metrics"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if series(&text, "ringblast_tx_steps_total", "verdict=\"judged\"") == Some(1) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no judged trial was served: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = search.wait_with_output().unwrap();
    let _ = sink.kill();
    let _ = sink.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "trial")
        .unwrap_or_else(|| panic!("no trial line: {stdout}"));
    let step = |result: &str| {
        series(
            &scraped,
            "ringblast_tx_step_packets_total",
            &format!("result=\"{result}\""),
        )
    };
    let offered = u(&first, "offered");
    assert!(offered > 0, "{first}");
    assert_eq!(step("sent"), Some(offered), "{first}\n{scraped}");
    assert_eq!(
        step("received"),
        Some(offered - u(&first, "lost")),
        "{first}\n{scraped}"
    );
    assert!(
        scraped
            .lines()
            .any(|l| l.starts_with("ringblast_tx_schedule_steps 1")),
        "a trial is a one-step run: {scraped}"
    );
}
