#!/usr/bin/env bash
# Exporter overhead: unpaced loopback pps with the Prometheus exporter on and scraped 10 times
# a second, against the exporter off, interleaved in one run; prints the median of per-round
# ratios (target >= 0.99). Usage: benches/exporter_overhead.sh [rounds] [seconds]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-5}
secs=${2:-5}
bin=${RINGBLAST:-target/release/ringblast}
[ -x "$bin" ] || cargo build --release --quiet
port=$((20000 + RANDOM % 20000))

run() { # run on|off -> prints the sink's pps
    local mode=$1 metrics=(--no-metrics) scraper=""
    if [ "$mode" = on ]; then
        metrics=(--metrics "127.0.0.1:$port")
        # One long-lived client on a kept-alive connection, like a Prometheus server.
        python3 - "$port" "$((secs * 10 + 20))" <<'PY' &
import http.client, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
conn = None
for _ in range(n):
    try:
        conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/metrics")
        conn.getresponse().read()
    except OSError:
        conn = None
    time.sleep(0.1)
PY
        scraper=$!
    fi
    "$bin" pair --duration "${secs}s" --json --interval 0 "${metrics[@]}" 2>/dev/null |
        python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if "\"role\":\"sink\"" in l][-1]["pps"])'
    if [ -n "$scraper" ]; then kill "$scraper" 2>/dev/null || true; wait "$scraper" 2>/dev/null || true; fi
}

ratios=()
for r in $(seq "$rounds"); do
    if ((RANDOM % 2)); then on=$(run on); off=$(run off); else off=$(run off); on=$(run on); fi
    ratio=$(python3 -c "print(f'{$on/$off:.3f}')")
    ratios+=("$ratio")
    echo "round $r: exporter on+scraped ${on} pps, off ${off} pps, ratio ${ratio}"
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print(f"median on/off ratio {statistics.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f}, {len(r)} rounds); target >= 0.99")
PY
