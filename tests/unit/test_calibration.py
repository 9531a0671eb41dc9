"""The simulator's cost model against PR #32374's step-time profile, point by point."""

from __future__ import annotations

import pytest

from specpilot.autotune.model.stepcost import step_cost_model, with_context_length
from specpilot.bench.calibration import MT_BENCH_CONTEXT, TOLERANCE, VERSION, step_time_ms
from specpilot.sim.engine import Engine, EngineConfig, SpecConfig
from specpilot.sim.presets import LLAMA8B_H100

# vLLM PR #32374: Llama-3.1-8B + EAGLE-1, MT-Bench, TP 1, median step time (ms) by batch and K
PROFILE = [
    (1, 0, 6.52), (1, 1, 7.37), (1, 3, 8.84), (1, 5, 10.33),
    (16, 0, 6.90), (16, 1, 7.85), (16, 3, 9.52), (16, 5, 11.20),
    (64, 0, 7.77), (64, 1, 9.66), (64, 3, 13.50), (64, 5, 16.83),
    (256, 0, 14.49), (256, 1, 27.14), (256, 3, 41.85), (256, 5, 57.40),
]  # fmt: skip


@pytest.mark.parametrize(("batch", "k", "published"), PROFILE)
def test_step_time_within_tolerance_of_the_profile(batch: int, k: int, published: float) -> None:
    """Before the refit, batch 256 came out 29-39% short at K >= 1 (N_r 320, c_kv 39.26 ns, no per-request term)."""
    assert abs(step_time_ms(batch, k) / published - 1) <= TOLERANCE


def _engine(spec: SpecConfig | None) -> Engine:
    return Engine(EngineConfig(LLAMA8B_H100, VERSION, "calibration", 256, speculation=spec), seed=7)


@pytest.mark.parametrize("batch", [1, 16, 64, 256])
def test_the_profiles_k0_column_is_the_server_without_speculation(batch: int) -> None:
    """vLLM's profiler (vllm/v1/spec_decode/dynamic/generate_config.py) measures K = 0 on a vanilla server: no
    drafter forward and no configured-drafter tax, unlike a dynamic table's K = 0 step (vLLM #53420)."""
    kv = batch * MT_BENCH_CONTEXT
    vanilla = _engine(None).step_ms(batch, kv, batch, 0)
    table_k0 = _engine(SpecConfig("eagle", 5, schedule=((1, 256, 0),))).step_ms(batch, kv, batch, 0)
    assert step_time_ms(batch, 0) == pytest.approx(vanilla)
    assert table_k0 > vanilla * 1.06  # one drafter forward + 2%: another configuration than the column measured


@pytest.mark.parametrize(("batch", "k"), [(1, 1), (64, 3), (256, 1), (256, 5)])
def test_the_profiles_speculating_columns_are_static_k_servers(batch: int, k: int) -> None:
    static = _engine(SpecConfig("eagle", k)).step_ms(batch * (k + 1), batch * MT_BENCH_CONTEXT, batch, k)
    assert step_time_ms(batch, k) == pytest.approx(static)


@pytest.mark.parametrize(("batch", "k"), [(1, 0), (64, 3), (256, 0), (256, 1), (256, 5)])
def test_the_operators_step_model_is_the_simulators(batch: int, k: int) -> None:
    """Same preset, same numbers: the per-request engine work reaches the operator's model too (token counts on
    captured CUDA-graph sizes or past the capture limit, where the simulator's staircase adds nothing)."""
    model = with_context_length(step_cost_model(LLAMA8B_H100), MT_BENCH_CONTEXT)
    spec = None if k == 0 else SpecConfig("eagle3", k)
    truth = _engine(spec).step_ms(batch * (k + 1), batch * MT_BENCH_CONTEXT, batch, k)
    assert model.step_ms(batch, k, configured=k > 0) == pytest.approx(truth, rel=1e-9)
