#!/usr/bin/env bash
# benches/numa.sh: sender throughput with its thread and packet memory on the NIC's NUMA node
# against the same on another node (pktgen measured about +18 % TX pps NIC-local). One command,
# run as root on a machine with two or more NUMA nodes, towards a UDP receiver over a real NIC:
#
#   bash benches/numa.sh 10.0.0.2:7000
#
# It reads the NIC's node from `ringblast topo --to TARGET` (`nic: IFACE (node N)`), then runs
# ROUNDS rounds, each one `ringblast send --to TARGET --rate max --node N` (local) and one with
# `--node OTHER` (remote) in a random order, and prints each round's sender pps (datagrams the
# kernel accepted per second, the summary's `pps`) and the median of the per-round ratios
# local/remote. `--node` places the worker threads on that node's CPUs and binds their packet
# memory to it.
#
# Knobs (environment): TARGET (instead of the argument), ROUNDS (5), DURATION (5, seconds per
# run), SIZE (64, UDP payload bytes), QUEUES (1), NIC_NODE (the NIC's node where the kernel
# reports none), OTHER_NODE (default: the first other node with CPUs), GAP_MAX_MS (500: random
# pause between runs), SEND_ARGS (more `ringblast send` options, e.g. "--gso 16"), RINGBLAST
# (path to a ringblast binary; default: cargo build --release).
# Results: the table on stdout, raw rows in target/bench/numa.tsv, each run's output in
# target/bench/numa-raw/. Exit status: 0 when every run produced a figure, 1 when a run failed,
# 2 on bad settings or a missing prerequisite, 3 on a machine with one NUMA node (or a NIC
# without one).
set -euo pipefail
export LC_ALL=C

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="$ROOT/target/bench"
RAW_DIR="$OUT_DIR/numa-raw"
TSV="$OUT_DIR/numa.tsv"

TARGET="${1:-${TARGET:-}}"
ROUNDS="${ROUNDS:-5}"
DURATION="${DURATION:-5}"
SIZE="${SIZE:-64}"
QUEUES="${QUEUES:-1}"
NIC_NODE="${NIC_NODE:-}"
OTHER_NODE="${OTHER_NODE:-}"
GAP_MAX_MS="${GAP_MAX_MS:-500}"
SEND_ARGS="${SEND_ARGS:-}"
RINGBLAST="${RINGBLAST:-}"

FAILURES=0
EMULATED=0
LAST_PPS=""
# shellcheck source=benches/live_pids.sh
source "$(dirname "${BASH_SOURCE[0]}")/live_pids.sh"
declare -a NODES=()

die() {
    echo "numa.sh: $*" >&2
    exit 2
}

refuse() {
    echo "numa.sh: $*" >&2
    exit 3
}

note() {
    echo "numa.sh: $*" >&2
}

