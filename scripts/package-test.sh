#!/usr/bin/env bash
# Builds the Debian package (cargo-deb), installs it with dpkg -i on this machine, checks what it
# installed (the binary's --version, one short loopback `ringblast pair`, the completions and man
# pages, the Wireshark dissector (loaded by tshark when tshark is installed), `systemd-analyze
# verify` on the installed units), then removes it with dpkg -r.
# Called by scripts/test.sh; run as root. Installs cargo-deb with `cargo install` when missing,
# and systemd (for systemd-analyze) and tshark with apt-get when missing.
#
# Usage: scripts/package-test.sh (RINGBLAST_DEB_OUT=DIR keeps the package there, for the scripts
# that test it further: scripts/test.sh hands it to units-test.sh and walkthrough-test.sh)
# Exits 0 when every check passes, 1 on a failed check, 3 when it cannot run here.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { printf 'package-test: %s\n' "$*" >&2; exit "${2:-1}"; }
step() { printf '== package: %s\n' "$*"; }

[[ $(id -u) == 0 ]] || die "dpkg -i needs root: run it as root or through scripts/test.sh (which uses sudo)" 3
command -v dpkg >/dev/null || die "no dpkg: the package test needs a Debian-based machine" 3
if dpkg-query -W -f='${Status}' ringblast 2>/dev/null | grep -q 'install ok installed'; then
  die "a ringblast package is already installed; remove it first (dpkg -r ringblast)" 3
fi
if ! command -v systemd-analyze >/dev/null; then
  step "installing systemd (for systemd-analyze)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
if ! command -v tshark >/dev/null; then
  step "installing tshark (to load the installed dissector)"
  apt-get update -qq
  # noninteractive: tshark's install asks whether non-root users may capture (the default, no, is kept).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tshark >/dev/null
fi
if ! cargo deb --version >/dev/null 2>&1; then
  step "cargo install cargo-deb"
  cargo install --locked cargo-deb
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
work=$(mktemp -d)
installed=no
cleanup() {
  if [[ $installed == yes ]]; then dpkg -r ringblast >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step "build ($(cargo deb --version))"
cargo build --release --quiet
bash scripts/build-assets.sh target/release/ringblast
deb=$(cargo deb --no-build --quiet --output "${RINGBLAST_DEB_OUT:-$work}/")
deb=$(printf '%s\n' "$deb" | tail -n1)
[[ -f $deb ]] || die "cargo deb printed no package path (got: $deb)"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Depends\|Installed-Size\):/  \1:/p'

step "dpkg -i $(basename "$deb")"
installed=yes
dpkg -i "$deb" >/dev/null

expected=(
  /usr/bin/ringblast
  /usr/lib/systemd/system/ringblast-sink.service
  /usr/lib/systemd/system/ringblast-send@.service
  /usr/share/bash-completion/completions/ringblast
  /usr/share/zsh/vendor-completions/_ringblast
  /usr/share/fish/vendor_completions.d/ringblast.fish
  /usr/share/man/man1/ringblast.1.gz
  /usr/share/man/man1/ringblast-send.1.gz
  /usr/share/man/man1/ringblast-sink.1.gz
  /usr/share/man/man1/ringblast-pair.1.gz
  /usr/share/man/man1/ringblast-topo.1.gz
  /usr/share/man/man1/ringblast-report.1.gz
  /usr/share/man/man1/ringblast-generate.1.gz
  /usr/share/ringblast/config/sink.toml
  /usr/share/ringblast/config/send-example.toml
  /usr/share/doc/ringblast/README.md
  /usr/share/doc/ringblast/docs/traffic.md
  /usr/share/doc/ringblast/docs/metrics.md
  /usr/share/ringblast/dashboards/ringblast.json
  /usr/share/ringblast/schema/ringblast-1.schema.json
  /usr/share/ringblast/prometheus/rules.yml
  /usr/share/ringblast/prometheus/prometheus.yml
  /usr/lib/x86_64-linux-gnu/wireshark/plugins/ringblast.lua
)
listed=$(dpkg -L ringblast)
for path in "${expected[@]}"; do
  grep -qx "$path" <<<"$listed" || die "the package does not list $path"
  [[ -s $path ]] || die "$path is missing or empty after dpkg -i"
