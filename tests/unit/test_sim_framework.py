"""Issue 14's rules on simulated traffic (virtual clock, fixed seeds, seconds): is the decision right?

Quantization penalty and short outputs are shown on simulated windows in tests/unit/test_framework_rules.py (an
8-point drop judged a penalty, a 1-point drop not; 7 in 10 short responses fire ShortOutputs). Here:

- acceptance method: a quantized target whose acceptance sits between disableBelow and enableAbove gets the relaxed
  method recommended; the simulator shows that band is where speculation is near break-even at load (the lever is
  worth pulling), while above enableAbove speculation clearly pays and nothing is recommended;
- mixed workload: 70% of requests the drafter knows well, 30% it barely knows; with speculation P50 improves and P99
  regresses against a plain canary, the rule fires, and the split it recommends (a speculative deployment for the
  first class, a plain one for the second, each with its share of the load) beats both all-on and all-off at P99
  while keeping the P50 gain.
"""

from __future__ import annotations

import pytest

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec, parse_spec
from specpilot.autotune.policy.framework_rules import FrameworkInputs, acceptance_method_advice, mixed_workload
from specpilot.autotune.signals.promql import Signal
from specpilot.bench.oracles import quantile
from specpilot.bench.specpilot_policy import bench_spec, to_datetime
from specpilot.sim.engine import SpecConfig
from specpilot.sim.presets import LLAMA8B_H100, LLAMA70B_4XH100, Preset
from specpilot.vllm.intent import SpeculationIntent
from specpilot.vllm.versions import VllmVersion
from tests.sim_windows import SimWindow, fixed_batch_window

VERSION = VllmVersion.parse("0.33.0")
BIG = LLAMA70B_4XH100
SECONDS = 75.0


def spec(method: str, quantization: str = "none") -> SpeculativeDeploymentSpec:
    raw = bench_spec(LLAMA8B_H100, method, 3, 512, 8192).model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["engine"].update({"version": "0.33.0", "image": "vllm/vllm-openai:v0.33.0"})
    raw["target"]["quantization"] = quantization
    raw["autotune"].update({"window": "1m", "mode": "Recommend"})
    return parse_spec(raw)


def run(
    batch: int,
    speculation: SpecConfig | None,
    multipliers: tuple[float, ...],
    method: str = "eagle3",
    seed: int = 1,
    preset: Preset = LLAMA8B_H100,
) -> SimWindow:
    """`batch` requests running at all times (tests/sim_windows.py), each with the next alpha multiplier of the
    cycle (the traffic mix), prompts of 300 tokens, responses of 150-250 (spread so the batch does not finish in
    lockstep waves); the last minute measured through specpilot's `measure`, and every finished request's TPOT kept."""
    return fixed_batch_window(
        spec(method),
        batch,
        speculation,
        version=VERSION,
        seconds=SECONDS,
        multipliers=multipliers,
        output_tokens=lambda made: 150 + (made * 37) % 101,
        preset=preset,
        seed=seed,
    )


def value(w: SimWindow, signal: Signal) -> float:
    m = w.measurements[signal]
    assert m.valid, m.detail
    assert m.value is not None
    return m.value


@pytest.mark.parametrize(
    ("multiplier", "status"),
    [
        (1.05, "True"),  # an AWQ target with its 1B draft: acceptance inside [0.50, 0.65)
        (0.85, "False"),  # below disableBelow: slower than plain, the policy's business (off), not a lever
        (1.25, "False"),  # acceptance above enableAbove: speculation pays, no lever needed
    ],
)
def test_acceptance_method_is_recommended_where_speculation_is_near_break_even(multiplier: float, status: str) -> None:
    batch = 64
    on = run(batch, SpecConfig("draft_model", 3), (multiplier,), method="draft_model")
    plain = run(batch, None, (1.0,), method="draft_model")
    s = spec("draft_model", "awq")
    finding = acceptance_method_advice(
        FrameworkInputs(spec=s, current=SpeculationIntent(True, 3), measurements=on.measurements, window_seconds=60),
        VERSION,
    )
    speedup = value(plain, Signal.TPOT_MEAN) / value(on, Signal.TPOT_MEAN)
    acceptance = value(on, Signal.ACCEPTANCE_RATE)
    print(f"\nx{multiplier}: acceptance {acceptance:.2f}, speedup over plain at batch {batch} {speedup:.2f}x -> "
          f"{finding.status} {finding.reason}: {finding.message[:140]}")  # fmt: skip
    assert finding.status == status, finding.message
    if status == "True":
        assert "Relaxed (renders rejection_sample_method" in finding.message
        assert abs(speedup - 1) < 0.1, "near break-even: the acceptance lever decides whether speculation pays"
    elif multiplier < 1:
        assert speedup < 1
    else:
        assert speedup > 1.15, "clear gain: nothing to recommend"


def test_a_mixed_workload_fires_and_the_recommended_split_serves_better() -> None:
    """70B on 4xH100 with an EAGLE-3 head, 48 running requests: 70% the head knows (x1.3), 30% it barely knows
    (x0.25). (On the 8B preset every TPOT is under 10 ms, inside vLLM's first TPOT bucket, so P50 and P99 are both
    interpolated in [0, 10 ms) and no tail can be seen from Prometheus; the 70B's TPOTs span several buckets.)"""
    mix = (1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 0.25, 0.25, 0.25)
    spec_cfg = SpecConfig("eagle3", 3)
    all_on, all_off = run(48, spec_cfg, mix, preset=BIG), run(48, None, mix, preset=BIG)
    s = spec("eagle3")
    finding = mixed_workload(
        FrameworkInputs(
            spec=s, current=SpeculationIntent(True, 3), measurements=all_on.measurements, window_seconds=60,
            canary=all_off.measurements,
        ),
        to_datetime(SECONDS),
    )  # fmt: skip
    print(f"\nmixed workload: {finding.status} {finding.reason}: {finding.message[:220]}")
    assert (finding.status, finding.reason) == ("True", "MixedWorkload"), finding.message
    assert "splitting the traffic" in finding.message

    # the split: the known class speculates (34 of the 48 running), the other runs plain (14)
    known, unknown = run(34, spec_cfg, (1.3,), preset=BIG), run(14, None, (0.25,), preset=BIG)
    split = known.tpots + unknown.tpots

    def shown(tpots: list[float]) -> tuple[float, float]:
        return quantile(tpots, 0.5) * 1000, quantile(tpots, 0.99) * 1000

    rows = {"all on": shown(all_on.tpots), "all off": shown(all_off.tpots), "split": shown(split)}
    for name, (p50, p99) in rows.items():
        print(f"  {name:8} P50 TPOT {p50:6.2f} ms  P99 TPOT {p99:6.2f} ms")
    assert rows["split"][1] < rows["all on"][1], "the split removes the tail speculation added"
    assert rows["split"][1] <= rows["all off"][1] * 1.05
    assert rows["split"][0] < rows["all off"][0], "and keeps speculation's P50 gain"
