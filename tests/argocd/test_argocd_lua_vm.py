"""The Argo CD health check and resource actions in Argo CD's own Lua VM, not only in a general-purpose Lua.

e2e/argocd/run.sh runs e2e/argocd/lua_test.go: the argo-cd Go module's util/lua package evaluates the scripts as
argocd-cm-patch.yaml installs them against the upstream-layout cases (health_test.yaml, actions/action_test.yaml).
Argo CD's VM differs from Lua 5.1 in ways lupa cannot show (gopher-lua, its own safe os module loaded only through
require, its JSON round trip of the returned object). Module and build caches live under $SPECPILOT_CACHE, so only
the first run compiles (minutes); SPECPILOT_SKIP_ARGOCD=1 skips it deliberately.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "e2e" / "argocd" / "run.sh"
CUSTOMIZATION = ROOT / "examples" / "argocd" / "resource_customizations" / "specpilot.dev" / "SpeculativeDeployment"
SKIP_ENV = "SPECPILOT_SKIP_ARGOCD"

pytestmark = [
    pytest.mark.argocd,
    pytest.mark.skipif(os.environ.get(SKIP_ENV) == "1", reason=f"{SKIP_ENV}=1: Argo CD VM tests deliberately skipped"),
]


def _cases() -> int:
    health = yaml.safe_load((CUSTOMIZATION / "health_test.yaml").read_text())["tests"]
    actions = yaml.safe_load((CUSTOMIZATION / "actions" / "action_test.yaml").read_text())
    return len(health) + len(actions["discoveryTests"]) + len(actions["actionTests"])


def test_health_and_actions_pass_in_argo_cds_lua_vm() -> None:
    done = subprocess.run(["bash", str(RUN), "-v"], capture_output=True, text=True, timeout=1200, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    passed = re.findall(r"--- PASS: (Test\w+)/(\S+)", output)
    print(f"\nArgo CD Lua VM: {len(passed)} cases passed")
    by_test = {test for test, _ in passed}
    assert by_test == {"TestHealth", "TestActionDiscovery", "TestActions"}, output[-8000:]
    assert not re.search(r"--- (FAIL|SKIP)", output), output[-8000:]
    assert len(passed) == _cases(), "every health, discovery and action case ran"
