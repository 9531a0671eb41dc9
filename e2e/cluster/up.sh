#!/usr/bin/env bash
# Start the local e2e control plane: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok (fake nodes whose pods become Running/Ready), all built
# from source by e2e/toolchain/build-all.sh (run automatically when missing).
# Every listener is on 127.0.0.1. State lives in $E2E_WORKDIR
# (default $SPECPILOT_CACHE/cluster); re-running while it is up is a no-op.
#
# Usage: up.sh            start (or reuse) the cluster
#        up.sh --check    exit 0 if it is up and healthy, 1 otherwise; start nothing
#        up.sh --workdir  print the state folder
# Progress goes to stderr; the last line on stdout is
#   export KUBECONFIG=<path> PATH=<folder of the built binaries>:$PATH
# so `eval "$(e2e/cluster/up.sh | tail -n 1)"` works.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../toolchain/versions.sh
. "$HERE/../toolchain/versions.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

W=$E2E_WORKDIR
KC=$W/admin.kubeconfig
export_line() { printf 'export KUBECONFIG=%q PATH=%q:$PATH\n' "$KC" "$1"; }
OWNER_SELECTOR_KEY='.metadata.annotations["specpilot.test/status-owner"]'

# kwok_config BIN: kwok's configuration on stdout: the upstream default stages (what kwokctl injects) from BIN's
# kwok-stages, except that upstream pod-ready skips pods the pod runner owns (annotation
# specpilot.test/status-owner), plus our stage that starts those pods not Ready (kwok-podrunner-stage.yaml).
kwok_config() {
  local f
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo '---'
    if [ "$f" = pod/fast/pod-ready.yaml ]; then
      # one more requirement under the (only) matchExpressions of the selector
      sed "/^    matchExpressions:\$/a\\    - key: '$OWNER_SELECTOR_KEY'\n      operator: 'DoesNotExist'" "$1/kwok-stages/$f"
    else
      cat "$1/kwok-stages/$f"
    fi
  done
  echo '---'
  cat "$HERE/kwok-podrunner-stage.yaml"
}
# write_kwok_config BIN DEST: kwok_config into DEST, checked (fails if the upstream file's shape changed).
write_kwok_config() {
  kwok_config "$1" >"$2"
  if [ "$(grep -cxF "    - key: '$OWNER_SELECTOR_KEY'" "$2")" != 1 ]; then
    echo "up.sh: could not add the pod-runner exclusion to kwok's pod-ready stage ($1/kwok-stages)" >&2
    return 1
  fi
}
# start_kwok BIN: kwok with $W/kwok.yaml. No --server-address and no --node-port, so kwok opens no listener at all.
start_kwok() {
  setsid "$1/kwok" --config="$W/kwok.yaml" --kubeconfig="$KC" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.244.0.0/16 --node-ip=127.0.0.1 --node-lease-duration-seconds=40 \
    >>"$W/logs/kwok.log" 2>&1 </dev/null 9>&- &
  echo $! >"$W/pids/kwok"
}
# refresh_running BIN: bring a running cluster up to date with this checkout: kwok's stages (kwok restarts only if
# they changed; it keeps no state of its own) and the pod-status admission policy (server-side apply, idempotent).
refresh_running() {
  local kubectl=("$1/kubectl" --kubeconfig="$KC" --cache-dir="$W/kube-cache" --request-timeout=10s) i
  write_kwok_config "$1" "$W/kwok.yaml.new"
  if cmp -s "$W/kwok.yaml.new" "$W/kwok.yaml"; then
    rm -f "$W/kwok.yaml.new"
  else
    e2e_log "cluster: kwok's stages changed; restarting kwok"
    e2e_stop kwok
    mv "$W/kwok.yaml.new" "$W/kwok.yaml"
    start_kwok "$1"
    for i in $(seq 1 120); do
      e2e_pid kwok >/dev/null || { e2e_log "cluster: kwok exited"; tail -n 20 "$W/logs/kwok.log" >&2; return 1; }
      if "${kubectl[@]}" wait --for=condition=Ready nodes --all --timeout=5s >/dev/null 2>&1; then break; fi
      sleep 0.25
    done
  fi
  "${kubectl[@]}" apply --server-side --force-conflicts -f "$HERE/pod-status-owner.yaml" >/dev/null
}

case "${1:-}" in
  --check)
    if e2e_healthy; then export_line "$(e2e_state_get BIN)"; exit 0; fi
    exit 1 ;;
  --workdir) echo "$W"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--check|--workdir]" >&2; exit 2 ;;
esac

for c in openssl curl python3 flock setsid; do
  command -v "$c" >/dev/null || { echo "up.sh: '$c' is required" >&2; exit 1; }
done
t_start=$(date +%s.%N)
e2e_lock 5400   # another up.sh may be running a cold build
if e2e_healthy; then
  if [ "$(e2e_state_get BIN)" = "$E2E_BIN" ]; then
    e2e_log "cluster: already up ($W)"
    refresh_running "$E2E_BIN"
    export_line "$E2E_BIN"
    exit 0
  fi
  e2e_log "cluster: running with $(e2e_state_get BIN), want $E2E_BIN; restarting"
fi
if [ -d "$W" ]; then
  e2e_log "cluster: cleaning up a stale or partial cluster in $W"
  e2e_teardown
fi

# Binaries (a no-op when already built).
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl; do
  if [ ! -x "$E2E_BIN/$b" ] || [ ! -d "$E2E_BIN/kwok-stages" ]; then
    e2e_log "cluster: $E2E_BIN/$b missing, running build-all.sh (a cold build takes a while)"
    "$HERE/../toolchain/build-all.sh" >&2
    break
  fi
