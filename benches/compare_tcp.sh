#!/usr/bin/env bash
# benches/compare_tcp.sh: TCP side by side, in interleaved rounds, sender pinned to SEND_CPU
# (0) and sink/server to SINK_CPU (1), with the ratios printed. Run as root:
#
#   bash benches/compare_tcp.sh
#
# Workloads (each run DURATION seconds, tools in a random order within each round):
#   stream_lo    1 connection over loopback, Gbit/s: ringblast --proto tcp, iperf3, sockperf tp
#                --tcp (sockperf reports its sender side), nuttcp; every tool writes WRITE bytes
#                at a time (ringblast --size, iperf3 -l, sockperf -m, nuttcp -l; sockperf at most
#                65000, the most its server takes).
#                The write size matters more than the tool: on this loopback (MSS 65483) writes
#                of 131072 or 65536 bytes, which leave a runt of 106 or 53 bytes per write, run
#                at about 60 % of writes of 65000 or 128000 bytes, in iperf3 as in ringblast.
#   stream_veth  2 queues/streams over a veth pair between two namespaces: ringblast --queues 2
#                against iperf3 -P 2.
#   rr_lo        request/response over loopback, 1 connection, transactions/s: ringblast
#                --pattern rr with its smallest records (36-byte requests, which carry the
#                response length, and 32-byte responses: the ringblast header) against sockperf
#                ping-pong --tcp --mps max (14 bytes, sockperf's smallest message, its own header).
#                Neither tool can send the issue's 1-byte requests.
# For every run: received (or, for sockperf tp, sent) Gbit/s or transactions/s; the CPU cost from
# the busy time of the two pinned CPUs (streams: CPU-seconds per GB moved; rr: CPU-microseconds
# per transaction); and for rr the context switches per transaction, of both processes
# (voluntary + involuntary, from GNU time) and of the whole machine (/proc/stat ctxt).
# Knobs: ROUNDS (3), DURATION (5), WRITE (65000: bytes per stream write, every tool),
# SEND_CPU (0), SINK_CPU (1), NICE (-20), TOOLS (all of
# "ringblast ringblast_sleep iperf3 sockperf nuttcp"; ringblast_sleep is ringblast with the sink
# at --rx-wait sleep, which wakes per completion as the peers' receivers do), RINGBLAST (default: cargo build --release),
# BASELINE (path to an older ringblast binary: adds a `baseline` tool run with ringblast's arguments to
# every round, and prints ringblast / baseline per workload, for before/after ratios from the same run).
# Raw rows: target/bench/compare_tcp.tsv; tool output of the last run: target/bench/raw_tcp/.
# Exit: 0 every run produced a figure, 1 a run failed, 2 bad settings or missing prerequisite.
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="$ROOT/target/bench"
RAW="$OUT_DIR/raw_tcp"
TSV="$OUT_DIR/compare_tcp.tsv"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-5}"
WRITE="${WRITE:-65000}"
SOCKPERF_WRITE=$((WRITE < 65000 ? WRITE : 65000))
SEND_CPU="${SEND_CPU:-0}"
SINK_CPU="${SINK_CPU:-1}"
NICE="${NICE:--20}"
TOOLS="${TOOLS:-ringblast ringblast_sleep iperf3 sockperf nuttcp}"
RINGBLAST="${RINGBLAST:-}"
BASELINE="${BASELINE:-}"
if [[ -n "$BASELINE" && " $TOOLS " != *" baseline "* ]]; then TOOLS="$TOOLS baseline"; fi
LO="rbt-lo-$$" TX="rbt-tx-$$" RX="rbt-rx-$$"
NET=231 PORT=$((21000 + $$ % 9000)) FAILURES=0
declare -A LIVE=()

die() { echo "compare_tcp.sh: $*" >&2; exit 2; }
note() { echo "compare_tcp.sh: $*" >&2; }
wants() { [[ " $TOOLS " == *" $1 "* ]]; }
# The sink's --rx-wait for a ringblast row: ringblast_sleep is the sink that wakes per completion.
rx_wait() { [[ "$1" == ringblast_sleep ]] && echo sleep || echo batch; }

