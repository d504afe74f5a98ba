#!/usr/bin/env bash
# The project's test command (README, .ci/run). On a fresh Debian machine with Rust installed it
# installs what the tests need, then runs: format and lint checks, every unit and integration
# test (real packets on loopback and between two network namespaces it creates), the lab (QEMU
# guests on Debian 12's kernel: two NUMA nodes, two hosts; docs/lab.md), the benches'
# build, the deployment validation, and the Debian package (installed here, and under systemd in a
# container). Run as root: the tests create network namespaces and
# drop CAP_IPC_LOCK to check the memlock error, and the package test installs a .deb.
#
# As root it runs directly (a fresh root Debian machine has no sudo). As another user it runs
# itself again under sudo, handing on PATH, CARGO_HOME and RUSTUP_HOME so that the user's own
# cargo and rustup (e.g. in ~/.cargo/bin) are found, and gives the user back the files root
# created in target/ and in those two homes. Without root or sudo it stops with one line (exit 3).
set -euo pipefail
script=$(realpath "${BASH_SOURCE[0]}")
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "test.sh: needs root (network namespaces, dpkg -i) and sudo is not installed: run it as root" >&2
    exit 3
  fi
  # `env` on the command line sets them whatever sudoers says (env_reset, env_keep,
  # secure_path); sudo resets HOME to root's, so the user's home is passed through the two.
  exec sudo env "PATH=$PATH" "CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}" \
    "RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}" bash "$script" "$@"
fi
cd "$(dirname "$script")/.."
# A user's PATH (handed on under sudo) lacks the sbin directories where nft, iptables, ldconfig
# and start-stop-daemon live; the tests and dpkg need them as root does.
for dir in /usr/local/sbin /usr/sbin /sbin; do
  case ":$PATH:" in *":$dir:"*) ;; *) PATH="$PATH:$dir" ;; esac
done
export PATH
# The tests hold more than a thousand sockets at once (1000 idle scrapes of one exporter, 1000 TCP
# connections over 2 queues); a login's soft limit of 1024 open files, which sudo hands on from the
# user, made them fail with EMFILE. The hard limit is the machine's word, so take all of it.
ulimit -Sn "$(ulimit -Hn)"

# Under sudo: hand the files root creates in the invoking user's directories back to that user,
# so that their own cargo can still write there afterwards. Only directories the user owns (for
# target/, which root may have created, the checkout), and only files owned by root in them.
give_back() {
  local dir owner
  for dir in target "${CARGO_HOME:-}" "${RUSTUP_HOME:-}"; do
    owner=$dir
    [ "$dir" = target ] && owner=.
    if [ -n "$dir" ] && [ -d "$dir" ] && [ "$(stat -c %u "$owner")" = "$SUDO_UID" ]; then
      chown -R --from=0 "$SUDO_UID:${SUDO_GID:?}" "$dir" || echo "test.sh: could not give $dir back to uid $SUDO_UID" >&2
    fi
  done
}
if [ -n "${SUDO_UID:-}" ] && [ "$SUDO_UID" != 0 ]; then
  trap give_back EXIT
  # bash runs the EXIT trap on a signal only when that signal is trapped: Ctrl-C gives back too.
  trap 'exit 130' INT
  trap 'exit 143' TERM
fi
echo "== as $(id -un)${SUDO_USER:+ (via sudo from $SUDO_USER)}; cargo: $(command -v cargo || echo none)"
command -v cargo >/dev/null || { echo "test.sh: cargo is not on PATH ($PATH): install Rust (rustup)" >&2; exit 3; }

need_apt=()
command -v cc >/dev/null || need_apt+=(gcc libc6-dev)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v ss >/dev/null || need_apt+=(iproute2)
command -v prlimit >/dev/null || need_apt+=(util-linux)
command -v setpriv >/dev/null || need_apt+=(util-linux)
command -v promtool >/dev/null || need_apt+=(prometheus)
command -v curl >/dev/null || need_apt+=(curl)
python3 -c 'import jsonschema' 2>/dev/null || need_apt+=(python3-jsonschema)
command -v nft >/dev/null || need_apt+=(nftables)
command -v tshark >/dev/null || need_apt+=(tshark)
command -v chromium >/dev/null || need_apt+=(chromium)
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

