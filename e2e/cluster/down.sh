#!/usr/bin/env bash
# Stop the local e2e cluster started by up.sh: only the processes it recorded
# (by PID, checked against the binary path), then remove its state folder.
# A no-op when nothing is running.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../toolchain/versions.sh
. "$HERE/../toolchain/versions.sh"
# shellcheck source=lib.sh
. "$HERE/lib.sh"

t0=$(date +%s.%N)
if [ ! -d "$E2E_WORKDIR" ]; then
  e2e_log "cluster: not running ($E2E_WORKDIR absent)"
  exit 0
fi
e2e_lock 300
e2e_teardown
e2e_log "cluster: down in $(python3 -c "import time; print(round(time.time() - $t0, 1))")s"
