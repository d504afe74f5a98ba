#!/usr/bin/env bash
# Runs the Debian package's systemd units for real: builds the .deb (cargo-deb, as
# scripts/package-test.sh does), installs it with dpkg -i into a Debian container that runs
# systemd 252 as PID 1 under podman, and checks that
#   - ringblast-sink and ringblast-send@example come up from the shipped configs
#     (/usr/share/ringblast/config/, copied to /etc/ringblast/ as deploy/README.md says), confined
#     as the units say (dynamic user, CAP_IPC_LOCK the only capability, no_new_privs, seccomp);
#   - systemd restarts each after its main PID is killed with SIGKILL (NRestarts goes to 1, a new
#     main PID comes up and works: the sink listens again, the sender sends again);
#   - a sender session counts exactly against the kernel: the container's own network namespace
#     (loopback only) has no other UDP, so its /proc/net/snmp Udp counters, read from outside,
#     are a neutral observer: OutDatagrams = the sender's tx_packets, InDatagrams = the sink's
#     rx_packets in the verdict, RcvbufErrors = its kernel drops, SndbufErrors = tx_errors = 0;
#     the sink's per-sender series and its own summary cover every session since it started,
#     the killed one too, and equal the kernel's totals;
#   - systemctl stop ends both cleanly (Result=success, exit status 0, the sender's verdict and the
#     sink's summary in the journal).
#
# Why the container runs the way it does (a host's systemd has both by default):
#   --privileged  systemd's namespace sandboxing (ProtectSystem=, PrivateTmp=, ...) and
#                 LoadCredential='s ramfs need CAP_SYS_ADMIN (226/NAMESPACE without it), and
#                 LimitMEMLOCK=infinity needs CAP_SYS_RESOURCE; systemd on a host holds every
#                 capability.
#   mount --make-rshared /   before exec /sbin/init: runc mounts the container's root and /run
#                 private, so the credentials systemd mounts in a helper's mount namespace under
#                 /run/credentials/UNIT never propagate back and the service finds the directory
#                 empty (ringblast: "cannot read secret file ...: Permission denied"). On a host /
#                 is shared, as systemd itself makes it at boot.
#
# The image: mmdebstrap --variant=minbase --include=systemd,systemd-sysv from the machine's own
# apt suite (cached in target/units-test/, ~25 s to build on a fresh machine), imported with
# `podman import`; nothing is pulled from a registry. podman runs with its own storage under a
# temporary directory (runc with cgroupfs, as in scripts/deploy-smoke.sh), removed on exit.
#
# Usage (root): bash scripts/units-test.sh [DEB]   (without DEB it builds one)
# Exit 0 = every check passed, 1 = a check failed, 3 = it cannot run here.
set -euo pipefail
cd "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/.."
STARTED=$(date +%s)
CACHE=$PWD/target/units-test

say() { echo "units-test [$(($(date +%s) - STARTED)) s]: $*"; }
die() { echo "units-test: $1" >&2; exit "${2:-1}"; }
[ "$(id -u)" = 0 ] || die "needs root (podman --privileged, dpkg in a container)" 3

need=()
for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
command -v catatonit >/dev/null || need+=(catatonit)
command -v nsenter >/dev/null || need+=(util-linux)
command -v curl >/dev/null || need+=(curl)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Waits (bounded) until command "$@" succeeds; $WHAT says what for, and a check may leave what it
# last saw in $LAST.
wait_for() {
  local deadline=$((SECONDS + ${WAIT:-30}))
  until "$@" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || die "timed out waiting: $WHAT${LAST:+ (last seen: $LAST)}"
    sleep 0.1
  done
}

W=$(mktemp -d /tmp/rbunits.XXXXXX)
C=rbunits-$$
cleanup() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ] && podman container exists "$C" 2>/dev/null; then
    echo "--- journal of the ringblast units (last 30 lines):" >&2
    podman exec "$C" journalctl -u 'ringblast-*' --no-pager -o short-monotonic 2>/dev/null | grep -v '^.\{0,40\}{' | tail -n 30 >&2
  fi
  podman rm -f -t 0 "$C" >/dev/null 2>&1
  podman rmi -af >/dev/null 2>&1
  umount -R "$W/storage" 2>/dev/null
  rm -rf "$W"
  say "cleaned up; wall time $(($(date +%s) - STARTED)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the package ---------------------------------------------------------------------------------
