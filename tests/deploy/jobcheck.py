#!/usr/bin/env python3
"""The combined verdict of an Indexed Job fleet (scripts/deploy-smoke.sh jobs), held to the
kernel's own counts in each sender pod's network namespace.

  jobcheck.py --sink-summary LOG --sink-metrics FILE --sink-snmp FILE --max-spread-ms MS
              --start-at TIME --sender NAME=SNMP=LOG ...

For every sender NAME (its --name at the sink, the pod's name <job>-<index>): its pod's Udp
OutDatagrams (SNMP, read from the pod's own namespace after the sender exited) = the sender's own
tx_packets (its JSON summary, LOG) = the sink's rx_packets for NAME in its JSON summary = the
sink's ringblast_rx_sender_packets_total{sender=NAME}, with lost, kernel drops, duplicates 0 in
both. The sink's totals: rx_packets = the sum over the senders = its node's Udp InDatagrams.
start_spread names every sender and its spread_ms is below MS, and each first datagram arrived
within MS after the start time (--start-at; the sink and the pods share one clock here). Prints ok/FAIL lines and a
`figures:` line; exits 1 on any FAIL.
"""
import argparse
import datetime
import json
import re
import sys


def udp(path):
    rows = [line.split() for line in open(path) if line.startswith("Udp:")]
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:])}


def summary(path, role):
    found = None
    for line in open(path):
        if line.startswith("{"):
            v = json.loads(line)
            if v.get("type") == "summary" and v.get("role") == role:
                found = v
    if found is None:
        tail = "".join(open(path).readlines()[-8:])
        sys.exit(f"jobcheck: no {role} summary in {path}; it ends:\n{tail}")
    return found


def series(path, metric):
    out = {}
    for line in open(path):
        m = re.match(rf'{metric}\{{(.*)\}} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            out[labels.get("sender")] = out.get(labels.get("sender"), 0) + float(m.group(2))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sink-summary", required=True)
    p.add_argument("--sink-metrics", required=True)
    p.add_argument("--sink-snmp", required=True)
    p.add_argument("--max-spread-ms", type=float, required=True)
    p.add_argument("--sender", action="append", required=True)
    p.add_argument("--start-at", required=True, help="the Job's one start time (RFC 3339, UTC)")
    a = p.parse_args()
    sink = summary(a.sink_summary, "sink")
    rows = {r["name"]: r for r in sink.get("senders", [])}
    packets = series(a.sink_metrics, "ringblast_rx_sender_packets_total")
    lost = series(a.sink_metrics, "ringblast_rx_sender_lost_packets_total")
    results, total = [], 0
    for spec in a.sender:
        name, snmp, log = spec.split("=", 2)
        out = udp(snmp)["OutDatagrams"]
        tx = summary(log, "send")["tx_packets"]
        row = rows.get(name, {})
        rx, m = row.get("rx_packets"), packets.get(name)
        total += out
        results.append((out > 0 and tx == out and rx == out and m == out,
                        f"{name}: pod Udp OutDatagrams {out} = its tx_packets {tx} = sink rx_packets {rx} = "
                        f"ringblast_rx_sender_packets_total {m and int(m)}"))
        results.append((row.get("rx_lost") == 0 and row.get("rx_kernel_drops") == 0 and row.get("rx_duplicates") == 0
                        and lost.get(name) == 0,
                        f"{name}: sink lost {row.get('rx_lost')} (series {lost.get(name)}), kernel drops "
                        f"{row.get('rx_kernel_drops')}, duplicates {row.get('rx_duplicates')}: all 0"))
    results.append((set(rows) == {s.split("=", 1)[0] for s in a.sender},
                    f"the sink's senders are the Job's pods: {sorted(rows)}"))
    kernel = udp(a.sink_snmp)
    results.append((sink["rx_packets"] == total == kernel["InDatagrams"] and kernel["RcvbufErrors"] == 0,
                    f"sink rx_packets {sink['rx_packets']} = sum of the pods' OutDatagrams {total} = sink node Udp "
                    f"InDatagrams {kernel['InDatagrams']} (RcvbufErrors {kernel['RcvbufErrors']})"))
    spread = sink.get("start_spread") or {}
    firsts = [rows.get(s.split("=", 1)[0], {}).get("first_packet_at") for s in a.sender]
    results.append((spread.get("senders") == len(a.sender) and all(firsts)
                    and spread.get("spread_ms") is not None and spread["spread_ms"] < a.max_spread_ms,
                    f"start_spread: {spread.get('senders')} senders within {spread.get('spread_ms')} ms "
                    f"(< {a.max_spread_ms:g}; first {spread.get('first')}, last {spread.get('last')}); "
                    f"first_packet_at {', '.join(str(f) for f in firsts)}"))
    start = datetime.datetime.fromisoformat(a.start_at.replace("Z", "+00:00"))
    after = [(datetime.datetime.fromisoformat(f.replace("Z", "+00:00")) - start).total_seconds() * 1e3
             for f in firsts if f]
    results.append((len(after) == len(a.sender) and all(0 <= ms < a.max_spread_ms for ms in after),
                    f"every first datagram arrived after the start time {a.start_at} and within "
                    f"{a.max_spread_ms:g} ms of it: +{', +'.join(f'{ms:.3f}' for ms in after)} ms"))
    for ok, what in results:
        print(("ok   " if ok else "FAIL ") + what)
    print(f"figures: senders={len(a.sender)} datagrams={total} spread_ms={spread.get('spread_ms')}")
    sys.exit(0 if all(ok for ok, _ in results) else 1)


if __name__ == "__main__":
    main()
