"""Fit a simulator profile to one real server's own measurements (pure; used by e2e/bench/fidelity.py).

The step cost of the simulator (docs/design/cost-model.md) is fitted in its simplest form, which is what an eager CPU
server needs: no CUDA-graph staircase, a linear roofline (p = 1) and no separate KV term, so a step over N new tokens
for R requests costs  a·(1 + N/N_r) + s_1·R.  Two kinds of measurement pin the three numbers down:

* decode steps: B requests decoding together, one token each: step(B) = a + (a/N_r + s_1)·B;
* lone prefills: one request with a prompt of P tokens, its TTFT = a + s_1 + (a/N_r)·P.

Both are the server's own figures (its inter-token latency histogram, one observation per step and request, and its
TTFT histogram), not a client's: on a tiny model the HTTP stream costs more than the step.

The slope of the prefill line is the per-token cost a/N_r; the decode line's intercept is a and its slope minus the
per-token cost is s_1. With speculation at K, a draft-model step costs (verify over B·(K+1) tokens + K draft forwards
over B tokens at cost ratio c)·(1 + the configured-drafter tax), which gives c by least squares. The acceptance
alpha is the one at which the simulator's positional model (rho = 1) yields the measured mean acceptance length at K
(the server's own counters).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from specpilot.sim.acceptance import expected_tokens
from specpilot.sim.presets import CPU_TINY


@dataclass(frozen=True)
class Point:
    """One measurement: `x` (batch size or prompt tokens), the mean time in ms, tokens per step (speculation)."""

    x: int
    ms: float
    tokens_per_step: float = 1.0


@dataclass(frozen=True)
class StepFit:
    verify_base_ms: float  # a
    ridge_tokens: float  # N_r
    per_request_ms: float  # s_1

    def step_ms(self, tokens: int, requests: int) -> float:
        return self.verify_base_ms * (1 + tokens / self.ridge_tokens) + self.per_request_ms * requests


def fit_steps(decodes: Sequence[Point], prefills: Sequence[Point]) -> StepFit:
    """a, N_r and s_1 from decode TPOTs at several batch sizes and lone-prefill TTFTs at several prompt lengths."""
    if len({p.x for p in decodes}) < 2 or len({p.x for p in prefills}) < 2:
        raise ValueError("the fit needs decode points at two batch sizes and prefill points at two prompt lengths")
    decode = statistics.linear_regression([p.x for p in decodes], [p.ms for p in decodes])
    prefill = statistics.linear_regression([p.x for p in prefills], [p.ms for p in prefills])
    per_token = max(prefill.slope, 1e-6)
    base = max(decode.intercept, 1e-3)
    return StepFit(base, base / per_token, max(decode.slope - per_token, 0.0))


def fit_cost_ratio(steps: StepFit, k: int, spec_decodes: Sequence[Point], tax: float) -> float:
    """c of a draft model: least squares through the origin of (measured step - verify part) on K draft forwards."""
    xs, ys = [], []
    for p in spec_decodes:
        verify = steps.step_ms(p.x * (k + 1), p.x)
        xs.append(k * steps.verify_base_ms * (1 + p.x / steps.ridge_tokens))
        ys.append(p.ms / (1 + tax) - verify)
    return max(sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs), 0.0)


def fit_alpha(k: int, mean_acceptance_length: float) -> float:
    """The mean alpha at which the positional model (rho = 1) gives this mean acceptance length at K (bisection)."""
    drafter = replace(CPU_TINY.drafter("draft_model"), rho=1.0)
    lo, hi = 0.001, 0.999
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens(replace(drafter, alpha=mid), k) < mean_acceptance_length:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def profile_doc(
    steps: StepFit, *, cost_ratio: float, alpha: float, kv_tokens: int, draft_kv_factor: float
) -> dict[str, Any]:
    """The `specpilot simulate --profile` document: cpu-tiny with the fitted numbers, no staircase, no cliff."""
    return {
        "base": CPU_TINY.name,
        "name": "cpu-tiny-fitted",
        "description": "the tiny CPU server, fitted to its own measured step times, TTFT and acceptance",
        "verify_base_ms": round(steps.verify_base_ms, 4),
        "ridge_tokens": round(steps.ridge_tokens, 2),
        "ridge_sharpness": 1.0,
        "kv_ns_per_token": 0.0,
        "sched_ms": 0.0,
        "sched_ms_per_request": round(steps.per_request_ms, 4),
        "capture_limit": 0,
        "eager_penalty_ms": 0.0,
        "kv_capacity_tokens": kv_tokens,
        "drafters": {"draft_model": {"cost_ratio": round(cost_ratio, 4), "alpha": alpha, "rho": 1.0,
                                     "kv_factor": draft_kv_factor}},
    }  # fmt: skip


def predicted_decode_ms(steps: StepFit, b: int) -> float:
    return steps.step_ms(b, b)


def predicted_prefill_ms(steps: StepFit, prompt: int) -> float:
    return steps.step_ms(prompt, 1)


def predicted_spec_step_ms(steps: StepFit, k: int, c: float, tax: float, b: int) -> float:
    step = steps.step_ms(b * (k + 1), b) + k * c * steps.verify_base_ms * (1 + b / steps.ridge_tokens)
    return step * (1 + tax)
