#!/usr/bin/env python3
"""Judges what the lab's guests observed (scripts/lab.sh; tests/lab/guest.sh wrote it).

Every count ringblast printed is held against an observer of the kernel it ran on: the guest's
/proc/PID/numa_maps and /proc/PID/task/*/status for placement and memory, the guest's own
/proc/net/snmp for datagrams, the peer guest's counters across the link. One line per check,
`lab: ok ...` or `lab: FAIL ...`; exit 1 if any failed.

Usage: check.py RUN_DIR CASE...   (CASE: numa, hosts, host)
"""

import json
import re
import sys
from pathlib import Path

failures = []


def check(ok, what, detail=""):
    print(f"lab: {'ok  ' if ok else 'FAIL'} {what}{'' if ok or not detail else ': ' + str(detail)}")
    if not ok:
        failures.append(what)
    return ok


def lines(path):
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def summary(d, name, role=None):
    """The last `"type":"summary"` JSON line of case NAME (of ROLE, if given), or {}."""
    found = {}
    for line in lines(d / f"{name}.json"):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("type") == "summary" and (role is None or obj.get("role") == role):
            found = obj
    return found


def rc(d, name):
    text = "".join(lines(d / f"{name}.rc")).strip()
    return int(text) if text else None


def snmp(path):
    """/proc/net/snmp (or netstat) as {(group, field): value}."""
    table, rows = {}, lines(path)
    for head, values in zip(rows[::2], rows[1::2]):
        group, names = head.split(":", 1)
        _, nums = values.split(":", 1)
        for key, value in zip(names.split(), nums.split()):
            table[(group, key)] = int(value)
    return table


def snmp_delta(d, name, group, field):
    before = snmp(d / f"{name}.snmp.before").get((group, field))
    after = snmp(d / f"{name}.snmp.after").get((group, field))
    return None if before is None or after is None else after - before


def tasks(d, name):
    """{thread name: allowed CPUs} of the process, as read in the guest while it ran."""
    out = {}
    for line in lines(d / f"{name}.tasks"):
        comm, _, cpus = line.rpartition(" ")
        out[comm] = cpus
    return out


def bound_mappings(d, name):
    """The process's mappings with a bind policy: [(policy node, {node: resident pages})]."""
    maps = []
    for line in lines(d / f"{name}.numa_maps"):
        m = re.search(r" bind:(\d+) ", line)
        if m:
            pages = {int(n): int(c) for n, c in re.findall(r" N(\d+)=(\d+)", line)}
            maps.append((int(m.group(1)), pages))
    return maps


def placement(s):
    return {p["queue"]: p for p in s.get("placement", [])}


def check_queue_on(d, name, role, queue, node, cpu):
    """Queue QUEUE of case NAME runs on CPU of NODE, and its memory is there, by the guest's word."""
    s = summary(d, name, role)
    p = placement(s).get(queue, {})
    check(p.get("node") == node and p.get("cpu") == cpu,
          f"{name}: q{queue} placed on cpu {cpu} node {node}", p)
    thread = f"{role}-q{queue}"
    check(tasks(d, name).get(thread) == str(cpu),
          f"{name}: thread {thread} may run on cpu {cpu} only (/proc/PID/task/*/status)", tasks(d, name))
    mem = p.get("memory") or {}
    check(mem.get("bound_node") == node and mem.get("all_on_node") is True
          and set(mem.get("pages_by_node", {})) == {str(node)},
          f"{name}: q{queue} reports its packet memory bound to and resident on node {node}", mem)
    return mem


def check_bound_memory(d, name, nodes):
    """Every node-bound mapping (the arenas) is bound to one of NODES with all pages there."""
    maps = bound_mappings(d, name)
    check(sorted({n for n, _ in maps}) == sorted(nodes)
          and all(set(pages) <= {n} and pages for n, pages in maps),
          f"{name}: numa_maps shows arenas bound to node(s) {sorted(nodes)} with every resident page there", maps)
    return maps


