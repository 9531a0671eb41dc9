"""Is speculation faster than plain decoding at this load? Measured per-token latency decides, not acceptance (pure).

Acceptance is a poor trigger on its own (docs/design/cost-model.md): with adaptive verification on, vLLM verifies fewer
draft positions, so acceptance falls while tokens per second rise (vLLM #52992, GLM DSpark-16: acceptance 20.9% ->
17.2%, +184% tokens/s); a healthy EAGLE-3 K=3 deployment runs faster than plain at aggregate acceptance 0.35
(specpilot's own benchmark); and a goodput probe picked speculation off at batch 32 while acceptance was still 0.83
(vLLM PR #26504). So the policy compares the mean time per output token with speculation against the plain baseline at
the same load, from the best source available:

1. a plain canary replica on the same traffic (same load by construction, checked within a factor of 2 in batch);
2. the baseline record: plain windows at the same load bucket (running requests per engine), at most a day old.

Mean TPOT (`vllm:request_time_per_output_token_seconds` sum/count) is per token whatever K is, unlike ITL, which is
per step under speculation. Acceptance stays evidence and an early warning: it is reported with
every verdict, and it still decides alone where no latency comparison exists (see decision.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# Speculation must beat plain by at least this much to count as faster: below it, window-to-window noise of a mean
# TPOT (and the memory speculation holds) make "no gain" the honest reading.
FASTER_MARGIN = 0.05
# Two groups are at comparable load when their per-engine batches are within this factor (baseline.compare_canary);
# a one-pod trial's groups also when their per-pod request rates are (trial.analyse): a balancer that spreads requests
# (a Service's round robin) gives every pod the same request rate, and a slower config then runs a larger batch; one
# that spreads outstanding requests (an endpoint picker) evens the batches.
COMPARABLE_BATCH_FACTOR = 2.0


class Speed(StrEnum):
    FASTER = "Faster"  # speculation's TPOT beats plain by more than FASTER_MARGIN
    SLOWER = "Slower"  # speculation's TPOT is worse than plain by more than the regression tolerance
    EVEN = "Even"  # in between: no measured gain, no measured loss
    UNKNOWN = "Unknown"  # no plain TPOT at this load to compare with


@dataclass(frozen=True)
class PlainReference:
    """The plain (non-speculative) mean TPOT to compare with, and where it comes from."""

    tpot_ms: float
    source: str  # "canary" or "baseline"
    detail: str  # e.g. "baseline at batch [16,32), 3 windows, newest 2026-11-26T12:00:00Z"


@dataclass(frozen=True)
class SpeedVerdict:
    outcome: Speed
    reason: str
    evidence: dict[str, Any]  # for people; the figures code reads are the fields below
    speedup: float | None = None  # plain TPOT / speculation's TPOT; None without a comparison
    missing: str = ""  # why there is no comparison (Unknown only)

    @property
    def known(self) -> bool:
        return self.outcome is not Speed.UNKNOWN


def compare_speed(
    *,
    tpot_on_ms: float | None,
    plain: PlainReference | None,
    tolerance: float,
    missing: str = "",
) -> SpeedVerdict:
    """Speculation's measured mean TPOT against the plain reference at the same load.

    `tolerance` is spec.autotune.latency.regressionTolerance: slower by more than it is a loss; faster needs at least
    FASTER_MARGIN; `missing` says why there is no reference (shown when the verdict is Unknown).
    """
    if tpot_on_ms is None or plain is None or plain.tpot_ms <= 0 or tpot_on_ms <= 0:
        why = "no mean TPOT with speculation in this window" if tpot_on_ms is None else missing or "no plain TPOT"
        return SpeedVerdict(Speed.UNKNOWN, f"no measured speed comparison: {why}", {"note": why}, missing=why)
    ratio = tpot_on_ms / plain.tpot_ms
    speedup = plain.tpot_ms / tpot_on_ms
    evidence: dict[str, Any] = {
        "tpotOnMs": round(tpot_on_ms, 3),
        "plainTpotMs": round(plain.tpot_ms, 3),
        "plainSource": plain.source,
        "plainDetail": plain.detail,
        "speedup": round(speedup, 3),
        "fasterMargin": FASTER_MARGIN,
        "tolerance": tolerance,
    }
    shown = (
        f"mean TPOT {tpot_on_ms:.2f} ms with speculation vs {plain.tpot_ms:.2f} ms plain ({plain.detail}): "
        f"{speedup:.2f}x"
    )
    if ratio > 1 + tolerance:
        outcome = Speed.SLOWER
        shown += f", slower beyond the tolerance {tolerance:.0%}"
    elif speedup >= 1 + FASTER_MARGIN:
        outcome = Speed.FASTER
        shown += f", faster by more than {FASTER_MARGIN:.0%}"
    else:
        outcome = Speed.EVEN
        shown += f", within -{FASTER_MARGIN:.0%}/+{tolerance:.0%}"
    evidence["outcome"] = outcome.value
    return SpeedVerdict(outcome, shown, evidence, speedup=speedup)


def comparable_batches(a: float, b: float) -> bool:
    low, high = sorted((max(a, 0.5), max(b, 0.5)))
    return high / low <= COMPARABLE_BATCH_FACTOR
