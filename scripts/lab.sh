#!/usr/bin/env bash
# The lab: ringblast on real kernels and as real hosts, under QEMU's software emulation (TCG; no
# KVM needed). It installs what it needs from Debian's packages, builds a small initramfs (a
# static busybox, Debian 12's 6.1 kernel's virtio and 9p modules, tests/lab/init), and boots:
#
#   numa   one guest with two NUMA nodes (one CPU and 512 MiB each) and its NIC behind a PCIe
#          expander on node 1: placement, worker affinity and where the packet memory is, against
#          the guest's /proc; an authenticated sender on a host whose hostname is "(none)"; the
#          UDP and TCP pair cases and the library's ring and memory unit tests on the 6.1 kernel;
#   hosts  two guests, each its own kernel, clock and hostname, joined only by an Ethernet link
#          between the two QEMU processes (a Unix stream socket), the sink guest's clock 5 s ahead
#          (-rtc base=): authenticated UDP and TCP runs, a run without control, a 2 s link cut,
#          and the sender's clock stepped so that the sink is 5 s behind;
#   host   the UDP and TCP pair cases on this machine's own kernel, in a private network namespace.
#
# Guests see the host's root read-only over 9p, so they run this checkout's own binaries; they
# write what they observed into a folder of their own, and tests/lab/check.py judges it all here
# after they have powered off. User networking is restrict=on (nothing leaves the guest). Each
# guest is bounded (LAB_GUEST_TIMEOUT, 180 s); one that hangs fails the lab with the last lines
# of its console, and every QEMU this script started is killed on every exit path.
#
# Usage: bash scripts/lab.sh [numa] [hosts] [host]   (all three by default; needs root to install
# packages and for the network namespace). LAB_DIR keeps the work (default: target/lab).
set -euo pipefail
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$script_dir/.." && pwd)
cd "$repo"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(numa hosts host)
lab=${LAB_DIR:-$repo/target/lab}
guest_timeout=${LAB_GUEST_TIMEOUT:-180}
started=$(date +%s)
log() { echo "lab: $*"; }
die() { echo "lab: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (packages, network namespaces): run it as root or under sudo"

# --- what it needs -----------------------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
cargo build --release --quiet
unit_tests=$(cargo test --release --lib --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])')
[ -x "$unit_tests" ] || die "could not build the library's unit-test binary"

