#!/usr/bin/env bash
# Fetch jemalloc from Debian's `libjemalloc2` package and extract the shared library to
# $JEMALLOC_DIR/libjemalloc.so.2, the allocator the operator's image preloads (see the Dockerfile and the chart).
# Nothing is installed. The last line of output is the library's path.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

LIB=$JEMALLOC_DIR/libjemalloc.so.2
if [ -f "$LIB" ]; then
  e2e_log "jemalloc $JEMALLOC_DEB_VERSION: already extracted"
  echo "$LIB"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
e2e_apt_extract libjemalloc2 "$JEMALLOC_DEB_VERSION" JEMALLOC_DEB_VERSION "$tmp/x"
found=$(find "$tmp/x" -name libjemalloc.so.2 | head -n 1)
[ -n "$found" ] || { echo "jemalloc: libjemalloc.so.2 not in the package" >&2; exit 1; }
mkdir -p "$JEMALLOC_DIR"
install -m 0644 "$(readlink -f "$found")" "$LIB.tmp"
mv "$LIB.tmp" "$LIB"
e2e_log "jemalloc $JEMALLOC_DEB_VERSION: extracted to $LIB"
echo "$LIB"
