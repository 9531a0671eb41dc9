#!/usr/bin/env bash
# Build Prometheus 3 with only the Kubernetes service discovery (tags remove_all_sd,enable_kubernetes_sd) from the Go
# module proxy into $PROMETHEUS3_DIR. Debian's Prometheus (get-prometheus.sh) has no kubernetes_sd_configs, which
# tests/cluster/test_discovery.py needs. The module's go.mod has replace/exclude directives that a plain
# `go install` rejects, so a wrapper module copies them. No web UI assets (the
# builtinassets tag needs npm): the API, /-/ready and scraping work. Last output line: the folder.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

if [ -x "$PROMETHEUS3_DIR/prometheus" ]; then
  e2e_log "prometheus $PROMETHEUS3_VERSION (k8s SD): already built in $PROMETHEUS3_DIR"
  echo "$PROMETHEUS3_DIR"; exit 0
fi
e2e_go_env
start=$(date +%s)
MINOR=$(echo "$PROMETHEUS3_VERSION" | cut -d. -f2); PATCH=$(echo "$PROMETHEUS3_VERSION" | cut -d. -f3)
MODVER=$(printf 'v0.3%02d.%d' "$MINOR" "$PATCH")
MOD=github.com/prometheus/prometheus
TAGS=remove_all_sd,enable_kubernetes_sd
tmp=$(mktemp -d "${TMPDIR:-/tmp}/specpilot-prom3.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
go mod init specpilot.dev/prometheus-build >/dev/null 2>&1
gomod=$(go mod download -json "$MOD@$MODVER" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if "Error" in d else print(d["GoMod"])')
go mod edit -json "$gomod" | python3 -c '
import json, shlex, sys
m = json.load(sys.stdin)
for r in m.get("Replace") or []:
    old = r["Old"]["Path"] + ("@" + r["Old"]["Version"] if r["Old"].get("Version") else "")
    new = r["New"]["Path"] + ("@" + r["New"]["Version"] if r["New"].get("Version") else "")
    print("-replace=" + shlex.quote(old + "=" + new))
for e in m.get("Exclude") or []:
    print("-exclude=" + shlex.quote(e["Path"] + "@" + e["Version"]))
go = m.get("Go")
if go:
    print("-go=" + (go if isinstance(go, str) else go["Version"]))
' | xargs go mod edit
GOFLAGS="$GOFLAGS -tags=$TAGS" go get "$MOD/cmd/prometheus@$MODVER"
mkdir -p "$PROMETHEUS3_DIR.tmp"
e2e_log "prometheus $PROMETHEUS3_VERSION: building with -tags $TAGS"
go build -tags "$TAGS" -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS3_VERSION" \
  -o "$PROMETHEUS3_DIR.tmp/prometheus" "$MOD/cmd/prometheus"
rm -rf "$PROMETHEUS3_DIR" && mv "$PROMETHEUS3_DIR.tmp" "$PROMETHEUS3_DIR"
"$PROMETHEUS3_DIR/prometheus" --version 2>&1 | head -n 1 >&2
e2e_log "prometheus $PROMETHEUS3_VERSION (k8s SD): built in $(( $(date +%s) - start ))s"
echo "$PROMETHEUS3_DIR"
