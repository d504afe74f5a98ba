#!/usr/bin/env bash
# The project's test command (README, .ci/run). On a fresh Debian machine with Rust installed it
# installs what the tests need, then runs: format and lint checks, every unit and integration
# test (real packets on loopback and between two network namespaces it creates), the benches'
# build, and the deployment validation. Run as root: the tests create network namespaces and
# drop CAP_IPC_LOCK to check the memlock error.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(gcc libc6-dev)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v ss >/dev/null || need_apt+=(iproute2)
command -v prlimit >/dev/null || need_apt+=(util-linux)
command -v setpriv >/dev/null || need_apt+=(util-linux)
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v curl >/dev/null || need_apt+=(curl)
command -v nft >/dev/null || need_apt+=(nftables)
command -v iptables >/dev/null || need_apt+=(iptables)
[ -e /usr/include/libnetfilter_queue/libnetfilter_queue.h ] || need_apt+=(libnetfilter-queue-dev)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "== installing: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# Prometheus (the Debian package) starts a system service on install; the tests run their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  systemctl stop prometheus || true
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --release --all-targets -- -D warnings
echo "== cargo test --release"
cargo test --release -- --test-threads=2
echo "== control-message decoder: 10 M random and structured inputs"
RINGBLAST_FUZZ_CASES=10000000 cargo test --release --lib control::tests::fuzz -- --nocapture
echo "== header, cmsg, unit and config-file parsers: 10 M random and structured inputs each"
RINGBLAST_FUZZ_CASES=10000000 cargo test --release --lib -- proto::fuzz sink::cmsg::fuzz config::fuzz --nocapture --test-threads=2
# A debug build, so overflow checks and debug_asserts run: every unit test (the parser fuzz loops
# at their default 100 000 cases included), the CLI and environment-failure tests, and each send
# operation and receive mode with real packets. The unpaced pair tests stay release-only: a debug
# sink cannot keep up with an unpaced sender, and those tests measure a release build's behaviour.
echo "== cargo test (debug build): unit tests, CLI, environment failures, send ops and rx modes"
cargo test --lib --test cli --test envfail --test ops -- --test-threads=2
echo "== soak: separate sender and sink, 3 minutes at 20 kpps (RSS, fds, threads, counts)"
bash scripts/soak.sh 3m 20kpps
echo "== cargo bench --no-run"
cargo bench --no-run --quiet
echo "== exporter against a real Prometheus (and every dashboard query)"
python3 tests/prometheus/e2e.py target/release/ringblast
echo "== deployment files"
RINGBLAST_BIN="$PWD/target/release/ringblast" bash scripts/validate-deploy.sh
echo "== all tests passed"
