#!/usr/bin/env bash
# Soak: a separate `ringblast sink` and `ringblast send` run for DURATION at RATE between two
# network namespaces this script creates and deletes (as root), or over loopback otherwise.
# Every SOAK_SAMPLE seconds (30) it samples RSS, open fds and threads of both processes (from
# /proc/PID) and their counters (from their metrics endpoints), and prints one line per sample;
# sampling stops 2 s before the sender's deadline, where its shutdown begins.
# It fails when, after the first sample (the baseline), RSS grows by SOAK_MAX_RSS_GROWTH_KIB
# (1024) or more, or the fd or thread count changes; or on any unexplained loss: the sink must
# count sent = received + kernel drops + lost with lost, duplicates and invalid all 0, and (in
# namespaces) received must equal the sink namespace's `Udp InDatagrams` and kernel drops its
# `Udp RcvbufErrors`. A metric with no series at an endpoint fails the soak (never read as 0).
#
#   scripts/soak.sh [DURATION] [RATE]      defaults: 24h 100kpps  (the test command: 3m 20kpps)
#
# DURATION is N[s|m|h]. The binary is target/release/ringblast unless RINGBLAST_BIN is set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DURATION=${1:-24h}
RATE=${2:-100kpps}
SAMPLE=${SOAK_SAMPLE:-30}
MAX_RSS_GROWTH_KIB=${SOAK_MAX_RSS_GROWTH_KIB:-1024}
BIN=${RINGBLAST_BIN:-$PWD/target/release/ringblast}
[ -x "$BIN" ] || { echo "soak: no binary at $BIN (cargo build --release)" >&2; exit 2; }

case "$DURATION" in
  *h) secs=$(( ${DURATION%h} * 3600 )) ;;
  *m) secs=$(( ${DURATION%m} * 60 )) ;;
  *s) secs=${DURATION%s} ;;
  *) secs=$DURATION ;;
esac
[ "$secs" -ge $(( SAMPLE + 3 )) ] || { echo "soak: DURATION must be at least $(( SAMPLE + 3 ))s (SOAK_SAMPLE + 3)" >&2; exit 2; }

work=$(mktemp -d /tmp/rbsoak.XXXXXX)
(umask 077; head -c32 /dev/urandom | base64 > "$work/secret")
id=$(( $$ % 100000 ))
pids=()
netns=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for n in "${netns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

if [ "$(id -u)" = 0 ]; then
  TX=rbsoaktx$id RX=rbsoakrx$id
  ip netns add "$TX"; netns+=("$TX")
  ip netns add "$RX"; netns+=("$RX")
  ip link add "rbsk${id}a" netns "$TX" type veth peer name "rbsk${id}b" netns "$RX"
  ip -n "$TX" addr add 10.230.0.1/24 dev "rbsk${id}a"
  ip -n "$RX" addr add 10.230.0.2/24 dev "rbsk${id}b"
  for n in "$TX" "$RX"; do ip -n "$n" link set lo up; done
  ip -n "$TX" link set "rbsk${id}a" up
  ip -n "$RX" link set "rbsk${id}b" up
  in_tx=(ip netns exec "$TX") in_rx=(ip netns exec "$RX")
  DATA=10.230.0.2:7000 RXM=10.230.0.2:9977 TXM=10.230.0.1:9978
  where="namespaces $TX -> $RX"
else
  in_tx=() in_rx=()
  port=$(( 20000 + id % 20000 ))
  DATA=127.0.0.1:$port RXM=127.0.0.1:$(( port + 1 )) TXM=127.0.0.1:$(( port + 2 ))
  where="loopback (not root)"
fi

