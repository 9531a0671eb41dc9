# shellcheck shell=bash
# Shared by up.sh and down.sh. Expects e2e/toolchain/versions.sh sourced.
#
# State folder layout ($E2E_WORKDIR):
#   state.env          BIN=<binaries used>, ports
#   pids/<component>   PID of each process started (each in its own session)
#   logs/<component>.log
#   pki/, etcd/, admin.kubeconfig, ...

E2E_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

# e2e_state_get KEY: a value from state.env (empty if absent)
e2e_state_get() {
  [ -f "$E2E_WORKDIR/state.env" ] || return 0
  sed -n "s/^$1=//p" "$E2E_WORKDIR/state.env" | tail -n 1
}

# e2e_pid NAME: print the PID of component NAME if it is alive and still the
# binary we started (guards against PID reuse); fail otherwise.
e2e_pid() {
  local name=$1 f=$E2E_WORKDIR/pids/$1 pid exe bin
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  bin=$(e2e_state_get BIN)
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  exe=${exe% (deleted)}
  [ "$exe" = "$bin/$name" ] || return 1
  echo "$pid"
}

# e2e_healthy: every component alive and the apiserver ready.
e2e_healthy() {
  local n bin
  [ -f "$E2E_WORKDIR/admin.kubeconfig" ] || return 1
  for n in "${E2E_COMPONENTS[@]}"; do e2e_pid "$n" >/dev/null || return 1; done
  bin=$(e2e_state_get BIN)
  "$bin/kubectl" --kubeconfig="$E2E_WORKDIR/admin.kubeconfig" --cache-dir="$E2E_WORKDIR/kube-cache" --request-timeout=5s \
    get --raw /readyz >/dev/null 2>&1
}

# e2e_stop NAME...: SIGTERM the given components (ours only), wait up to 15 s
# for all of them, then SIGKILL what is left.
e2e_stop() {
  local n pid pids=() deadline
  for n in "$@"; do
    if pid=$(e2e_pid "$n"); then
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    fi
  done
  deadline=$(( $(date +%s) + 15 ))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      e2e_log "cluster: PID $pid did not stop in time, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

# e2e_teardown: stop everything we started and remove the state folder.
# Each component takes ~2 s to shut down gracefully, so the API server and its
# clients stop together; etcd goes last (an API server that loses etcd first
# hangs in its shutdown until SIGKILL).
e2e_teardown() {
  [ -d "$E2E_WORKDIR" ] || return 0
  e2e_stop kwok kube-scheduler kube-controller-manager kube-apiserver
  e2e_stop etcd
  rm -rf "$E2E_WORKDIR"
}

# e2e_lock: serialise up/down on one state folder (fd 9, released on exit).
e2e_lock() {
  mkdir -p "$(dirname "$E2E_WORKDIR")"
  exec 9>"$E2E_WORKDIR.lock"
  if ! flock -w "${1:-300}" 9; then
    echo "cluster: timed out waiting for $E2E_WORKDIR.lock" >&2
    return 1
  fi
}