def check_pair_udp(d, label):
    s_send, s_sink = summary(d, "pair_udp", "send"), summary(d, "pair_udp", "sink")
    tx, rx = s_send.get("tx_packets"), s_sink.get("rx_packets")
    indgrams = snmp_delta(d, "pair_udp", "Udp", "InDatagrams")
    check(rc(d, "pair_udp") == 0 and tx and tx == rx == indgrams and s_sink.get("rx_lost") == 0,
          f"{label} UDP pair: sent = received = the kernel's Udp InDatagrams, none lost",
          dict(rc=rc(d, "pair_udp"), tx=tx, rx=rx, InDatagrams=indgrams, lost=s_sink.get("rx_lost")))


def check_pair_tcp(d, label):
    s_send, s_sink = summary(d, "pair_tcp", "send"), summary(d, "pair_tcp", "sink")
    before = int("".join(lines(d / "pair_tcp.lo_rx_bytes.before")) or 0)
    after = int("".join(lines(d / "pair_tcp.lo_rx_bytes.after")) or 0)
    tx, rx = s_send.get("tx_records"), s_sink.get("rx_records")
    check(rc(d, "pair_tcp") == 0 and tx and tx == rx and s_sink.get("rx_invalid") == 0
          and s_send.get("verdict") is not None,
          f"{label} TCP pair: every record sent was received, none invalid, with the sink's verdict",
          dict(rc=rc(d, "pair_tcp"), tx=tx, rx=rx, invalid=s_sink.get("rx_invalid"),
               verdict=s_send.get("verdict"), error=s_send.get("sink_error")))
    check(after - before >= (s_sink.get("rx_bytes") or 1 << 62),
          f"{label} TCP pair: loopback carried at least the bytes the sink counted",
          dict(lo_rx_bytes=after - before, rx_bytes=s_sink.get("rx_bytes")))


def numa(run):
    d = run / "numa"
    print(f"lab: -- two-node guest, kernel {''.join(lines(d / 'kernel'))}, hostname {''.join(lines(d / 'hostname'))!r}")
    topo = "\n".join(lines(d / "topo.txt"))
    check("nic: eth0 (node 1)" in topo and "q0 -> cpu 1 node 1" in topo,
          "topo: the NIC is on node 1 and q0 goes there", topo)
    # NIC on node 1, no placement flags: the sender's and the sink's queue and memory there.
    for name, role in (("nic_send", "send"), ("nic_sink", "sink")):
        check_queue_on(d, name, role, 0, 1, 1)
        check_bound_memory(d, name, [1])
    send_mem = (placement(summary(d, "nic_send", "send")).get(0) or {}).get("memory") or {}
    maps = bound_mappings(d, "nic_send")
    check(maps and send_mem.get("pages_by_node", {}).get("1") == sum(p.get(1, 0) for _, p in maps),
          "nic_send: the pages ringblast found on node 1 are the pages numa_maps shows there",
          dict(ringblast=send_mem.get("pages_by_node"), numa_maps=maps))
    # Explicit placement wins over the NIC's node, says so, and the memory follows it.
    for name in ("explicit_node", "explicit_cpus"):
        err = "\n".join(lines(d / f"{name}.err"))
        check(re.search(r"warning: explicit --(node|cpus) .*NIC eth0's node 1", err) is not None,
              f"{name}: a warning says the explicit choice overrides the NIC's node", err[:400])
        check_queue_on(d, name, "send", 0, 0, 0)
        check_bound_memory(d, name, [0])
    # No NIC locality: one queue per node, each queue's memory on its own node.
    for name, role in (("spread_send", "send"), ("spread_sink", "sink")):
        p = placement(summary(d, name, role))
        nodes = {q: p.get(q, {}).get("node") for q in (0, 1)}
        check(set(nodes.values()) == {0, 1}, f"{name}: two queues, one per node", p)
        for q, node in nodes.items():
            if node is not None:
                check_queue_on(d, name, role, q, node, node)
        check_bound_memory(d, name, [0, 1])
    # A host whose hostname is the kernel's "(none)": the default sender name and the sink's
    # session id are valid, so the authenticated handshake and the verdict work.
    s = summary(d, "named_send", "send")
    sink = summary(d, "nic_sink", "sink")
    senders = {x.get("name"): x for x in sink.get("senders", [])}
    indgrams = snmp_delta(d, "nic_sink", "Udp", "InDatagrams")
    check(rc(d, "named_send") == 0 and (s.get("sink") or {}).get("rx_packets") == s.get("tx_packets") == 5000,
          "named_send on a host named '(none)': the sender got the sink's verdict for all 5000",
          dict(rc=rc(d, "named_send"), err=lines(d / "named_send.err")[-1:]))
    check(sink.get("rx_packets") == indgrams == 5000 and len(senders) == 1
          and all(re.fullmatch(r"[A-Za-z0-9._:/@-]+", n or "") for n in senders),
          "nic_sink: received = the guest's Udp InDatagrams, booked under one valid sender name",
          dict(rx=sink.get("rx_packets"), InDatagrams=indgrams, senders=list(senders)))
    check_pair_udp(d, "6.1 guest")
    check_pair_tcp(d, "6.1 guest")
    unit = lines(d / "unit.txt")
    check(rc(d, "unit") == 0, "the library's ring and memory unit tests pass on this kernel",
          "\n".join(l for l in unit if "FAILED" in l or "panicked" in l or "test result" in l))