[[ "$ROUNDS" =~ ^[0-9]+$ && "$DURATION" =~ ^[0-9]+$ ]] || die "ROUNDS and DURATION must be integers"
((ROUNDS >= 1 && ROUNDS <= 50 && DURATION >= 2 && DURATION <= 120)) || die "ROUNDS 1..50, DURATION 2..120"
((EUID == 0)) || die "run as root: the benchmark creates network namespaces"
((SEND_CPU != SINK_CPU)) || die "SEND_CPU and SINK_CPU must differ"

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${!LIVE[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${!LIVE[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "$LO" "$TX" "$RX"; do ip netns del "$ns" 2>/dev/null || true; done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install_tools() {
    local -a pkgs=()
    for t in iperf3 sockperf nuttcp jq; do command -v "$t" >/dev/null || pkgs+=("$t"); done
    [[ -x /usr/bin/time ]] || pkgs+=(time)
    ((${#pkgs[@]} == 0)) && return 0
    command -v apt-get >/dev/null || die "missing ${pkgs[*]} and no apt-get; install them first"
    note "installing ${pkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; }
}

setup() {
    if wants ringblast || wants ringblast_sleep; then
        if [[ -z "$RINGBLAST" ]]; then
            (cd "$ROOT" && cargo build --release --quiet)
            RINGBLAST="$ROOT/target/release/ringblast"
        fi
        "$RINGBLAST" send --help | grep -q -- '--proto' ||
            die "$RINGBLAST has no --proto (TCP); build a ringblast with TCP or leave it out of TOOLS"
    fi
    if wants baseline; then
        [[ -x "$BASELINE" ]] || die "BASELINE=$BASELINE is not an executable ringblast"
    fi
    ip netns add "$LO" && ip -n "$LO" link set lo up
    ip netns add "$TX" && ip netns add "$RX"
    ip link add "rbt$$a" netns "$TX" type veth peer name "rbt$$b" netns "$RX"
    ip -n "$TX" addr add "10.$NET.0.1/24" dev "rbt$$a" && ip -n "$RX" addr add "10.$NET.0.2/24" dev "rbt$$b"
    for ns in "$TX" "$RX"; do ip -n "$ns" link set lo up; done
    ip -n "$TX" link set "rbt$$a" up && ip -n "$RX" link set "rbt$$b" up
    mkdir -p "$RAW"
    printf 'round\tworkload\ttool\tvalue\tunit\tbytes\tbusy_cpu_s\tcpu_cost\tctx_per_tx\tmachine_ctx_per_tx\tstatus\n' >"$TSV"
}

busy_ticks() {
    awk -v a="cpu$SEND_CPU" -v b="cpu$SINK_CPU" '$1 == a || $1 == b { s += $2 + $3 + $4 + $7 + $8 + $9 } END { print s }' /proc/stat
}
machine_ctxt() { awk '$1 == "ctxt" { print $2 }' /proc/stat; }

# start NS CPU OUT CMD...: the server/sink side, under GNU time (ctx switches) and a timeout.
start() {
    local ns="$1" cpu="$2" out="$3"
    shift 3
    ip netns exec "$ns" /usr/bin/time -f 'ctx %c %w' -o "$out.time" timeout -k 2 $((DURATION + 15)) \
        nice -n "$NICE" taskset -c "$cpu" "$@" >"$out" 2>"$out.err" &
    SERVER=$!
    LIVE[$SERVER]=1
}

# client NS CPU OUT CMD...: the sender/client side, waited for.
client() {
    local ns="$1" cpu="$2" out="$3" rc=0
    shift 3
    ip netns exec "$ns" /usr/bin/time -f 'ctx %c %w' -o "$out.time" timeout -k 2 $((DURATION + 15)) \
        nice -n "$NICE" taskset -c "$cpu" "$@" >"$out" 2>"$out.err" || rc=$?
    return "$rc"
}

listening() { # listening NS PORT: up to 5 s for a TCP listener
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null)" ]] && return 0
        sleep 0.05
    done
    return 1
}

ctx_of() { awk '$1 == "ctx" { n = $2 + $3 } END { print n + 0 }' "$1.time" 2>/dev/null || echo 0; }

# run_one ROUND WORKLOAD TOOL: one measured run, one TSV row.
run_one() {
    local round="$1" w="$2" tool="$3" port=$((PORT++)) dir="$RAW/$2-$3-r$1"
    local sns="$LO" cns="$LO" host=127.0.0.1
    if [[ "$w" == stream_veth ]]; then sns="$RX" cns="$TX" host="10.$NET.0.2"; fi
    mkdir -p "$dir"
    local b0 c0 b1 c1 status=ok value="" unit=gbps bytes=0 tx=0 crc=0
    b0="$(busy_ticks)" c0="$(machine_ctxt)"
    case "$w:$tool" in
    stream_*:ringblast | stream_*:ringblast_sleep | stream_*:baseline)
        local q=1 bin="$RINGBLAST"
        [[ "$tool" == baseline ]] && bin="$BASELINE"
        [[ "$w" == stream_veth ]] && q=2
        start "$sns" "$SINK_CPU" "$dir/s" "$bin" sink --listen "$host:$port" --proto tcp --queues "$q" \
            --insecure-control --rx-wait "$(rx_wait "$tool")" --duration "$((DURATION + 4))s" --json
        listening "$sns" "$port" || status=fail:listen
        [[ "$status" == ok ]] && { client "$cns" "$SEND_CPU" "$dir/c" "$bin" send --to "$host:$port" --proto tcp \
            --queues "$q" --conns 1 --size "$WRITE" --duration "${DURATION}s" --json || crc=$?; }
        kill -INT "$SERVER" 2>/dev/null || true ;;
    rr_lo:ringblast | rr_lo:ringblast_sleep | rr_lo:baseline)
        unit=tps
        local bin="$RINGBLAST"
        [[ "$tool" == baseline ]] && bin="$BASELINE"
        start "$sns" "$SINK_CPU" "$dir/s" "$bin" sink --listen "$host:$port" --proto tcp \
            --rx-wait "$(rx_wait "$tool")" --duration "$((DURATION + 4))s" --json
        listening "$sns" "$port" || status=fail:listen
        [[ "$status" == ok ]] && { client "$cns" "$SEND_CPU" "$dir/c" "$bin" send --to "$host:$port" --proto tcp \
            --pattern rr --request-size 36 --response-size 32 --conns 1 --duration "${DURATION}s" --json || crc=$?; }
        kill -INT "$SERVER" 2>/dev/null || true ;;
    stream_*:iperf3)
        local p=1
        [[ "$w" == stream_veth ]] && p=2
        start "$sns" "$SINK_CPU" "$dir/s" iperf3 -s -1 -p "$port" --json
        listening "$sns" "$port" || status=fail:listen
        [[ "$status" == ok ]] && { client "$cns" "$SEND_CPU" "$dir/c" iperf3 -c "$host" -p "$port" -t "$DURATION" -P "$p" -l "$WRITE" --json || crc=$?; } ;;
    stream_lo:sockperf)
        start "$sns" "$SINK_CPU" "$dir/s" sockperf sr --tcp -i "$host" -p "$port"
        listening "$sns" "$port" || status=fail:listen
        [[ "$status" == ok ]] && { client "$cns" "$SEND_CPU" "$dir/c" sockperf tp --tcp -i "$host" -p "$port" -m "$SOCKPERF_WRITE" -t "$DURATION" --dontwarmup || crc=$?; }
        kill -TERM "$SERVER" 2>/dev/null || true ;;
    rr_lo:sockperf)
        unit=tps
        start "$sns" "$SINK_CPU" "$dir/s" sockperf sr --tcp -i "$host" -p "$port"
        listening "$sns" "$port" || status=fail:listen
        [[ "$status" == ok ]] && { client "$cns" "$SEND_CPU" "$dir/c" sockperf ping-pong --tcp -i "$host" -p "$port" -m 14 --mps max --full-rtt -t "$DURATION" || crc=$?; }
        kill -TERM "$SERVER" 2>/dev/null || true ;;
    stream_lo:nuttcp)
        start "$sns" "$SINK_CPU" "$dir/s" nuttcp -1 --nofork -P "$port"
        listening "$sns" "$port" || status=fail:listen
        [[ "$status" == ok ]] && { client "$cns" "$SEND_CPU" "$dir/c" nuttcp -T"$DURATION" -N1 -l"$WRITE" -P "$port" -p $((port + 1)) -fparse "$host" || crc=$?; }
        PORT=$((PORT + 1)) ;;
    *) die "internal: no $tool for $w" ;;
    esac
    wait "$SERVER" 2>/dev/null || true
    unset "LIVE[$SERVER]"
    b1="$(busy_ticks)" c1="$(machine_ctxt)"
    ((crc == 0)) || status="fail:client-exit-$crc"
    if [[ "$status" == ok ]]; then
        case "$w:$tool" in
        stream_*:ringblast* | stream_*:baseline) read -r value bytes < <(grep -h '"role":"sink"' "$dir/s" | tail -n 1 |
            jq -r 'select(.type == "summary") | "\(.bps / 1e9) \(.rx_bytes)"') || true ;;
        rr_lo:ringblast* | rr_lo:baseline) read -r value tx < <(tail -n 1 "$dir/c" | jq -r '"\(.tps) \(.transactions)"') || true ;;
        stream_*:iperf3) read -r value bytes < <(jq -r '.end.sum_received | "\(.bits_per_second / 1e9) \(.bytes)"' "$dir/c") || true ;;
        stream_lo:sockperf) read -r value bytes < <(awk '/BandWidth is/ { for (i = 1; i <= NF; i++) if ($i ~ /^\(/) { v = substr($i, 2) / 1000 } }
            /Total of/ { m = $4 } END { if (v != "") printf "%.3f %.0f\n", v, m * w }' w="$SOCKPERF_WRITE" "$dir/c.err" "$dir/c") || true ;;
        rr_lo:sockperf) read -r value tx < <(awk '/\[Valid Duration\]/ { split($0, a, "RunTime="); s = a[2] + 0
            split($0, b, "ReceivedMessages="); n = b[2] + 0 } END { if (s > 0) printf "%.0f %d\n", n / s, n }' "$dir/c.err" "$dir/c") || true ;;
        stream_lo:nuttcp) read -r value bytes < <(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "=")
            if (kv[1] == "rate_Mbps") r = kv[2] / 1000; if (kv[1] == "megabytes") m = kv[2] } } END { if (r != "") printf "%.3f %.0f\n", r, m * 1048576 }' "$dir/c") || true ;;
        esac
        [[ -n "$value" && "$value" != null ]] || status=fail:no-result
    fi
    local busy ctx
    busy="$(awk -v d="$((b1 - b0))" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", d / hz }')"
    ctx=$(($(ctx_of "$dir/s") + $(ctx_of "$dir/c")))
    local row
    row="$(awk -v r="$round" -v w="$w" -v t="$tool" -v v="${value:-0}" -v u="$unit" -v by="$bytes" -v b="$busy" \
        -v x="$ctx" -v m="$((c1 - c0))" -v n="${tx:-0}" -v s="$status" 'BEGIN {
        cost = (u == "tps" ? (n > 0 ? sprintf("%.2f", b * 1e6 / n) : "-") : (by > 0 ? sprintf("%.3f", b / (by / 1e9)) : "-"))
        printf "%s\t%s\t%s\t%.3f\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s", r, w, t, v, u, by, b, cost,
            (n > 0 ? sprintf("%.2f", x / n) : "-"), (n > 0 ? sprintf("%.2f", m / n) : "-"), s }')"
    echo "$row" >>"$TSV"
    printf '  %s\n' "${row//$'\t'/  }"
    [[ "$status" == ok ]] || { FAILURES=$((FAILURES + 1)); note "$tool $w failed ($status); see $dir"; }
}

