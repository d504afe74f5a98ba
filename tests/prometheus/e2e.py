#!/usr/bin/env python3
"""End-to-end exporter test against a real Prometheus server (Debian's `prometheus` package).

1. A paced 2-queue `send` and a 2-queue `sink` (separate processes, each with --metrics) and a
   paced `pair` run on loopback, all scraped every second by a Prometheus started here.
2. `promtool check metrics` on each live endpoint finds no problem.
3. rate(tx packets[5s]) agrees with the sender's own reported pps within 2 %.
4. After the runs, the last scraped counters equal the JSON summaries exactly, the sink counted
   exactly what the sender sent (nothing lost), and, as root, where the script runs in a network
   namespace of its own, both equal the kernel's Udp counters (OutDatagrams, InDatagrams,
   RcvbufErrors deltas).
5. Labels: series per (node, queue) match the placement each process printed in its summary.
6. Every dashboard panel query parses and returns data.
7. Every JSON line of every run follows the published JSON Schema (docs/schema/, with Debian's
   python3-jsonschema).

Every wait is on an event (a line, a series value, a sample count) with a deadline that fails.
As root the script re-runs itself in a private network namespace (unshare --net), Prometheus
included, so the kernel's Udp counters count only this script's datagrams. As a user it runs on
the host's loopback and skips the kernel comparison: other processes (parallel test runs, a DNS
stub, syslog) can send UDP over the host's loopback too, so its deltas are not attributable.

Usage: tests/prometheus/e2e.py [path/to/ringblast]   (exit 0 = pass; every load is bounded)
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/ringblast")
FAILURES = []
with open(os.path.join(ROOT, "docs/schema/ringblast-1.schema.json")) as f:
    SCHEMA = jsonschema.Draft202012Validator(json.load(f))
NETNS_ENV = "RINGBLAST_E2E_IN_NETNS"


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
        else:
            raise SystemExit(f"Prometheus did not scrape all {len(targets)} targets within 30 s: {active}")

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


class Run:
    """A ringblast process whose stdout and stderr lines are collected as they come."""

    def __init__(self, args):
        self.proc = subprocess.Popen([BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(f, lines), daemon=True)
                        for f, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    @staticmethod
    def _read(f, lines):
        for line in f:
            lines.append(line.rstrip("\n"))

    def pid(self):
        return self.proc.pid

    def wait_line(self, needle, seconds):
        """Waits for a stderr line containing needle; fails the script at the deadline."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if any(needle in l for l in self.err):
                return
            if self.proc.poll() is not None and not self.readers[1].is_alive():
                break
            time.sleep(0.05)
        raise SystemExit(f"no line with {needle!r} within {seconds} s; stderr:\n" + "\n".join(self.err))


def start(args):
    return Run(args)


def finish(run, name, timeout=60):
    try:
        run.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{name} still running after {timeout} s")
    for r in run.readers:
        r.join(5)
    if run.proc.returncode != 0:
        raise SystemExit(f"{name} exited {run.proc.returncode}: " + "\n".join(run.err))
    records = [json.loads(l) for l in run.out if l.startswith("{")]
    for r in records:
        SCHEMA.validate(r)
    summaries = [r for r in records if r.get("type") == "summary"]
    return {s["role"]: s for s in summaries}


def wait_for(what, seconds, probe):
    """Polls probe() until it returns a true value; fails the script at the deadline."""
    deadline = time.monotonic() + seconds
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.2)


def udp_counters():
    """The Udp line of /proc/net/snmp as a dict."""
    with open("/proc/net/snmp") as f:
        head, values = [l.split()[1:] for l in f if l.startswith("Udp:")]
    return {k: int(v) for k, v in zip(head, values)}


