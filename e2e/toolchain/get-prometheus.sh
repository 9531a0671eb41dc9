#!/usr/bin/env bash
# Fetch Prometheus and promtool from Debian's `prometheus` package and extract
# them under $PROMETHEUS_DIR/bin. Nothing is installed: the package's
# postinst would start a daemon listening on all interfaces.
# The last line of output is the folder holding `prometheus` and `promtool`.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

BIN=$PROMETHEUS_DIR/bin
if [ -x "$BIN/prometheus" ] && [ -x "$BIN/promtool" ]; then
  e2e_log "prometheus $PROMETHEUS_DEB_VERSION: already extracted"
  echo "$BIN"; exit 0
fi
start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
e2e_apt_extract prometheus "$PROMETHEUS_DEB_VERSION" PROMETHEUS_DEB_VERSION "$tmp/x"
mkdir -p "$BIN.tmp"
install -m 0755 "$tmp/x/usr/bin/prometheus" "$tmp/x/usr/bin/promtool" "$BIN.tmp/"
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
"$BIN/prometheus" --version 2>&1 | head -n 1 >&2
e2e_log "prometheus: extracted in $(( $(date +%s) - start ))s"
echo "$BIN"
