#!/usr/bin/env bash
# benches/compare.sh: side-by-side UDP throughput of ringblast, a neutral C
# sendmmsg/recvmmsg reference (benches/reference/udp_ref.c, with a blocking and
# a spinning sink) and iperf3, run as pairs in the same rounds inside a private
# network namespace, with received packets per busy CPU-second for each (of both pinned CPUs,
# and of the sink's CPU alone); then
# paced accuracy checks (PACED_KPPS, and 1 Mpps with --gso 16 in 100 ms
# windows) and the sink's queue balance with --queues 2 --flows 8. One command,
# run as root:
#
#   bash benches/compare.sh
#
# Knobs (environment): SIZES ("64 1400"), ROUNDS (5), DURATION (5, seconds per
# run), RETRIES (1: extra attempts for a round that saw foreign CPU load),
# QUIET_CPU (0.15: foreign CPUs above which a run is not clean), QUIET_WAIT
# (10: seconds to wait for a quiet machine before each run, 0 = off),
# GAP_MAX_MS (1000: random pause between runs), SEND_CPU (0), SINK_CPU (1),
# NICE (-20), REF_GSO (1: also run udp_ref GSO->GRO), SAME_SENDER (1: also run
# udp_ref's sinks fed by ringblast's sender, for sink-against-sink ratios), PACED_KPPS (100),
# RINGBLAST (path to a ringblast binary; default: cargo build --release),
# BASELINE (path to an older ringblast binary: adds `baseline` and
# `baseline_gso` runs with the same arguments to every round, for before/after
# ratios measured in the same run), PROOF (0; 1 adds `ringblast_secret` and
# `ringblast_auth` runs, plain and with GSO, to every round: both sides hold a
# --secret-file, so each datagram carries its run's token, and `_auth` adds
# --auth-data's tag; their ratios to `ringblast` are the proof's cost), ARRIVAL (0; 1
# adds `ringblast_read` runs, the default sink with `--arrival read`, to every round: the
# ratio of `ringblast` to it is the cost of the kernel's receive stamps).
# Results: a table on stdout, raw rows in target/bench/compare.tsv, tool
# output of the last invocation in target/bench/raw/. Exit status: 0 when
# every run produced a result (whatever the ratios), 1 when a run failed,
# 2 on bad settings or a missing prerequisite.
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="$ROOT/target/bench"
RAW_DIR="$OUT_DIR/raw"
TSV="$OUT_DIR/compare.tsv"
UDP_REF="$OUT_DIR/udp_ref"

SIZES="${SIZES:-64 1400}"
ROUNDS="${ROUNDS:-5}"
DURATION="${DURATION:-5}"
RETRIES="${RETRIES:-1}"
QUIET_CPU="${QUIET_CPU:-0.15}"
QUIET_WAIT="${QUIET_WAIT:-10}"
GAP_MAX_MS="${GAP_MAX_MS:-1000}"
SEND_CPU="${SEND_CPU:-0}"
SINK_CPU="${SINK_CPU:-1}"
NICE="${NICE:--20}"
REF_GSO="${REF_GSO:-1}"
SAME_SENDER="${SAME_SENDER:-1}"
PACED_KPPS="${PACED_KPPS:-100}"
PACED_SECONDS=5
PACED_FAST_SECONDS=10
RINGBLAST="${RINGBLAST:-}"
BASELINE="${BASELINE:-}"
PROOF="${PROOF:-0}"
ARRIVAL="${ARRIVAL:-0}"
SECRET_FILE=""

NS="rb-bench-$$"
NS_CREATED=0
PORT=$((20000 + $$ % 30000))
HZ="$(getconf CLK_TCK)"
TIMES_FILE=""
FAILURES=0
LAST_DIR=""
# shellcheck source=benches/live_pids.sh
source "$(dirname "${BASH_SOURCE[0]}")/live_pids.sh"

die() {
    echo "compare.sh: $*" >&2
    exit 2
}

note() {
    echo "compare.sh: $*" >&2
}

