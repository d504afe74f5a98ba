#!/usr/bin/env bash
# `ringblast search` through a known bottleneck, for comparing builds: a router namespace with
# tbf at 4 Mbit/s and a 20 ms queue on its egress towards the sink (200-byte payloads are
# 242-byte frames at tbf: 4e6 / 8 / 242 = 2 066 pps), the setup of docs/search.md. Each binary
# given runs the same search RUNS times, in turn; one line per run: binary, trials, seconds
# (and how much of it the trials did not send: the cost of each trial beyond its duration), NDR,
# PDR and the search's exit status.
#
#   sudo benches/search_tbf.sh [--runs N] [--final-trial D] [--max-time D] [--confirm D] BINARY...
#
# With --confirm D, each run is followed by a D-long send at the NDR it found; tbf's own drop
# counter (the neutral observer) and the sink's loss for it are printed.
#
# Needs root (namespaces, tc). Everything it creates is named rbst$$ and removed on exit; the
# only traffic goes between those namespaces.
set -euo pipefail

runs=2
final=3s
max_time=95s
confirm=
while [[ $# -gt 0 ]]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --final-trial) final=$2; shift 2 ;;
    --max-time) max_time=$2; shift 2 ;;
    --confirm) confirm=$2; shift 2 ;;
    *) break ;;
    esac
done
[[ $# -ge 1 ]] || { echo "usage: $0 [--runs N] [--final-trial D] [--max-time D] [--confirm D] BINARY..." >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "$0: needs root (network namespaces and tc); run it with sudo" >&2; exit 3; }

bins=("$@")
tag=rbst$$
tx=${tag}tx rt=${tag}rt rx=${tag}rx
work=$(mktemp -d)
sink_pid=
cleanup() {
    [[ -n $sink_pid ]] && kill "$sink_pid" 2>/dev/null && wait "$sink_pid" 2>/dev/null
    for ns in $tx $rt $rx; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

for ns in $tx $rt $rx; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add ${tag}a type veth peer name ${tag}b
ip link set ${tag}a netns $tx
ip link set ${tag}b netns $rt
ip link add ${tag}c type veth peer name ${tag}d
ip link set ${tag}c netns $rt
ip link set ${tag}d netns $rx
ip -n $tx addr add 10.231.1.1/24 dev ${tag}a
ip -n $rt addr add 10.231.1.2/24 dev ${tag}b
ip -n $rt addr add 10.231.2.1/24 dev ${tag}c
ip -n $rx addr add 10.231.2.2/24 dev ${tag}d
ip -n $tx link set ${tag}a up
ip -n $rt link set ${tag}b up
ip -n $rt link set ${tag}c up
ip -n $rx link set ${tag}d up
ip -n $tx route add default via 10.231.1.2
ip -n $rx route add default via 10.231.2.1
ip netns exec $rt sysctl -qw net.ipv4.ip_forward=1
ip netns exec $rt tc qdisc add dev ${tag}c root tbf rate 4mbit burst 1600 latency 20ms

(umask 077; head -c32 /dev/urandom | base64 > "$work/secret")
first=${bins[0]}
ip netns exec $rx "$first" sink --listen 10.231.2.2:7000 --secret-file "$work/secret" \
    --interval 0 --duration 1h >"$work/sink.log" 2>&1 &
sink_pid=$!
for _ in $(seq 100); do
    ip netns exec $rx ss -Hltn 'sport = :7000' | grep -q . && break
    sleep 0.05
done

for run in $(seq "$runs"); do
    for bin in "${bins[@]}"; do
        rc=0
        ip netns exec $tx "$bin" search --to 10.231.2.2:7000 --secret-file "$work/secret" \
            --size 200 --loss-ratios 0,0.005 --trial 1s --final-trial "$final" --max-time "$max_time" \
            --json >"$work/out" 2>"$work/err" </dev/null || rc=$?
        python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[4])]
s = lines[-1]
ndr, pdr = (r["lower_pps"] for r in s["results"])
sending = sum(l["duration_s"] for l in lines if l["type"] == "trial")
print("%s run %s: %d trials, %.1f s (%.1f s sending, %.0f ms more per trial), NDR %d pps, PDR %d pps, exit %s"
      % (sys.argv[1], sys.argv[2], s["trials"], s["duration_s"], sending,
         (s["duration_s"] - sending) * 1000 / s["trials"], ndr, pdr, sys.argv[3]))
' "$bin" "$run" "$rc" "$work/out" || { echo "$bin run $run: no summary (exit $rc)"; tail -n3 "$work/err"; continue; }
        [[ -n $confirm ]] || continue
        ndr=$(tail -n1 "$work/out" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["results"][0]["lower_pps"])')
        drops() { ip netns exec $rt tc -s qdisc show dev ${tag}c | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -n1; }
        before=$(drops)
        ip netns exec $tx "$bin" send --to 10.231.2.2:7000 --secret-file "$work/secret" --size 200 \
            --rate "${ndr}pps" --duration "$confirm" --interval 0 --json >"$work/confirm" 2>/dev/null </dev/null || true
        after=$(drops)
        python3 -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if "\"summary\"" in l][-1]
k = s.get("sink") or {}
print("  %s at the NDR %s pps: sent %d (achieved %.3f of target), tbf dropped %d, sink lost %s, kernel drops %s"
      % (sys.argv[2], sys.argv[3], s["tx_packets"], s["achieved_ratio"], int(sys.argv[4]), k.get("rx_lost"), k.get("rx_kernel_drops")))
' "$work/confirm" "$confirm" "$ndr" "$((after - before))"
    done
done
