#!/usr/bin/env bash
# Build (or reuse) the whole e2e toolchain: kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, kwok (+ stages), helm, prometheus-operator's CRDs, Prometheus 3 with Kubernetes
# discovery from the Go module proxy, prometheus/promtool 2.42 and jemalloc (the operator image's allocator) from
# Debian. Idempotent: each step skips what already exists
# in $E2E_BIN (a folder keyed by every pinned version, see versions.sh).
# The last line of output is
#   export E2E_BIN=<dir> PROMETHEUS_BIN=<dir> PATH=<E2E_BIN>:<PROMETHEUS_BIN>:$PATH
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
. "$HERE/versions.sh"

mkdir -p "$E2E_BIN"
# One build at a time per binary folder (CI and a developer's pytest may race).
exec 8>"$E2E_BIN.lock"
flock -w 5400 8 || { echo "build-all: timed out waiting for $E2E_BIN.lock" >&2; exit 1; }

total0=$(date +%s)
summary=()
for step in build-k8s build-etcd build-kwok build-helm get-prometheus get-jemalloc get-monitoring-crds build-prometheus-k8s-sd; do
  t0=$(date +%s)
  if [ "$step" = get-prometheus ]; then
    PROMETHEUS_BIN=$("$HERE/$step.sh" | tail -n 1)
  elif [ "$step" = get-monitoring-crds ] || [ "$step" = build-prometheus-k8s-sd ] || [ "$step" = get-jemalloc ]; then
    "$HERE/$step.sh" >/dev/null
  else
    "$HERE/$step.sh" >&2
  fi
  summary+=("$(printf '%-16s %5ss' "$step" "$(( $(date +%s) - t0 ))")")
done

{
  echo "key=$E2E_KEY"
  echo "k8s=$K8S_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION helm=$HELM_VERSION recipe=$E2E_RECIPE"
  command -v go >/dev/null && go version
} >"$E2E_BIN/VERSIONS"

{
  echo "build-all: toolchain in $E2E_BIN (total $(( $(date +%s) - total0 ))s)"
  printf '  %s\n' "${summary[@]}"
  echo "  prometheus: $PROMETHEUS_BIN"
} >&2
printf 'export E2E_BIN=%q PROMETHEUS_BIN=%q PATH=%q:%q:$PATH\n' \
  "$E2E_BIN" "$PROMETHEUS_BIN" "$E2E_BIN" "$PROMETHEUS_BIN"