# Counters from a metrics endpoint, summed over series: scrape ADDR SIDE NAME...
# Exit 1: the endpoint does not answer (yet). Exit 2: a NAME has no series at all; every
# series is registered before the workers start, so that is a renamed or missing metric and
# never reads as 0.
scrape() {
  local addr=$1 side=$2; shift 2
  local run=("${in_rx[@]}"); [ "$side" = tx ] && run=("${in_tx[@]}")
  local text sums
  text=$("${run[@]}" curl -fsS --max-time 5 "http://$addr/metrics") || { echo "soak: metrics $addr do not answer" >&2; return 1; }
  for name in "$@"; do
    sums+=$(awk -v n="$name" '$1 == n || index($1, n "{") == 1 { s += $NF; f = 1 }
      END { if (!f) { print "soak: no series " n " at the endpoint" > "/dev/stderr"; exit 2 } printf "%.0f ", s }' <<<"$text") ||
      return 2
  done
  echo "$sums"
}
# The same, where a failure ends the soak: scraped ADDR SIDE NAME...
scraped() {
  scrape "$@" || { echo "soak: FAIL: cannot read $* from the metrics endpoint" >&2; exit 1; }
}
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }
proc() { # RSS_KiB FDS THREADS of PID
  local pid=$1
  echo "$(awk '/^VmRSS:/{print $2}' "/proc/$pid/status") $(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l) $(awk '/^Threads:/{print $2}' "/proc/$pid/status")"
}
# A Udp counter of the sink's namespace: snmp_udp FIELD
snmp_udp() {
  # shellcheck disable=SC2016 # $(col) is awk's, not the shell's
  "${in_rx[@]}" awk -v f="$1" '/^Udp:/ { if (h) { print $(col); exit } for (i = 1; i <= NF; i++) if ($i == f) col = i; h = 1 }' /proc/net/snmp
}

echo "== soak: $DURATION (${secs}s) at $RATE, $where, sample every ${SAMPLE}s"
"${in_rx[@]}" "$BIN" sink --listen "$DATA" --metrics "$RXM" --json --interval 0 \
  --secret-file "$work/secret" >"$work/sink.out" 2>"$work/sink.err" &
sink=$!; pids+=("$sink")
for _ in $(seq 500); do grep -q "control: listening" "$work/sink.err" && break; sleep 0.01; done
grep -q "control: listening" "$work/sink.err" || { cat "$work/sink.err" >&2; echo "soak: the sink did not start" >&2; exit 1; }
in0=0 rcvbuf0=0
if [ "${#in_rx[@]}" -gt 0 ]; then in0=$(snmp_udp InDatagrams) rcvbuf0=$(snmp_udp RcvbufErrors); fi

launched=$(date +%s%N)
"${in_tx[@]}" "$BIN" send --to "$DATA" --rate "$RATE" --duration "${secs}s" --metrics "$TXM" \
  --json --interval 0 --secret-file "$work/secret" >"$work/send.out" 2>"$work/send.err" &
send=$!; pids+=("$send")
first=""
for _ in $(seq 1000); do
  # Not answering yet (exit 1) is waited for; a missing series (exit 2) ends the soak.
  n=$(scrape "$RXM" rx ringblast_rx_packets_total 2>"$work/scrape.err") || {
    [ $? = 2 ] && { cat "$work/scrape.err" >&2; exit 1; }
    n=0
  }
  if [ "${n%% *}" -gt 0 ]; then first=$(date +%s%N); break; fi
  sleep 0.01
done
[ -n "$first" ] || { cat "$work/send.err" "$work/sink.err" >&2; echo "soak: no packet within 10 s of launch" >&2; exit 1; }
echo "start-up: first packet at the sink $(( (first - launched) / 1000000 )) ms after the sender's launch"

