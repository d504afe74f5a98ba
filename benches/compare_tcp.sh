#!/usr/bin/env bash
# benches/compare_tcp.sh: TCP over loopback, ringblast against iperf3, nuttcp and sockperf, in
# interleaved rounds inside a private network namespace, sender pinned to SEND_CPU and the
# receiver to SINK_CPU, with the ratios printed. One command, as root:
#
#   bash benches/compare_tcp.sh
#
# Measures: stream with 1 connection (Gbit/s, and CPU seconds per GB of both processes), and
# request/response with 1 connection (transactions/s and machine context switches per
# transaction). ringblast's smallest rr records are 36-byte requests and 32-byte responses (the
# record header); sockperf ping-pong's smallest message is 14 bytes (RR_MSG). Knobs: ROUNDS (3),
# DURATION (3, seconds), SEND_CPU (0), SINK_CPU (1), STREAM_SIZE (128K: ringblast record size
# and write size of the peers), RR_MSG (14), RINGBLAST (binary; default target/release).
# Results: a table on stdout, raw rows in target/bench/compare_tcp.tsv. Exit 2 on a missing
# prerequisite, 1 when a run produced no figure.
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/target/bench"
TSV="$OUT/compare_tcp.tsv"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-3}"
SEND_CPU="${SEND_CPU:-0}"
SINK_CPU="${SINK_CPU:-1}"
STREAM_SIZE="${STREAM_SIZE:-128K}"
RR_MSG="${RR_MSG:-14}"
RINGBLAST="${RINGBLAST:-$ROOT/target/release/ringblast}"
NS="rb-tcpbench-$$"
PORT=$((20000 + $$ % 10000))
FAILED=0