def endpoint_sum(endpoint, name):
    """The sum of every series of `name` at a metrics endpoint; a missing series fails."""
    samples = [float(l.rsplit(" ", 1)[1]) for l in http_get(f"http://{endpoint}/metrics").splitlines()
               if l.startswith(name + "{") or l.startswith(name + " ")]
    if not samples:
        raise SystemExit(f"no series {name} at {endpoint}")
    return sum(samples)


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
    in_netns = os.environ.get(NETNS_ENV) == "1"
    if os.geteuid() == 0 and not in_netns:
        env = dict(os.environ, **{NETNS_ENV: "1"})
        os.execvpe("unshare", ["unshare", "--net", "--", sys.executable, os.path.abspath(__file__), BIN], env)
    if in_netns:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        print("note: in a private network namespace: the kernel's Udp counters count only this script's datagrams")
    else:
        print("note: not root, so on the host's loopback: the kernel comparison is skipped (other processes "
              "can send UDP over the host's loopback, so /proc/net/snmp deltas are not attributable)")
    work = tempfile.mkdtemp(prefix="rb-prom-")
    data_port = free_port(socket.SOCK_DGRAM)
    m_sink, m_send, m_pair, m_tcp = free_port(), free_port(), free_port(), free_port()
    prom = Prom([f"127.0.0.1:{m_sink}", f"127.0.0.1:{m_send}", f"127.0.0.1:{m_pair}", f"127.0.0.1:{m_tcp}"], work)
    procs = []
    try:
        # The sink runs until the sender's goodbye (an event), not on a timer.
        sink = start(["sink", "--listen", f"127.0.0.1:{data_port}", "--queues", "2",
                      "--json", "--metrics", f"127.0.0.1:{m_sink}", "--interval", "0"])
        procs.append(sink)
        # The metrics endpoint answers before the data sockets are bound; a sender started then
        # sends its first datagrams to no socket (NoPorts, then ECONNREFUSED). The events: the
        # sink's workers are released, and `ss` shows both queues' UDP sockets on the port.
        sink.wait_line("startup: workers released", 15)
        wait_for(f"2 UDP sockets bound to port {data_port} (ss)", 5, lambda: len(subprocess.run(
            ["ss", "-Hunl", f"sport = :{data_port}"], capture_output=True, text=True).stdout.splitlines()) == 2)
        wait_http(f"http://127.0.0.1:{m_sink}/metrics")
        udp_before = udp_counters()
        send = start(["send", "--to", f"127.0.0.1:{data_port}", "--queues", "2", "--flows", "4", "--rate", "40kpps",
                      "--duration", "10s", "--json", "--metrics", f"127.0.0.1:{m_send}", "--metrics-linger", "8s",
                      "--interval", "0"])
        procs.append(send)
        wait_http(f"http://127.0.0.1:{m_send}/metrics")
        # The event for the mid-run rate: Prometheus holds 6 one-second samples of the sender's
        # tx counter, the oldest already counting traffic, so rate([5s]) spans steady sending.
        tx_sum = f'sum(ringblast_tx_packets_total{{instance="127.0.0.1:{m_send}"}})'
        steady = f"min_over_time({tx_sum}[6s:1s]) > 0 and count_over_time({tx_sum}[6s:1s]) >= 6"
        wait_for("6 s of the sender's traffic in Prometheus", 20, lambda: prom.value(steady) is not None)
        check(send.proc.poll() is None, "the sender was still sending when the mid-run rate was taken")
        promtool_check(f"127.0.0.1:{m_send}")
        promtool_check(f"127.0.0.1:{m_sink}")
        mid_rate = prom.value(f'sum(rate(ringblast_tx_packets_total{{instance="127.0.0.1:{m_send}"}}[5s]))')
        # The sink stops on events, not a timer: the sender's goodbye closes its books; then,
        # once Prometheus has scraped the count the sink's endpoint serves after it, SIGINT
        # (the sink ends at once, no linger; its summary must still equal that scrape).
        sink.wait_line("said goodbye", 30)
        rx_at_end = endpoint_sum(f"127.0.0.1:{m_sink}", "ringblast_rx_packets_total")
        rx_sum = f'sum(ringblast_rx_packets_total{{instance="127.0.0.1:{m_sink}"}})'
        wait_for(f"Prometheus to scrape the sink's final {rx_at_end} packets", 15,
                 lambda: prom.value(rx_sum) == rx_at_end)
        sink.proc.send_signal(signal.SIGINT)
        send_s = finish(send, "send")["send"]
        sink_s = finish(sink, "sink")["sink"]
        udp = {k: udp_counters()[k] - udp_before[k]
               for k in ("OutDatagrams", "InDatagrams", "RcvbufErrors", "NoPorts", "InErrors")}
        pps = send_s["pps"]
        check(mid_rate is not None and abs(mid_rate - pps) <= 0.02 * pps,
              f"rate(tx packets[5s]) = {mid_rate} vs the sender's reported {pps} pps (within 2 %)")
        # The separate sink against the separate sender: paced 40 kpps on loopback, so exact.
        errnos = {r["metric"].get("errno"): r["value"][1] for r in prom.query(
            f'sum by (errno) (ringblast_tx_errors_total{{instance="127.0.0.1:{m_send}"}}) > 0')["data"]["result"]}
        check(send_s["tx_errors"] == 0 and sink_s["rx_packets"] == send_s["tx_packets"],
              f"sink rx {sink_s['rx_packets']} == sender tx {send_s['tx_packets']} (send errors {send_s['tx_errors']}"
              f" {errnos or ''})")
        check(sink_s["rx_lost"] == 0 and sink_s["rx_kernel_drops"] == 0 and sink_s["rx_duplicates"] == 0
              and sink_s["rx_invalid"] == 0,
              f"sink lost {sink_s['rx_lost']}, kernel drops {sink_s['rx_kernel_drops']}, duplicates "
              f"{sink_s['rx_duplicates']}, invalid {sink_s['rx_invalid']}: all 0")
        if in_netns:
            # Only this send/sink pair sends UDP in the namespace while these deltas are taken
            # (Prometheus and the control channel are TCP; the pair runs start afterwards).
            check(udp["OutDatagrams"] == send_s["tx_packets"],
                  f"sender tx {send_s['tx_packets']} == kernel Udp OutDatagrams delta {udp['OutDatagrams']}")
            check(udp["InDatagrams"] == sink_s["rx_packets"],
                  f"sink rx {sink_s['rx_packets']} == kernel Udp InDatagrams delta {udp['InDatagrams']}"
                  f" (NoPorts {udp['NoPorts']}, InErrors {udp['InErrors']})")
            check(udp["RcvbufErrors"] == sink_s["rx_kernel_drops"],
                  f"sink kernel drops {sink_s['rx_kernel_drops']} == kernel Udp RcvbufErrors delta "
                  f"{udp['RcvbufErrors']}")
        # Pair run for the dashboard queries, while the lingering endpoints still serve finals.
        pair = start(["pair", "--queues", "2", "--flows", "4", "--rate", "30kpps", "--duration", "8s", "--json",
                      "--metrics", f"127.0.0.1:{m_pair}", "--metrics-linger", "15s", "--interval", "0"])
        procs.append(pair)
        # A paced TCP pair beside it, for the dashboard's TCP row (streams, TCP_INFO, TCP books).
        tcp = start(["pair", "--proto", "tcp", "--conns", "2", "--size", "1400", "--rate", "10kpps",
                     "--duration", "8s", "--json", "--metrics", f"127.0.0.1:{m_tcp}", "--metrics-linger", "15s",
                     "--interval", "0"])
        procs.append(tcp)
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
        # The event: Prometheus's last samples equal the summaries (scraped during the linger).
        deadline = time.monotonic() + 15
        for expr, want in exact:
            got = prom.value(expr)
            while (got is None or int(got) != want) and time.monotonic() < deadline:
                time.sleep(0.2)
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
        # The event: each query returns data (the pairs' lingering endpoints were scraped), with
        # one deadline for them all.
        deadline = time.monotonic() + 15
        for expr in dashboard_queries():
            body = prom.query(expr)
            while not (body.get("status") == "success" and body["data"]["result"]) and time.monotonic() < deadline:
                time.sleep(0.2)
                body = prom.query(expr)
            ok = body.get("status") == "success"
            has_data = ok and len(body["data"]["result"]) > 0
            check(has_data, f"dashboard query parses and returns data: {expr[:110]}"
                  + ("" if ok else f" ({body.get('error')})"))
    finally:
        for r in procs:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        prom.stop()
        shutil.rmtree(work, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("all exporter checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
