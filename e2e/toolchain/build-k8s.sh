#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
# from the Go module proxy into $E2E_BIN, version-stamped like upstream.
#
# `go install k8s.io/kubernetes/cmd/...@vX` is refused (k/k's go.mod replaces
# every staging module with a local path), so we build through a wrapper
# module (e2e/toolchain/k8s/) that requires k8s.io/kubernetes and replaces
# each staging module (k8s.io/<m> v0.0.0 in k/k's go.mod) with its published
# v0.<minor>.<patch>. The wrapper is generated from k/k's own go.mod whenever
# it does not match K8S_VERSION; commit the result for reproducible builds.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
have_all() { local b; for b in "${BINS[@]}"; do [ -x "$E2E_BIN/$b" ] || return 1; done; }
if have_all; then e2e_log "k8s v$K8S_VERSION: already built in $E2E_BIN"; exit 0; fi

e2e_go_env
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
PATCH=${K8S_VERSION##*.}
MOD=$HERE/k8s
start=$(date +%s)

generate() {
  e2e_log "k8s: generating wrapper module for k8s.io/kubernetes v$K8S_VERSION"
  local w kmod
  w=$(mktemp -d)
  trap 'rm -rf "$w"' RETURN
  kmod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  (
    cd "$w"
    go mod init specpilot.invalid/e2e-k8s >/dev/null 2>&1
    # Same `go` and `godebug` lines as k/k, so the binaries behave like upstream's.
    go mod edit -json "$kmod" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print("-go=" + d["Go"])
for g in d.get("GoDebug") or []:
    print("-godebug=%s=%s" % (g["Key"], g["Value"]))
for r in d.get("Require") or []:
    if r["Path"].startswith("k8s.io/") and r["Version"] == "v0.0.0":
        print("-replace=%s=%s@v0.'"$MINOR.$PATCH"'" % (r["Path"], r["Path"]))
' | xargs go mod edit
    go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
    cp "$MOD/tools.go" .
    go mod tidy
  )
  cp "$w/go.mod" "$w/go.sum" "$MOD/"
  e2e_log "k8s: wrote $MOD/go.mod and go.sum (commit them)"
}

if ! grep -q "^require k8s.io/kubernetes v$K8S_VERSION\$" "$MOD/go.mod" 2>/dev/null &&
   ! grep -qE "^[[:space:]]+k8s.io/kubernetes v$K8S_VERSION\$" "$MOD/go.mod" 2>/dev/null; then
  generate
fi

# Stamp the version exactly as k/k's hack/lib/version.sh does, on both
# component-base/version and client-go/pkg/version: unstamped builds report
# v0.0.0-master+$Format:%H$, which breaks helm's kubeVersion checks.
# The module proxy knows the release time (a reproducible buildDate) and, for
# newer releases, the commit; an unknown commit is left empty rather than
# k/k's placeholder "$Format:%H$".
read -r build_date commit < <(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c '
import json, sys
info = json.load(open(json.load(sys.stdin)["Info"]))
print(info.get("Time") or "1970-01-01T00:00:00Z", (info.get("Origin") or {}).get("Hash") or "-")')
[ "$commit" = - ] && commit=""
V=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  V+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
  V+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date -X $pkg.gitCommit=$commit"
done

tmp=$(mktemp -d "$E2E_BIN/.k8s.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$MOD"
for b in "${BINS[@]}"; do
  [ -x "$E2E_BIN/$b" ] && continue
  t0=$(date +%s)
  e2e_log "k8s: building $b v$K8S_VERSION"
  go build -trimpath -ldflags "-s -w$V" -o "$tmp/$b" "k8s.io/kubernetes/cmd/$b"
  mv "$tmp/$b" "$E2E_BIN/$b"
  e2e_log "k8s: built $b in $(( $(date +%s) - t0 ))s"
done
"$E2E_BIN/kube-apiserver" --version
"$E2E_BIN/kubectl" version --client
e2e_log "k8s: done in $(( $(date +%s) - start ))s"
