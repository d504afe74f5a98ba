//! `ringblast search` against a known bottleneck: a tbf qdisc at 20 Mbit/s on the sender's veth
//! between two namespaces this test creates. With 64-byte payloads tbf sees 106-byte frames, so
//! the true limit is 20e6 / 8 / 106 ≈ 23 585 pps; the NDR found must lie within 5 % below it
//! (tbf's 8 KiB bucket lets a trial run a little above it), the PDR at or above the NDR, and the
//! whole search must finish within 60 s with short trials. `--max-time` running out exits 1.

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
