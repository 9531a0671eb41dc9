"""The Argo CD health check, run the way Argo CD runs it: Lua 5.1, with and without the open libraries.

Argo CD's production VM (gopher-lua, UseOpenLibs=false) has no `string` or `math` library and no string metatable;
built-in checks run with open libs. Both modes must give the same answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import pytest
import yaml

CHECK = (
    Path(__file__).resolve().parents[2]
    / "examples"
    / "argocd"
    / "resource_customizations"
    / "specpilot.dev"
    / "SpeculativeDeployment"
)
VALID = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
CASES = yaml.safe_load((CHECK / "health_test.yaml").read_text())["tests"]


def run_health(script: str, obj: dict[str, Any], open_libs: bool) -> dict[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True, register_eval=False, register_builtins=False)
    if not open_libs:
        runtime.execute(
            "local t,d=os.time,os.date; debug.setmetatable('',nil); "
            "string,math,io,debug,coroutine,dofile,loadfile=nil,nil,nil,nil,nil,nil,nil; "
            "os=nil; package.loaded.os={time=t,date=d}"
        )
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(script)
    if result is None:
        return {}
    out = dict(result.items())
    if out.get("status") not in VALID:
        return {"status": "Unknown", "message": "Lua returned an invalid health status"}
    return {"status": str(out["status"]), "message": str(out.get("message", ""))}


@pytest.mark.parametrize("open_libs", [False, True], ids=["argocd-default-vm", "open-libs"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["inputPath"])
def test_health_check(case: dict[str, Any], open_libs: bool) -> None:
    obj = yaml.safe_load((CHECK / case["inputPath"]).read_text())
    assert run_health((CHECK / "health.lua").read_text(), obj, open_libs) == case["healthStatus"]


def test_argocd_cm_patch_carries_the_same_script() -> None:
    patch = yaml.safe_load((CHECK.parents[2] / "argocd-cm-patch.yaml").read_text())
    key = "resource.customizations.health.specpilot.dev_SpeculativeDeployment"
    assert patch["data"][key] == (CHECK / "health.lua").read_text()


def test_every_health_status_is_covered() -> None:
    assert {c["healthStatus"]["status"] for c in CASES} == {"Healthy", "Progressing", "Degraded", "Suspended"}
