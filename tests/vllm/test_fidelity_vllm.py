"""The fidelity benchmark's pipeline end to end on a tiny slice (e2e/bench/fidelity.py; the figure is in
docs/benchmarks.md): two real vLLM CPU servers measured and fitted, two simulators started from the fitted profile,
every trace request delivered to all four. No timing is asserted: the figures are reported, not judged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from e2e.bench.fidelity import report, run
from specpilot.sim.presets import preset_from_profile

pytestmark = pytest.mark.vllm


def test_a_tiny_slice_runs_through_real_vllm_and_the_fitted_simulator(tmp_path: Path) -> None:
    figures = run(6, 4, 1.0, 1, tmp_path, repeats=1)  # drive() raises if any request of any replay fails
    rows = {(r["speculation"], r["server"]): r for r in figures["comparison"]}
    assert set(rows) == {(s, server) for s in ("off", "on") for server in ("real vLLM", "simulator")}
    for (speculation, _), row in rows.items():
        assert row["p50_tpot_ms"] is not None
        assert row["server_mean_step_ms"] is not None  # the server's own histograms moved during the replay
        if speculation == "off":
            assert row["acceptance"] is None
        else:
            assert 0 < row["acceptance"] <= 1
    assert len(figures["fit"]) == 8  # 3 decode points off, 2 prefill points, 3 decode points on
    assert all(math.isfinite(r["residual_pct"]) for r in figures["fit"])
    profile = preset_from_profile(json.loads((tmp_path / "fitted-profile.json").read_text()), "fitted-profile.json")
    assert profile.capture_limit == 0
    assert profile.drafter("draft_model").alpha == figures["profile"]["drafters"]["draft_model"]["alpha"]
    print(report(figures["profile"], figures["fit"], figures["comparison"]))