deb=${1:-}
if [ -z "$deb" ]; then
  if ! cargo deb --version >/dev/null 2>&1; then
    say "cargo install cargo-deb"
    cargo install --locked cargo-deb
  fi
  cargo build --release --quiet
  bash scripts/build-assets.sh target/release/ringblast >/dev/null
  deb=$(cargo deb --no-build --quiet --output "$W/" | tail -n1)
fi
[ -f "$deb" ] || die "no package at '$deb'"
say "package $(basename "$deb")"

# --- private podman ----------------------------------------------------------------------------
# shellcheck source=scripts/private-podman.sh
. scripts/private-podman.sh

# --- the image -----------------------------------------------------------------------------------
# shellcheck source=/dev/null
SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
tar=$CACHE/systemd-$SUITE.tar
if [ ! -s "$tar" ]; then
  say "mmdebstrap $SUITE minbase + systemd (cached in $CACHE)"
  mkdir -p "$CACHE"
  apt-cache policy 2>/dev/null | grep -q "n=$SUITE," || apt-get update -qq
  mmdebstrap --quiet --format=tar --variant=minbase --include=systemd,systemd-sysv \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' "$SUITE" "$tar.tmp" || die "mmdebstrap failed" 3
  mv "$tar.tmp" "$tar"
fi
podman import -q "$tar" "localhost/$C:latest" >/dev/null

# --- systemd as PID 1 ----------------------------------------------------------------------------
# --network none: the container's network namespace has loopback only, so every UDP datagram its
# kernel counts is ringblast's.
podman run -d -q --name "$C" --hostname "$C" --privileged --systemd=always --network none \
  "localhost/$C:latest" sh -c 'mount --make-rshared / && exec /sbin/init' >/dev/null
# Every command in the container is bounded too: a podman exec that hangs (a host saturated by
# the sender under test) fails the step that waited on it instead of stalling the test command.
in_c() { timeout "${EXEC_TIMEOUT:-60}" podman exec "$C" "$@"; }
# Until PID 1 answers on its socket, systemctl fails at once; then --wait waits for the boot's end.
booted() {
  state=$(timeout 60 podman exec "$C" systemctl is-system-running --wait 2>/dev/null) || true
  [ "$state" = running ] || [ "$state" = degraded ]
}
WHAT="systemd in the container to finish booting" WAIT=60 wait_for booted
CPID=$(podman inspect -f '{{.State.Pid}}' "$C")
say "systemd $(in_c systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p') is PID 1 in $C ($state)"

podman cp "$deb" "$C:/tmp/ringblast.deb"
in_c dpkg -i /tmp/ringblast.deb >/dev/null
# The package's postinst ran daemon-reload against this live systemd: the units are known.
for unit in ringblast-sink.service ringblast-send@example.service; do
  [ "$(in_c systemctl show -P LoadState "$unit")" = loaded ] || die "$unit is not loaded after dpkg -i"
done
# The configs as deploy/README.md installs them, unchanged: the sender's shipped `to` is the
# local sink (127.0.0.1:9900).
in_c sh -ec '
  install -d -m 0755 /etc/ringblast
  (umask 077; head -c32 /dev/urandom | base64 > /etc/ringblast/secret)
  install -m 0644 /usr/share/ringblast/config/sink.toml /etc/ringblast/sink.toml
  install -m 0644 /usr/share/ringblast/config/send-example.toml /etc/ringblast/send-example.toml'

