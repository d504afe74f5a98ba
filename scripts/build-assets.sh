#!/usr/bin/env bash
# Generates what the Debian package ships besides the binary, into target/assets/ (the paths
# [package.metadata.deb] in Cargo.toml names): shell completions and man pages from the clap
# definitions and the Wireshark dissector (`ringblast generate`), and the systemd units with ExecStart pointing at the
# package's /usr/bin/ringblast instead of /usr/local/bin (the path for a hand install).
#
# Usage: scripts/build-assets.sh [BINARY]   (default target/release/ringblast, built already)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=${1:-target/release/ringblast}
out=target/assets
[[ -x $bin ]] || { echo "build-assets: no binary at $bin; run cargo build --release first" >&2; exit 2; }

rm -rf "$out"
mkdir -p "$out/completions" "$out/man" "$out/systemd" "$out/wireshark"
"$bin" generate complete-bash >"$out/completions/ringblast.bash"
"$bin" generate complete-zsh >"$out/completions/_ringblast"
"$bin" generate complete-fish >"$out/completions/ringblast.fish"
"$bin" generate man --dir "$out/man" >/dev/null
"$bin" generate wireshark-dissector --dir "$out/wireshark" >/dev/null
# Debian ships man pages compressed; -n keeps the archive reproducible (no name or time stamp).
gzip -9n "$out"/man/*.1

for unit in deploy/systemd/*.service; do
  sed 's|^\(ExecStart=\)/usr/local/bin/ringblast |\1/usr/bin/ringblast |' "$unit" >"$out/systemd/${unit##*/}"
  grep -q '^ExecStart=/usr/bin/ringblast ' "$out/systemd/${unit##*/}" ||
    { echo "build-assets: $unit has no ExecStart=/usr/local/bin/ringblast line to rewrite" >&2; exit 1; }
done
echo "build-assets: $(find "$out" -type f | wc -l) files in $out"
