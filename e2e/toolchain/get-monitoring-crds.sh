#!/usr/bin/env bash
# Copy prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs out of its Go module (downloaded
# through the Go module proxy, no GitHub) into $MONITORING_CRDS_DIR. The chart's tests apply them to the local
# cluster so `kubectl apply --dry-run=server` validates the chart's monitoring objects against the real schemas.
# The last line of output is the folder.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

KINDS=(servicemonitors podmonitors prometheusrules)
if [ -f "$MONITORING_CRDS_DIR/monitoring.coreos.com_prometheusrules.yaml" ]; then
  e2e_log "monitoring CRDs v$PROMETHEUS_OPERATOR_VERSION: already in $MONITORING_CRDS_DIR"
  echo "$MONITORING_CRDS_DIR"; exit 0
fi
e2e_go_env
dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@v$PROMETHEUS_OPERATOR_VERSION" \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if "Error" in d else print(d["Dir"])')
mkdir -p "$MONITORING_CRDS_DIR.tmp"
for kind in "${KINDS[@]}"; do
  install -m 0644 "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$MONITORING_CRDS_DIR.tmp/"
done
rm -rf "$MONITORING_CRDS_DIR" && mv "$MONITORING_CRDS_DIR.tmp" "$MONITORING_CRDS_DIR"
e2e_log "monitoring CRDs v$PROMETHEUS_OPERATOR_VERSION: copied to $MONITORING_CRDS_DIR"
echo "$MONITORING_CRDS_DIR"