# The tests build about fifty test binaries, and the release profile's thin LTO with one codegen
# unit made each take a minute here (jsonschema and serde_json in tests/common go into every
# one). The test builds therefore skip cross-crate LTO and debug info and use 16 codegen units:
# the same code at the same optimisation level, built in a fraction of the time. The package
# stage builds the .deb with the release profile as it ships, and the package, units and
# walkthrough stages test that binary.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=0
shipped_profile=(env -u CARGO_PROFILE_RELEASE_LTO -u CARGO_PROFILE_RELEASE_CODEGEN_UNITS -u CARGO_PROFILE_RELEASE_DEBUG)

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --release --all-targets -- -D warnings
echo "== cargo test --release (root-only tests marked #[ignore = \"needs root: ...\"] included)"
cargo test --release -- --include-ignored --test-threads=2
echo "== control-message decoder: 10 M random and structured inputs"
RINGBLAST_FUZZ_CASES=10000000 cargo test --release --lib control::tests::fuzz -- --nocapture
echo "== header (full and compact), TCP record stream, cmsg and unit parsers: 10 M random and structured inputs each; the config file 1 M"
RINGBLAST_FUZZ_CASES=10000000 cargo test --release --lib -- proto::fuzz net::cmsg::fuzz cli::fuzz --nocapture --test-threads=2
# The exact-count tests again with the CPUs busy: two busy loops of this script's own (bounded,
# ended by PID) beside the send-op and receive-mode pairs, the four senders into one sink and the
# kernel-drop faults. Their counts must still equal the kernel's: a sink that cannot keep up
# shows its kernel's drops as kernel drops, equal to RcvbufErrors, never as loss.
echo "== exact counts on a busy host: two busy loops beside the exact-count tests"
busy_loops=()
for _ in 1 2; do
  timeout 900 sh -c 'while :; do :; done' &
  busy_loops+=("$!")
done
busy_status=0
cargo test --release --test ops --test pairing -- --include-ignored --test-threads=1 || busy_status=$?
if [ "$busy_status" -eq 0 ]; then
  cargo test --release --test faults -- --include-ignored --test-threads=1 kernel:: || busy_status=$?
fi
kill "${busy_loops[@]}" 2>/dev/null || true
wait "${busy_loops[@]}" 2>/dev/null || true
[ "$busy_status" -eq 0 ] || exit "$busy_status"
# A debug build, so overflow checks and debug_asserts run: every unit test (the parser fuzz loops
# at their default 100 000 cases included), the CLI and environment-failure tests, and each send
# operation and receive mode with real packets. The unpaced pair tests stay release-only: a debug
# sink cannot keep up with an unpaced sender, and those tests measure a release build's behaviour.
echo "== cargo test (debug build): unit tests, CLI, environment failures, send ops and rx modes"
cargo test --lib --test cli --test envfail --test ops -- --test-threads=2 --include-ignored
echo "== lab: Debian 12's 6.1 kernel under QEMU TCG (a two-node guest, two guests as two hosts) and this kernel (docs/lab.md)"
bash scripts/lab.sh
echo "== soak: separate sender and sink, 3 minutes at 20 kpps (RSS, fds, threads, counts)"
bash scripts/soak.sh 3m 20kpps
echo "== cargo bench --no-run"
cargo bench --no-run --quiet
echo "== exporter against a real Prometheus (and every dashboard query)"
python3 tests/prometheus/e2e.py target/release/ringblast
echo "== deployment files"
RINGBLAST_BIN="$PWD/target/release/ringblast" bash scripts/validate-deploy.sh
echo "== deployments for real under podman (compose, bridge stand-in, kube pod specs), scraped by Prometheus"
RINGBLAST_BIN="$PWD/target/release/ringblast" bash scripts/deploy-smoke.sh
echo "== Debian package: build, dpkg -i, run, systemd-analyze verify, dpkg -r"
# The package is built once here and kept for the two scripts after it.
rm -rf target/test-deb && mkdir -p target/test-deb
RINGBLAST_DEB_OUT="$PWD/target/test-deb" "${shipped_profile[@]}" bash scripts/package-test.sh
deb=$(echo "$PWD"/target/test-deb/ringblast_*.deb)
echo "== Debian package under systemd: the units start, count against the kernel, restart, stop (podman, systemd as PID 1)"
bash scripts/units-test.sh "$deb"
echo "== deploy/README.md's walkthrough as written, three network namespaces as the hosts"
bash scripts/walkthrough-test.sh "$deb"
echo "== all tests passed"