fail=0
base_rx="" base_tx=""
printf '%-6s %-22s %-22s %-12s %-12s %-8s %-8s\n' t_s "sink rss_kib/fds/thr" "send rss_kib/fds/thr" tx_packets rx_packets rx_lost kdrops
started=$(date +%s)
next=$SAMPLE
while alive "$send"; do
  # The sampling cadence (not a synchronisation): wake every second, sample every SAMPLE s.
  sleep 1
  t=$(( $(date +%s) - started ))
  [ "$t" -ge "$next" ] || continue
  next=$(( next + SAMPLE ))
  # The run's last seconds are its shutdown (threads and sockets closing): not a steady sample.
  [ $(( $(date +%s%N) - launched )) -lt $(( (secs - 2) * 1000000000 )) ] || break
  alive "$send" || break
  alive "$sink" || { echo "soak: the sink died" >&2; exit 1; }
  prx=$(proc "$sink"); ptx=$(proc "$send")
  txs=$(scraped "$TXM" tx ringblast_tx_packets_total ringblast_tx_errors_total)
  rxs=$(scraped "$RXM" rx ringblast_rx_packets_total ringblast_rx_lost_packets_total \
    ringblast_rx_kernel_drops_total ringblast_rx_duplicate_packets_total ringblast_rx_invalid_packets_total)
  read -r tx_p tx_e <<<"$txs"
  read -r rx_p lost kd dup inv <<<"$rxs"
  printf '%-6s %-22s %-22s %-12s %-12s %-8s %-8s\n' "$t" "${prx// //}" "${ptx// //}" "$tx_p" "$rx_p" "$lost" "$kd"
  if [ "$lost" != 0 ] || [ "$dup" != 0 ] || [ "$inv" != 0 ] || [ "$tx_e" != 0 ]; then
    echo "soak: FAIL at ${t}s: lost $lost, duplicates $dup, invalid $inv, send errors $tx_e" >&2; fail=1
  fi
  if [ -z "$base_rx" ]; then base_rx=$prx base_tx=$ptx; continue; fi
  for side in rx tx; do
    if [ $side = rx ]; then read -r -a b <<<"$base_rx"; read -r -a c <<<"$prx"
    else read -r -a b <<<"$base_tx"; read -r -a c <<<"$ptx"; fi
    if [ $(( c[0] - b[0] )) -ge "$MAX_RSS_GROWTH_KIB" ]; then
      echo "soak: FAIL at ${t}s: $side RSS grew from ${b[0]} to ${c[0]} KiB" >&2; fail=1
    fi
    if [ "${c[1]}" != "${b[1]}" ] || [ "${c[2]}" != "${b[2]}" ]; then
      echo "soak: FAIL at ${t}s: $side fds ${b[1]} -> ${c[1]}, threads ${b[2]} -> ${c[2]}" >&2; fail=1
    fi
  done
done
wait "$send" || { cat "$work/send.err" >&2; echo "soak: the sender failed" >&2; exit 1; }
kill -INT "$sink"
wait "$sink" || { cat "$work/sink.err" >&2; echo "soak: the sink failed" >&2; exit 1; }
pids=()
[ -n "$base_rx" ] || { echo "soak: FAIL: no sample taken" >&2; exit 1; }

field() { python3 -c 'import json,sys; v=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]; s=[x for x in v if x.get("type")=="summary"][-1]; print(s[sys.argv[2]])' "$1" "$2"; }
tx=$(field "$work/send.out" tx_packets); txe=$(field "$work/send.out" tx_errors)
rx=$(field "$work/sink.out" rx_packets); lost=$(field "$work/sink.out" rx_lost)
kd=$(field "$work/sink.out" rx_kernel_drops); dup=$(field "$work/sink.out" rx_duplicates)
inv=$(field "$work/sink.out" rx_invalid)
echo "summary: sent $tx (errors $txe), received $rx, kernel drops $kd, lost $lost, duplicates $dup, invalid $inv"
echo "rss/fds/threads: sink ${base_rx// //} -> ${prx// //}, sender ${base_tx// //} -> ${ptx// //} (baseline at ${SAMPLE}s -> last sample)"
[ "$tx" -gt 0 ] || { echo "soak: FAIL: nothing sent" >&2; fail=1; }
[ $(( rx + kd + lost )) -eq "$tx" ] || { echo "soak: FAIL: sent $tx != received + kernel drops + lost" >&2; fail=1; }
if ! { [ "$lost" = 0 ] && [ "$dup" = 0 ] && [ "$inv" = 0 ] && [ "$txe" = 0 ]; }; then
  echo "soak: FAIL: unexplained loss or damage" >&2; fail=1
fi
if [ "${#in_rx[@]}" -gt 0 ]; then
  delivered=$(( $(snmp_udp InDatagrams) - in0 )) overflowed=$(( $(snmp_udp RcvbufErrors) - rcvbuf0 ))
  echo "independent: the sink namespace's Udp InDatagrams rose by $delivered, RcvbufErrors by $overflowed"
  [ "$delivered" -eq "$rx" ] || { echo "soak: FAIL: InDatagrams $delivered != received $rx" >&2; fail=1; }
  # The identity's kernel term, held to the kernel's own count of receive-buffer overflows.
  [ "$overflowed" -eq "$kd" ] || { echo "soak: FAIL: RcvbufErrors $overflowed != kernel drops $kd" >&2; fail=1; }
fi
if [ "$fail" = 0 ]; then echo "== soak passed"; else echo "== soak FAILED" >&2; exit 1; fi
