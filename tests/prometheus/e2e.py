#!/usr/bin/env python3
"""End-to-end exporter test against a real Prometheus server (Debian's `prometheus` package).

1. A paced 2-queue `send` and a 2-queue `sink` (separate processes, each with --metrics) and a
   paced `pair` run on loopback, all scraped every second by a Prometheus started here.
2. `promtool check metrics` on each live endpoint finds no problem.
3. rate(tx packets[5s]) agrees with the sender's own reported pps within 2 %.
4. After the runs, the last scraped counters equal the JSON summaries exactly.
5. Labels: series per (node, queue) match the placement each process printed in its summary.
6. Every dashboard panel query parses and returns data.

Usage: tests/prometheus/e2e.py [path/to/ringblast]   (exit 0 = pass; every load is bounded)
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/ringblast")
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def free_port(kind=socket.SOCK_STREAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_http(url, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            return http_get(url, timeout=1)
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing answered at {url} within {seconds}s")


class Prom:
    def __init__(self, targets, workdir):
        self.port = free_port()
        cfg = os.path.join(workdir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
            f.write("scrape_configs:\n  - job_name: ringblast\n    static_configs:\n")
            f.write("      - targets: [" + ", ".join(f"'{t}'" for t in targets) + "]\n")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={workdir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(workdir, "prometheus.log"), "w"))
        wait_http(f"http://127.0.0.1:{self.port}/-/ready", 30)
        # Prometheus applies discovered targets in batches (every 5 s): wait until every target
        # has been scraped once (down is fine), so runs are scraped from their first second.
        deadline = time.time() + 30
        while time.time() < deadline:
            body = json.loads(http_get(f"http://127.0.0.1:{self.port}/api/v1/targets"))
            active = body["data"]["activeTargets"]
            if len(active) == len(targets) and all(t.get("lastScrape", "").startswith("20") for t in active):
                break
            time.sleep(0.2)

    def query(self, expr):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            body = json.loads(http_get(url))
        except urllib.error.HTTPError as e:
            body = json.loads(e.read().decode())
        return body

    def value(self, expr):
        body = self.query(expr)
        result = body.get("data", {}).get("result", [])
        return float(result[0]["value"][1]) if result else None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start(args):
    return subprocess.Popen([BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, name, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{name} exited {proc.returncode}: {err}")
    summaries = [json.loads(l) for l in out.splitlines() if '"type":"summary"' in l]
    return {s["role"]: s for s in summaries}


def promtool_check(endpoint):
    text = http_get(f"http://{endpoint}/metrics")
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    problems = (r.stdout + r.stderr).strip()
    check(r.returncode == 0 and not problems, f"promtool check metrics on {endpoint}: {problems or 'clean'}")


def dashboard_queries():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "dashboards/generate.py"), "--exprs"],
                         capture_output=True, text=True, check=True).stdout
    subst = {"$__rate_interval": "5s", "$__range": "2m", "$instance": ".*", "$node": ".*", "$queue": ".*",
             "$sender": ".*"}
    exprs = []
    for line in out.splitlines():
        for k, v in subst.items():
            line = line.replace(k, v)
        if line.strip():
            exprs.append(line.strip())
    return exprs


def main():
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found: apt-get install prometheus")
    work = tempfile.mkdtemp(prefix="rb-prom-")
    data_port = free_port(socket.SOCK_DGRAM)
    m_sink, m_send, m_pair, m_tcp = free_port(), free_port(), free_port(), free_port()
    prom = Prom([f"127.0.0.1:{m_sink}", f"127.0.0.1:{m_send}", f"127.0.0.1:{m_pair}", f"127.0.0.1:{m_tcp}"], work)
    procs = []
    try:
        sink = start(["sink", "--listen", f"127.0.0.1:{data_port}", "--queues", "2", "--duration", "16s",
                      "--json", "--metrics", f"127.0.0.1:{m_sink}", "--metrics-linger", "8s", "--interval", "0"])
        procs.append(sink)
        wait_http(f"http://127.0.0.1:{m_sink}/metrics")
        send = start(["send", "--to", f"127.0.0.1:{data_port}", "--queues", "2", "--flows", "4", "--rate", "40kpps",
                      "--duration", "10s", "--json", "--metrics", f"127.0.0.1:{m_send}", "--metrics-linger", "8s",
                      "--interval", "0"])
        procs.append(send)
        wait_http(f"http://127.0.0.1:{m_send}/metrics")
        time.sleep(7)
        promtool_check(f"127.0.0.1:{m_send}")
        promtool_check(f"127.0.0.1:{m_sink}")
        mid_rate = prom.value(f'sum(rate(ringblast_tx_packets_total{{instance="127.0.0.1:{m_send}"}}[5s]))')
        send_s = finish(send, "send")["send"]
        sink_s = finish(sink, "sink")["sink"]
        pps = send_s["pps"]
        check(mid_rate is not None and abs(mid_rate - pps) <= 0.02 * pps,
              f"rate(tx packets[5s]) = {mid_rate} vs the sender's reported {pps} pps (within 2 %)")
        # Pair run for the dashboard queries, while the lingering endpoints still serve finals.
        pair = start(["pair", "--queues", "2", "--flows", "4", "--rate", "30kpps", "--duration", "8s", "--json",
                      "--metrics", f"127.0.0.1:{m_pair}", "--metrics-linger", "15s", "--interval", "0"])
        procs.append(pair)
        # A paced TCP pair beside it, for the dashboard's TCP row (streams, TCP_INFO, TCP books).
        tcp = start(["pair", "--proto", "tcp", "--conns", "2", "--size", "1400", "--rate", "10kpps",
                     "--duration", "8s", "--json", "--metrics", f"127.0.0.1:{m_tcp}", "--metrics-linger", "15s",
                     "--interval", "0"])
        procs.append(tcp)
        time.sleep(3)  # two scrapes after the send/sink runs ended, during their linger
        inst_send, inst_sink = f'instance="127.0.0.1:{m_send}"', f'instance="127.0.0.1:{m_sink}"'
        exact = [
            (f"sum(last_over_time(ringblast_tx_packets_total{{{inst_send}}}[1m]))", send_s["tx_packets"]),
            (f"sum(last_over_time(ringblast_tx_bytes_total{{{inst_send}}}[1m]))", send_s["tx_bytes"]),
            (f"sum(last_over_time(ringblast_tx_errors_total{{{inst_send}}}[1m]))", send_s["tx_errors"]),
            (f"sum(last_over_time(ringblast_rx_packets_total{{{inst_sink}}}[1m]))", sink_s["rx_packets"]),
            (f"sum(last_over_time(ringblast_rx_bytes_total{{{inst_sink}}}[1m]))", sink_s["rx_bytes"]),
            (f"sum(last_over_time(ringblast_rx_lost_packets_total{{{inst_sink}}}[1m]))", sink_s["rx_lost"]),
            (f"sum(last_over_time(ringblast_rx_reordered_packets_total{{{inst_sink}}}[1m]))", sink_s["rx_reordered"]),
            (f"sum(last_over_time(ringblast_rx_duplicate_packets_total{{{inst_sink}}}[1m]))", sink_s["rx_duplicates"]),
            (f"sum(last_over_time(ringblast_rx_invalid_packets_total{{{inst_sink}}}[1m]))", sink_s["rx_invalid"]),
            (f"sum(last_over_time(ringblast_rx_kernel_drops_total{{{inst_sink}}}[1m]))", sink_s["rx_kernel_drops"]),
            # Every packet is a corrected latency sample or counted as unknown (before the
            # sender's hello said it shares the sink's clock), never both.
            (f"sum(last_over_time(ringblast_rx_latency_seconds_count{{{inst_sink}}}[1m]))",
             sink_s["latency"]["count"]),
            (f"sum(last_over_time(ringblast_rx_latency_unknown_packets_total{{{inst_sink}}}[1m]))",
             sink_s["latency_unknown_packets"]),
            (f"sum(last_over_time(ringblast_rx_sender_latency_unknown_packets_total{{{inst_sink}}}[1m]))",
             sink_s["latency_unknown_packets"]),
            (f"sum(last_over_time(ringblast_rx_sender_clock_offset_seconds{{{inst_sink}}}[1m]))", 0),
        ]
        check(sink_s["latency"]["count"] + sink_s["latency_unknown_packets"] == sink_s["rx_packets"],
              f"latency samples {sink_s['latency']['count']} + unknown {sink_s['latency_unknown_packets']}"
              f" = rx_packets {sink_s['rx_packets']}")
        rtt = prom.value(f"last_over_time(ringblast_tx_control_rtt_seconds{{{inst_send}}}[1m])")
        check(rtt is not None and abs(rtt * 1e9 - send_s["control_rtt_ns"]) <= 1,
              f"ringblast_tx_control_rtt_seconds = {rtt}, summary says {send_s['control_rtt_ns']} ns")
        for expr, want in exact:
            got = prom.value(expr)
            check(got is not None and int(got) == want, f"{expr} = {got}, summary says {want}")
        for name, summary, inst, role in (("send", send_s, inst_send, "send"), ("sink", sink_s, inst_sink, "sink")):
            body = prom.query(f"last_over_time(ringblast_worker_info{{{inst}}}[1m])")
            got = sorted((int(r["metric"]["queue"]), int(r["metric"]["node"]), int(r["metric"]["cpu"]), r["metric"]["role"])
                         for r in body["data"]["result"])
            want = sorted((p["queue"], p["node"], p["cpu"], role) for p in summary["placement"])
            check(got == want, f"{name} worker_info labels {got} match its placement {want}")
            metric = "ringblast_tx_packets_total" if role == "send" else "ringblast_rx_packets_total"
            body = prom.query(f"count by (node, queue) (last_over_time({metric}{{{inst}}}[1m]))")
            queues = sorted((r["metric"]["node"], r["metric"]["queue"]) for r in body["data"]["result"])
            check(queues == [("0", "0"), ("0", "1")], f"{name} traffic series exist per node and queue: {queues}")
        pair_s = finish(pair, "pair", timeout=60)
        check(pair_s["send"]["tx_packets"] == pair_s["sink"]["rx_packets"], "the pair run was exact")
        tcp_s = finish(tcp, "tcp pair", timeout=60)
        check(tcp_s["send"]["tx_records"] == tcp_s["sink"]["rx_records"] > 0, "the TCP pair run was exact")
        time.sleep(2)
        for expr in dashboard_queries():
            body = prom.query(expr)
            ok = body.get("status") == "success"
            has_data = ok and len(body["data"]["result"]) > 0
            check(has_data, f"dashboard query parses and returns data: {expr[:110]}"
                  + ("" if ok else f" ({body.get('error')})"))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        prom.stop()
        shutil.rmtree(work, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all exporter checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