die() { echo "compare_tcp.sh: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "run as root (it creates a network namespace)"
for t in iperf3 nuttcp sockperf taskset /usr/bin/time jq; do
    command -v "$t" >/dev/null || die "missing $t (apt-get install iperf3 nuttcp sockperf time jq)"
done
[ -x "$RINGBLAST" ] || die "no ringblast binary at $RINGBLAST (cargo build --release)"
mkdir -p "$OUT"
ip netns add "$NS" && ip -n "$NS" link set lo up
cleanup() {
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
in_ns() { ip netns exec "$NS" "$@"; }
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
# cpu_s FILE...: user+system seconds summed over /usr/bin/time -f '%U %S' outputs.
cpu_s() { awk '{u += $1 + $2} END {printf "%.3f", u}' "$@"; }
wait_listen() { for _ in $(seq 100); do in_ns ss -Hltn | grep -q ":$1 " && return 0; sleep 0.05; done; return 1; }
printf 'round\ttest\ttool\tvalue\tunit\tcpu_s_per_gb\tctx_per_transaction\n' > "$TSV"
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" | tee -a "$TSV" >&2; }

stream_ringblast() {
    local r=$1 p=$((PORT + 1))
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.sink" taskset -c "$SINK_CPU" "$RINGBLAST" sink --proto tcp \
        --listen 127.0.0.1:$p --cpus "$SINK_CPU" --json --interval 0 --duration "$((DURATION + 2))s" \
        > "$OUT/sink.json" 2>/dev/null &
    local sink=$!
    wait_listen $p
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.send" taskset -c "$SEND_CPU" "$RINGBLAST" send --proto tcp \
        --to 127.0.0.1:$p --cpus "$SEND_CPU" --size "$STREAM_SIZE" --duration "${DURATION}s" --json \
        --interval 0 > "$OUT/send.json" 2>/dev/null
    wait $sink || true
    local bps bytes
    bps=$(tail -1 "$OUT/sink.json" | jq -r .bps); bytes=$(tail -1 "$OUT/sink.json" | jq -r .rx_bytes)
    row "$r" stream1 ringblast "$(echo "$bps" | awk '{printf "%.2f", $1/1e9}')" Gbit/s \
        "$(echo "$(cpu_s "$OUT/t.sink" "$OUT/t.send") $bytes" | awk '{printf "%.3f", $1/($2/1e9)}')" -
}

stream_iperf3() {
    local r=$1 p=$((PORT + 2))
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.sink" iperf3 -s -1 -p $p -A "$SINK_CPU" >/dev/null 2>&1 &
    local srv=$!
    wait_listen $p
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.send" iperf3 -c 127.0.0.1 -p $p -A "$SEND_CPU" -t "$DURATION" \
        -l "$STREAM_SIZE" -J > "$OUT/iperf3.json"
    wait $srv || true
    local bps bytes
    bps=$(jq -r .end.sum_received.bits_per_second "$OUT/iperf3.json")
    bytes=$(jq -r .end.sum_received.bytes "$OUT/iperf3.json")
    row "$r" stream1 iperf3 "$(echo "$bps" | awk '{printf "%.2f", $1/1e9}')" Gbit/s \
        "$(echo "$(cpu_s "$OUT/t.sink" "$OUT/t.send") $bytes" | awk '{printf "%.3f", $1/($2/1e9)}')" -
}

stream_nuttcp() {
    local r=$1 p=$((PORT + 3))
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.sink" taskset -c "$SINK_CPU" nuttcp -S -1 -P $p -p $((p + 1)) --nofork >/dev/null 2>&1 &
    local srv=$!
    wait_listen $p
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.send" taskset -c "$SEND_CPU" nuttcp -P $p -p $((p + 1)) \
        -T "$DURATION" -l "$(numfmt --from=iec "$STREAM_SIZE")" -fparse 127.0.0.1 > "$OUT/nuttcp.txt"
    wait $srv || true
    local mbps mb
    mbps=$(grep -o 'rate_Mbps=[0-9.]*' "$OUT/nuttcp.txt" | cut -d= -f2)
    mb=$(grep -o 'megabytes=[0-9.]*' "$OUT/nuttcp.txt" | cut -d= -f2)
    row "$r" stream1 nuttcp "$(echo "$mbps" | awk '{printf "%.2f", $1/1e3}')" Gbit/s \
        "$(echo "$(cpu_s "$OUT/t.sink" "$OUT/t.send") $mb" | awk '{printf "%.3f", $1/($2*1.048576/1e3)}')" -
}

stream_sockperf() {
    local r=$1 p=$((PORT + 5))
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.sink" taskset -c "$SINK_CPU" sockperf sr --tcp -i 127.0.0.1 -p $p >/dev/null 2>&1 &
    local srv=$!
    wait_listen $p
    in_ns /usr/bin/time -f '%U %S' -o "$OUT/t.send" taskset -c "$SEND_CPU" sockperf tp --tcp -i 127.0.0.1 -p $p \
        -m 65000 -t "$DURATION" > "$OUT/sockperf.txt" 2>&1 || true
    in_ns kill -INT $(ip netns pids "$NS") 2>/dev/null || true
    wait $srv || true
    # sockperf reports its sender side: "BandWidth is X MBps (Y Mbps)".
    local mbps
    mbps=$(grep -o '([0-9.]* Mbps)' "$OUT/sockperf.txt" | tr -d '(' | awk '{print $1}' | tail -1)
    row "$r" stream1 sockperf "$(echo "${mbps:-0}" | awk '{printf "%.2f", $1/1e3}')" Gbit/s - -
}

rr_ringblast() {
    local r=$1 p=$((PORT + 6))
    in_ns taskset -c "$SINK_CPU" "$RINGBLAST" sink --proto tcp --listen 127.0.0.1:$p --cpus "$SINK_CPU" \
        --json --interval 0 --duration "$((DURATION + 2))s" > "$OUT/sink.json" 2>/dev/null &
    local sink=$!
    wait_listen $p
    in_ns taskset -c "$SEND_CPU" "$RINGBLAST" send --proto tcp --pattern rr --request-size 36 \
        --response-size 32 --to 127.0.0.1:$p --cpus "$SEND_CPU" --duration "${DURATION}s" --json \
        --interval 0 > "$OUT/send.json" 2>/dev/null
    wait $sink || true
    local s; s=$(tail -1 "$OUT/send.json")
    row "$r" rr1 ringblast "$(echo "$s" | jq -r .tps)" trans/s - \
        "$(echo "$s" | jq -r '.machine_ctx_switches_per_transaction | . * 100 | round / 100')"
}

rr_sockperf() {
    local r=$1 p=$((PORT + 7))
    in_ns taskset -c "$SINK_CPU" sockperf sr --tcp -i 127.0.0.1 -p $p >/dev/null 2>&1 &
    local srv=$!
    wait_listen $p
    local c0; c0=$(ctxt)
    in_ns taskset -c "$SEND_CPU" sockperf pp --tcp -i 127.0.0.1 -p $p -m "$RR_MSG" -t "$DURATION" \
        > "$OUT/sockperf_pp.txt" 2>&1 || true
    local c1; c1=$(ctxt)
    in_ns kill -INT $(ip netns pids "$NS") 2>/dev/null || true
    wait $srv || true
    local n; n=$(grep -o 'ReceivedMessages=[0-9]*' "$OUT/sockperf_pp.txt" | cut -d= -f2 | tail -1)
    n=${n:-0}
    local run; run=$(grep -o 'RunTime=[0-9.]*' "$OUT/sockperf_pp.txt" | cut -d= -f2 | tail -1)
    row "$r" rr1 sockperf "$(echo "$n ${run:-$DURATION}" | awk '{printf "%.0f", $1/$2}')" trans/s - \
        "$(echo "$((c1 - c0)) $n" | awk '{ if ($2 > 0) printf "%.2f", $1/$2; else print "-" }')"
}

for r in $(seq "$ROUNDS"); do
    for t in stream_ringblast stream_iperf3 stream_nuttcp stream_sockperf rr_ringblast rr_sockperf; do
        $t "$r" || { echo "compare_tcp.sh: $t failed in round $r" >&2; FAILED=1; }
    done
done

echo
echo "medians over $ROUNDS rounds (load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); a shared, busy machine inflates every figure's spread)"
awk -F'\t' 'NR > 1 { key = $2 "\t" $3; v[key] = v[key] " " $4; u[key] = $5; c[key] = $6; x[key] = $7 }
    END { for (k in v) { n = split(v[k], a, " ");
          for (i = 2; i <= n; i++) { t = a[i]; j = i - 1; while (j > 0 && a[j] + 0 > t + 0) { a[j + 1] = a[j]; j-- } a[j + 1] = t }
          m = a[int((n + 1) / 2)];
          med[k] = m; printf "%-22s %10s %-7s (last round: cpu_s/GB %s, ctx/trans %s)\n", k, m, u[k], c[k], x[k] }
          split("iperf3 nuttcp sockperf", peers, " "); best = 0
          for (i in peers) { k = "stream1\t" peers[i]; if (med[k] > best) { best = med[k]; bp = peers[i] } }
          if (best > 0) printf "stream1: ringblast / best peer (%s) = %.2f\n", bp, med["stream1\tringblast"] / best
          if (med["rr1\tsockperf"] > 0) printf "rr1: ringblast / sockperf = %.2f\n", med["rr1\tringblast"] / med["rr1\tsockperf"] }' "$TSV" | sed 's/\t/ /'
exit $FAILED
