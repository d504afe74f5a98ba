#!/usr/bin/env bash
# Runs deploy/README.md's "From two bare hosts to a dashboard" as written, with network namespaces
# as the hosts, and checks its outcome against the kernel's counters.
#
# The hosts: sink-1 (10.0.0.10), load-1 (10.0.1.21) and mon-1 (10.0.0.5), each a network
# namespace of its own on one bridge (in a fourth namespace), each with its own host name (UTS
# namespace) and its own /etc and /usr (overlays in a private mount namespace, so the host's own
# /etc and /usr never change). tests/deploy/walkthrough_blocks.py cuts the walkthrough's ```sh
# blocks out of the README, each block names its hosts in its first line, and each runs with
# `bash -eo pipefail` on its hosts in the page's order, unchanged. What a namespace cannot do is a
# shell function of the same name (the "stand-ins" below), so the text still runs verbatim:
#   apt-get install ./ringblast_*.deb   unpacks the package built here (dpkg-deb -x) into that
#                                       host's /usr and /etc overlays; no maintainer scripts (their
#                                       one job, daemon-reload, has no systemd to tell here)
#   apt-get install prometheus          requires the machine's Debian prometheus (scripts/test.sh
#                                       installs it): missing, the test fails
#   scp FILE root@HOST:PATH             copies into that host's mount namespace (/proc/PID/root)
#   systemctl enable --now UNIT         runs the installed unit's ExecStart line as systemd would
#                                       (%i, %H, ${CREDENTIALS_DIRECTORY} holding a copy of the
#                                       LoadCredential= file, ConditionPathExists=,
#                                       AssertPathExists=, LimitMEMLOCK=, LimitNOFILE=), as root:
#                                       no dynamic user, no sandboxing (scripts/units-test.sh runs
#                                       the units under systemd itself)
#   systemctl stop UNIT                 SIGTERM to the main process, waits for its exit status
#   systemctl reload prometheus         starts Debian's prometheus.service ExecStart
#                                       (/usr/bin/prometheus $ARGS, ARGS="") with its storage in
#                                       the test's directory
#   systemctl cat, daemon-reload        print the installed units / nothing
#   systemctl restart grafana-server    nothing: Grafana is packaged nowhere here. The test checks
#                                       the provisioning instead: the dashboard provider's path
#                                       holds the packaged dashboard, the datasource's url is the
#                                       running Prometheus, and tests/deploy/promcheck.py runs
#                                       every dashboard query against it
#   journalctl -u UNIT [-f]             prints the unit's output so far (-f cannot follow in a
#                                       script)
# Between steps the test waits for what an operator would see before going on (the sink
# listening after step 3, Prometheus ready after step 6).
#
# Checks (neutral observers: the namespaces' /proc/net/snmp, nft's verdicts, Prometheus):
#   - the firewall of step 4 drops: a TCP connection from mon-1 to the sink's control port 9900
#     times out, while load-1's control channel connects and its data arrives;
#   - Prometheus (step 6) scrapes both exporters through the firewalls, every target up, every
#     dashboard query returns data (promcheck.py live);
#   - the sender's verdict (step 8) against the kernel: tx_packets = load-1's Udp OutDatagrams,
#     the sink's rx_packets = sink-1's Udp InDatagrams, its kernel drops = sink-1's Udp
#     RcvbufErrors, and the sink's per-sender series in Prometheus = the verdict (promcheck.py
#     exact); the sender and the sink exit 0 when stopped.
#
# Usage (root): bash scripts/walkthrough-test.sh [DEB]   (without DEB it builds one with cargo-deb)
# Exit 0 = every check passed, 1 = a check failed, 3 = it cannot run here.
# The single-quoted scripts below expand in the shells they run in (the hosts' namespaces).
# shellcheck disable=SC2016
set -euo pipefail
cd "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/.."
ROOT=$PWD
STARTED=$(date +%s)
say() { echo "walkthrough [$(($(date +%s) - STARTED)) s]: $*"; }
die() { echo "walkthrough: $1" >&2; exit "${2:-1}"; }
[ "$(id -u)" = 0 ] || die "needs root (network, mount and UTS namespaces, nft)" 3
for tool in ip nft unshare nsenter dpkg-deb curl python3 prometheus promtool; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/test.sh installs it with apt-get)" 3
done

