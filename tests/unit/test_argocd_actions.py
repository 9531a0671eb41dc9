"""The Argo CD resource actions (pause, resume, reevaluate), run the way Argo CD runs them: Lua 5.1, in Argo CD's
default VM (no string/math library, no global os: only require("os") with time and date) and with open libraries,
from the upstream layout and its action_test.yaml. tests/argocd/test_argocd_lua_vm.py runs them in Argo CD's own VM.

Argo CD calls discovery.lua with the live object as `obj` and lists the actions it returns; an action.lua returns the
modified object, which Argo CD then patches. The clock is frozen so the reevaluate token is reproducible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import pytest
import yaml

CUSTOMIZATION = (
    Path(__file__).resolve().parents[2]
    / "examples"
    / "argocd"
    / "resource_customizations"
    / "specpilot.dev"
    / "SpeculativeDeployment"
)
ACTIONS = CUSTOMIZATION / "actions"
TESTS = yaml.safe_load((ACTIONS / "action_test.yaml").read_text())
FROZEN_EPOCH = 1795687200  # 2026-11-26T10:00:00Z


def _runtime(obj: dict[str, Any], open_libs: bool) -> Any:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True, register_eval=False, register_builtins=False)
    runtime.execute(f"local d=os.date; os.date=function(f, t) return d(f, t or {FROZEN_EPOCH}) end")
    if not open_libs:
        runtime.execute(
            "local t,d=os.time,os.date; debug.setmetatable('',nil); "
            "string,math,io,debug,coroutine,dofile,loadfile=nil,nil,nil,nil,nil,nil,nil; "
            "os=nil; package.loaded.os={time=t,date=d}"
        )
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    return runtime


def _to_python(value: Any) -> Any:
    """A Lua table as JSON sees it: keys 1..n make a list, anything else an object; empty is None (either)."""
    if lua51.lua_type(value) != "table":
        return value
    items = dict(value.items())
    if not items:
        return None
    if set(items) == set(range(1, len(items) + 1)):
        return [_to_python(items[i]) for i in range(1, len(items) + 1)]
    return {str(k): _to_python(v) for k, v in items.items()}


def _normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()} or None
    if isinstance(value, list):
        return [_normalised(v) for v in value] or None
    return value


def _load(path: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ACTIONS / path).read_text())
    return data


def run_discovery(obj: dict[str, Any], open_libs: bool) -> list[dict[str, Any]]:
    result = _to_python(_runtime(obj, open_libs).execute((ACTIONS / "discovery.lua").read_text()))
    return [{"name": name, **spec} for name, spec in sorted(result.items())]


def run_action(action: str, obj: dict[str, Any], open_libs: bool) -> Any:
    return _to_python(_runtime(obj, open_libs).execute((ACTIONS / action / "action.lua").read_text()))


OPEN_LIBS = pytest.mark.parametrize("open_libs", [False, True], ids=["argocd-default-vm", "open-libs"])


@OPEN_LIBS
@pytest.mark.parametrize("case", TESTS["discoveryTests"], ids=lambda c: c["inputPath"])
def test_discovery(case: dict[str, Any], open_libs: bool) -> None:
    assert run_discovery(_load(case["inputPath"]), open_libs) == case["result"]


@OPEN_LIBS
@pytest.mark.parametrize("case", TESTS["actionTests"], ids=lambda c: f"{c['action']}-{c['inputPath']}")
def test_action(case: dict[str, Any], open_libs: bool) -> None:
    before = _load(case["inputPath"])
    after = run_action(case["action"], before, open_libs)
    assert after == _normalised(_load(case["expectedOutputPath"]))
    assert after["spec"] == _normalised(before["spec"]), "actions set annotations only; spec belongs to git"
    assert after["status"] == _normalised(before["status"]), "status belongs to the operator"


def test_every_action_is_discovered_and_tested() -> None:
    folders = {p.name for p in ACTIONS.iterdir() if (p / "action.lua").exists()}
    assert folders == {"pause", "resume", "reevaluate"}
    assert {c["action"] for c in TESTS["actionTests"]} == folders
    assert {a["name"] for c in TESTS["discoveryTests"] for a in c["result"]} == folders


def test_argocd_cm_patch_carries_the_same_actions() -> None:
    patch = yaml.safe_load((CUSTOMIZATION.parents[2] / "argocd-cm-patch.yaml").read_text())
    actions = yaml.safe_load(patch["data"]["resource.customizations.actions.specpilot.dev_SpeculativeDeployment"])
    assert actions["discovery.lua"] == (ACTIONS / "discovery.lua").read_text()
    assert {d["name"]: d["action.lua"] for d in actions["definitions"]} == {
        name: (ACTIONS / name / "action.lua").read_text() for name in ("pause", "resume", "reevaluate")
    }
