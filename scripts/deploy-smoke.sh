#!/usr/bin/env bash
# Runs the shipped deployments for real under podman, each topology in a network namespace of its
# own, and checks them through a real Prometheus (tests/deploy/promcheck.py):
#   compose   deploy/compose/compose.yaml via podman-compose: sink, sender, Prometheus on the
#             (namespace's) host network
#   bridge    deploy/compose/compose.bridge.yaml: a sink and three senders, each container in its
#             own network namespace, the senders reaching the sink by service name
# with the test-only overrides in tests/deploy/ (a local Prometheus image, limits the host allows,
# the test's own secret). Images come from no registry: mmdebstrap builds a Debian root from the
# machine's apt sources (cached under target/deploy-smoke/), `podman import` makes it the base
# image, and deploy/compose/Dockerfile.prebuilt copies the release binary onto it.
#
# Usage (root): RINGBLAST_BIN=target/release/ringblast bash scripts/deploy-smoke.sh [TOPOLOGY...]
# Installs what it needs (apt: podman, runc, mmdebstrap, netavark, aardvark-dns; PyPI:
# podman-compose into target/deploy-smoke/venv). Everything it creates (containers, pods,
# networks, volumes, images, namespaces) lives in a private podman storage under a temporary
# directory and is removed on exit, also on failure. Exit 0 = every check passed.
set -euo pipefail
cd "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/.."
ROOT=$PWD
BIN=$(realpath "${RINGBLAST_BIN:-target/release/ringblast}")
TOPOLOGIES=("${@:-compose bridge}")
read -r -a TOPOLOGIES <<<"${TOPOLOGIES[*]}"
PODMAN_COMPOSE_VERSION=1.6.0
CACHE=$ROOT/target/deploy-smoke
STARTED=$(date +%s)

say() { echo "deploy-smoke [$(( $(date +%s) - STARTED )) s]: $*"; }
die() { echo "deploy-smoke: $*" >&2; exit "${2:-1}"; }
[ "$(id -u)" = 0 ] || die "needs root (podman with host networking, network namespaces)" 3
[ -x "$BIN" ] || die "no ringblast binary at $BIN: cargo build --release, or set RINGBLAST_BIN" 3

# --- tools -----------------------------------------------------------------------------------
need=()
for tool in podman:podman runc:runc mmdebstrap:mmdebstrap netavark:/usr/lib/podman/netavark \
  aardvark-dns:/usr/lib/podman/aardvark-dns nsenter:nsenter ip:ip curl:curl; do
  pkg=${tool%%:*} probe=${tool#*:}
  [ "$pkg" = nsenter ] && pkg=util-linux
  [ "$pkg" = ip ] && pkg=iproute2
  command -v "$probe" >/dev/null 2>&1 || [ -x "$probe" ] || need+=("$pkg")
done
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$CACHE"
COMPOSE=$CACHE/venv/bin/podman-compose
if ! "$COMPOSE" --version 2>/dev/null | grep -q "version $PODMAN_COMPOSE_VERSION"; then
  # Debian's podman-compose 1.0.3 puts host-network services on the default network too.
  say "installing podman-compose $PODMAN_COMPOSE_VERSION (PyPI)"
  rm -rf "$CACHE/venv"
  python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q "podman-compose==$PODMAN_COMPOSE_VERSION"
fi

# --- private podman ----------------------------------------------------------------------------
P=rbsmoke-$$
W=$(mktemp -d "/tmp/$P.XXXXXX")
NETNS=()
# The machine's hard limits: a runtime without CAP_SYS_RESOURCE cannot raise them in a container.
# podman itself runs with nproc no higher than pid_max.
NOFILE=$(ulimit -Hn)
MEMLOCK=$(ulimit -Hl)
[ "$MEMLOCK" = unlimited ] && MEMLOCK=-1 || MEMLOCK=$((MEMLOCK * 1024))
NPROC=$(ulimit -Hu)
PID_MAX=$(cat /proc/sys/kernel/pid_max)
{ [ "$NPROC" = unlimited ] || [ "$NPROC" -gt "$PID_MAX" ]; } && NPROC=$PID_MAX
[ "$NOFILE" = unlimited ] && NOFILE=1048576
cat >"$W/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$NOFILE:$NOFILE", "nproc=$NPROC:$NPROC"]
[engine]
# runc, and cgroupfs: crun and the systemd cgroup manager refuse a cgroup v1 (hybrid) host.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$W/tmp"
[network]
network_config_dir = "$W/networks"
EOF
cat >"$W/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$W/storage"
runroot = "$W/run"
EOF
echo 'unqualified-search-registries = ["docker.io"]' >"$W/registries.conf"
export CONTAINERS_CONF=$W/containers.conf CONTAINERS_STORAGE_CONF=$W/storage.conf \
  CONTAINERS_REGISTRIES_CONF=$W/registries.conf