W=$(mktemp -d /tmp/rbwalk.XXXXXX)
P=rbwalk-$$
declare -A ADDR=([sink-1]=10.0.0.10 [load-1]=10.0.1.21 [mon-1]=10.0.0.5)
declare -A HOLDER=()
HOSTS=(sink-1 load-1 mon-1)
ns_of() { echo "$P-$1"; }
cleanup() {
  local rc=$? host pid
  set +e
  if [ "$rc" -ne 0 ]; then
    for host in "${HOSTS[@]}"; do
      for log in "$W/$host"/*.log; do
        [ -e "$log" ] && { echo "--- $host: $(basename "$log") (last lines)"; grep -v '^{' "$log" | tail -n 8; } >&2
      done
    done
  fi
  # Every process in the namespaces this test made is one it started (holders, units, Prometheus).
  for host in "${HOSTS[@]}" sw; do
    for pid in $(ip netns pids "$(ns_of "$host")" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  for host in "${HOSTS[@]}" sw; do ip netns del "$(ns_of "$host")" 2>/dev/null; done
  rm -rf "$W"
  say "cleaned up; wall time $(($(date +%s) - STARTED)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits (bounded) until command "$@" succeeds; $WHAT says what for.
wait_for() {
  local deadline=$((SECONDS + ${WAIT:-30}))
  until "$@" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || die "timed out waiting: $WHAT"
    sleep 0.1
  done
}

# --- the package --------------------------------------------------------------------------------
mkdir -p "$W/dl"
deb=${1:-}
if [ -z "$deb" ]; then
  cargo deb --version >/dev/null 2>&1 || cargo install --locked cargo-deb
  cargo build --release --quiet
  bash scripts/build-assets.sh target/release/ringblast >/dev/null
  deb=$(cargo deb --no-build --quiet --output "$W/dl/" | tail -n1)
else
  cp "$deb" "$W/dl/"
fi
[ -f "$deb" ] || die "no package at '$deb'"
say "package $(basename "$deb")"

# --- the hosts -----------------------------------------------------------------------------------
sw=$(ns_of sw)
ip netns add "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
n=0
for host in "${HOSTS[@]}"; do
  ns=$(ns_of "$host")
  n=$((n + 1))
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "rbw$$-$n" netns "$ns" type veth peer name "p$n" netns "$sw"
  ip -n "$ns" link set "rbw$$-$n" name eth0
  ip -n "$sw" link set "p$n" master br0 up
  ip -n "$ns" addr add "${ADDR[$host]}/24" dev eth0
  ip -n "$ns" link set eth0 up
  # One segment, two /24s: each reaches the other /24 on the link.
  case ${ADDR[$host]} in
    10.0.0.*) ip -n "$ns" route add 10.0.1.0/24 dev eth0 ;;
    *) ip -n "$ns" route add 10.0.0.0/24 dev eth0 ;;
  esac
  mkdir -p "$W/$host"/{etc-up,etc-work,usr-up,usr-work}
  # The holder keeps the host's mount and UTS namespaces; every block runs inside them.
  ip netns exec "$ns" unshare --mount --uts --propagation private bash -c '
    set -e
    hostname "$1"
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$2/etc-up,workdir=$2/etc-work" /etc
    mount -t overlay overlay -o "lowerdir=/usr,upperdir=$2/usr-up,workdir=$2/usr-work" /usr
    : >"$2/ready"
    exec sleep infinity' _ "$host" "$W/$host" &
  HOLDER[$host]=$!
  disown "${HOLDER[$host]}"
done
for host in "${HOSTS[@]}"; do
  WHAT="$host's namespaces" wait_for test -e "$W/$host/ready"
done
say "hosts: sink-1 ${ADDR[sink-1]}, load-1 ${ADDR[load-1]}, mon-1 ${ADDR[mon-1]} (namespaces $P-*)"

# Runs a command in host $1's namespaces, in the directory that holds the .deb.
on() {
  local host=$1
  shift
  nsenter -t "${HOLDER[$host]}" -m -u -n --wd="$W/dl" -- "$@"
}
udp() { # host -> "InDatagrams OutDatagrams RcvbufErrors SndbufErrors"
  on "$1" awk '/^Udp:/ { if (!h) { for (i = 2; i <= NF; i++) c[$i] = i; h = 1 } else
       print $c["InDatagrams"], $c["OutDatagrams"], $c["RcvbufErrors"], $c["SndbufErrors"] }' /proc/net/snmp
}

# --- the stand-ins -----------------------------------------------------------------------------
cat >"$W/standins.sh" <<'STANDINS'
# Sourced before each block; RB_STATE is this host's state directory, RB_HOLDERS "host=pid ...".
unit_file() { # UNIT -> the installed file (the template for an instance)
  local unit=$1
  case $unit in *.service) ;; *) unit=$unit.service ;; esac
  case $unit in *@?*.service) unit=${unit%%@*}@.service ;; esac
  echo "/usr/lib/systemd/system/$unit"
}
unit_name() { case $1 in *.service) echo "$1" ;; *) echo "$1.service" ;; esac; }
expand() { # TEXT INSTANCE -> TEXT with %i and %H as systemd expands them
  local text=${1//%i/$2}
  echo "${text//%H/$(hostname)}"
}
start_unit() {
  local unit file instance key value cmd creds memlock=unlimited nofile
  unit=$(unit_name "$1")
  file=$(unit_file "$unit")
  [ -f "$file" ] || { echo "stand-in systemctl: Unit $unit not found." >&2; return 5; }
  instance=${unit#*@}
  instance=${instance%.service}
  [ "$instance" = "$unit" ] && instance=
  creds=$RB_STATE/credentials/$unit
  while IFS='=' read -r key value; do
    value=$(expand "$value" "$instance")
    case $key in
      ConditionPathExists) [ -e "$value" ] || { echo "stand-in systemctl: $unit skipped: $value is missing"; return 0; } ;;
      AssertPathExists) [ -e "$value" ] || { echo "stand-in systemctl: $unit: assertion failed: $value" >&2; return 1; } ;;
      LoadCredential)
        install -d -m 0700 "$creds"
        install -m 0400 "${value#*:}" "$creds/${value%%:*}" ;;
      LimitMEMLOCK) memlock=${value/infinity/unlimited} ;;
      LimitNOFILE) nofile=$value ;;
      ExecStart) cmd=$value ;;
    esac
  done < <(grep -E '^(ConditionPathExists|AssertPathExists|LoadCredential|LimitMEMLOCK|LimitNOFILE|ExecStart)=' "$file")
  [ -n "$cmd" ] || { echo "stand-in systemctl: $file has no ExecStart=" >&2; return 1; }
  echo "stand-in systemctl: $unit: $cmd" >>"$RB_STATE/units.txt"
  # The main process's exit status lands in UNIT.status; its output (the journal) in UNIT.log.
  CREDENTIALS_DIRECTORY=$creds setsid bash -c '
    ulimit -l "$1"; [ -z "$2" ] || ulimit -n "$2"
    eval "exec $3" & echo $! >"$4.pid"; wait $!; echo $? >"$4.status"' _ \
    "$memlock" "${nofile:-}" "$cmd" "$RB_STATE/$unit" >"$RB_STATE/$unit.log" 2>&1 </dev/null &
  until [ -s "$RB_STATE/$unit.pid" ]; do sleep 0.05; done
}
stop_unit() {
  local unit pid i
  unit=$(unit_name "$1")
  pid=$(cat "$RB_STATE/$unit.pid")
  kill -TERM "$pid"
  for ((i = 0; i < 900; i++)); do [ -s "$RB_STATE/$unit.status" ] && return 0; sleep 0.1; done
  echo "stand-in systemctl: $unit did not exit within 90 s of SIGTERM" >&2
  return 1
}
systemctl() {
  case "$*" in
    daemon-reload) ;;
    cat\ *) shift; local u; for u in "$@"; do echo "# $(unit_file "$u")"; cat "$(unit_file "$u")"; done ;;
    enable\ --now\ *) shift 2; local u; for u in "$@"; do start_unit "$u"; done ;;
    stop\ *) shift; local u; for u in "$@"; do stop_unit "$u"; done ;;
    "reload prometheus")
      # Debian's prometheus.service: ExecStart=/usr/bin/prometheus $ARGS (ARGS="" in
      # /etc/default/prometheus), its storage under /var/lib/prometheus: here the test's directory.
      /usr/bin/prometheus --config.file=/etc/prometheus/prometheus.yml \
        --storage.tsdb.path="$RB_STATE/prometheus-data" >"$RB_STATE/prometheus.log" 2>&1 </dev/null &
      echo $! >"$RB_STATE/prometheus.pid" ;;
    "restart grafana-server") echo "stand-in systemctl: grafana-server not run (Grafana is packaged nowhere here)" ;;
    *) echo "stand-in systemctl: '$*' is not stood in for" >&2; return 1 ;;
  esac
}
journalctl() {
  local unit=
  while [ $# -gt 0 ]; do
    case $1 in -u) unit=$(unit_name "$2"); shift ;; esac
    shift
  done
  cat "$RB_STATE/$unit.log"
}
apt-get() {
  [ "$1" = install ] || { echo "stand-in apt-get: only install" >&2; return 1; }
  shift
  local arg
  for arg in "$@"; do
    case $arg in
      ./*.deb)
        # Unpacked aside, then copied into /usr and /etc (this host's overlays): extracting onto
        # / would touch the attributes of the machine's real root directory.
        rm -rf "$RB_STATE/pkg"
        dpkg-deb -x "$arg" "$RB_STATE/pkg"
        local top
        for top in "$RB_STATE"/pkg/*; do
          case ${top##*/} in usr | etc) cp -a "$top/." "/${top##*/}/" ;; *) echo "stand-in apt-get: the package has /${top##*/}" >&2; return 1 ;; esac
        done ;;
      prometheus) command -v prometheus >/dev/null || { echo "stand-in apt-get: no prometheus on this machine" >&2; return 1; } ;;
      *) echo "stand-in apt-get: cannot install '$arg' here" >&2; return 1 ;;
    esac
  done
}
scp() {
  [ "$1" = -p ] && shift
  local target=${2#root@} pid
  pid=$(tr ' ' '\n' <<<"$RB_HOLDERS" | sed -n "s/^${target%%:*}=//p")
  [ -n "$pid" ] || { echo "stand-in scp: unknown host ${target%%:*}" >&2; return 1; }
  cp -p "$1" "/proc/$pid/root${target#*:}"
}
STANDINS
holders=""
for host in "${HOSTS[@]}"; do holders+="$host=${HOLDER[$host]} "; done

run_block() { # FILE HOST: one walkthrough block as written, with the stand-ins
  local file=$1 host=$2
  say "$(head -n1 "$file" | sed 's/^# //')"
  RB_STATE=$W/$host RB_HOLDERS=$holders on "$host" bash -eo pipefail -c \
    'source "$1"; source "$2"' _ "$W/standins.sh" "$file" >"$W/$host/$(basename "$file" .sh).out" 2>&1 ||
    { cat "$W/$host/$(basename "$file" .sh).out"; die "$(head -n1 "$file" | sed 's/^# //') failed"; }
}

# --- the walkthrough -----------------------------------------------------------------------------
python3 tests/deploy/walkthrough_blocks.py deploy/README.md "$W/blocks" >"$W/blocks.txt"
sink_listening() {
  on sink-1 grep -q ':26AC 00000000:0000 07' /proc/net/udp && on sink-1 grep -q ':26AC 00000000:0000 0A' /proc/net/tcp
}
while read -r name; do
  host=${name#*-step*-}
  host=${host%.sh}
  step=${name#*-step}
  step=${step%%-*}
  if [ "$step" = 5 ]; then
    # Before the sender starts: the baseline of both namespaces' Udp counters.
    read -r sink_in0 _ sink_rcvbuf0 _ <<<"$(udp sink-1)"
    read -r _ load_out0 _ load_sndbuf0 <<<"$(udp load-1)"
  fi
  if [ "$step" = 8 ]; then
    # The sender's data and control channel through both firewalls, as Prometheus sees them.
    on mon-1 python3 "$ROOT/tests/deploy/promcheck.py" live --prom http://127.0.0.1:9090 --targets 2 \
      --senders load-1-example --no-tcp >"$W/live.txt" || { cat "$W/live.txt"; die "Prometheus live checks failed"; }
    grep -E '^ok .*(up|sender)' "$W/live.txt" | sed 's/^/  /' | head -n 4
    connected=$(on mon-1 curl -sf "http://${ADDR[load-1]}:9978/metrics" | awk '$1 == "ringblast_tx_control_connected" { print $2 }')
    [ "$connected" = 1 ] || die "load-1's ringblast_tx_control_connected is '$connected', not 1: the control channel did not pass sink-1's firewall"
    echo "  ok   load-1's control channel connected through sink-1's firewall (ringblast_tx_control_connected 1)"
    # sink-1's drop policy: mon-1 may scrape 9977 but not reach the control port.
    rc=0
    on mon-1 timeout 2 bash -c "exec 3<>/dev/tcp/${ADDR[sink-1]}/9900" 2>/dev/null || rc=$?
    [ "$rc" = 124 ] || die "a TCP connection from mon-1 to sink-1:9900 ended with status $rc instead of hanging in the drop policy (124)"
    echo "  ok   sink-1's firewall drops mon-1's TCP SYN to 9900 (connection attempt timed out)"
  fi
  run_block "$W/blocks/$name" "$host"
  case $step in
    3) WHAT="sink-1 listening on UDP and TCP 9900" wait_for sink_listening ;;
    6) WHAT="Prometheus on mon-1 ready" wait_for on mon-1 curl -sf -o /dev/null http://127.0.0.1:9090/-/ready ;;
  esac
done <"$W/blocks.txt"
grep -q 'step8-load-1' "$W/blocks.txt" || die "the walkthrough has no step-8 block on load-1 (the verdict)"
[ "$(cat "$W/load-1/ringblast-send@example.service.status")" = 0 ] ||
  die "the sender exited with status $(cat "$W/load-1/ringblast-send@example.service.status") on SIGTERM"

# --- the outcome against the kernel ---------------------------------------------------------------
read -r sink_in1 _ sink_rcvbuf1 _ <<<"$(udp sink-1)"
read -r _ load_out1 _ load_sndbuf1 <<<"$(udp load-1)"
verdict=$(grep '^{' "$W/load-1/"*step8-load-1.out | tail -n1)
[ -n "$verdict" ] || die "step 8 printed no verdict"
printf '%s\n' "$verdict" >"$W/verdict.json"
python3 - "$W/verdict.json" "$((load_out1 - load_out0))" "$((load_sndbuf1 - load_sndbuf0))" \
  "$((sink_in1 - sink_in0))" "$((sink_rcvbuf1 - sink_rcvbuf0))" <<'PY' || die "the verdict does not match the kernel's counters"
import json, sys
import jsonschema
s = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator(json.load(open("docs/schema/ringblast-1.schema.json"))).validate(s)
out_d, sndbuf, in_d, rcvbuf = map(int, sys.argv[2:])
checks = [
    ("verdict tx_packets = load-1 Udp OutDatagrams", s["tx_packets"], out_d),
    ("verdict tx_errors = load-1 Udp SndbufErrors", s["tx_errors"], sndbuf),
    ("verdict sink rx_packets = sink-1 Udp InDatagrams", s["sink"]["rx_packets"], in_d),
    ("verdict sink rx_kernel_drops = sink-1 Udp RcvbufErrors", s["sink"]["rx_kernel_drops"], rcvbuf),
    ("verdict complete", True, s["sink"]["complete"]),
    # What left load-1 and neither reached the sink nor overflowed its socket vanished on the path.
    ("verdict sink rx_lost = OutDatagrams - InDatagrams - RcvbufErrors", s["sink"]["rx_lost"], out_d - in_d - rcvbuf),
]
for name, got, want in checks:
    print(f"  {'ok  ' if got == want else 'BAD '} {name}: {got} vs {want}")
sys.exit(0 if all(g == w for _, g, w in checks) else 1)
PY
on mon-1 python3 "$ROOT/tests/deploy/promcheck.py" exact --prom http://127.0.0.1:9090 \
  --summary "load-1-example=$W/verdict.json" >"$W/exact.txt" || { cat "$W/exact.txt"; die "Prometheus exact checks failed"; }
grep '^ok' "$W/exact.txt" | sed 's/^/  /' | head -n 3

# Step 7's provisioning, where Grafana's Debian package reads it.
python3 - "$W/mon-1/etc-up" <<'PY' || die "step 7's Grafana provisioning is not where Grafana reads it"
import filecmp, os, re, sys
etc = sys.argv[1]   # mon-1's /etc overlay: what the walkthrough wrote
prov = os.path.join(etc, "grafana/provisioning")
provider = open(os.path.join(prov, "dashboards/ringblast.yaml")).read()
path = re.search(r"^\s*path:\s*(\S+)", provider, re.M).group(1)
dash = os.path.join(etc, os.path.relpath(path, "/etc"), "ringblast.json")
assert filecmp.cmp(dash, "dashboards/ringblast.json", shallow=False), f"{path}/ringblast.json differs from the package's"
sources = open(os.path.join(prov, "datasources/ringblast.yaml")).read()
url = re.search(r"^\s*url:\s*(\S+)", sources, re.M).group(1)
assert url == "http://127.0.0.1:9090", url
print(f"  ok   the dashboard provider's path {path} holds the packaged ringblast.json; the datasource's url {url} is mon-1's Prometheus")
PY

# The sink stops cleanly too (systemctl stop, as for the sender).
RB_STATE=$W/sink-1 RB_HOLDERS=$holders on sink-1 bash -c 'source "$1"; systemctl stop ringblast-sink.service' _ "$W/standins.sh" ||
  die "stopping the sink failed"
[ "$(cat "$W/sink-1/ringblast-sink.service.status")" = 0 ] ||
  die "the sink exited with status $(cat "$W/sink-1/ringblast-sink.service.status") on SIGTERM"
say "figures: tx=$((load_out1 - load_out0)) rx=$((sink_in1 - sink_in0)) kernel_drops=$((sink_rcvbuf1 - sink_rcvbuf0)); sender and sink exited 0"
say "all checks passed: the walkthrough's $(wc -l <"$W/blocks.txt") blocks ran as written"
