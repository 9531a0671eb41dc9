#!/usr/bin/env bash
# Run specpilot's Argo CD health check and resource actions in Argo CD's own Lua VM (lua_test.go: the argo-cd module's
# util/lua package, the code Argo CD's controller and API server run). Module and build caches live under
# $SPECPILOT_CACHE (e2e/toolchain/versions.sh): the first run downloads and compiles util/lua and its dependencies
# (about 6 minutes on 2 cores), later runs only re-run the test. Arguments go to `go test` (e.g. -v, -run TestActions).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../toolchain/versions.sh
. "$HERE/../toolchain/versions.sh"
e2e_go_env
cd "$HERE"
exec go test -count=1 "$@" ./...