# podman in namespace $1: host-network containers share it, bridges and their DNS live in it.
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

cleanup() {
  local rc=$? ns left
  set +e
  say "cleaning up"
  for ns in "${NETNS[@]}"; do
    in_ns "$ns" podman pod rm -af -t 0 >/dev/null 2>&1
    in_ns "$ns" podman rm -af -t 0 >/dev/null 2>&1
    in_ns "$ns" podman network prune -f >/dev/null 2>&1
  done
  podman rm -af -t 0 >/dev/null 2>&1
  podman volume rm -af >/dev/null 2>&1
  podman secret rm -a >/dev/null 2>&1
  podman rmi -af >/dev/null 2>&1
  left=$(podman ps -aq | wc -l)/$(podman pod ps -q | wc -l)/$(podman volume ls -q | wc -l)/$(podman images -q | wc -l)
  [ "$left" = 0/0/0/0 ] || echo "deploy-smoke: left over (containers/pods/volumes/images): $left" >&2
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  umount -R "$W/storage" 2>/dev/null
  rm -rf "$W"
  say "cleaned up ($P); wall time $(( $(date +%s) - STARTED )) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

new_ns() {
  ip netns add "$1"
  NETNS+=("$1")
  ip -n "$1" link set lo up
}

# Waits (bounded) until container $1 is running.
wait_running() {
  local deadline=$((SECONDS + ${2:-30}))
  until [ "$(podman inspect -f '{{.State.Status}}' "$1" 2>/dev/null)" = running ]; do
    [ $SECONDS -lt $deadline ] || { podman logs "$1" 2>&1 | tail -5 >&2; die "$1 is not running"; }
    sleep 0.2
  done
}

# --- images ------------------------------------------------------------------------------------
# shellcheck source=/dev/null
SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
apt-cache policy 2>/dev/null | grep -q "n=$SUITE," || die "the apt sources offer no suite $SUITE for mmdebstrap" 3
rootfs() { # $1 = name, then mmdebstrap options; builds $CACHE/$1-$SUITE.tar once
  local tar=$CACHE/$1-$SUITE.tar
  shift
  [ -s "$tar" ] && return 0
  mmdebstrap --quiet --format=tar --variant=minbase --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$@" "$SUITE" "$tar.tmp" && mv "$tar.tmp" "$tar"
}
say "root filesystems ($SUITE, cached in $CACHE)"
rootfs base & base_pid=$!
rootfs prometheus --include=prometheus & prom_pid=$!
wait $base_pid || die "mmdebstrap of the base image failed" 3
wait $prom_pid || die "mmdebstrap of the prometheus image failed" 3
# The Dockerfiles' FROM (debian:bookworm-slim), resolved locally: nothing is pulled. It is the
# machine's own suite, the one the host-built binary was linked against.
BASE_IMAGE=docker.io/library/$(sed -n 's/^FROM //p' deploy/compose/Dockerfile.prebuilt)
podman import -q "$CACHE/base-$SUITE.tar" "$BASE_IMAGE" >/dev/null
# What the prom/prometheus image provides: prometheus as the entrypoint, /prometheus as workdir.
PROM_IMAGE=localhost/$P-prometheus:latest
podman import -q --change 'ENTRYPOINT ["/usr/bin/prometheus"]' --change 'WORKDIR /prometheus' \
  "$CACHE/prometheus-$SUITE.tar" "$PROM_IMAGE" >/dev/null
mkdir -p "$W/context"
cp "$BIN" "$W/context/ringblast"
podman build -q --pull=never -f deploy/compose/Dockerfile.prebuilt -t ringblast:local "$W/context" >/dev/null
say "images: $(podman images --format '{{.Repository}}:{{.Tag}}' | tr '\n' ' ')"

# The control-channel secret, as deploy/README.md makes it (root-only).
(umask 077; head -c32 /dev/urandom | base64 >"$W/secret")

render() { # $1 = override template -> its rendered copy
  sed -e "s|\${RB_MEMLOCK}|$MEMLOCK|g; s|\${RB_NOFILE}|$NOFILE|g; s|\${RB_NPROC}|$NPROC|g" \
    -e "s|\${RB_PROMETHEUS_IMAGE}|$PROM_IMAGE|g; s|\${RB_SECRET}|$W/secret|g" "$1" >"$W/$(basename "$1")"
  echo "$W/$(basename "$1")"
}

# Runs compose file $1 (in deploy/compose) with override $2 as project $3 in its own namespace;
# $4 = Prometheus URL inside it, $5 = targets, then the sender services (service=name ...).
compose_topology() {
  local file=$1 template=$2 override project=$3 prom=$4 targets=$5 ns=$3
  shift 5
  local pairs=("$@") services=() names=() summaries=() pair svc
  override=$(render "$template")
  for pair in "${pairs[@]}"; do services+=("${pair%%=*}"); names+=("${pair#*=}"); done
  new_ns "$ns"
  say "$project: podman-compose -f deploy/compose/$file up (override $(basename "$template"))"
  (cd deploy/compose && timeout 120 nsenter --net="/run/netns/$ns" "$COMPOSE" -p "$project" \
    -f "$file" -f "$override" up -d --no-build sink "${services[@]}" prometheus >"$W/$project-up.log" 2>&1) \
    || { tail -20 "$W/$project-up.log" >&2; die "$project: compose up failed"; }
  for svc in sink "${services[@]}" prometheus; do wait_running "${project}_${svc}_1"; done
  say "$project: $((${#services[@]} + 2)) containers running: $(podman ps --filter "label=io.podman.compose.project=$project" --format '{{.Names}}' | tr '\n' ' ')"
  in_ns "$ns" python3 tests/deploy/promcheck.py live --prom "$prom" --targets "$targets" \
    --senders "$(IFS=,; echo "${names[*]}")" >"$W/$project-live.txt" \
    || { cat "$W/$project-live.txt"; die "$project: live checks failed"; }
  grep -v '^ok ' "$W/$project-live.txt" || true
  # Stopping a sender (SIGTERM) ends its session: it prints the sink's books as its summary.
  local containers=()
  for svc in "${services[@]}"; do containers+=("${project}_${svc}_1"); done
  in_ns "$ns" podman stop -t 20 "${containers[@]}" >/dev/null
  for pair in "${pairs[@]}"; do
    svc=${pair%%=*}
    podman logs "${project}_${svc}_1" 2>/dev/null >"$W/$project-$svc.out"
    summaries+=(--summary "${pair#*=}=$W/$project-$svc.out")
  done
  in_ns "$ns" python3 tests/deploy/promcheck.py exact --prom "$prom" "${summaries[@]}" >"$W/$project-exact.txt" \
    || { cat "$W/$project-exact.txt"; die "$project: exact counts failed"; }
  grep -E '^ok .*(sent|up:|return data)' "$W/$project-live.txt" "$W/$project-exact.txt" -h | sed 's/^/  /' 
  say "$project figures: containers=$((${#services[@]} + 2)) $(grep -h '^figures:' "$W/$project-live.txt" "$W/$project-exact.txt" | sed 's/^figures: //' | tr '\n' ' ')"
}

for topology in "${TOPOLOGIES[@]}"; do
  case $topology in
    compose)
      # The shipped single-host stack (Grafana is packaged nowhere here; its dashboard queries
      # run against Prometheus instead).
      RINGBLAST_RATE=20kpps compose_topology compose.yaml tests/deploy/compose.smoke.yaml "$P-compose" \
        http://127.0.0.1:9090 2 sender=compose-sender
      ;;
    bridge)
      compose_topology compose.bridge.yaml tests/deploy/compose.bridge.smoke.yaml "$P-bridge" \
        http://127.0.0.1:9090 4 sender-1=sender-1 sender-2=sender-2 sender-3=sender-3
      ;;
    *) die "unknown topology $topology (compose, bridge)" 2 ;;
  esac
done
say "all deployment smoke checks passed"
