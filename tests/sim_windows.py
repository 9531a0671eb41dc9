"""One simulated measurement window at a fixed batch: the closed-loop driver the simulator tests share.

`batch` requests run at all times (a finished one is replaced at once, so the load never drifts), on the simulator's
virtual clock; Prometheus scrapes every 15 s into a ScrapeHistory, and the last window is read through specpilot's
real `measure` against the simulated Prometheus (SimQueryClient), as the operator reads a real one. Every finished
request's TPOT is kept too, for the tail a histogram cannot show.

Used by tests/unit/test_sim_decisions.py (the policy's decisions) and tests/unit/test_sim_framework.py (the framework
rules); the full-size closed-loop runs are `specpilot bench`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec
from specpilot.autotune.evaluate import measure
from specpilot.autotune.signals.measurements import Measurement
from specpilot.autotune.signals.promql import Scope
from specpilot.bench.queries import ScrapeHistory, SimQueryClient, snapshot
from specpilot.bench.specpilot_policy import to_datetime, to_seconds
from specpilot.sim.engine import Engine, EngineConfig, SimRequest, SpecConfig
from specpilot.sim.presets import LLAMA8B_H100, Preset
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion

SCRAPE_SECONDS = 15.0
PROMPT_TOKENS = 300
SCOPE = Scope("bench", "bench", "sim")


@dataclass(frozen=True)
class SimWindow:
    measurements: dict[str, Measurement]
    tpots: list[float]  # every finished request's TPOT, seconds


def fixed_batch_window(
    spec: SpeculativeDeploymentSpec,
    batch: int,
    speculation: SpecConfig | None,
    *,
    version: VllmVersion,
    seconds: float,
    multipliers: tuple[float, ...] = (1.0,),
    output_tokens: Callable[[int], int] = lambda made: 200,
    preset: Preset = LLAMA8B_H100,
    seed: int = 1,
) -> SimWindow:
    """Run `batch` requests at all times for `seconds` of virtual time and measure the last window of `spec`.

    Request number `made` gets the alpha multiplier `multipliers[made % len(multipliers)]` (the traffic mix) and
    `output_tokens(made)` tokens to generate; prompts are 300 tokens.
    """
    engine = Engine(EngineConfig(preset, version, "bench", 512, speculation=speculation), seed=seed)
    history = ScrapeHistory()
    made = 0
    tpots: list[float] = []

    def submit() -> None:
        nonlocal made
        out = output_tokens(made)
        multiplier = multipliers[made % len(multipliers)]
        engine.submit(SimRequest(f"r{made}", engine.now, PROMPT_TOKENS, out, out, alpha_multiplier=multiplier))
        made += 1

    for _ in range(batch):
        submit()
    next_scrape = SCRAPE_SECONDS
    while engine.now < seconds:
        report = engine.step()
        for r in report.finished:
            if r.tpot is not None:
                tpots.append(r.tpot)
            submit()
        while next_scrape <= engine.now:
            history.add(snapshot(engine.metrics, next_scrape))
            next_scrape += SCRAPE_SECONDS
    client = SimQueryClient(metric_names_for(version), SCOPE, history, to_seconds)
    return SimWindow(dict(measure(spec, SCOPE, client, to_datetime(seconds))), tpots)
