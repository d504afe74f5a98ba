#!/usr/bin/env bash
# Start-up time, launch to the first packet, measured where it belongs (tests/startup.rs keeps
# only a 5 s hang guard): RUNS counted `pair` runs idle, then RUNS with a busy loop on every
# core. For each it reads the sender's `startup_ms` (launch to first send) and the sink's
# `first_packet_ms` (launch to its first valid packet), and times launch to exit with the shell's
# own clock; it prints the median and the worst of each, and whether the worst first packet met
# the 1 s target (docs/traffic.md). It sends 20 000 packets on loopback per run.
#
#   benches/startup.sh [RUNS (default 10)] [BINARY (default target/release/ringblast)]
set -euo pipefail
runs=${1:-10}
bin=${2:-target/release/ringblast}
[[ -x $bin ]] || { echo "$0: $bin is not built; run cargo build --release" >&2; exit 2; }
work=$(mktemp -d)
load_pids=()
cleanup() {
    for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

measure() { # label
    local label=$1 i start end
    for ((i = 0; i < runs; i++)); do
        start=$(date +%s%N)
        "$bin" pair --count 20000 --json --no-metrics --interval 0 >"$work/run.json" 2>/dev/null
        end=$(date +%s%N)
        python3 - "$work/run.json" "$(( (end - start) / 1000000 ))" >>"$work/$label" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
summary = {r["role"]: r for r in rows if r.get("type") == "summary"}
print(summary["send"]["startup_ms"], summary["sink"]["first_packet_ms"], sys.argv[2])
PY
    done
    python3 - "$work/$label" "$label" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
cols = list(zip(*rows))
def fmt(name, xs):
    return f"{name} median {statistics.median(xs):.0f} ms, worst {max(xs):.0f} ms"
print(f"{sys.argv[2]:>12} ({len(rows)} runs): " + "; ".join(
    [fmt("send startup", cols[0]), fmt("sink first packet", cols[1]), fmt("launch to exit", cols[2])])
    + f"; first packet within 1 s: {'yes' if max(cols[1]) < 1000 else 'NO'}")
PY
}

measure idle
cores=$(nproc)
for ((c = 0; c < cores; c++)); do
    sh -c 'while :; do :; done' &
    load_pids+=($!)
done
measure "${cores} busy loops"
