#!/usr/bin/env bash
# Build kwok (fake kubelet: nodes and pods that become Running/Ready) from the
# Go module proxy into $E2E_BIN, and copy its upstream Stage definitions to
# $E2E_BIN/kwok-stages (standalone kwok fails with "no stages found" without
# them; kwokctl normally injects them).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

STAGES=(node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
        pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)
have_all() {
  [ -x "$E2E_BIN/kwok" ] || return 1
  local s; for s in "${STAGES[@]}"; do [ -f "$E2E_BIN/kwok-stages/$s" ] || return 1; done
}
if have_all; then e2e_log "kwok v$KWOK_VERSION: already built in $E2E_BIN"; exit 0; fi
e2e_go_env
start=$(date +%s)

# kwok's go.mod has no replace/exclude directives, so `go install pkg@version`
# works (and is verified against the checksum database). Its version is a
# constant in sigs.k8s.io/kwok/pkg/consts, nothing to stamp.
tmp=$(mktemp -d "$E2E_BIN/.kwok.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
e2e_log "kwok: building kwok v$KWOK_VERSION"
(cd "$tmp" && GOBIN=$tmp go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION")

src=$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')/kustomize/stage
rm -rf "$E2E_BIN/kwok-stages"
for s in "${STAGES[@]}"; do
  install -D -m 0644 "$src/$s" "$E2E_BIN/kwok-stages/$s"
done
mv "$tmp/kwok" "$E2E_BIN/kwok"
"$E2E_BIN/kwok" --version
e2e_log "kwok: done in $(( $(date +%s) - start ))s"
