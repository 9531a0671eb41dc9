#!/usr/bin/env bash
# Build etcd (server) from the Go module proxy into $E2E_BIN.
#
# go.etcd.io/etcd/server/v3's go.mod has replace directives, so
# `go install ...@vX` is refused; a wrapper module (e2e/toolchain/etcd/) that
# requires it works because every etcd module is published. It is kept apart
# from the k8s wrapper so MVS does not bump grpc/otel for both.
# Debian's etcd-server (3.4.23) is too old for kube-apiserver >= 1.34
# (RequestWatchProgress needs etcd >= 3.4.31/3.5.13).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

if [ -x "$E2E_BIN/etcd" ]; then e2e_log "etcd v$ETCD_VERSION: already built in $E2E_BIN"; exit 0; fi
e2e_go_env
MOD=$HERE/etcd
start=$(date +%s)

if ! grep -qE "go.etcd.io/etcd/server/v3 v$ETCD_VERSION\$" "$MOD/go.mod" 2>/dev/null; then
  e2e_log "etcd: generating wrapper module for go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
  w=$(mktemp -d)
  (
    cd "$w"
    go mod init specpilot.invalid/e2e-etcd >/dev/null 2>&1
    go mod edit -require="go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
    # Same `go` (and `godebug`) lines as etcd's own server module, which is the
    # main module of upstream builds: they set the binary's GODEBUG defaults.
    smod=$(go mod download -json "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
    go mod edit -json "$smod" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("-go=" + d["Go"])
for g in d.get("GoDebug") or []:
    print("-godebug=%s=%s" % (g["Key"], g["Value"]))
' | xargs go mod edit
    cp "$MOD/tools.go" .
    go mod tidy
  )
  cp "$w/go.mod" "$w/go.sum" "$MOD/"
  rm -rf "$w"
  e2e_log "etcd: wrote $MOD/go.mod and go.sum (commit them)"
fi

tmp=$(mktemp -d "$E2E_BIN/.etcd.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$MOD"
e2e_log "etcd: building etcd v$ETCD_VERSION"
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
mv "$tmp/etcd" "$E2E_BIN/etcd"
"$E2E_BIN/etcd" --version
e2e_log "etcd: done in $(( $(date +%s) - start ))s"
