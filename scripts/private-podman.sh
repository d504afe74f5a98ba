# shellcheck shell=bash
# Sourced, not run: points podman at a private configuration and store under directory $W, so a
# test's images and containers never touch the machine's own. Used by deploy-smoke.sh and
# units-test.sh. Sets NOFILE and NPROC (the hard limits the containers get, capped where podman
# would refuse them) and exports CONTAINERS_CONF and CONTAINERS_STORAGE_CONF.
NOFILE=$(ulimit -Hn)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
NPROC=$(ulimit -Hu)
PID_MAX=$(cat /proc/sys/kernel/pid_max)
{ [ "$NPROC" = unlimited ] || [ "$NPROC" -gt "$PID_MAX" ]; } && NPROC=$PID_MAX
cat >"$W/containers.conf" <<CONF
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
CONF
cat >"$W/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$W/storage"
runroot = "$W/run"
CONF
export CONTAINERS_CONF=$W/containers.conf CONTAINERS_STORAGE_CONF=$W/storage.conf
