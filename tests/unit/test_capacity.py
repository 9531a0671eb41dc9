"""The scenarios' capacity table is what the simulator's engine measures now (bench/capacity.py)."""

from __future__ import annotations

import pytest

from specpilot.bench.capacity import capacity_qps
from specpilot.bench.scenarios import NO_SD_CAPACITY_QPS, SHAREGPT, VLLM_VERSION, Lengths, share_of_capacity
from specpilot.sim.presets import preset_named


@pytest.mark.parametrize(("preset", "lengths", "max_num_seqs", "max_model_len"), list(NO_SD_CAPACITY_QPS))
def test_the_capacity_table_is_the_models(preset: str, lengths: Lengths, max_num_seqs: int, max_model_len: int) -> None:
    """A refit of a preset that moves its capacity fails here until the table (and so every rate) follows it."""
    measured = capacity_qps(
        preset_named(preset), lengths, version=VLLM_VERSION, max_num_seqs=max_num_seqs, max_model_len=max_model_len
    )
    assert measured == pytest.approx(NO_SD_CAPACITY_QPS[(preset, lengths, max_num_seqs, max_model_len)], rel=0.01)


@pytest.mark.parametrize(
    ("preset", "shares", "qps"),
    [
        ("llama8b-h100", ((0.0, 0.5),), ((0.0, 0.5 * 13.178),)),
        ("llama70b-4xh100", ((0.0, 0.1), (60.0, 1.0)), ((0.0, 1.0492), (60.0, 10.492))),
    ],
)
def test_shares_become_rates(
    preset: str, shares: tuple[tuple[float, float], ...], qps: tuple[tuple[float, float], ...]
) -> None:
    rates = share_of_capacity(preset, shares, SHAREGPT)
    assert [t for t, _ in rates] == [t for t, _ in qps]
    assert [v for _, v in rates] == pytest.approx([v for _, v in qps])


def test_a_faster_preset_has_more_capacity() -> None:
    """The measurement answers to the cost model: the 8B preset out-serves the 70B one on the same lengths."""
    small, large = (
        capacity_qps(preset_named(p), SHAREGPT, version=VLLM_VERSION, max_num_seqs=64, max_model_len=8192)
        for p in ("llama8b-h100", "llama70b-4xh100")
    )
    assert small > 1.2 * large
