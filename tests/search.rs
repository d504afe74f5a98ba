//! `ringblast search` against a known bottleneck: a tbf qdisc at 20 Mbit/s on a router
//! namespace's egress towards the sink, between namespaces this test creates (a qdisc on the
//! sender's own egress would refuse its sends, which makes the sender, not the path, the limit).
//! Only UDP enters tbf (an htb class); the control channel passes unshaped, as on a management
//! path. tbf charges each packet its whole frame: the
//! 64-byte payload (ringblast's header is inside it) + UDP 8 + IP 20 + Ethernet 14 = 106 bytes,
//! read back from the qdisc's own byte and packet counters, so the true limit is
//! 20e6 / 8 / 106 ≈ 23 585 pps. A trial of `d` seconds can pass a little above it, by what the
//! 16 KiB bucket and the 16 KiB queue hold (32 KiB / 106 B / d: at most 0.7 % for a 2 s trial;
//! a queue of 13 ms absorbs a router or sender stalled that long on a busy 2-core host). The NDR found must lie within 5 %
//! below the limit and at most `--precision` above what a final-length trial can pass, be
//! backed by a final-length trial, and hold in a run at that rate that the qdisc drops nothing
//! of; the PDR lies at or above the NDR, and the whole search converges within its
//! `--max-time` with short trials. `--max-time` running out exits 1. Every trial runs on one
//! control connection, counted by the sink's kernel (nft). With `--metrics`, each trial's verdict
//! is served as a step, scraped from the sink's side. A search whose own CPU is capped (a CPU
//! cgroup) passes no trial it did not offer, by the namespace's own count of datagrams sent,
//! and ends at what its sender could offer with exit 6.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use common::*;
use serde_json::Value;

/// A sender, a router and a sink namespace: `10.<net>.0.1` routes through the router to the
/// sink at `10.<net>.1.2`; the router's device towards the sink is `dev`. Deleted on drop.
struct Routed {
    tx: String,
    router: String,
    rx: String,
    dev: String,
}

impl Routed {
    fn create(tag: &str, net: u8) -> Routed {
        let id = std::process::id() % 100_000;
        let r = Routed {
            tx: format!("rb{tag}tx{id}"),
            router: format!("rb{tag}rt{id}"),
            rx: format!("rb{tag}rx{id}"),
            dev: format!("rb{tag}{id}c"),
        };
        let (a, b, d) = (
            format!("rb{tag}{id}a"),
            format!("rb{tag}{id}b"),
            format!("rb{tag}{id}d"),
        );
        let ip = |args: &[&str]| Command::new("ip").args(args).status().unwrap().success();
        let n = |last: &str| format!("10.{net}.{last}");
        let ok = [&r.tx, &r.router, &r.rx]
            .iter()
            .all(|ns| ip(&["netns", "add", ns]) && ip(&["-n", ns, "link", "set", "lo", "up"]))
            && ip(&[
                "link", "add", &a, "netns", &r.tx, "type", "veth", "peer", "name", &b, "netns",
                &r.router,
            ])
            && ip(&[
                "link", "add", &r.dev, "netns", &r.router, "type", "veth", "peer", "name", &d,
                "netns", &r.rx,
            ])
            && ip(&["-n", &r.tx, "addr", "add", &n("0.1/24"), "dev", &a])
            && ip(&["-n", &r.router, "addr", "add", &n("0.254/24"), "dev", &b])
            && ip(&[
                "-n",
                &r.router,
                "addr",
                "add",
                &n("1.254/24"),
                "dev",
                &r.dev,
            ])
            && ip(&["-n", &r.rx, "addr", "add", &n("1.2/24"), "dev", &d])
            && ip(&["-n", &r.tx, "link", "set", &a, "up"])
            && ip(&["-n", &r.router, "link", "set", &b, "up"])
            && ip(&["-n", &r.router, "link", "set", &r.dev, "up"])
            && ip(&["-n", &r.rx, "link", "set", &d, "up"])
            && ip(&["-n", &r.tx, "route", "add", "default", "via", &n("0.254")])
            && ip(&["-n", &r.rx, "route", "add", "default", "via", &n("1.254")])
            && Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &r.router,
                    "sysctl",
                    "-qw",
                    "net.ipv4.ip_forward=1",
                ])
                .status()
                .unwrap()
                .success();
        assert!(
            ok,
            "create three namespaces, two veth pairs and routes (iproute2, root)"
        );
        r
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        for ns in [&self.tx, &self.router, &self.rx] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn search(lab: &Routed, secret: &str, args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", &lab.tx, bin(), "search", "--json"])
        .args(["--to", "10.213.1.2:7600", "--secret-file", secret])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The tbf qdisc's own counters on `dev` in `ns`: (bytes sent, packets sent, packets dropped).
fn qdisc_counters(ns: &str, dev: &str) -> (u64, u64, u64) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev", dev])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("qdisc tbf"))
        .find(|l| l.trim_start().starts_with("Sent "))
        .unwrap_or_else(|| panic!("no tbf Sent line: {text}"))
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .filter(|w| !w.is_empty())
        .collect();
    // Sent B bytes P pkt (dropped D, overlimits O requeues R)
    let after = |key: &str| -> u64 {
        let at = words.iter().position(|w| *w == key).unwrap();
        words[at + 1].parse().unwrap()
    };
    (after("Sent"), words[3].parse().unwrap(), after("dropped"))
}