# --- observers -----------------------------------------------------------------------------------
# The container's Udp counters, read from outside it: "InDatagrams OutDatagrams RcvbufErrors
# SndbufErrors NoPorts".
udp() {
  awk '/^Udp:/ { if (!h) { for (i = 2; i <= NF; i++) c[$i] = i; h = 1 } else
       print $c["InDatagrams"], $c["OutDatagrams"], $c["RcvbufErrors"], $c["SndbufErrors"], $c["NoPorts"] }' \
    "/proc/$CPID/net/snmp"
}
show() { in_c systemctl show -P "$2" "$1"; }
active_pid() { [ "$(show "$1" ActiveState)" = active ] && [ "$(show "$1" MainPID)" != 0 ]; }
restarted_once() { [ "$(show "$1" NRestarts)" = 1 ] && active_pid "$1"; }
# The UDP and TCP listeners on 9900 (0x26AC) and the exporter on $1, in the container's namespace.
sink_listening() {
  grep -q ':26AC 00000000:0000 07' "/proc/$CPID/net/udp" &&
    grep -q ':26AC 00000000:0000 0A' "/proc/$CPID/net/tcp" &&
    nsenter -t "$CPID" -n curl -sf -o /dev/null "http://127.0.0.1:9977/metrics"
}
in_datagrams_above() { [ "$(udp | cut -d' ' -f1)" -gt "$1" ]; }
confined() { # unit: its main process runs as the units say
  local pid status
  pid=$(show "$1" MainPID)
  status=$(in_c grep -E '^(Uid|CapEff|NoNewPrivs|Seccomp):' "/proc/$pid/status" | tr -s '\t ' ' ' | tr '\n' ' ')
  # DynamicUser= takes its uids from 61184-65519.
  if ! [[ $status =~ ^Uid:\ ([0-9]+)\  ]] || [ "${BASH_REMATCH[1]}" -lt 61184 ] || [ "${BASH_REMATCH[1]}" -gt 65519 ]; then
    die "$1 does not run as a dynamic user: $status"
  fi
  [[ $status == *"CapEff: 0000000000004000 NoNewPrivs: 1 Seccomp: 2 " ]] || die "$1 is not confined as shipped: $status"
}
# The last JSON summary line unit $1 wrote to the journal.
summary() { in_c journalctl -u "$1" -o cat --no-pager | grep '^{.*"type":"summary"' | tail -n1; }
stopped_clean() {
  [ "$(show "$1" ActiveState)" = inactive ] || die "$1 is $(show "$1" ActiveState) after systemctl stop"
  [ "$(show "$1" Result)" = success ] || die "$1 stopped with result $(show "$1" Result)"
  [ "$(show "$1" ExecMainStatus)" = 0 ] || die "$1 exited with status $(show "$1" ExecMainStatus)"
}

read -r in0 out0 _ _ _ <<<"$(udp)"
[ "$in0 $out0" = "0 0" ] || die "the container's namespace counted UDP before ringblast ran: $(udp)"

# --- the sink: up, killed, restarted -------------------------------------------------------------
SINK=ringblast-sink.service SEND=ringblast-send@example.service
in_c systemctl enable --now "$SINK" >/dev/null 2>&1 || die "systemctl enable --now $SINK failed"
WHAT="$SINK listening on UDP and TCP 9900 and serving metrics on 9977" wait_for sink_listening
confined "$SINK"
pid1=$(show "$SINK" MainPID)
in_c sh -c "kill -KILL $pid1"
# RestartSec=5s: the new process comes about 5 s after the kill.
WHAT="$SINK restarted after SIGKILL" WAIT=20 wait_for restarted_once "$SINK"
pid2=$(show "$SINK" MainPID)
[ "$pid2" != "$pid1" ] || die "$SINK has the killed PID $pid1 still"
WHAT="the restarted sink listening" wait_for sink_listening
say "$SINK: up as a dynamic user with CAP_IPC_LOCK only; SIGKILL of PID $pid1 -> NRestarts=1, PID $pid2 listening"

# --- the sender: up, killed, restarted -----------------------------------------------------------
in_c systemctl enable --now "$SEND" >/dev/null 2>&1 || die "systemctl enable --now $SEND failed"
WHAT="$SEND running" wait_for active_pid "$SEND"
confined "$SEND"
WHAT="datagrams from $SEND at the sink" wait_for in_datagrams_above 1000
pid1=$(show "$SEND" MainPID)
in_c sh -c "kill -KILL $pid1"
WHAT="$SEND restarted after SIGKILL" WAIT=20 wait_for restarted_once "$SEND"
pid2=$(show "$SEND" MainPID)
[ "$pid2" != "$pid1" ] || die "$SEND has the killed PID $pid1 still"
mark=$(udp | cut -d' ' -f1)
WHAT="datagrams from the restarted sender" wait_for in_datagrams_above $((mark + 1000))
say "$SEND: SIGKILL of PID $pid1 -> NRestarts=1, PID $pid2 sending"
in_c systemctl stop "$SEND"
stopped_clean "$SEND"

# --- one counted session -------------------------------------------------------------------------
# No sender runs now and the sink has read what it was sent: the counters are at rest. Wait for
# InDatagrams + RcvbufErrors to equal OutDatagrams (every datagram sent either read or dropped),
# then take the baseline.
at_rest() { read -r i o r _ _ <<<"$(udp)"; [ $((i + r)) = "$o" ]; }
WHAT="the sink to read every datagram sent" wait_for at_rest
read -r in0 out0 rcvbuf0 sndbuf0 noports0 <<<"$(udp)"
in_c systemctl start "$SEND"
WHAT="datagrams from the counted session" wait_for in_datagrams_above $((in0 + 200000))
in_c systemctl stop "$SEND"
stopped_clean "$SEND"
read -r in1 out1 rcvbuf1 sndbuf1 noports1 <<<"$(udp)"
summary "$SEND" >"$W/send.json"
python3 - "$W/send.json" "$((out1 - out0))" "$((in1 - in0))" "$((rcvbuf1 - rcvbuf0))" "$((sndbuf1 - sndbuf0))" \
  "$((noports1 - noports0))" <<'PY' || die "the counted session does not match the kernel's counters"
