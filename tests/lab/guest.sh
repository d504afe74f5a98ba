#!/bin/bash
# The lab's actions inside one guest (scripts/lab.sh boots it; tests/lab/init runs this in a chroot
# over the host's read-only root), or on the host itself for the host-kernel pair cases. It runs
# ringblast cases and records what the guest's own kernel observed beside ringblast's output, in
# $LAB_OUT: each case's JSON Lines (NAME.json) and stderr (NAME.err), and, read while the process
# runs, its /proc/PID/numa_maps (NAME.numa_maps) and each thread's name and allowed CPUs
# (NAME.tasks); /proc/net/snmp and /proc/net/netstat before and after (NAME.snmp.before/.after).
# It judges nothing: tests/lab/check.py does, on the host, after the guest has powered off.
#
# LAB_ROLE says which cases: `numa` (the two-node guest), `sink` and `send` (the two guests as two
# hosts, LAB_ADDR this guest's address on the link, LAB_PEER the other's), `pairs` (the UDP and
# TCP pair cases alone, run in a guest and on the host). Every case is bounded in time and count.
set -u
cd "$(dirname "$0")/../.."
rb=$PWD/target/release/ringblast
out=${LAB_OUT:?}
secret=${LAB_SECRET:-}
log() { echo "guest($LAB_ROLE) at $(cut -d' ' -f1 /proc/uptime) s: $*"; }

# Waits (bounded, 60 s) until FILE has a line matching PATTERN; fails the case otherwise.
wait_line() {
  local file=$1 pattern=$2 i
  for ((i = 0; i < 1200; i++)); do
    grep -qE "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.05
  done
  log "timed out waiting for /$pattern/ in $file"
  return 1
}

# Starts ringblast in the background as case NAME; its PID is left in $pid.
start() {
  local name=$1
  shift
  log "$name: ringblast $*"
  "$rb" "$@" >"$out/$name.json" 2>"$out/$name.err" </dev/null &
  pid=$!
  echo "$*" >"$out/$name.cmd"
}

# Records what this kernel says about process PID for case NAME: its NUMA memory map and, per
# thread, the thread's name and the CPUs it may run on.
observe() {
  local name=$1 p=$2 task
  cat "/proc/$p/numa_maps" >"$out/$name.numa_maps"
  for task in /proc/"$p"/task/*; do
    printf '%s %s\n' "$(cat "$task/comm")" "$(sed -n 's/^Cpus_allowed_list:\s*//p' "$task/status")"
  done >"$out/$name.tasks"
}

snapshot() { # NAME before|after
  cat /proc/net/snmp >"$out/$1.snmp.$2"
  cat /proc/net/netstat >"$out/$1.netstat.$2"
  cat /sys/class/net/lo/statistics/rx_bytes >"$out/$1.lo_rx_bytes.$2"
}

# Runs ringblast as case NAME in the foreground, with the kernel's counters around it.
run_counted() {
  local name=$1
  shift
  snapshot "$name" before
  start "$name" "$@"
  wait "$pid"
  echo $? >"$out/$name.rc"
  snapshot "$name" after
}

# Runs ringblast as case NAME, observes it once it has started its workers, then ends it with
# SIGINT: the observation never races the end of the run, however slow the emulation is.
run_observed() {
  local name=$1
  shift
  start "$name" "$@" --duration 60s
  if wait_line "$out/$name.err" '^startup:'; then
    observe "$name" "$pid"
  fi
  kill -INT "$pid"
  wait "$pid"
  echo $? >"$out/$name.rc"
}

link_up() { # ADDR/PREFIX
  ip addr add "$1" dev eth0
  ip link set eth0 up
}

pairs() {
  run_counted pair_udp pair --rate 20kpps --duration 2s --json --no-metrics
  run_counted pair_tcp pair --proto tcp --rate 2kpps --duration 2s --json --no-metrics
}

