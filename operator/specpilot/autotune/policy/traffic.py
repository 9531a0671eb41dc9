"""The traffic a verdict was measured on, and the shift in it that re-opens the verdict (pure).

A verdict measured on live traffic (a candidate drafter Lost or Inconclusive, a config rolled back by its one-pod
trial) holds for the traffic it was measured on: acceptance under the incumbent config and the prompt / output length
mix. When that traffic shifts beyond the ordinary drift of one window to the next, the verdict no longer says
anything about the config, and it may be tried again before its retry time.
"""

from __future__ import annotations

from collections.abc import Mapping

from specpilot.api.v1alpha1 import MeasuredTraffic
from specpilot.autotune.signals.measurements import Measurement, valid_value
from specpilot.autotune.signals.promql import Signal

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