def latency_clock(entry):
    return (entry or {}).get("latency_clock") or {}


def hosts(run):
    ds, dr = run / "send", run / "sink"
    print(f"lab: -- two guests: sender {''.join(lines(ds / 'kernel'))} {''.join(lines(ds / 'hostname'))!r}, "
          f"sink {''.join(lines(dr / 'kernel'))} {''.join(lines(dr / 'hostname'))!r}")
    udp_sink = summary(dr, "udp_sink", "sink")
    tcp_sink = summary(dr, "tcp_sink", "sink")
    by_name = {x.get("name"): x for x in udp_sink.get("senders", [])}
    # The sink guest's kernel saw exactly the datagrams the sink counted, across every case.
    indgrams = snmp_delta(dr, "hosts_sink", "Udp", "InDatagrams")
    check(rc(dr, "udp_sink") == 0 and udp_sink.get("rx_packets") == indgrams and indgrams,
          "sink guest: the UDP sink received exactly the sink kernel's Udp InDatagrams",
          dict(rx=udp_sink.get("rx_packets"), InDatagrams=indgrams))
    for name in ("udp_auth", "no_control", "link_cut", "sink_behind"):
        s = summary(ds, name, "send")
        out = snmp_delta(ds, name, "Udp", "OutDatagrams")
        check(rc(ds, name) == 0 and s.get("tx_packets") == out,
              f"{name}: sent = the sender kernel's Udp OutDatagrams", dict(rc=rc(ds, name), tx=s.get("tx_packets"), OutDatagrams=out))
    # Authenticated UDP and TCP runs, counted exactly on both sides, the verdict on the sender.
    s = summary(ds, "udp_auth", "send")
    r = by_name.get("udp-auth", {})
    check(s.get("tx_packets") == 10000 and (s.get("sink") or {}).get("rx_packets") == r.get("rx_packets")
          and r.get("rx_packets", 0) + r.get("rx_lost", 0) + r.get("rx_kernel_drops", 0) == 10000,
          "udp_auth: 10000 sent; the verdict the sender printed is the sink's count; sent = received + lost + kernel drops",
          dict(tx=s.get("tx_packets"), verdict=(s.get("sink") or {}).get("rx_packets"), sink=r))
    t = summary(ds, "tcp_auth", "send")
    tcp_senders = {x.get("name"): x for x in tcp_sink.get("senders", [])}
    tr = tcp_senders.get("tcp-auth", {})
    check(rc(ds, "tcp_auth") == 0 and t.get("tx_records") and t.get("tx_records") == tr.get("rx_records")
          and t.get("verdict") is not None and tr.get("rx_invalid") == 0,
          "tcp_auth: every record sent was received by the sink guest, none invalid, with the verdict",
          dict(tx=t.get("tx_records"), sink=tr, verdict=t.get("verdict"), error=t.get("sink_error")))
    # The sink's clock is 5 s ahead, then (after the sender's clock steps 10 s) 5 s behind: the
    # offset is estimated, not reported as latency, and within its own error bound of the truth.
    for name, sender, offset in (("udp_auth", "udp-auth", 5.0), ("sink_behind", "sink-behind", -5.0)):
        s = summary(ds, name, "send")
        for side, entry in (("sink", by_name.get(sender)), ("verdict", s.get("sink"))):
            lc, lat = latency_clock(entry), (entry or {}).get("latency") or {}
            est = lc.get("offset_ns")
            check(lc.get("kind") == "offset_corrected" and est is not None and abs(est / 1e9 - offset) < 1.5,
                  f"{name}: the {side} estimates the clock offset as about {offset:+.0f} s", lc)
            # No offset is left in the latency (p99 < 1 s), and none was taken off twice or with
            # the wrong sign (then every sample would come out negative and be clamped to 0, so
            # p99 would be <= 1 us). Half or more of the samples may be clamped: a sample comes out
            # negative when the guests' one-way delay is below the estimate's error bound (half
            # the control channel's round trip), which QEMU's TCG often makes it.
            p99 = lat.get("p99_ns_at_most")
            check(p99 is not None and 1000 < p99 < 1e9,
                  f"{name}: the {side}'s one-way latency carries no offset (1 us < p99 < 1 s)",
                  dict(latency=lat, clock=lc))
        check(s.get("control_rtt_ns") is not None and 0 < s["control_rtt_ns"] < 1e9,
              f"{name}: the sender reports the control channel's round trip", s.get("control_rtt_ns"))
    # The sender's clock stepped exactly 10 s between the two runs, so the two estimates differ
    # by 10 s, within the sum of their error bounds (and 2 ms for the clocks' drift in between).
    a = latency_clock(by_name.get("udp-auth"))
    b = latency_clock(by_name.get("sink-behind"))
    if a.get("offset_ns") is not None and b.get("offset_ns") is not None:
        step = a["offset_ns"] - b["offset_ns"]
        slack = a["error_bound_ns"] + b["error_bound_ns"] + 2_000_000
        check(abs(step - 10**10) <= slack,
              "the two estimates differ by the sender's 10 s clock step, within their error bounds",
              dict(step_ns=step, slack_ns=slack))
    else:
        check(False, "the two estimates differ by the sender's 10 s clock step", (a, b))
    # Without a control channel there is no estimate: latency is unknown, not a number.
    nc = [x for n, x in by_name.items() if n not in ("udp-auth", "link-cut", "sink-behind")]
    check(len(nc) == 1 and nc[0].get("latency") is None and latency_clock(nc[0]).get("kind") == "unknown"
          and nc[0].get("rx_packets") == 2000,
          "no_control: the sink received all 2000 and says their latency is unknown", nc)
    # The link cut: failed sends are the sender's, the sink's loss is exact, the verdict arrives.
    s = summary(ds, "link_cut", "send")
    r = by_name.get("link-cut", {})
    failed = s.get("tx_errors")
    check(failed and r.get("send_failed") == failed,
          "link_cut: sends failed while the link was down, and the sink booked them as send_failed, not loss",
          dict(tx_errors=failed, sink_send_failed=r.get("send_failed"), errnos=s.get("tx_errors_by_errno")))
    check(s.get("tx_packets") == r.get("rx_packets", 0) + r.get("rx_lost", 0) + r.get("rx_kernel_drops", 0)
          and (s.get("sink") or {}).get("rx_lost") == r.get("rx_lost"),
          "link_cut: sent = received + lost + kernel drops at the sink, and the verdict agrees", dict(tx=s.get("tx_packets"), sink=r))


def host(run):
    d = run / "host"
    print(f"lab: -- this host's kernel {''.join(lines(d / 'kernel'))}")
    check_pair_udp(d, "host kernel")
    check_pair_tcp(d, "host kernel")


def main():
    run = Path(sys.argv[1])
    for case in sys.argv[2:]:
        {"numa": numa, "hosts": hosts, "host": host}[case](run)
    if failures:
        print(f"lab: {len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