require_uint() {
    [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a non-negative integer, got '$2'"
}

require_number() {
    [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "$1 must be a non-negative number, got '$2'"
}

validate_settings() {
    require_uint ROUNDS "$ROUNDS"
    require_uint DURATION "$DURATION"
    require_uint RETRIES "$RETRIES"
    require_uint QUIET_WAIT "$QUIET_WAIT"
    require_uint GAP_MAX_MS "$GAP_MAX_MS"
    require_uint SEND_CPU "$SEND_CPU"
    require_uint SINK_CPU "$SINK_CPU"
    require_uint REF_GSO "$REF_GSO"
    require_uint SAME_SENDER "$SAME_SENDER"
    require_uint PACED_KPPS "$PACED_KPPS"
    require_uint PROOF "$PROOF"
    require_uint ARRIVAL "$ARRIVAL"
    require_number QUIET_CPU "$QUIET_CPU"
    [[ "$NICE" =~ ^-?[0-9]+$ ]] || die "NICE must be an integer, got '$NICE'"
    ((ROUNDS >= 1 && ROUNDS <= 100)) || die "ROUNDS must be 1..100"
    ((DURATION >= 1 && DURATION <= 120)) || die "DURATION must be 1..120 seconds"
    ((RETRIES <= 5)) || die "RETRIES must be 0..5"
    ((QUIET_WAIT <= 600)) || die "QUIET_WAIT must be 0..600 seconds"
    ((PACED_KPPS >= 1)) || die "PACED_KPPS must be at least 1"
    ((SEND_CPU != SINK_CPU)) || die "SEND_CPU and SINK_CPU must differ"
    local size
    for size in $SIZES; do
        require_uint "a size in SIZES" "$size"
        ((size >= 16 && size <= 65507)) || die "sizes must be 16..65507 bytes, got $size"
    done
    [[ -n "${SIZES// /}" ]] || die "SIZES is empty"
    ((EUID == 0)) || die "run as root: the benchmark creates a network namespace"
    local ncpu
    ncpu="$(nproc --all)"
    ((SEND_CPU < ncpu && SINK_CPU < ncpu)) || die "SEND_CPU/SINK_CPU must be below nproc ($ncpu); set them for this host"
}

# --- prerequisites -----------------------------------------------------------

install_missing_tools() {
    local -a pkgs=()
    command -v iperf3 >/dev/null || pkgs+=(iperf3)
    command -v gcc >/dev/null || pkgs+=(gcc)
    command -v jq >/dev/null || pkgs+=(jq)
    { command -v ip >/dev/null && command -v ss >/dev/null; } || pkgs+=(iproute2)
    command -v taskset >/dev/null || pkgs+=(util-linux)
    ((${#pkgs[@]} > 0)) || return 0
    command -v apt-get >/dev/null || die "missing ${pkgs[*]} and no apt-get to install them; install them first"
    note "installing ${pkgs[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >/dev/null
    fi
}

build_binaries() {
    mkdir -p "$OUT_DIR"
    gcc -O2 -Wall -Wextra -o "$UDP_REF" "$ROOT/benches/reference/udp_ref.c"
    if [[ -z "$RINGBLAST" ]]; then
        command -v cargo >/dev/null || die "cargo not found; install Rust or set RINGBLAST=/path/to/ringblast"
        (cd "$ROOT" && cargo build --release --quiet)
        RINGBLAST="${CARGO_TARGET_DIR:-$ROOT/target}/release/ringblast"
    fi
    [[ -x "$RINGBLAST" ]] || die "RINGBLAST=$RINGBLAST is not an executable file"
    [[ -z "$BASELINE" || -x "$BASELINE" ]] || die "BASELINE=$BASELINE is not an executable file"
}

# --- processes and the namespace ---------------------------------------------

start_bg() { # start_bg VAR LIMIT_S OUT ERR CPU CMD...: runs CMD in the namespace, pinned, under timeout
    local -n pid_ref="$1"
    local limit="$2" out="$3" err="$4" cpu="$5"
    shift 5
    timeout -k 2 "$limit" ip netns exec "$NS" nice -n "$NICE" taskset -c "$cpu" "$@" >"$out" 2>"$err" &
    pid_ref=$!
    LIVE_PIDS[$pid_ref]=1
}

wait_pid() { # wait_pid PID: waits for one of our children; its exit status goes to WAIT_RC
    WAIT_RC=0
    wait "$1" || WAIT_RC=$?
    unset 'LIVE_PIDS[$1]'
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_live_processes
    if ((NS_CREATED)); then
        ip netns del "$NS" 2>/dev/null || note "could not delete namespace $NS; remove it with: ip netns del $NS"
    fi
    if [[ -n "$TIMES_FILE" ]]; then
        rm -f "$TIMES_FILE"
    fi
    if [[ -n "$SECRET_FILE" ]]; then
        rm -f "$SECRET_FILE"
    fi
    exit "$rc"
}

create_namespace() {
    ip netns add "$NS" || die "could not create network namespace $NS"
    NS_CREATED=1
    ip -n "$NS" link set lo up
}

wait_listening() { # wait_listening PID udp|tcp PORT: up to 5 s for the sink to bind
    local pid="$1" proto="$2" port="$3" i flag=-u
    if [[ "$proto" == tcp ]]; then
        flag=-t
    fi
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 1
        if [[ -n "$(ip netns exec "$NS" ss -Hln "$flag" "sport = :$port" 2>/dev/null)" ]]; then
            return 0
        fi
        sleep 0.05
    done
    return 1
}

# --- CPU load accounting -----------------------------------------------------

pinned_busy_ticks() { # "BOTH SINK": busy jiffies (user nice system irq softirq steal) of the two
    # pinned CPUs together and of the sink's CPU alone, from one read of /proc/stat
    awk -v a="cpu$SEND_CPU" -v b="cpu$SINK_CPU" '$1 == a || $1 == b {
            t = $2 + $3 + $4 + $7 + $8 + $9; busy += t; if ($1 == b) sink = t
        } END { printf "%d %d\n", busy, sink }' /proc/stat
}

our_cpu_seconds() { # sets OUR_CPU: CPU seconds of this shell and every child it has waited for
    # Must run in this shell, not in $(...): a subshell starts with zero children's times.
    times >"$TIMES_FILE"
    OUR_CPU="$(awk '{ for (i = 1; i <= NF; i++) { split($i, p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] } }
         END { printf "%.3f\n", s }' "$TIMES_FILE")"
}

wait_quiet() { # waits (bounded) for a QUIET_WAIT-limited 1 s window with little foreign load
    ((QUIET_WAIT > 0)) || return 0
    local i b0 b1
    for ((i = 0; i < QUIET_WAIT; i++)); do
        read -r b0 _ < <(pinned_busy_ticks)
        sleep 1
        read -r b1 _ < <(pinned_busy_ticks)
        if awk -v d="$((b1 - b0))" -v hz="$HZ" -v q="$QUIET_CPU" 'BEGIN { exit !(d / hz < q) }'; then
            return 0
        fi
    done
    note "no quiet second within ${QUIET_WAIT}s; running anyway (the run will be marked by its foreign load)"
}

random_gap() {
    ((GAP_MAX_MS > 0)) || return 0
    local ms=$((RANDOM % GAP_MAX_MS))
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
}

# --- result parsing ----------------------------------------------------------

last_line() {
    grep -v '^[[:space:]]*$' "$1" | tail -n 1 || true
}

# Each parser prints "rx_pps rx_packets rx_secs tx_pps" or fails.
parse_ringblast() { # parse_ringblast SINK_OUT SEND_OUT
    local rx tx
    rx="$(last_line "$1" | jq -er 'select(.type == "summary" and .role == "sink")
        | "\(.pps) \(.rx_packets) \(.duration_s)"' 2>/dev/null)" || return 1
    tx="$(last_line "$2" | jq -er 'select(.type == "summary" and .role == "send")
        | "\(.pps) \(.duration_s)"' 2>/dev/null)" || return 1
    local tx_pps tx_secs rx_secs
    read -r tx_pps tx_secs <<<"$tx"
    rx_secs="$(awk '{ print $3 }' <<<"$rx")"
    if awk -v r="$rx_secs" -v t="$tx_secs" 'BEGIN { exit !(r > 1.2 * t + 0.5) }'; then
        note "ringblast sink duration_s=$rx_secs is much longer than the send's $tx_secs s:" \
            "its pps is averaged over idle time (expected: first-to-last packet)"
    fi
    awk -v tx="$tx_pps" '{ print $1, $2, $3, tx }' <<<"$rx"
}

udp_ref_rx() { # udp_ref_rx SINK_OUT: "packets seconds" from udp_ref's sink summary line
    [[ "$(last_line "$1")" =~ ^recv_pkts=([0-9]+)\ recv_bytes=[0-9]+\ secs=([0-9.]+)$ ]] || return 1
    echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
}

parse_udp_ref() { # parse_udp_ref SINK_OUT SEND_OUT
    local pkts secs tx
    read -r pkts secs < <(udp_ref_rx "$1") || return 1
    tx="$(last_line "$2")"
    [[ "$tx" =~ ^sent_pkts=([0-9]+)\ sent_bytes=[0-9]+\ secs=([0-9.]+)$ ]] || return 1
    awk -v p="$pkts" -v s="$secs" -v tp="${BASH_REMATCH[1]}" -v ts="${BASH_REMATCH[2]}" \
        'BEGIN { printf "%.0f %d %.6f %.0f\n", (s > 0 ? p / s : 0), p, s, (ts > 0 ? tp / ts : 0) }'
}

parse_mixed() { # parse_mixed SINK_OUT SEND_OUT: a udp_ref sink fed by a ringblast sender
    local pkts secs tx
    read -r pkts secs < <(udp_ref_rx "$1") || return 1
    tx="$(last_line "$2" | jq -er 'select(.type == "summary" and .role == "send") | .pps' 2>/dev/null)" || return 1
    awk -v p="$pkts" -v s="$secs" -v tx="$tx" 'BEGIN { printf "%.0f %d %.6f %.0f\n", (s > 0 ? p / s : 0), p, s, tx }'
}

parse_iperf3() { # parse_iperf3 CLIENT_JSON: receiver side from end.sum_received (end.sum before 3.12)
    jq -er '.end as $e | ($e.sum_received // $e.sum) as $r | ($e.sum_sent // $e.sum) as $s
        | ($r.packets - $r.lost_packets) as $got
        | "\(if $r.seconds > 0 then $got / $r.seconds else 0 end) \($got) \($r.seconds)"
          + " \(if $s.seconds > 0 then $s.packets / $s.seconds else 0 end)"' "$1" 2>/dev/null
}

gso_segments_for() { # at most 64 segments, and one send must stay under the 64 KiB UDP limit
    local segs=$((65507 / $1))
    echo $((segs > 64 ? 64 : segs))
}

# --- one measured run ----------------------------------------------------------

# run_one SIZE ROUND ATTEMPT TOOL: runs one sink+sender pair and appends a TSV row.
# Sets LAST_PPS, LAST_TX_PPS, LAST_FOREIGN, LAST_STATUS.
run_one() {
    local size="$1" round="$2" attempt="$3" tool="$4"
    local port=$((PORT++))
    local dir="$RAW_DIR/${size}B-r${round}a${attempt}-$tool"
    local segs=0 proto=udp parser tool_args
    local -a sink_cmd send_cmd
    local rb_sink_s=$((DURATION + 3))
    mkdir -p "$dir"
    local rb="$RINGBLAST"
    case "$tool" in
    baseline) rb="$BASELINE" tool_args=ringblast ;;
    baseline_gso) rb="$BASELINE" tool_args=ringblast_gso ;;
    *) tool_args="$tool" ;;
    esac
    case "$tool_args" in
    ringblast | ringblast_gso | ringblast_spin | ringblast_inline | ringblast_paced | ringblast_paced_gso | ringblast_balance | \
        ringblast_secret | ringblast_secret_gso | ringblast_auth | ringblast_auth_gso | ringblast_read)
        parser=ringblast
        sink_cmd=("$rb" sink --listen "127.0.0.1:$port" --json --duration "${rb_sink_s}s")
        send_cmd=("$rb" send --to "127.0.0.1:$port" --rate max --size "$size" --duration "${DURATION}s" --json)
        case "$tool_args" in
        ringblast_secret* | ringblast_auth*)
            sink_cmd+=(--secret-file "$SECRET_FILE")
            send_cmd+=(--secret-file "$SECRET_FILE")
            ;;
        esac
        if [[ "$tool_args" == ringblast_auth* ]]; then
            send_cmd+=(--auth-data)
        fi
        if [[ "$tool_args" == ringblast_gso || "$tool_args" == ringblast_secret_gso || "$tool_args" == ringblast_auth_gso ]]; then
            segs="$(gso_segments_for "$size")"
            send_cmd+=(--gso "$segs")
        elif [[ "$tool" == ringblast_spin ]]; then
            sink_cmd+=(--rx-wait spin)
        elif [[ "$tool" == ringblast_inline ]]; then
            sink_cmd+=(--rx-wait inline)
        elif [[ "$tool" == ringblast_read ]]; then
            sink_cmd+=(--arrival read)
        elif [[ "$tool" == ringblast_paced ]]; then
            sink_cmd=("$RINGBLAST" sink --listen "127.0.0.1:$port" --json --duration "$((PACED_SECONDS + 3))s")
            send_cmd=("$RINGBLAST" send --to "127.0.0.1:$port" --rate "${PACED_KPPS}kpps" --size "$size"
                --duration "${PACED_SECONDS}s" --json)
        elif [[ "$tool" == ringblast_paced_gso ]]; then
            segs=16
            sink_cmd=("$RINGBLAST" sink --listen "127.0.0.1:$port" --json --duration "$((PACED_FAST_SECONDS + 3))s")
            send_cmd=("$RINGBLAST" send --to "127.0.0.1:$port" --rate 1Mpps --gso 16 --size "$size"
                --duration "${PACED_FAST_SECONDS}s" --interval 100ms --json)
        elif [[ "$tool" == ringblast_balance ]]; then
            sink_cmd+=(--queues 2)
            send_cmd+=(--flows 8)
        fi
        ;;
    udp_ref | udp_ref_spin | udp_ref_gso)
        parser=udp_ref
        sink_cmd=("$UDP_REF" sink -l 127.0.0.1 -p "$port" -b 64 -t "$((DURATION + 5))" -i 1000)
        send_cmd=("$UDP_REF" send -d 127.0.0.1 -p "$port" -s "$size" -b 64 -t "$DURATION")
        if [[ "$tool" == udp_ref_spin ]]; then
            sink_cmd+=(-S)
        elif [[ "$tool" == udp_ref_gso ]]; then
            segs="$(gso_segments_for "$size")"
            sink_cmd+=(-G)
            send_cmd=("$UDP_REF" send -d 127.0.0.1 -p "$port" -s "$size" -b 1 -g "$segs" -t "$DURATION")
        fi
        ;;
    udp_ref_rbsend | udp_ref_spin_rbsend)
        # The reference sinks fed by ringblast's own sender (no control channel: udp_ref has
        # none), so that a ratio to a ringblast sink compares the sinks alone.
        parser=mixed
        sink_cmd=("$UDP_REF" sink -l 127.0.0.1 -p "$port" -b 64 -t "$((DURATION + 5))" -i 1000)
        send_cmd=("$RINGBLAST" send --to "127.0.0.1:$port" --rate max --size "$size" --duration "${DURATION}s"
            --json --control off)
        if [[ "$tool" == udp_ref_spin_rbsend ]]; then
            sink_cmd+=(-S)
        fi
        ;;
    iperf3)
        parser=iperf3
        proto=tcp
        sink_cmd=(iperf3 -s -1 -p "$port" --json)
        send_cmd=(iperf3 -c 127.0.0.1 -p "$port" -u -b 0 -l "$size" -t "$DURATION" -A "$SEND_CPU" --json)
        ;;
    *) die "internal: unknown tool $tool" ;;
    esac
    printf '%s\n' "${sink_cmd[*]}" "${send_cmd[*]}" >"$dir/commands"

    wait_quiet
    local busy0 our0 wall0 busy1 our1 wall1 sink0 sink1
    read -r busy0 sink0 < <(pinned_busy_ticks)
    our_cpu_seconds
    our0="$OUR_CPU"
    wall0="$EPOCHREALTIME"

    local sink_pid send_pid sink_rc=0 send_rc=0 status=ok
    start_bg sink_pid $((DURATION + 20)) "$dir/sink.out" "$dir/sink.err" "$SINK_CPU" "${sink_cmd[@]}"
    if wait_listening "$sink_pid" "$proto" "$port"; then
        start_bg send_pid $((DURATION + 15)) "$dir/send.out" "$dir/send.err" "$SEND_CPU" "${send_cmd[@]}"
        wait_pid "$send_pid"
        send_rc="$WAIT_RC"
    else
        status="fail:sink-not-listening"
        kill -TERM "$sink_pid" 2>/dev/null || true
    fi
    wait_pid "$sink_pid"
    sink_rc="$WAIT_RC"

    read -r busy1 sink1 < <(pinned_busy_ticks)
    our_cpu_seconds
    our1="$OUR_CPU"
    wall1="$EPOCHREALTIME"

    local result="" pps=0 packets=0 secs=0 tx_pps=0
    if [[ "$status" == ok ]]; then
        if ((send_rc != 0)); then
            status="fail:send-exit-$send_rc"
        elif ((sink_rc != 0)); then
            status="fail:sink-exit-$sink_rc"
        else
            case "$parser" in
            ringblast) result="$(parse_ringblast "$dir/sink.out" "$dir/send.out")" || status="fail:no-summary" ;;
            udp_ref) result="$(parse_udp_ref "$dir/sink.out" "$dir/send.out")" || status="fail:no-summary" ;;
            mixed) result="$(parse_mixed "$dir/sink.out" "$dir/send.out")" || status="fail:no-summary" ;;
            iperf3) result="$(parse_iperf3 "$dir/send.out")" || status="fail:no-summary" ;;
            esac
        fi
    fi
    if [[ -n "$result" ]]; then
        read -r pps packets secs tx_pps <<<"$result"
    fi
    if [[ "$status" == ok ]] && ! awk -v p="$pps" 'BEGIN { exit !(p > 0) }'; then
        status="fail:no-packets"
    fi

    local load
    load="$(awk -v b="$((busy1 - busy0))" -v hz="$HZ" -v o0="$our0" -v o1="$our1" -v w0="$wall0" -v w1="$wall1" \
        'BEGIN { w = w1 - w0; if (w <= 0) w = 1; f = (b / hz - (o1 - o0)) / w; if (f < 0) f = 0
                 printf "%.3f %.3f\n", f, b / hz / w }')"
    local foreign busy busy_s per_cpu_s
    read -r foreign busy <<<"$load"
    # Received packets per busy CPU-second of the two pinned CPUs (sender, sink and the kernel
    # work on them, which on loopback includes the receive path).
    read -r busy_s per_cpu_s < <(awk -v b="$((busy1 - busy0))" -v hz="$HZ" -v p="$packets" \
        'BEGIN { s = b / hz; printf "%.3f %.0f\n", s, (s > 0 ? p / s : 0) }')
    # The same per busy CPU-second of the sink's CPU alone: what the sink itself costs (on
    # loopback the receive path runs on the sending CPU, so this is the sink's own work).
    local per_sink_cpu_s
    per_sink_cpu_s="$(awk -v b="$((sink1 - sink0))" -v hz="$HZ" -v p="$packets" \
        'BEGIN { s = b / hz; printf "%.0f\n", (s > 0 ? p / s : 0) }')"

    printf '%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$round" "$attempt" "$tool" "$segs" \
        "$pps" "$packets" "$secs" "$tx_pps" "$foreign" "$busy" "$status" "$busy_s" "$per_cpu_s" "$per_sink_cpu_s" >>"$TSV"
    printf '  %5sB round %d.%d %-16s rx %12.0f pps  tx %12.0f pps  %10s pkts/CPU-s  %10s pkts/sink-CPU-s  foreign %.2f CPU  busy %.2f CPU  %s\n' \
        "$size" "$round" "$attempt" "$tool" "$pps" "$tx_pps" "$per_cpu_s" "$per_sink_cpu_s" "$foreign" "$busy" "$status"
    LAST_DIR="$dir"
    if [[ "$status" != ok ]]; then
        FAILURES=$((FAILURES + 1))
        note "$tool failed ($status); its output is in $dir"
    fi
    LAST_PPS="$pps"
    LAST_TX_PPS="$tx_pps"
    LAST_FOREIGN="$foreign"
    LAST_STATUS="$status"
}