summarize() {
    awk -F '\t' '
    function median(a, n,    i, j, v) { for (i = 2; i <= n; i++) { v = a[i]; for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    NR == 1 || $11 != "ok" { next }
    { k = $2 SUBSEP $3; v[$1, k] = $4; c[$1, k] = $8; x[$1, k] = $9; seen[k] = 1; ws[$2] = 1; ts[$3] = 1; unit[$2] = $5
      if ($1 > rounds) rounds = $1 }
    END {
        printf "%-12s %-15s %19s %22s %12s\n", "workload", "tool", "median", "cpu (s/GB | us/tx)", "ctx_per_tx"
        for (w in ws) for (t in ts) if ((w, t) in seen) {
            n = 0; m = 0; p = 0
            for (r = 1; r <= rounds; r++) if ((r, w SUBSEP t) in v) { a[++n] = v[r, w SUBSEP t]; if (c[r, w SUBSEP t] != "-") b[++m] = c[r, w SUBSEP t]; if (x[r, w SUBSEP t] != "-") d[++p] = x[r, w SUBSEP t] }
            printf "%-12s %-15s %14.3f %-4s %22s %12s\n", w, t, median(a, n), unit[w], (m ? sprintf("%.3f", median(b, m)) : "-"), (p ? sprintf("%.2f", median(d, p)) : "-")
        }
        split("ringblast ringblast_sleep", rbs, " ")
        for (k = 1; k <= 2; k++) {
            rb = rbs[k]
            printf "\n%s / best other tool of the same round (median over rounds, min-max; ringblast rows are never a peer):\n", rb
            for (w in ws) {
                n = 0
                for (r = 1; r <= rounds; r++) {
                    if (!((r, w SUBSEP rb) in v)) continue
                    best = 0; for (t in ts) if (t !~ /^(ringblast|baseline)/ && (r, w SUBSEP t) in v && v[r, w SUBSEP t] > best) best = v[r, w SUBSEP t]
                    if (best > 0) q[++n] = v[r, w SUBSEP rb] / best
                }
                if (n) { lo = q[1]; hi = q[1]; for (i = 2; i <= n; i++) { if (q[i] < lo) lo = q[i]; if (q[i] > hi) hi = q[i] }
                    printf "  %-12s %.2f (%.2f-%.2f) over %d rounds\n", w, median(q, n), lo, hi, n }
            }
        }
        if ("baseline" in ts) {
            printf "\nringblast / baseline of the same round (median over rounds, min-max):\n"
            for (w in ws) {
                n = 0
                for (r = 1; r <= rounds; r++) if ((r, w SUBSEP "ringblast") in v && (r, w SUBSEP "baseline") in v && v[r, w SUBSEP "baseline"] > 0)
                    q[++n] = v[r, w SUBSEP "ringblast"] / v[r, w SUBSEP "baseline"]
                if (n) { lo = q[1]; hi = q[1]; for (i = 2; i <= n; i++) { if (q[i] < lo) lo = q[i]; if (q[i] > hi) hi = q[i] }
                    printf "  %-12s %.2f (%.2f-%.2f) over %d rounds\n", w, median(q, n), lo, hi, n }
            }
        }
    }' "$TSV"
}

install_tools
setup
echo "ringblast compare_tcp: $(date -u '+%Y-%m-%dT%H:%M:%SZ'), kernel $(uname -r), nproc $(nproc); sender CPU $SEND_CPU, sink CPU $SINK_CPU, ${DURATION}s runs, $ROUNDS rounds, $WRITE-byte stream writes, tools: $TOOLS"
for ((round = 1; round <= ROUNDS; round++)); do
    mapfile -t order < <(for w in stream_lo stream_veth rr_lo; do for t in $TOOLS; do
        case "$w:$t" in stream_veth:sockperf | stream_veth:nuttcp | rr_lo:iperf3 | rr_lo:nuttcp) ;; *) echo "$w $t" ;; esac
    done; done | shuf)
    for pair in "${order[@]}"; do
        run_one "$round" ${pair}
    done
done
echo
summarize
echo
echo "targets (issue 12): stream_lo >= 1.0x the best of iperf3/sockperf/nuttcp; stream_veth >= 1.2x iperf3 -P 2; rr_lo >= 1.0x sockperf ping-pong"
echo "raw rows: $TSV"
((FAILURES == 0)) || { note "$FAILURES run(s) failed; see $RAW"; exit 1; }