require_uint() {
    [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a non-negative integer, got '$2'"
}

validate_settings() {
    [[ -n "$TARGET" ]] || die "give the receiver as ADDR:PORT: bash benches/numa.sh 10.0.0.2:7000"
    [[ "$TARGET" == *:* ]] || die "TARGET must be ADDR:PORT, got '$TARGET'"
    require_uint ROUNDS "$ROUNDS"
    require_uint DURATION "$DURATION"
    require_uint SIZE "$SIZE"
    require_uint QUEUES "$QUEUES"
    require_uint GAP_MAX_MS "$GAP_MAX_MS"
    [[ -z "$NIC_NODE" ]] || require_uint NIC_NODE "$NIC_NODE"
    [[ -z "$OTHER_NODE" ]] || require_uint OTHER_NODE "$OTHER_NODE"
    ((ROUNDS >= 1 && ROUNDS <= 100)) || die "ROUNDS must be 1..100"
    ((DURATION >= 1 && DURATION <= 120)) || die "DURATION must be 1..120 seconds"
    ((QUEUES >= 1 && QUEUES <= 64)) || die "QUEUES must be 1..64"
    ((EUID == 0)) || die "run as root (sudo bash benches/numa.sh ...): the senders pin and lock node-local memory"
}

build_binary() {
    if [[ -z "$RINGBLAST" ]]; then
        command -v cargo >/dev/null || die "cargo not found; install Rust or set RINGBLAST=/path/to/ringblast"
        (cd "$ROOT" && cargo build --release --quiet)
        RINGBLAST="${CARGO_TARGET_DIR:-$ROOT/target}/release/ringblast"
    fi
    [[ -x "$RINGBLAST" ]] || die "RINGBLAST=$RINGBLAST is not an executable file"
}

# --- topology ------------------------------------------------------------------

TOPO=""
NIC=""

read_topology() { # sets TOPO, NODES (nodes with CPUs this process may use), NIC, NIC_NODE
    TOPO="$("$RINGBLAST" topo --to "$TARGET" 2>&1)" || die "ringblast topo --to $TARGET failed: $TOPO"
    local line unknown=""
    while IFS= read -r line; do
        if [[ "$line" =~ ^\ \ node\ ([0-9]+):\ cpus\ .*\(allowed\ (.*)\)$ && "${BASH_REMATCH[2]}" != none ]]; then
            NODES+=("${BASH_REMATCH[1]}")
        elif [[ "$line" =~ ^nic:\ ([^ ]+)\ \(node\ ([0-9]+)\)$ ]]; then
            NIC="${BASH_REMATCH[1]}"
            NIC_NODE="${NIC_NODE:-${BASH_REMATCH[2]}}"
        elif [[ "$line" =~ ^nic:\ ([^ ]+)\ \(NUMA\ node\ unknown:\ (.*)\)$ ]]; then
            NIC="${BASH_REMATCH[1]}"
            unknown="${BASH_REMATCH[2]}"
        fi
    done <<<"$TOPO"
    ((${#NODES[@]} >= 2)) ||
        refuse "this machine has ${#NODES[@]} NUMA node(s) with usable CPUs; a NIC-local against remote comparison needs two or more"
    [[ -n "$NIC" ]] || refuse "ringblast topo named no NIC towards $TARGET"
    [[ -n "$NIC_NODE" ]] ||
        refuse "the NIC $NIC towards $TARGET has no NUMA node ($unknown); pick a TARGET routed over a PCI NIC, or set NIC_NODE=N if you know its node"
    local n found=0
    for n in "${NODES[@]}"; do
        [[ "$n" != "$NIC_NODE" ]] || found=1
    done
    ((found)) || refuse "the NIC's node $NIC_NODE has no CPUs this process may use (nodes with CPUs: ${NODES[*]})"
    if [[ -z "$OTHER_NODE" ]]; then
        for n in "${NODES[@]}"; do
            if [[ "$n" != "$NIC_NODE" ]]; then
                OTHER_NODE="$n"
                break
            fi
        done
    fi
    [[ "$OTHER_NODE" != "$NIC_NODE" ]] || die "OTHER_NODE must differ from the NIC's node $NIC_NODE"
}

check_emulation() { # QEMU TCG guests: every guest node is the same host memory
    local vm=""
    if command -v systemd-detect-virt >/dev/null; then
        vm="$(systemd-detect-virt --vm 2>/dev/null || true)"
    elif grep -qw hypervisor /proc/cpuinfo; then
        vm="unknown hypervisor"
    fi
    case "$vm" in
    "" | none) ;;
    qemu)
        EMULATED=1
        note "emulated CPU (QEMU TCG): both guest nodes are the same host memory, so the local/remote ratio is meaningless here"
        ;;
    *) note "virtual machine ($vm): guest nodes differ only as far as the VM's vNUMA is pinned to host nodes" ;;
    esac
}

# --- processes -------------------------------------------------------------------

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_live_processes
    exit "$rc"
}

random_gap() {
    ((GAP_MAX_MS > 0)) || return 0
    local ms=$((RANDOM % GAP_MAX_MS))
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
}

send_summary() { # send_summary OUT: the sender's JSON summary line
    grep '"type":"summary"' "$1" | grep '"role":"send"' | tail -n 1 || true
}