#[test]
#[ignore = "needs root: it creates network namespaces"]
fn the_search_finds_the_tbf_rate_as_ndr_and_a_pdr_above_it() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    let _guard = traffic_lock();
    let lab = Routed::create("se", 213);
    // Only the data (UDP) goes through tbf: an htb root sends it to a class whose qdisc is tbf,
    // and everything else, the control channel (TCP) included, to an unshaped class, so a
    // trial above the limit, whose excess tbf drops, never drops a control frame (the search
    // then kept one connection only while TCP's retransmits beat its read deadline).
    let tc = |args: &str| {
        Command::new("ip")
            .args(["netns", "exec", &lab.router, "tc"])
            .args(args.split_whitespace())
            .status()
            .unwrap()
            .success()
    };
    let dev = &lab.dev;
    let tbf = tc(&format!(
        "qdisc add dev {dev} root handle 1: htb default 20"
    )) && ["10", "20"].iter().all(|class| {
        tc(&format!(
            "class add dev {dev} parent 1: classid 1:{class} htb rate 10gbit quantum 1514"
        ))
    }) && tc(&format!(
        "qdisc add dev {dev} parent 1:10 handle 30: tbf rate 20mbit burst 16kb limit 16kb"
    )) && tc(&format!(
        "filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff flowid 1:10"
    ));
    assert!(tbf, "tc: htb, tbf in its UDP class, and the UDP filter");
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap().to_string();
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &lab.rx, bin(), "sink", "--interval", "0"])
        .args(["--listen", "10.213.1.2:7600", "--secret-file", &secret])
        .args(["--duration", "200s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_bound(Some(&lab.rx), 7600);
    // ... and its control channel's TCP listener (bound after the UDP sockets): a connection
    // refused before it would count as a second request below.
    wait_listening(Some(&lab.rx), 7600);
    // The sink's kernel counts the control connections opened to it: connection requests (SYN
    // without ACK) to its port.
    nft(
        &lab.rx,
        "table ip rbsearch {\n counter connects { }\n \
         chain input {\n  type filter hook input priority 0; policy accept;\n  \
         tcp dport 7600 tcp flags & (syn | ack) == syn counter name \"connects\"\n }\n}\n",
    );

    let (_, _, dropped_before) = qdisc_counters(&lab.router, &lab.dev);
    let budget = 60.0;
    let final_s = 2.0;
    let precision = 0.005;
    let out = search(
        &lab,
        &secret,
        &[
            "--trial",
            "500ms",
            "--final-trial",
            "2s",
            "--max-time",
            "60s",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<Value> = stdout.lines().map(common::schema::record).collect();
    let last = lines.last().unwrap();
    assert_eq!(
        last["type"], "search",
        "the last line is the summary: {last}"
    );
    let trials = lines.iter().filter(|v| v["type"] == "trial").count() as u64;
    assert_eq!(u(last, "trials"), trials, "{last}");
    // Every trial ran on one control connection (and one sender process): the sink's kernel
    // saw a single connection request however many trials there were.
    assert!(trials > 3, "{last}");
    assert_eq!(
        nft_named(&lab.rx, "ip", "rbsearch", "connects").0,
        1,
        "{trials} trials, one control connection: {stderr}"
    );
    assert!(last["duration_s"].as_f64().unwrap() <= budget, "{last}");
    assert_eq!(
        last["phases_s"].as_array().unwrap().last(),
        Some(&final_s.into())
    );
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
    assert!(results.iter().all(|r| r["converged"] == true), "{last}");
    // The trials that back the NDR: a final-length pass, and a final-length failure above it.
    let trial_line = |key: &str| {
        let n = u(&results[0], key);
        lines
            .iter()
            .find(|v| v["type"] == "trial" && v["trial"] == n)
            .unwrap_or_else(|| panic!("no trial {n}: {stdout}"))
    };
    let (lower, upper) = (trial_line("lower_trial"), trial_line("upper_trial"));
    assert_eq!(lower["duration_s"], final_s, "{lower}");
    assert_eq!(u(lower, "lost"), 0, "{lower}");
    assert_eq!(u(lower, "rate_pps") as f64, ndr, "{lower}");
    assert_eq!(results[0]["lower_duration_s"], final_s, "{last}");
    assert_eq!(upper["duration_s"], final_s, "{upper}");
    assert!(u(upper, "lost") > 0, "{upper}");
    assert!(last["contradictions"].is_u64(), "{last}");
    // The qdisc dropped what the trials above the limit offered beyond it.
    let (_, _, dropped_after) = qdisc_counters(&lab.router, &lab.dev);
    assert!(
        dropped_after > dropped_before,
        "the search never passed the limit"
    );

    // A final-length run one precision step (0.5 %) below the NDR: the qdisc drops nothing, and
    // its counters say what each packet costs it, hence what a final-length trial can pass. Not
    // at the NDR itself: a 2 s trial there passes only while tbf's bucket and queue absorb the
    // excess over its rate, which a re-run at that edge does not always repeat (33 of 47 000
    // dropped in one run); a 30 s final trial amortises that edge, a 2 s one cannot.
    let confirm_pps = (ndr * 0.995).floor();
    // The claim holds for a sender that keeps its pace. One descheduled for tens of ms on this
    // 2-core VM falls behind and catches up in a burst that tbf's queue cannot hold
    // (seen once: achieved_ratio 0.979, 1001 dropped); such a run says nothing about the
    // NDR, so it is re-run (at most 3 runs), and the drops of every run that kept pace must be 0.
    let mut runs = 0;
    let (send, bytes0, packets0, bytes1, packets1) = loop {
        runs += 1;
        let (bytes0, packets0, dropped0) = qdisc_counters(&lab.router, &lab.dev);
        let confirm = Command::new("ip")
            .args(["netns", "exec", &lab.tx, bin(), "send", "--json"])
            .args(["--to", "10.213.1.2:7600", "--secret-file", &secret])
            .args(["--size", "64", "--interval", "0", "--duration", "2s"])
            .args(["--rate", &format!("{confirm_pps}pps")])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_ok(&confirm);
        let send = summaries(&confirm).send.unwrap();
        let (bytes1, packets1, dropped1) = qdisc_counters(&lab.router, &lab.dev);
        let kept_pace = send["achieved_ratio"].as_f64().unwrap() >= 0.995;
        // A sender descheduled and caught up within the run keeps its overall pace but still
        // bursts past tbf's queue (seen once: achieved_ratio 1.0, 560 of 47 040 dropped): such
        // a run is re-run too. An NDR above the path's rate drops in every run.
        if (!kept_pace || dropped1 != dropped0) && runs < 3 {
            eprintln!(
                "confirmation run {runs}: achieved_ratio {}, tbf dropped {}: re-run",
                send["achieved_ratio"],
                dropped1 - dropped0
            );
            continue;
        }
        assert!(
            kept_pace,
            "3 confirmation runs fell behind their pace: {send}"
        );
        assert_eq!(
            dropped1, dropped0,
            "tbf dropped packets just below the NDR: {send}"
        );
        break (send, bytes0, packets0, bytes1, packets1);
    };
    assert!(packets1 - packets0 >= u(&send, "tx_packets"), "{send}");
    let frame = (bytes1 - bytes0) as f64 / (packets1 - packets0) as f64;
    assert!(
        (frame - 106.0).abs() < 2.0,
        "tbf charges {frame} bytes a packet"
    );
    let bucket_and_queue = 2.0 * 16384.0;
    let final_pps = (20e6 / 8.0 + bucket_and_queue / final_s) / frame;
    assert!(
        ndr <= final_pps * (1.0 + precision),
        "NDR {ndr} above what a {final_s}s trial passes, {final_pps:.0}pps: {last}"
    );
    // The path, not the sender, was the limit: trials above it lost packets at the router,
    // none had a send refused, and the bounds are the path's.
    assert_eq!(last["reason"], "converged", "{last}");
    assert!(
        lines
            .iter()
            .filter(|v| v["type"] == "trial")
            .all(|v| u(v, "send_failed") == 0),
        "{stdout}"
    );
    assert!(
        results.iter().all(|r| r["sender_limited"] == false),
        "{last}"
    );

    let out = search(&lab, &secret, &["--trial", "300ms", "--max-time", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--max-time ran out"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = common::schema::records(&stdout).pop().unwrap();
    assert_eq!(last["type"], "search", "{stdout}");
    let results = last["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "every ratio is reported: {last}");
    assert!(results.iter().all(|r| r["converged"] == false), "{last}");
    let _ = sink.kill();
    let _ = sink.wait();
}

/// A TCP search through a 40 Mbit/s tbf (the router's whole egress to the sink: TCP's control
/// channel shares the data port). A TCP trial's loss is its shortfall, so its NDR in records/s
/// times the record size is the rate the path carried records at: within 80–102 % of the
/// qdisc's rate (its frames' headers take a few percent). The qdisc's own counters bound the
/// search: it dropped what the trials above its rate offered beyond it, and it passed at least
/// the bytes of every record the search counted as delivered.
#[test]
#[ignore = "needs root: it creates network namespaces"]
fn a_tcp_search_finds_the_tbf_rate_as_its_ndr_in_records() {
    assert!(
        is_root(),
        "this test creates network namespaces: run it as root"
    );
    let _guard = traffic_lock();
    let lab = Routed::create("st", 216);
    let tbf = Command::new("ip")
        .args(["netns", "exec", &lab.router, "tc", "qdisc", "add", "dev"])
        .args([&lab.dev, "root", "tbf", "rate", "40mbit", "burst", "32kb"])
        .args(["latency", "20ms"])
        .status()
        .unwrap()
        .success();
    assert!(tbf, "tc: a tbf at 40 Mbit/s");
    let secret = secret_file();
    let secret = secret.path().to_str().unwrap().to_string();
    let mut sink = Command::new("ip")
        .args(["netns", "exec", &lab.rx, bin(), "sink", "--proto", "tcp"])
        .args(["--listen", "10.216.1.2:7602", "--secret-file", &secret])
        .args(["--interval", "0", "--duration", "200s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(Some(&lab.rx), 7602);
    let (bytes_before, _, dropped_before) = qdisc_counters(&lab.router, &lab.dev);
    let record = 1000.0;
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.tx,
            bin(),
            "search",
            "--json",
            "--proto",
            "tcp",
        ])
        .args(["--to", "10.216.1.2:7602", "--secret-file", &secret])
        .args(["--size", "1000", "--trial", "1s", "--final-trial", "3s"])
        .args(["--max-time", "90s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (bytes_after, _, dropped_after) = qdisc_counters(&lab.router, &lab.dev);
    let _ = sink.kill();
    let _ = sink.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<Value> = stdout.lines().map(common::schema::record).collect();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "search", "{last}");
    assert_eq!(last["proto"], "tcp", "{last}");
    let trials: Vec<&Value> = lines.iter().filter(|v| v["type"] == "trial").collect();
    assert!(trials.iter().all(|t| t["proto"] == "tcp"), "{stdout}");
    let results = last["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["converged"] == true), "{last}");
    let ndr = u(&results[0], "lower_pps") as f64;
    let share = ndr * record * 8.0 / 40e6;
    assert!(
        (0.80..=1.02).contains(&share),
        "NDR {ndr} records/s of {record} bytes is {:.1} % of tbf's 40 Mbit/s: {last}\n{stderr}",
        share * 100.0
    );
    let trial = |n: u64| {
        *trials
            .iter()
            .find(|t| t["trial"] == n)
            .unwrap_or_else(|| panic!("no trial {n}: {stdout}"))
    };
    let lower = trial(u(&results[0], "lower_trial"));
    assert_eq!(lower["duration_s"], 3.0, "{lower}");
    assert_eq!(u(lower, "lost"), 0, "{lower}");
    if let Some(n) = results[0]["upper_trial"].as_u64() {
        assert!(u(trial(n), "lost") > 0, "{}", trial(n));
    }
    assert!(
        dropped_after > dropped_before,
        "the search never pushed past tbf's rate: {stderr}"
    );
    let delivered: u64 = trials.iter().map(|t| u(t, "offered") - u(t, "lost")).sum();
    assert!(
        delivered as f64 * record <= (bytes_after - bytes_before) as f64,
        "the trials counted {delivered} records delivered, more than the {} bytes tbf passed",
        bytes_after - bytes_before
    );
}

#[test]
fn bad_search_options_exit_2() {
    for (args, needle) in [
        (vec!["--loss-ratios", "2"], "not a loss ratio"),
        (vec!["--size", "64:0"], "not a whole number from 1"),
        (vec!["--min-rate", "max"], "not max"),
        (vec!["--drain", "1s"], "--drain applies to --proto tcp only"),
        (vec!["--conns", "2"], "--conns applies to --proto tcp only"),
        (
            vec!["--proto", "tcp", "--metrics", "127.0.0.1:9"],
            "--metrics does not apply to --proto tcp",
        ),
        (vec!["--proto", "tcp", "--size", "imix"], "give one --size"),
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
#[ignore = "needs root: it creates network namespaces"]
fn with_metrics_each_trial_is_a_step_whose_verdict_is_served() {
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
    let (sent_before, arrived_before) = (
        snmp(&lab.tx, "Udp", "OutDatagrams"),
        snmp(&lab.rx, "Udp", "InDatagrams"),
    );
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
    // The kernel's count of the whole search: what every trial offered left the sender's
    // namespace, and what the sink's verdicts say arrived reached its socket (the control
    // channel is TCP, so the Udp counters hold only the trials' datagrams).
    let trials: Vec<Value> = stdout
        .lines()
        .filter_map(common::schema::parsed)
        .filter(|v| v["type"] == "trial")
        .collect();
    let offered: u64 = trials.iter().map(|t| u(t, "offered")).sum();
    let arrived: u64 = trials.iter().map(|t| u(t, "offered") - u(t, "lost")).sum();
    assert_eq!(
        snmp(&lab.tx, "Udp", "OutDatagrams") - sent_before,
        offered,
        "Udp OutDatagrams of the sender's namespace: {stdout}"
    );
    assert_eq!(
        snmp(&lab.rx, "Udp", "InDatagrams") - arrived_before,
        arrived,
        "Udp InDatagrams of the sink's namespace: {stdout}"
    );
    let first: Value = stdout
        .lines()
        .filter_map(common::schema::parsed)
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
    // Each trial is a step of the search's one sender run: the steps so far, at least the one
    // judged.
    let steps: u64 = scraped
        .lines()
        .find_map(|l| l.strip_prefix("ringblast_tx_schedule_steps "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ringblast_tx_schedule_steps: {scraped}"));
    assert!(steps >= 1, "{scraped}");
}

/// A CPU cgroup capped at `percent` % of one CPU in 10 ms periods (cgroup v1's cpu controller,
/// or v2's `cpu.max`), removed on drop. A short period keeps each throttled gap below the 20 ms
/// a paced sender may still send in after a trial's end.
struct CpuCap(PathBuf);

impl CpuCap {
    fn create(tag: &str, percent: u64) -> CpuCap {
        let name = format!("rb{tag}{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let quota = (percent * 100).to_string();
        let dir = if v1.join("cpu.cfs_quota_us").exists() {
            let dir = v1.join(&name);
            std::fs::create_dir(&dir).expect("create a cgroup v1 cpu group (root)");
            std::fs::write(dir.join("cpu.cfs_period_us"), "10000").unwrap();
            std::fs::write(dir.join("cpu.cfs_quota_us"), &quota).unwrap();
            dir
        } else {
            let root = Path::new("/sys/fs/cgroup");
            let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))
                .expect("a cgroup v1 cpu controller or a cgroup v2 hierarchy");
            assert!(
                controllers.split_whitespace().any(|c| c == "cpu"),
                "cgroup v2 without the cpu controller: {controllers}"
            );
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            let dir = root.join(&name);
            std::fs::create_dir(&dir).expect("create a cgroup v2 group (root)");
            std::fs::write(dir.join("cpu.max"), format!("{quota} 10000")).unwrap();
            dir
        };
        CpuCap(dir)
    }

    /// `args` run inside the group: a shell joins it and execs them.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
            .arg(&self.0)
            .args(args);
        c
    }
}

impl CpuCap {
    /// The group's throttled time so far, in µs, as its own `cpu.stat` counts it (v1's
    /// `throttled_time` is in ns, v2's `throttled_usec` in µs).
    fn throttled_us(&self) -> u64 {
        let stat = std::fs::read_to_string(self.0.join("cpu.stat")).unwrap();
        let field = |name: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
        };
        field("throttled_usec ")
            .or_else(|| field("throttled_time ").map(|ns| ns / 1000))
            .unwrap_or_else(|| panic!("no throttled time in cpu.stat: {stat}"))
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The run: a search capped at 10 % of one CPU against an unshaped loopback sink, for
/// rates up to 400 kpps, which it cannot offer. No trial that offered less than its rate passes,
/// what the trials say they sent is what the namespace's kernel counted as sent, and the search
/// ends at its sender's ceiling: exit 6, `"reason":"sender_limited"`, and one line that says the
/// bound is this host's.
#[test]
#[ignore = "needs root: it creates a network namespace and a CPU cgroup"]
fn a_search_that_cannot_offer_its_rates_passes_none_of_them_and_exits_6() {
    assert!(
        is_root(),
        "this test creates a network namespace and a cgroup: run it as root"
    );
    let _guard = traffic_lock();
    let ns = Netns::create("slim");
    let sink = common::proc::Proc::ringblast(
        Some(&ns.0),
        &[
            "sink",
            "--listen",
            "127.0.0.1:7602",
            "--interval",
            "0",
            "--duration",
            "300s",
        ],
    );
    wait_bound(Some(&ns.0), 7602);
    let cap = CpuCap::create("slim", 10);
    let before = UdpSnmp::read(&ns.0);
    let out = cap
        .command(&["ip", "netns", "exec", &ns.0, bin(), "search", "--json"])
        .args(["--to", "127.0.0.1:7602", "--max-rate", "400kpps"])
        .args([
            "--trial",
            "500ms",
            "--final-trial",
            "1s",
            "--precision",
            "0.05",
        ])
        .args(["--max-time", "150s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let counted = UdpSnmp::read(&ns.0).since(before);
    sink.interrupt();
    let _ = sink.finish();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    let last_line = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    assert!(
        last_line.contains("could not offer") && last_line.contains("this host"),
        "{last_line}"
    );
    let lines: Vec<Value> = stdout.lines().map(common::schema::record).collect();
    let trials: Vec<&Value> = lines.iter().filter(|v| v["type"] == "trial").collect();
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "search", "{summary}");
    assert_eq!(summary["reason"], "sender_limited", "{summary}");
    // What the trials say they sent is what the kernel sent: the trials' own offered counts are
    // true, so the judgement below rests on real numbers.
    let sent: u64 = trials
        .iter()
        .map(|t| u(t, "offered") - u(t, "send_failed"))
        .sum();
    assert_eq!(sent, counted.out_datagrams, "{stdout}");
    // The cap bit: some trials fell short of their rate, and each was measured again.
    let limited: Vec<&&Value> = trials
        .iter()
        .filter(|t| t["sender_limited"] == true)
        .collect();
    assert!(limited.len() >= 2, "{stdout}");
    // No trial that offered less than 99 % of its rate counts as offered in full.
    for t in &trials {
        let due = t["rate_pps"].as_f64().unwrap() * t["duration_s"].as_f64().unwrap();
        let offered = (u(t, "offered") - u(t, "send_failed")) as f64;
        if offered < 0.99 * due - 1.0 {
            assert_eq!(t["sender_limited"], true, "short but judged: {t}");
        }
    }
    for r in summary["results"].as_array().unwrap() {
        assert_eq!(r["sender_limited"], true, "{r}");
        let ceiling = &trials[u(r, "sender_limited_trial") as usize - 1];
        assert_eq!(ceiling["sender_limited"], true, "{ceiling}");
        assert_eq!(u(r, "upper_pps"), u(ceiling, "rate_pps"), "{r}");
        // The lower bound is a trial that passed and offered its rate in full.
        if let Some(n) = r["lower_trial"].as_u64() {
            let pass = &trials[n as usize - 1];
            assert_eq!(pass["sender_limited"], false, "{pass}");
            assert_eq!(u(pass, "rate_pps"), u(r, "lower_pps"), "{r}");
        }
        assert!(u(r, "upper_pps") < 400_000, "the search climbed down: {r}");
    }

    // A plain send in the same cap names the cause: its worker waited for its CPU, as long as
    // the cgroup's own counters say the quota held it.
    let throttled_before = cap.throttled_us();
    let out = cap
        .command(&["ip", "netns", "exec", &ns.0, bin(), "send", "--json"])
        .args([
            "--to",
            "127.0.0.1:7602",
            "--rate",
            "200kpps",
            "--duration",
            "2s",
        ])
        .args(["--control", "off"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let throttled_s = (cap.throttled_us() - throttled_before) as f64 / 1e6;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let send = summaries(&out).send.unwrap();
    assert_eq!(send["sender_limited"], true, "{send}");
    assert_eq!(send["sender_limited_cause"], "cpu_wait", "{send}\n{stderr}");
    let worker = &send["worker_time"][0];
    let waited = worker["run_queue_wait_s"].as_f64().unwrap();
    let wall = worker["wall_s"].as_f64().unwrap();
    assert!(
        throttled_s > 0.5,
        "the cap held the sender: {throttled_s} s throttled"
    );
    // The run-queue wait includes the throttling: at least most of what the group was held
    // (the group's count spans the process's start and exit too, the worker's only its loop).
    assert!(
        waited >= 0.5 * throttled_s.min(wall) && waited <= wall,
        "worker waited {waited} s of {wall} s; the group was throttled {throttled_s} s: {worker}"
    );
    assert!(
        stderr.contains("send: the limit was this host: queue 0's worker")
            && stderr.contains("waited for its CPU"),
        "{stderr}"
    );
}

/// `--max-latency-p99` over TCP: the sink's verdict carries each trial's latency (the upper
/// bound of the cell holding its p99), so a bound below any record's latency on loopback fails
/// every trial on latency alone, none of them lossy, and no rate passes.
#[test]
fn a_tcp_search_bounded_below_any_records_latency_passes_no_rate() {
    let _guard = traffic_lock();
    let port = free_port();
    let to = format!("127.0.0.1:{port}");
    let sink = common::proc::Proc::ringblast(
        None,
        &["sink", "--proto", "tcp", "--listen", &to, "--interval", "0"],
    );
    wait_listening(None, port);
    let out = ringblast(&[
        "search",
        "--proto",
        "tcp",
        "--to",
        &to,
        "--json",
        "--size",
        "1000",
        "--min-rate",
        "1000pps",
        "--max-rate",
        "4000pps",
        "--trial",
        "200ms",
        "--final-trial",
        "300ms",
        "--max-time",
        "15s",
        "--max-latency-p99",
        "1us",
    ]);
    sink.interrupt();
    let _ = sink.finish();
    assert_ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout.lines().map(common::schema::record).collect();
    let trials: Vec<&Value> = lines.iter().filter(|v| v["type"] == "trial").collect();
    assert!(!trials.is_empty(), "{stdout}");
    for t in &trials {
        assert_eq!(
            (&t["over_latency"], u(t, "lost")),
            (&Value::Bool(true), 0),
            "{t}"
        );
        assert!(u(t, "latency_p99_ns") > 1_000, "{t}");
    }
    let summary = lines.last().unwrap();
    for r in summary["results"].as_array().unwrap() {
        assert_eq!(u(r, "lower_pps"), 0, "{summary}");
    }
}
