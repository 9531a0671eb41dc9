"""The round trip's command lines (tests/seams.py) through the real vLLM 0.33 parser and create_engine_config().

Off, then on again: the re-enabled command must be one vLLM accepts, with K and the per-batch-size schedule
reaching the engine config exactly as before the switch (a bare --speculative-config without K is refused).
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.vllm.venvs import VllmVenv, validate_argv_cases
from specpilot.planning import catalog
from tests.seams import ROUND_TRIP_SPEC, round_trip

pytestmark = pytest.mark.vllm


def config_for(model: str) -> dict[str, Any]:
    entry = catalog.lookup(model)
    assert entry is not None, model
    return catalog.to_hf_config(entry)


def test_disable_and_reenable_command_lines_pass_vllm_0_33(vllm_validator_venv: VllmVenv) -> None:
    trip = round_trip()
    models = [ROUND_TRIP_SPEC["target"]["model"], ROUND_TRIP_SPEC["speculation"]["draft"]["model"]]
    configs = {m: config_for(m) for m in models}
    cases = [
        {"id": name, "argv": argv, "configs": configs}
        for name, argv in (("on", trip.argv_on), ("off", trip.argv_off), ("reenabled", trip.argv_reenabled))
    ]
    results = {r["id"]: r for r in validate_argv_cases(cases, python=vllm_validator_venv.python)}
    assert all(r["ok"] for r in results.values()), {k: (r["stage"], r["error"]) for k, r in results.items()}
    assert results["off"]["engine"].get("speculative") in (None, {})
    speculative = results["reenabled"]["engine"]["speculative"]
    assert speculative["num_speculative_tokens"] == 4
    assert speculative["num_speculative_tokens_per_batch_size"] == [[1, 15, 4], [16, 64, 0]]
    assert speculative == results["on"]["engine"]["speculative"]