case $LAB_ROLE in
numa)
  # The user-mode NIC (restrict=on: nothing leaves the guest) sits behind a PCIe expander on
  # node 1. Its gateway is where the sender's packets go (and are dropped by QEMU).
  link_up 10.91.0.15/24
  gw=10.91.0.2
  uname -r >"$out/kernel"
  hostname >"$out/hostname"
  "$rb" topo --to "$gw:9000" >"$out/topo.txt" 2>&1
  run_observed nic_send send --to "$gw:9000" --rate 2kpps --control off --json
  run_observed explicit_node send --to "$gw:9000" --node 0 --rate 2kpps --control off --json
  run_observed explicit_cpus send --to "$gw:9000" --cpus 0 --rate 2kpps --control off --json
  # The sink listens on the NIC's address; a sender on the same guest (default name: the
  # guest's hostname, the kernel's "(none)") pairs with it over the authenticated channel.
  snapshot nic_sink before
  start nic_sink sink --listen 10.91.0.15:7000 --secret-file "$secret" --json
  sink_pid=$pid
  if wait_line "$out/nic_sink.err" '^control: listening'; then
    observe nic_sink "$sink_pid"
    run_counted named_send send --to 10.91.0.15:7000 --secret-file "$secret" --rate 5kpps --count 5000 --json
  fi
  kill -INT "$sink_pid"
  wait "$sink_pid"
  echo $? >"$out/nic_sink.rc"
  snapshot nic_sink after
  # No NIC locality (loopback): one queue per node, each with its own node's memory.
  start spread_sink sink --listen 127.0.0.1:7001 --queues 2 --insecure-control --json
  spread_sink_pid=$pid
  if wait_line "$out/spread_sink.err" '^startup:'; then
    observe spread_sink "$spread_sink_pid"
    run_observed spread_send send --to 127.0.0.1:7001 --queues 2 --flows 4 --rate 2kpps --control off --json
  fi
  kill -INT "$spread_sink_pid"
  wait "$spread_sink_pid"
  echo $? >"$out/spread_sink.rc"
  pairs
  # The library's io_uring and memory unit tests, on this kernel.
  if [ -n "${LAB_UNIT_TESTS:-}" ]; then
    "$LAB_UNIT_TESTS" --test-threads=1 ring:: mem:: >"$out/unit.txt" 2>&1
    echo $? >"$out/unit.rc"
  fi
  ;;
pairs)
  uname -r >"$out/kernel"
  pairs
  ;;
sink)
  link_up "$LAB_ADDR/24"
  uname -r >"$out/kernel"
  hostname >"$out/hostname"
  snapshot hosts_sink before
  # It also counts the sender's run without a control channel (no_control), which a sink with
  # a secret refuses unless told to accept unannounced senders.
  start udp_sink sink --listen "$LAB_ADDR:7000" --no-gro --secret-file "$secret" --accept-unannounced --json
  udp_pid=$pid
  start tcp_sink sink --proto tcp --listen "$LAB_ADDR:7100" --secret-file "$secret" --json
  tcp_pid=$pid
  # The sender guest connects here once it is done with every case (bounded: 240 s).
  python3 - "$LAB_ADDR" <<'PY' >"$out/done.txt" 2>&1
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7999))
s.listen(1)
s.settimeout(240)
conn, peer = s.accept()
print("done from", peer[0])
PY
  kill -INT "$udp_pid" "$tcp_pid"
  wait "$udp_pid"
  echo $? >"$out/udp_sink.rc"
  wait "$tcp_pid"
  echo $? >"$out/tcp_sink.rc"
  snapshot hosts_sink after
  ;;
send)
  link_up "$LAB_ADDR/24"
  uname -r >"$out/kernel"
  hostname >"$out/hostname"
  to=$LAB_PEER
  # Waits (bounded) until both sinks accept control connections.
  for port in 7000 7100; do
    for ((i = 0; i < 600; i++)); do
      (exec 3<>"/dev/tcp/$to/$port") 2>/dev/null && break
      sleep 0.1
    done
  done
  run_counted udp_auth send --to "$to:7000" --secret-file "$secret" --name udp-auth --rate 5kpps --count 10000 --json
  run_counted tcp_auth send --proto tcp --to "$to:7100" --secret-file "$secret" --name tcp-auth --rate 2kpps --duration 3s --json
  run_counted no_control send --to "$to:7000" --control off --rate 5kpps --count 2000 --json
  # The link goes down for 2 s in the middle of a 7 s run, then comes back.
  snapshot link_cut before
  start link_cut send --to "$to:7000" --secret-file "$secret" --name link-cut --rate 2kpps --duration 7s --json
  cut_pid=$pid
  if wait_line "$out/link_cut.err" '^startup:'; then
    sleep 2
    ip link set eth0 down
    sleep 2
    ip link set eth0 up
  fi
  wait "$cut_pid"
  echo $? >"$out/link_cut.rc"
  snapshot link_cut after
  # This guest's clock jumps 10 s ahead: the sink, which was 5 s ahead, is now 5 s behind.
  # The kernel makes the step in one call, so it is exactly 10 s (date -s would drop the fraction of
  # a second, and reading then setting the clock would lose the time between the two calls).
  python3 tests/lab/clock_step.py 10
  run_counted sink_behind send --to "$to:7000" --secret-file "$secret" --name sink-behind --rate 5kpps --count 5000 --json
  (exec 3<>"/dev/tcp/$to/7999") 2>/dev/null || log "could not tell the sink guest that we are done"
  ;;
*)
  log "unknown role"
  exit 2
  ;;
esac
log "done"
