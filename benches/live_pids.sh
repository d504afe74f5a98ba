# Sourced by the bench scripts (compare.sh, numa.sh): the processes a script started and still
# waits for, so that its exit trap ends only those, by PID. A script adds a PID with
# LIVE_PIDS[$pid]=1 when it starts one and unsets it once it has waited for it.
declare -A LIVE_PIDS=()

stop_live_processes() { # TERM, up to 3 s to exit, then KILL; each one waited for
    local pid i
    for pid in "${!LIVE_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${!LIVE_PIDS[@]}"; do
        for ((i = 0; i < 30; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        unset 'LIVE_PIDS[$pid]'
    done
}
