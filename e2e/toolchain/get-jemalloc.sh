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
chmod 755 "$tmp"   # apt's _apt sandbox user must be able to write here
cd "$tmp"
if ! apt-get download "libjemalloc2=$JEMALLOC_DEB_VERSION" >apt.log 2>&1; then
  e2e_log "jemalloc: not in the apt lists yet, running apt-get update"
  apt-get update -qq >/dev/null 2>&1 || e2e_log "jemalloc: apt-get update failed (not root?)"
  apt-get download "libjemalloc2=$JEMALLOC_DEB_VERSION" >apt.log 2>&1 || {
    cat apt.log >&2
    echo "jemalloc: Debian no longer serves libjemalloc2 $JEMALLOC_DEB_VERSION;" \
         "available: $(apt-cache madison libjemalloc2 | awk '{print $3}' | xargs)." \
         "Bump JEMALLOC_DEB_VERSION in e2e/toolchain/versions.sh." >&2
    exit 1
  }
fi
dpkg-deb -x libjemalloc2_*.deb x
found=$(find x -name libjemalloc.so.2 | head -n 1)
[ -n "$found" ] || { echo "jemalloc: libjemalloc.so.2 not in the package" >&2; exit 1; }
mkdir -p "$JEMALLOC_DIR"
install -m 0644 "$(readlink -f "$found")" "$LIB.tmp"
mv "$LIB.tmp" "$LIB"
e2e_log "jemalloc $JEMALLOC_DEB_VERSION: extracted to $LIB"
echo "$LIB"
