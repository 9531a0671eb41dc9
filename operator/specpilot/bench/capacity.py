"""A preset's no-speculation capacity: the request rate it sustains at saturation (pure).

Scenarios state their load as a share of "no-SD capacity" (steady: 10-20%, diurnal: 10% -> 90%).
A rate written as QPS is only that share for the cost model it was chosen against: a refit that makes batch-256
steps 30% slower silently turns 60% of capacity into 95%. So scenarios carry the share and the benchmark turns it
into QPS with this measurement of the model in use.

The measurement is a closed loop on the simulator's engine: speculation off, `max_num_seqs` requests always
admitted (a finished one is replaced at once by a fresh draw from the scenario's length distribution), and the
completion rate counted after a warm-up. That includes what an analytic formula would have to approximate: chunked
prefill sharing steps with decodes, the KV cache, preemption and the CUDA-graph staircase.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from specpilot.bench.scenarios import Lengths, batched_tokens, draw_lengths
from specpilot.sim.engine import Engine, EngineConfig, SimRequest
from specpilot.sim.presets import Preset
from specpilot.vllm.versions import VllmVersion

# A length distribution, or recorded (prompt, output) pairs drawn uniformly (a trace's lengths).
Draw = Lengths | Sequence[tuple[int, int]]

WARMUP_S = 300.0
MEASURE_S = 900.0


def _request(rng: random.Random, draw: Draw, max_model_len: int, n: int, now: float) -> SimRequest:
    if isinstance(draw, Lengths):
        prompt, output, max_tokens = draw_lengths(rng, draw, max_model_len)
    else:  # recorded (prompt, output) pairs, each generating exactly its output
        prompt, output = rng.choice(draw)
        max_tokens = output
    return SimRequest(f"c{n}", now, prompt, max_tokens, output)


def capacity_qps(
    preset: Preset,
    draw: Draw,
    *,
    version: str,
    max_num_seqs: int,
    max_model_len: int,
    seed: int = 0,
) -> float:
    """Completed requests per second with speculation off and the engine kept full (closed loop)."""
    engine = Engine(
        EngineConfig(
            preset=preset,
            version=VllmVersion.parse(version),
            model_name="capacity",
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            max_num_batched_tokens=batched_tokens(max_model_len),
            speculation=None,
        ),
        seed=seed,
    )
    rng = random.Random(f"capacity:{preset.name}:{seed}")
    submitted = 0
    completed = 0
    for _ in range(max_num_seqs):
        engine.submit(_request(rng, draw, max_model_len, submitted, engine.now))
        submitted += 1
    end = WARMUP_S + MEASURE_S
    while engine.now < end:
        report = engine.step()
        if report.duration == 0:
            raise ValueError(f"{preset.name}: a request does not fit the KV cache at max_model_len {max_model_len}")
        for _ in report.finished:
            if engine.now >= WARMUP_S:
                completed += 1
            engine.submit(_request(rng, draw, max_model_len, submitted, engine.now))
            submitted += 1
    return completed / MEASURE_S