done
BIN=$E2E_BIN
KUBECTL=("$BIN/kubectl" --kubeconfig="$KC" --cache-dir="$W/kube-cache" --request-timeout=10s)

on_error() {
  local rc=$? f
  trap - ERR
  e2e_log "cluster: up FAILED (exit $rc); last log lines:"
  for f in "$W"/logs/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f" >&2
    tail -n 40 "$f" >&2
  done
  rm -rf "$W.failed-logs" && cp -r "$W/logs" "$W.failed-logs" 2>/dev/null &&
    e2e_log "cluster: logs kept in $W.failed-logs"
  e2e_teardown
  exit "$rc"
}
trap on_error ERR

mkdir -p "$W"/{etcd,logs,pids,kcm,scheduler}
P=$W/pki
bash "$HERE/pki.sh" "$P"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
EP=$(port); EPP=$(port); AP=$(port); KP=$(port); SP=$(port)
cat >"$W/state.env" <<EOS
BIN=$BIN
KEY=$E2E_KEY
ETCD_PORT=$EP
APISERVER_PORT=$AP
KCM_PORT=$KP
SCHEDULER_PORT=$SP
EOS

# start NAME ARGS...: run in its own session (so a Ctrl-C in the caller's
# terminal does not reach it), stdio detached, PID recorded.
start() {
  local n=$1; shift
  setsid "$BIN/$n" "$@" >"$W/logs/$n.log" 2>&1 </dev/null 9>&- &
  echo $! >"$W/pids/$n"
}
# await NAME SECONDS CMD...: poll CMD until it succeeds; fail if NAME died or
# the deadline passed.
await() {
  local n=$1 deadline=$(( $(date +%s) + $2 )); shift 2
  until "$@" >/dev/null 2>&1; do
    if ! e2e_pid "$n" >/dev/null; then e2e_log "cluster: $n exited"; return 1; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then e2e_log "cluster: timed out waiting for $n"; return 1; fi
    sleep 0.25
  done
  e2e_log "cluster: $n ready"
}

start etcd --name=e2e --data-dir="$W/etcd" \
  --listen-client-urls="http://127.0.0.1:$EP" --advertise-client-urls="http://127.0.0.1:$EP" \
  --listen-peer-urls="http://127.0.0.1:$EPP" --initial-advertise-peer-urls="http://127.0.0.1:$EPP" \
  --initial-cluster="e2e=http://127.0.0.1:$EPP" --unsafe-no-fsync=true \
  --quota-backend-bytes=2147483648 --log-level=warn
await etcd 30 curl -fsS "http://127.0.0.1:$EP/health"

start kube-apiserver --etcd-servers="http://127.0.0.1:$EP" \
  --bind-address=127.0.0.1 --secure-port="$AP" \
  --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" \
  --requestheader-client-ca-file="$P/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$P/front-proxy-client.crt" --proxy-client-key-file="$P/front-proxy-client.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --authorization-mode=RBAC --allow-privileged=true \
  --enable-admission-plugins=OwnerReferencesPermissionEnforcement \
  --service-cluster-ip-range=10.96.0.0/16 --profiling=false --v=1

cat >"$KC" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: specpilot-e2e
  cluster:
    server: https://127.0.0.1:$AP
    certificate-authority: $P/ca.crt
users:
- name: specpilot-e2e-admin
  user:
    client-certificate: $P/admin.crt
    client-key: $P/admin.key
contexts:
- name: specpilot-e2e
  context:
    cluster: specpilot-e2e
    user: specpilot-e2e-admin
current-context: specpilot-e2e
EOK
await kube-apiserver 120 "${KUBECTL[@]}" get --raw /readyz

start kube-controller-manager --kubeconfig="$KC" \
  --authentication-kubeconfig="$KC" --authorization-kubeconfig="$KC" \
  --bind-address=127.0.0.1 --secure-port="$KP" --cert-dir="$W/kcm" --leader-elect=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --flex-volume-plugin-dir="$W/kcm/flexvolume" \
  --profiling=false --v=1

cat >"$W/scheduler.yaml" <<EOC
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $KC
leaderElection:
  leaderElect: false
EOC
start kube-scheduler --config="$W/scheduler.yaml" \
  --authentication-kubeconfig="$KC" --authorization-kubeconfig="$KC" \
  --bind-address=127.0.0.1 --secure-port="$SP" --cert-dir="$W/scheduler" --v=1

# kwok: the upstream default stages (what kwokctl injects), with pods the pod runner owns left to it.
write_kwok_config "$BIN" "$W/kwok.yaml"
start_kwok "$BIN"

"${KUBECTL[@]}" create -f "$HERE/nodes.yaml" >/dev/null
await kube-controller-manager 60 curl -fsSk "https://127.0.0.1:$KP/healthz"
await kube-scheduler 60 curl -fsSk "https://127.0.0.1:$SP/readyz"
await kwok 60 "${KUBECTL[@]}" wait --for=condition=Ready nodes --all --timeout=5s
# The token controller and service-account controller of KCM work:
await kube-controller-manager 60 "${KUBECTL[@]}" -n default get serviceaccount default
"${KUBECTL[@]}" apply --server-side --force-conflicts -f "$HERE/pod-status-owner.yaml" >/dev/null

e2e_log "cluster: up in $(python3 -c "import time; print(round(time.time() - $t_start, 1))")s; KUBECONFIG=$KC"
trap - ERR
rm -rf "$W.failed-logs"
export_line "$BIN"
