# shellcheck shell=bash
# Pinned versions and cache locations for the e2e toolchain. Sourced by every
# script in e2e/toolchain/ and e2e/cluster/. Bumping any version changes
# E2E_BIN, so the next build-all.sh rebuilds into a fresh folder.

K8S_VERSION=${K8S_VERSION:-1.37.2}       # kube-apiserver, -controller-manager, -scheduler, kubectl
ETCD_VERSION=${ETCD_VERSION:-3.6.16}     # 3.6.x: envtest's pairing for k8s 1.34-1.37
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
HELM_VERSION=${HELM_VERSION:-3.22.0}
PROMETHEUS_DEB_VERSION=${PROMETHEUS_DEB_VERSION:-2.42.0+ds-5+deb12u1}
# Bump when a build recipe (flags, stamping, stage set) changes.
E2E_RECIPE=${E2E_RECIPE:-r1}

SPECPILOT_CACHE=${SPECPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specpilot}
E2E_KEY="k8s${K8S_VERSION}-etcd${ETCD_VERSION}-kwok${KWOK_VERSION}-helm${HELM_VERSION}-${E2E_RECIPE}"
# Always derived from the pins (an inherited E2E_BIN from an older export line
# must not keep stale binaries in use after a bump).
E2E_BIN=$SPECPILOT_CACHE/e2e-bin/$E2E_KEY
E2E_WORKDIR=${E2E_WORKDIR:-$SPECPILOT_CACHE/cluster}
PROMETHEUS_DIR=$SPECPILOT_CACHE/prometheus-${PROMETHEUS_DEB_VERSION//+/_}
# jemalloc, the allocator the operator's image preloads (Dockerfile, chart): Debian's libjemalloc2, extracted, so an
# operator started on this machine by the tests and benchmarks runs with the allocator production runs with.
JEMALLOC_DEB_VERSION=${JEMALLOC_DEB_VERSION:-5.3.0-1}
JEMALLOC_DIR=$SPECPILOT_CACHE/jemalloc-$JEMALLOC_DEB_VERSION

# Deliberately not exported: the daemons read their own env namespaces
# (etcd treats every ETCD_* variable as a flag), and every script sources this
# file anyway. Export one of the pins yourself to override it.

# Go: the module proxy only; caches that survive across runs, deletable by CI.
e2e_go_env() {
  local go_bin
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    PATH=/usr/local/go/bin:$PATH
  fi
  go_bin=$(command -v go) || { echo "e2e toolchain: Go >= 1.26 is required" >&2; return 1; }
  export PATH GOMODCACHE="$SPECPILOT_CACHE/go/mod" GOCACHE="$SPECPILOT_CACHE/go/build"
  export GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-local}
  export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
  mkdir -p "$GOMODCACHE" "$GOCACHE" "$E2E_BIN"
  echo "e2e toolchain: $("$go_bin" version)" >&2
}

# e2e_log MSG... : timestamped progress on stderr
e2e_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# e2e_apt_extract PACKAGE VERSION PIN DEST : download Debian's PACKAGE=VERSION and unpack it into DEST; nothing is
# installed. Updates the apt lists once if the version is not in them; if Debian no longer serves it, says which
# versions it serves and which PIN (versions.sh) to bump.
e2e_apt_extract() (
  set -euo pipefail
  local package=$1 version=$2 pin=$3 dest=$4 tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"   # apt's _apt sandbox user must be able to write here
  cd "$tmp"
  if ! apt-get download "$package=$version" >apt.log 2>&1; then
    e2e_log "$package: not in the apt lists yet, running apt-get update"
    apt-get update -qq >/dev/null 2>&1 || e2e_log "$package: apt-get update failed (not root?)"
    apt-get download "$package=$version" >apt.log 2>&1 || {
      cat apt.log >&2
      echo "$package: Debian no longer serves $version;" \
           "available: $(apt-cache madison "$package" | awk '{print $3}' | xargs)." \
           "Bump $pin in e2e/toolchain/versions.sh." >&2
      exit 1
    }
  fi
  dpkg-deb -x "${package}_"*.deb "$dest"
)

# prometheus-operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule) for server-side dry runs of the chart,
# taken from the Go module (the module proxy serves the repository's example/ folder with the generated CRDs).
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-0.85.0}
MONITORING_CRDS_DIR=$SPECPILOT_CACHE/monitoring-crds-v$PROMETHEUS_OPERATOR_VERSION

# Prometheus 3 with Kubernetes service discovery, built from the Go module proxy (v0.3MM.P is Prometheus 3.MM.P):
# Debian's prometheus 2.42 is built without kubernetes_sd_configs. Only the pod-discovery test needs it.
PROMETHEUS3_VERSION=${PROMETHEUS3_VERSION:-3.16.0}
PROMETHEUS3_DIR=$SPECPILOT_CACHE/prometheus3-$PROMETHEUS3_VERSION-k8s-sd