# --- rounds, summary -----------------------------------------------------------

run_rounds() {
    local size round attempt tool worst
    local -a tools=(ringblast ringblast_spin ringblast_inline udp_ref udp_ref_spin iperf3 ringblast_gso) order
    if ((REF_GSO)); then
        tools+=(udp_ref_gso)
    fi
    if ((SAME_SENDER)); then
        tools+=(udp_ref_rbsend udp_ref_spin_rbsend)
    fi
    if [[ -n "$BASELINE" ]]; then
        tools+=(baseline baseline_gso)
    fi
    if ((PROOF)); then
        tools+=(ringblast_secret ringblast_secret_gso ringblast_auth ringblast_auth_gso)
    fi
    if ((ARRIVAL)); then
        tools+=(ringblast_read)
    fi
    for size in $SIZES; do
        for ((round = 1; round <= ROUNDS; round++)); do
            for ((attempt = 0; attempt <= RETRIES; attempt++)); do
                worst=0
                mapfile -t order < <(shuf -e "${tools[@]}")
                for tool in "${order[@]}"; do
                    random_gap
                    run_one "$size" "$round" "$attempt" "$tool"
                    worst="$(awk -v a="$worst" -v b="$LAST_FOREIGN" 'BEGIN { print (b > a ? b : a) }')"
                done
                if awk -v w="$worst" -v q="$QUIET_CPU" 'BEGIN { exit !(w < q) }'; then
                    break
                fi
                if ((attempt < RETRIES)); then
                    note "round $round at ${size}B saw ${worst} CPUs of foreign load; repeating it"
                fi
            done
        done
    done
}