import json, sys
import jsonschema
s = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator(json.load(open("docs/schema/ringblast-1.schema.json"))).validate(s)
out_d, in_d, rcvbuf, sndbuf, noports = map(int, sys.argv[2:])
sink = s["sink"]
checks = [
    ("sender tx_packets = kernel Udp OutDatagrams", s["tx_packets"], out_d),
    ("sender tx_errors = kernel Udp SndbufErrors", s["tx_errors"], sndbuf),
    ("sink rx_packets (verdict) = kernel Udp InDatagrams", sink["rx_packets"], in_d),
    ("sink rx_kernel_drops (verdict) = kernel Udp RcvbufErrors", sink["rx_kernel_drops"], rcvbuf),
    ("no datagram to a closed port (kernel Udp NoPorts)", 0, noports),
    ("verdict complete", True, sink["complete"]),
    # On loopback a datagram sent is either read or dropped at the socket: none vanishes between.
    ("sink rx_lost = OutDatagrams - InDatagrams - RcvbufErrors", sink["rx_lost"], out_d - in_d - rcvbuf),
]
bad = [c for c in checks if c[1] != c[2]]
for name, got, want in checks:
    print(f"  {'ok ' if got == want else 'BAD'} {name}: {got} vs {want}")
sys.exit(1 if bad else 0)
PY

# --- the sink's totals since it started, and its clean stop --------------------------------------
# Three sender sessions (the killed one, its restart, the counted one) under one name.
# The exporter updates its counters from the workers' books once per interval: wait for the scrape
# to catch up with the kernel (a count that never matches times out and fails).
read -r in_all _ rcvbuf_all _ _ <<<"$(udp)"
per_sender() { # metric -> its value for sender <hostname>-example in the last scrape
  awk -v want="ringblast_rx_sender_$1{sender=\"$C-example\"}" '$1 == want { print $2; f = 1 } END { exit !f }' <<<"$metrics"
}
series_match() {
  metrics=$(nsenter -t "$CPID" -n curl -sf http://127.0.0.1:9977/metrics) &&
    LAST="$(per_sender packets_total) $(per_sender kernel_drops_total) $(per_sender sessions_total)" &&
    [ "$LAST" = "$in_all $rcvbuf_all 3" ]
}
WHAT="the sink's series for $C-example: packets_total, kernel_drops_total, sessions_total = $in_all \
(kernel InDatagrams) $rcvbuf_all (kernel RcvbufErrors) 3 (first run, restart, counted run)" wait_for series_match
echo "  ok  sink ringblast_rx_sender_packets_total{sender=\"$C-example\"} = kernel Udp InDatagrams since start: $in_all"
echo "  ok  sink ringblast_rx_sender_kernel_drops_total = kernel Udp RcvbufErrors since start: $rcvbuf_all"
echo "  ok  sink ringblast_rx_sender_sessions_total = 3"
in_c systemctl stop "$SINK"
stopped_clean "$SINK"
summary "$SINK" >"$W/sink.json"
python3 - "$W/sink.json" "$in_all" "$rcvbuf_all" <<'PY' || die "the sink's summary does not match the kernel's counters"
import json, sys
import jsonschema
s = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator(json.load(open("docs/schema/ringblast-1.schema.json"))).validate(s)
in_all, rcvbuf_all = int(sys.argv[2]), int(sys.argv[3])
checks = [
    ("sink summary rx_packets = kernel Udp InDatagrams since start", s["rx_packets"], in_all),
    ("sink summary rx_kernel_drops = kernel Udp RcvbufErrors since start", s["rx_kernel_drops"], rcvbuf_all),
]
for name, got, want in checks:
    print(f"  {'ok ' if got == want else 'BAD'} {name}: {got} vs {want}")
sys.exit(0 if all(g == w for _, g, w in checks) else 1)
PY
say "figures: counted session tx=$((out1 - out0)) rx=$((in1 - in0)) kernel_drops=$((rcvbuf1 - rcvbuf0)); sink since start rx=$in_all kernel_drops=$rcvbuf_all over 3 sessions"
say "all checks passed"
