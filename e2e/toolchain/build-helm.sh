#!/usr/bin/env bash
# Build helm v3 from the Go module proxy into $E2E_BIN, stamped like helm's
# own Makefile (unstamped builds print a bare "v3.x" version), with the
# offline Capabilities.KubeVersion (helm template/lint) set to our K8S minor.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

if [ -x "$E2E_BIN/helm" ]; then e2e_log "helm v$HELM_VERSION: already built in $E2E_BIN"; exit 0; fi
e2e_go_env
start=$(date +%s)
MAJOR=${HELM_VERSION%%.*}
KMINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
P=helm.sh/helm/v$MAJOR
LD="-s -w -X $P/internal/version.version=v$HELM_VERSION -X $P/internal/version.gitTreeState=clean"
LD+=" -X $P/pkg/chartutil.k8sVersionMajor=1 -X $P/pkg/chartutil.k8sVersionMinor=$KMINOR"
LD+=" -X $P/pkg/lint/rules.k8sVersionMajor=1 -X $P/pkg/lint/rules.k8sVersionMinor=$KMINOR"

tmp=$(mktemp -d "$E2E_BIN/.helm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
e2e_log "helm: building helm v$HELM_VERSION"
(cd "$tmp" && GOBIN=$tmp go install -trimpath -ldflags "$LD" "$P/cmd/helm@v$HELM_VERSION")
mv "$tmp/helm" "$E2E_BIN/helm"
"$E2E_BIN/helm" version
e2e_log "helm: done in $(( $(date +%s) - start ))s"