paced_check() {
    echo
    echo "Paced accuracy: ringblast send --rate ${PACED_KPPS}kpps --duration ${PACED_SECONDS}s -> ringblast sink (64 B)"
    run_one 64 0 0 ringblast_paced
    if [[ "$LAST_STATUS" != ok ]]; then
        echo "  achieved sink pps / target = n/a (the paced run failed: $LAST_STATUS)"
        return 0
    fi
    awk -v rx="$LAST_PPS" -v tx="$LAST_TX_PPS" -v t="$((PACED_KPPS * 1000))" 'BEGIN {
        r = rx / t
        printf "  achieved sink pps / target = %.4f (%+.2f %%; target within +-0.5 %%: %s)\n",
            r, (r - 1) * 100, ((r >= 0.995 && r <= 1.005) ? "met" : "NOT met")
        printf "  sender pps / target        = %.4f\n", tx / t
    }'
    echo
    echo "Paced accuracy at 1 Mpps: ringblast send --rate 1Mpps --gso 16 --duration ${PACED_FAST_SECONDS}s --interval 100ms (64 B)"
    run_one 64 0 0 ringblast_paced_gso
    if [[ "$LAST_STATUS" != ok ]]; then
        echo "  n/a (the paced run failed: $LAST_STATUS)"
        return 0
    fi
    # The sender's interval lines are dated by the worker's own publishes (window_s). The first
    # window holds the start-up and the last is a partial one: both are left out and said so.
    jq -r 'select(.type == "interval" and .role == "send") | "\(.window_s) \(.tx_packets)"' \
        "$LAST_DIR/send.out" | awk -v t=1000000 -v tx="$LAST_TX_PPS" -v rx="$LAST_PPS" '
        { w[NR] = $1; p[NR] = $2 }
        END {
            worst = 0; at = 0; n = 0
            for (i = 2; i < NR; i++) {
                if (w[i] <= 0) continue
                d = p[i] / w[i] / t - 1; n++
                if (d < 0 ? -d > worst : d > worst) { worst = (d < 0 ? -d : d); at = i; sign = (d < 0 ? -1 : 1) }
            }
            printf "  whole run: sender pps / target = %.4f (%+.2f %%; within +-0.5 %%: %s), sink pps / target = %.4f\n",
                tx / t, (tx / t - 1) * 100, ((tx / t >= 0.995 && tx / t <= 1.005) ? "met" : "NOT met"), rx / t
            printf "  worst of %d full 100 ms windows (first and last left out): window %d, %+.2f %% (within +-2 %%: %s)\n",
                n, at, sign * worst * 100, (worst <= 0.02 ? "met" : "NOT met")
        }'
}

