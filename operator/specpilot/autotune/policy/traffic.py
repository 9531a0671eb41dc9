"""The traffic a verdict was measured on, and the shift in it that re-opens the verdict (pure).

A verdict measured on live traffic (a candidate drafter Lost or Inconclusive, a config rolled back by its one-pod
trial) holds for the traffic it was measured on: acceptance under the incumbent config and the prompt / output length
mix. When that traffic shifts beyond the ordinary drift of one window to the next, the verdict no longer says
anything about the config, and it may be tried again before its retry time.

The running config's own holding rests on traffic too: where no model prices it, on the acceptance it was first
measured at (AcceptanceSeen), and a fall from that by the same shift is a doubt that may start an experiment.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from specpilot.api.v1alpha1 import MeasuredTraffic
from specpilot.autotune.policy.state import AcceptanceSeen
from specpilot.autotune.signals.measurements import Measurement, valid_value
from specpilot.autotune.signals.promql import Signal
from specpilot.vllm.intent import SpeculationIntent

# A shift in the traffic that re-opens a verdict: acceptance (under the same incumbent config) moved by at least
# ACCEPTANCE_SHIFT (absolute), or the median output or mean prompt length changed by LENGTH_SHIFT times or more either
# way. Smaller moves are the ordinary drift of one window to the next.
ACCEPTANCE_SHIFT = 0.15
LENGTH_SHIFT = 2.0


def traffic_of(measurements: Mapping[str, Measurement], config_hash: str) -> MeasuredTraffic:
    """The traffic the incumbent pods (running `config_hash`) measured over one window."""
    return MeasuredTraffic(
        config_hash=config_hash,
        acceptance_rate=valid_value(measurements, Signal.ACCEPTANCE_RATE),
        output_tokens_p50=valid_value(measurements, Signal.OUTPUT_TOKENS_P50),
        mean_prompt_tokens=valid_value(measurements, Signal.MEAN_PROMPT_TOKENS),
    )


def _length_shift(what: str, then: float | None, now: float | None) -> str | None:
    if then is None or now is None or then <= 0 or now <= 0:
        return None
    if max(then, now) / min(then, now) >= LENGTH_SHIFT:
        return f"{what} {then:.0f} -> {now:.0f} tokens"
    return None


def traffic_shift(then: MeasuredTraffic | None, now: MeasuredTraffic | None) -> str | None:
    """How the traffic moved since a verdict, in words, when the move re-opens the verdict; None otherwise
    (also when either side was not measured: no shift is assumed from missing data)."""
    if then is None or now is None:
        return None
    before, after = then.acceptance_rate, now.acceptance_rate
    same_config = then.config_hash == now.config_hash
    if same_config and before is not None and after is not None and abs(after - before) >= ACCEPTANCE_SHIFT:
        return f"acceptance {before:.2f} -> {after:.2f}"
    output = _length_shift("median output", then.output_tokens_p50, now.output_tokens_p50)
    return output or _length_shift("mean prompt", then.mean_prompt_tokens, now.mean_prompt_tokens)


# A fall in acceptance is read only between windows that each hold FALL_EVIDENCE times the requests minimum
# (spec.autotune.minSamples.requests). Acceptance varies far more from request to request than from token to token, so
# a window's noise shrinks with its requests: at the minimum its figure may decide, but a fall is the difference of
# two figures, each of which must sit well inside ACCEPTANCE_SHIFT.
FALL_EVIDENCE = 10


def acceptance_for_fall(measurements: Mapping[str, Measurement], min_requests: int) -> float | None:
    """The window's acceptance where the window holds FALL_EVIDENCE times the requests minimum; None otherwise."""
    requests = valid_value(measurements, Signal.REQUESTS_IN_WINDOW)
    if requests is None or requests < FALL_EVIDENCE * max(min_requests, 1):
        return None
    return valid_value(measurements, Signal.ACCEPTANCE_RATE)


def acceptance_seen_after(
    seen: AcceptanceSeen | None, running: SpeculationIntent, acceptance: float | None, now: datetime
) -> AcceptanceSeen | None:
    """The record after one settled window: kept while the config it was measured under runs, this window's
    acceptance (acceptance_for_fall) once another one went in; None while that one drafts nothing or no window of it
    was measured with the evidence a fall needs."""
    if seen is not None and seen.intent == running:
        return seen
    if acceptance is None or not running.enabled:
        return None
    return AcceptanceSeen(running, acceptance, now)


def acceptance_fell(
    seen: AcceptanceSeen | None, running: SpeculationIntent, acceptance: float | None
) -> AcceptanceSeen | None:
    """The record the running config's acceptance fell from by ACCEPTANCE_SHIFT or more since its first window;
    None where it did not, or where either figure is missing or the record is another config's."""
    if seen is None or acceptance is None or seen.intent != running:
        return None
    return seen if seen.rate - acceptance >= ACCEPTANCE_SHIFT else None
