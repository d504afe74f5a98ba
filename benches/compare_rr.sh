#!/usr/bin/env bash
# benches/compare_rr.sh: UDP request/response over loopback, one flow, depth 1, 64-byte requests
# and responses, transactions/s side by side in interleaved rounds: ringblast send --pattern rr
# against its own sink (`ringblast`: the sink's default, which polls for the next request for
# 50 us after each; `ringblast_sleep`: the sink at --rx-wait sleep, which wakes per request as
# sockperf's server does), and sockperf ping-pong (64-byte messages) against sockperf server; the
# client/sender pinned to SEND_CPU (0), the sink/server to SINK_CPU (1). Run as root or not:
#
#   bash benches/compare_rr.sh
#
# sockperf counts its "valid duration" (after its 400 ms warm-up), ringblast its whole run.
# Knobs: ROUNDS (3), DURATION (5), SEND_CPU (0), SINK_CPU (1), RINGBLAST (default: cargo build
# --release). Prints each run's transactions/s, the medians and each ringblast row / sockperf.
# Exit: 0 every run produced a figure, 1 a run failed, 2 a missing prerequisite.
set -euo pipefail
export LC_ALL=C
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${ROUNDS:-3}" DURATION="${DURATION:-5}" SEND_CPU="${SEND_CPU:-0}" SINK_CPU="${SINK_CPU:-1}"
command -v sockperf >/dev/null || { echo "compare_rr: sockperf is missing (apt-get install sockperf)" >&2; exit 2; }
if [ -z "${RINGBLAST:-}" ]; then
  (cd "$ROOT" && cargo build --release --quiet)
  RINGBLAST="$ROOT/target/release/ringblast"
fi
port=$((20000 + RANDOM % 20000))
ringblast_tps() {
  local sink out
  timeout $((DURATION + 15)) taskset -c "$SINK_CPU" "$RINGBLAST" sink --listen "127.0.0.1:$port" \
    --cpus "$SINK_CPU" --duration "$((DURATION + 4))s" --interval 0 --rx-wait "$1" >/dev/null 2>&1 &
  sink=$!
  sleep 1
  out=$(timeout $((DURATION + 10)) "$RINGBLAST" send --to "127.0.0.1:$port" --cpus "$SEND_CPU" \
    --pattern rr --request-size 64 --response-size 64 --duration "${DURATION}s" --interval 0 --json 2>/dev/null \
    | grep '"role":"send"' | grep -o '"transactions_per_s":[0-9]*' | cut -d: -f2)
  wait "$sink" || true
  port=$((port + 1))
  [ -n "$out" ] && echo "$out"
}
sockperf_tps() {
  local server out
  timeout $((DURATION + 15)) taskset -c "$SINK_CPU" sockperf server -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  server=$!
  sleep 1
  out=$(taskset -c "$SEND_CPU" timeout $((DURATION + 10)) sockperf ping-pong -i 127.0.0.1 -p "$port" \
    -m 64 -t "$DURATION" 2>&1 | awk '/\[Valid Duration\]/ { for (i = 1; i <= NF; i++) { if ($i ~ /^RunTime=/) { split($i, a, "="); t = a[2] + 0 } if ($i ~ /^ReceivedMessages=/) { split($i, b, "="); n = b[2] + 0 } } } END { if (t > 0) printf "%d\n", n / t }')
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  port=$((port + 1))
  [ -n "$out" ] && echo "$out"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
rb=() rs=() sp=()
for round in $(seq 1 "$ROUNDS"); do
  for tool in $(printf 'ringblast\nringblast_sleep\nsockperf\n' | shuf); do
    case "$tool" in
      ringblast) v=$(ringblast_tps batch) || { echo "compare_rr: ringblast run failed" >&2; exit 1; }; rb+=("$v") ;;
      ringblast_sleep) v=$(ringblast_tps sleep) || { echo "compare_rr: ringblast run failed" >&2; exit 1; }; rs+=("$v") ;;
      *) v=$(sockperf_tps) || { echo "compare_rr: sockperf run failed" >&2; exit 1; }; sp+=("$v") ;;
    esac
    printf 'round %d %-15s %8d trans/s\n' "$round" "$tool" "$v"
  done
done
rbm=$(printf '%s\n' "${rb[@]}" | median) rsm=$(printf '%s\n' "${rs[@]}" | median) spm=$(printf '%s\n' "${sp[@]}" | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }
printf 'median: ringblast %d, ringblast_sleep %d, sockperf %d trans/s; ringblast / sockperf = %s, ringblast_sleep / sockperf = %s\n' \
  "$rbm" "$rsm" "$spm" "$(ratio "$rbm" "$spm")" "$(ratio "$rsm" "$spm")"