balance_check() {
    echo
    echo "Sink queue balance: ringblast sink --queues 2 <- ringblast send --flows 8 (64 B, unpaced, default --steer flow)"
    run_one 64 0 0 ringblast_balance
    if [[ "$LAST_STATUS" != ok ]]; then
        echo "  n/a (the run failed: $LAST_STATUS)"
        return 0
    fi
    last_line "$LAST_DIR/sink.out" | jq -r '"  per queue: \([.per_queue[] | "q\(.queue) \(.rx_packets)"] | join(", ")); busiest queue / mean = \(.busiest_queue_over_mean) (target <= 1.1: \(if .busiest_queue_over_mean <= 1.1 then "met" else "NOT met" end))"'
}

summarize() {
    awk -F '\t' -v q="$QUIET_CPU" -f "$ROOT/benches/compare_summary.awk" "$TSV"
}

print_header() {
    echo "ringblast compare: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
    echo "host: kernel $(uname -r), nproc $(nproc), cpu $(awk -F ': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "tools: ringblast=$RINGBLAST ($("$RINGBLAST" --version 2>/dev/null | head -n 1 || true))," \
        "$(iperf3 --version | head -n 1), $(gcc --version | head -n 1)"
    echo "setup: namespace $NS (lo only), sender CPU $SEND_CPU, sink CPU $SINK_CPU, nice $NICE," \
        "sizes [$SIZES], rounds $ROUNDS (+$RETRIES retries), ${DURATION}s per run, clean < $QUIET_CPU foreign CPUs"
    echo
}