# run_one ROUND WHICH NODE: one sender run on NODE; sets LAST_PPS ("" when it failed).
run_one() {
    local round="$1" which="$2" node="$3"
    local out="$RAW_DIR/r$round-$which.json" err="$RAW_DIR/r$round-$which.err"
    local -a extra=()
    read -r -a extra <<<"$SEND_ARGS"
    LAST_PPS=""
    timeout -k 2 $((DURATION + 30)) "$RINGBLAST" send --to "$TARGET" --rate max --size "$SIZE" \
        --queues "$QUEUES" --node "$node" --duration "${DURATION}s" --control off --json \
        "${extra[@]}" >"$out" 2>"$err" &
    local pid=$! rc=0
    LIVE_PIDS[$pid]=1
    wait "$pid" || rc=$?
    unset 'LIVE_PIDS[$pid]'
    local summary placed
    summary="$(send_summary "$out")"
    placed="$(grep -o '"placement":\[[^]]*\]' <<<"$summary" | grep -o '"node":[0-9]*' | sort -u | tr '\n' ' ' || true)"
    if ((rc != 0)) || [[ ! "$summary" =~ [{,]\"pps\":([0-9.]+) ]]; then
        FAILURES=$((FAILURES + 1))
        note "round $round $which (node $node): ringblast send exited $rc: $(tail -n 1 "$err" 2>/dev/null)"
    elif [[ "$placed" != "\"node\":$node " ]]; then
        FAILURES=$((FAILURES + 1))
        note "round $round $which: asked for node $node, the sender placed its queues on ${placed:-nothing}"
    else
        LAST_PPS="${BASH_REMATCH[1]}"
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$which" "$node" "${LAST_PPS:-NA}" "$rc" >>"$TSV"
}

run_rounds() {
    local round first which local_pps remote_pps
    local -a order
    for ((round = 1; round <= ROUNDS; round++)); do
        order=(local remote)
        ((RANDOM % 2 == 0)) || order=(remote local)
        first="${order[0]}"
        local_pps="" remote_pps=""
        for which in "${order[@]}"; do
            random_gap
            if [[ "$which" == local ]]; then
                run_one "$round" local "$NIC_NODE"
                local_pps="$LAST_PPS"
            else
                run_one "$round" remote "$OTHER_NODE"
                remote_pps="$LAST_PPS"
            fi
        done
        if [[ -n "$local_pps" && -n "$remote_pps" ]]; then
            awk -v r="$round" -v l="$local_pps" -v m="$remote_pps" -v f="$first" -v ln="$NIC_NODE" -v mn="$OTHER_NODE" \
                'BEGIN { printf "round %d: local (node %s) %.0f pps, remote (node %s) %.0f pps, local/remote %.3f (%s first)\n",
                         r, ln, l, mn, m, (m > 0 ? l / m : 0), f }'
        else
            echo "round $round: no ratio (a run failed; see $RAW_DIR)"
        fi
    done
}

summarize() { # median of the per-round ratios and of each side's pps, from the raw rows
    awk -F '\t' 'NR > 1 && $4 != "NA" { pps[$1, $2] = $4 }
        END {
            n = 0
            for (k in pps) {
                split(k, p, SUBSEP)
                if (p[2] == "local" && ((p[1], "remote") in pps)) {
                    r = pps[p[1], "remote"]
                    if (r > 0) { ratio[++n] = pps[k] / r; l[n] = pps[k]; m[n] = r }
                }
            }
            if (n == 0) { print "median local/remote: none (no round had both runs)"; exit }
            printf "median local/remote over %d round(s): %.3f (min %.3f, max %.3f); median pps local %.0f, remote %.0f\n",
                n, median(ratio, n), lo(ratio, n), hi(ratio, n), median(l, n), median(m, n)
        }
        function median(a, n,   s, i, j, t) {
            for (i = 1; i <= n; i++) s[i] = a[i]
            for (i = 2; i <= n; i++) for (j = i; j > 1 && s[j - 1] > s[j]; j--) { t = s[j]; s[j] = s[j - 1]; s[j - 1] = t }
            return (n % 2) ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
        }
        function lo(a, n,   i, v) { v = a[1]; for (i = 2; i <= n; i++) if (a[i] < v) v = a[i]; return v }
        function hi(a, n,   i, v) { v = a[1]; for (i = 2; i <= n; i++) if (a[i] > v) v = a[i]; return v }' "$TSV"
}

print_header() {
    echo "ringblast numa: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
    echo "host: kernel $(uname -r), nproc $(nproc), cpu $(awk -F ': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "nic: $NIC (node $NIC_NODE) towards $TARGET; local = --node $NIC_NODE, remote = --node $OTHER_NODE (nodes with CPUs: ${NODES[*]})"
    echo "setup: ringblast send --rate max --size $SIZE --queues $QUEUES --duration ${DURATION}s --control off${SEND_ARGS:+ $SEND_ARGS}, rounds $ROUNDS"
    echo
}

main() {
    validate_settings
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    build_binary
    read_topology
    check_emulation
    rm -rf "$RAW_DIR"
    mkdir -p "$RAW_DIR"
    printf 'round\twhich\tnode\ttx_pps\trc\n' >"$TSV"
    print_header
    run_rounds
    echo
    summarize
    if ((EMULATED)); then
        echo "(emulated under QEMU TCG: both guest nodes are the same host memory; this ratio means nothing)"
    fi
    echo "raw rows: $TSV"
    if ((FAILURES > 0)); then
        note "$FAILURES run(s) failed; see $RAW_DIR"
        exit 1
    fi
}

main "$@"