# Debian 12's kernel package, unpacked (no install: nothing on this host changes).
mkdir -p "$lab"
kdir=$lab/kernel
if [ ! -f "$kdir/ready" ]; then
  rm -rf "$kdir" && mkdir -p "$kdir"
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [ -n "$pkg" ] || { apt-get update -qq; pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'); }
  [ -n "$pkg" ] || die "apt knows no linux-image-amd64: add Debian 12's main archive to the apt sources"
  log "fetching $pkg"
  (cd "$kdir" && apt-get download "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  dpkg-deb -x "$kdir"/"$pkg"_*.deb "$kdir/x"
  rm -f "$kdir"/*.deb
  touch "$kdir/ready"
fi
vmlinuz=$(ls "$kdir"/x/boot/vmlinuz-*)
moddir=$(ls -d "$kdir"/x/lib/modules/*)

# --- the initramfs -----------------------------------------------------------------------------
# Module order matters: each comes after what it depends on (the kernel builds virtio and 9p as
# modules; the package ships no modules.dep, and busybox's insmod resolves nothing).
modules=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover
  net_failover virtio_net netfs fscache 9pnet 9pnet_virtio 9p)
ird=$lab/initramfs
rm -rf "$ird" && mkdir -p "$ird"/{bin,modules,proc,sys,dev}
cp /bin/busybox "$ird/bin/"
install -m 0755 tests/lab/init "$ird/init"
for m in "${modules[@]}"; do
  f=$(find "$moddir/kernel" -name "$m.ko" | head -n 1)
  [ -n "$f" ] || die "the kernel package has no $m.ko"
  cp "$f" "$ird/modules/"
done
printf '%s\n' "${modules[@]}" >"$ird/modules.order"
(cd "$ird" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$lab/initrd.gz"

# --- guests ------------------------------------------------------------------------------------
run=$lab/run
rm -rf "$run" && mkdir -p "$run"
secret=$run/secret
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret")
chmod 600 "$secret"
pids=()
declare -A deadline
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$netns" 2>/dev/null || true
}
netns=rblab$$
trap cleanup EXIT
# bash runs the EXIT trap on a signal only when that signal is trapped.
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts guest NAME in the background (QEMU's PID appended to pids); extra QEMU arguments follow
# `--`, kernel command-line words before it.
boot() {
  local name=$1 words=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do words+=("$1"); shift; done
  shift
  mkdir -p "$run/$name"
  qemu-system-x86_64 -machine q35 -accel tcg,thread=multi -cpu max \
    -m 1G -display none -nodefaults -no-reboot -serial "file:$run/$name.console" \
    -fsdev local,id=root,path=/,readonly=on,security_model=none,multidevs=remap \
    -device virtio-9p-pci,fsdev=root,mount_tag=hostroot,bus=pcie.0 \
    -fsdev "local,id=out,path=$run/$name,security_model=none" \
    -device virtio-9p-pci,fsdev=out,mount_tag=out,bus=pcie.0 \
    -kernel "$vmlinuz" -initrd "$lab/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet lab.repo=$repo lab.secret=$secret ${words[*]}" \
    "$@" </dev/null >"$run/$name.qemu" 2>&1 &
  pids+=($!)
  deadline[$!]=$(($(date +%s) + guest_timeout))
  log "booting $name (QEMU pid $!)"
}

# Waits for the guest QEMU PID (NAME for messages); a guest that did not finish its script fails
# the lab with its console's last lines.
await() {
  local name=$1 pid=$2 rc=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(date +%s)" -ge "${deadline[$pid]}" ]; then
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.5
  done
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q 'lab-init: guest script exited 0' "$run/$name.console"; then
    echo "lab: guest $name did not finish its script (QEMU exit $rc; 137: killed after ${guest_timeout} s); its console ends:" >&2
    tail -n 25 "$run/$name.console" >&2 || true
    cat "$run/$name.qemu" >&2 || true
    exit 1
  fi
  log "guest $name finished"
}

two_node=(-smp 2,sockets=2,cores=1,threads=1
  -object memory-backend-ram,id=m0,size=512M -object memory-backend-ram,id=m1,size=512M
  -numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1
  -device pxb-pcie,id=pxb1,bus_nr=128,numa_node=1,bus=pcie.0
  -device pcie-root-port,id=rp1,bus=pxb1,chassis=1,slot=0)

for c in "${cases[@]}"; do
  case $c in
  numa)
    boot numa lab.role=numa "lab.unit_tests=$unit_tests" -- "${two_node[@]}" \
      -netdev user,id=n0,net=10.91.0.0/24,restrict=on -device virtio-net-pci,netdev=n0,bus=rp1
    numa_pid=${pids[-1]}
    ;;
  hosts)
    sock=$run/link.sock
    ahead=$(date -u -d '+5 seconds' +%Y-%m-%dT%H:%M:%S)
    boot sink lab.role=sink lab.hostname=sink-host lab.addr=10.77.0.1 -- -smp 2 -rtc "base=$ahead" \
      -netdev "stream,id=l0,server=on,addr.type=unix,addr.path=$sock" \
      -device virtio-net-pci,netdev=l0,mac=52:54:00:77:00:01,bus=pcie.0
    sink_pid=${pids[-1]}
    for ((i = 0; i < 100; i++)); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || die "the sink guest's QEMU did not open the link socket $sock"
    boot send lab.role=send lab.hostname=send-host lab.addr=10.77.0.2 lab.peer=10.77.0.1 -- -smp 2 -rtc base=utc \
      -netdev "stream,id=l0,server=off,addr.type=unix,addr.path=$sock" \
      -device virtio-net-pci,netdev=l0,mac=52:54:00:77:00:02,bus=pcie.0
    send_pid=${pids[-1]}
    ;;
  host)
    mkdir -p "$run/host"
    ip netns add "$netns"
    ip -n "$netns" link set lo up
    log "pair cases on this host's kernel $(uname -r), in network namespace $netns"
    ip netns exec "$netns" env LAB_ROLE=pairs "LAB_OUT=$run/host" timeout -s KILL "$guest_timeout" \
      bash tests/lab/guest.sh >"$run/host.console" 2>&1 || { tail -n 25 "$run/host.console" >&2; die "the host-kernel pair cases failed"; }
    ip netns del "$netns"
    ;;
  *) die "unknown case $c (numa, hosts, host)" ;;
  esac
done
for c in "${cases[@]}"; do
  case $c in
  numa) await numa "$numa_pid" ;;
  hosts) await sink "$sink_pid"; await send "$send_pid" ;;
  esac
done
pids=()
log "guests done after $(($(date +%s) - started)) s; checking what they observed"
python3 tests/lab/check.py "$run" "${cases[@]}"
log "passed in $(($(date +%s) - started)) s"