done
cmp -s deploy/prometheus/rules.yml /usr/share/ringblast/prometheus/rules.yml || die "installed rules.yml differs from deploy/"
cmp -s docs/schema/ringblast-1.schema.json /usr/share/ringblast/schema/ringblast-1.schema.json ||
  die "installed ringblast-1.schema.json differs from docs/schema/"

step "installed binary"
got=$(/usr/bin/ringblast --version)
[[ $got == "ringblast $version" ]] || die "/usr/bin/ringblast --version printed '$got', expected 'ringblast $version'"
echo "  $got"
/usr/bin/ringblast pair --duration 1s --rate 20kpps --no-metrics --json --interval 0 >"$work/pair.json" 2>"$work/pair.err" ||
  { cat "$work/pair.err"; die "/usr/bin/ringblast pair failed"; }
python3 - "$work/pair.json" /usr/share/ringblast/schema/ringblast-1.schema.json <<'PY' || die "the installed binary's pair run did not deliver or broke the installed JSON Schema"
import json, sys
import jsonschema
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
schema = jsonschema.Draft202012Validator(json.load(open(sys.argv[2])))
for r in rows:
    schema.validate(r)
s = {r["role"]: r for r in rows if r.get("type") == "summary"}
tx, rx = s["send"]["tx_packets"], s["sink"]["rx_packets"]
assert tx > 0 and rx == tx and s["sink"]["rx_lost"] == 0, (tx, rx, s["sink"]["rx_lost"])
print(f"  pair: {tx} packets sent, {rx} received, 0 lost; {len(rows)} JSON lines follow the installed schema")
PY

step "completions and man pages"
bash -c 'source /usr/share/bash-completion/completions/ringblast && complete -p ringblast' >/dev/null ||
  die "the installed bash completion does not register for ringblast"
for page in ringblast-send ringblast-sink ringblast-pair; do
  zcat "/usr/share/man/man1/$page.1.gz" | grep -q '^\\fB\\-\\-queues\\fR' || die "$page(1) does not document --queues"
done
zcat /usr/share/man/man1/ringblast-send.1.gz | grep -q '^\\fB\\-\\-to\\fR' || die "ringblast-send(1) does not document --to"

step "Wireshark dissector"
cmp -s deploy/wireshark/ringblast.lua /usr/lib/x86_64-linux-gnu/wireshark/plugins/ringblast.lua ||
  die "the installed dissector differs from deploy/wireshark/ringblast.lua"
# tshark loads every Lua file in its global plugin folder: the installed dissector registers.
protocols=$(tshark -G protocols 2>/dev/null)
grep -qx 'ringblast traffic'$'\t''RINGBLAST'$'\t''ringblast' <<<"$protocols" ||
  die "tshark did not load /usr/lib/x86_64-linux-gnu/wireshark/plugins/ringblast.lua"
echo "  tshark $(tshark --version 2>/dev/null | sed -n '1s/^TShark (Wireshark) \([^ ]*\).*/\1/p') loads it from its global Lua plugin folder"

step "systemd-analyze verify (installed units)"
# First prove that verify can fail here: a unit whose ExecStart does not exist must be reported.
# (In some sandboxes verify passes everything; then the real check below would prove nothing.)
mkdir "$work/broken"
sed 's|^ExecStart=/usr/bin/ringblast |ExecStart=/usr/bin/ringblast-missing |' \
  /usr/lib/systemd/system/ringblast-sink.service >"$work/broken/ringblast-sink.service"
if systemd-analyze verify --man=no "$work/broken/ringblast-sink.service" >/dev/null 2>&1; then
  die "systemd-analyze verify accepts a unit with a missing ExecStart binary here; it cannot check the units" 3
fi
# The installed units by name, from the system unit path; the template through an instance
# (verifying a bare template prints nothing even for a broken line).
out=$(systemd-analyze verify --man=no ringblast-sink.service ringblast-send@example.service 2>&1) ||
  { printf '%s\n' "$out"; die "systemd-analyze verify failed on the installed units"; }
[[ -z $out ]] || { printf '%s\n' "$out"; die "systemd-analyze verify complained about the installed units"; }
echo "  ringblast-sink.service, ringblast-send@example.service: no findings"

step "dpkg -r ringblast"
dpkg -r ringblast >/dev/null
installed=no
for path in "${expected[@]}"; do
  [[ ! -e $path ]] || die "$path is still there after dpkg -r"
done
echo "== package: all checks passed"