main() {
    validate_settings
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    install_missing_tools
    build_binaries
    TIMES_FILE="$(mktemp)"
    if ((PROOF)); then
        SECRET_FILE="$(umask 077 && mktemp)"
        head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SECRET_FILE"
    fi
    rm -rf "$RAW_DIR"
    mkdir -p "$RAW_DIR"
    printf 'size\tround\tattempt\ttool\tgso_segs\trx_pps\trx_packets\trx_secs\ttx_pps\tforeign_cpu\tbusy_cpu\tstatus\tbusy_cpu_s\tpkts_per_cpu_s\tpkts_per_sink_cpu_s\n' >"$TSV"
    create_namespace
    print_header
    run_rounds
    paced_check
    balance_check
    echo
    summarize
    echo
    echo "targets (issue 13): default sink >= 1.05x the blocking udp_ref and best mode >= 1.0x the spinning one, at 64 and 1400 B;"
    echo "  1400 B gso46 >= 1.0x udp_ref gso->gro; pkts per busy CPU-second >= 1.5x udp_ref in every row;"
    echo "  paced within +-0.5 % (1 Mpps: every 100 ms window within +-2 %); busiest sink queue <= 1.1x the mean"
    echo "raw rows: $TSV"
    if ((FAILURES > 0)); then
        note "$FAILURES run(s) failed; see $RAW_DIR"
        exit 1
    fi
}

main "$@"
