"""The scoring hook of spec.autotune.objective: which K the fit takes at one batch size (pure; decisions.md).

At a fixed batch size B the engine's tokens/s is B x E_k/T(B, k) and each request's mean time per output token is
T(B, k)/E_k, so one number, the rate E_k/T(B, k), ranks both. Ks whose rates are within `tie` of the best (the fit's
`prefer_within`, below the cost model's error) tie at goodput, and the objective breaks that tie:

- Throughput: the smallest tied K. It drafts and verifies the fewest tokens per step for the same goodput, which
  leaves more of the step's token budget to prefills and narrows P99 when acceptance varies between requests.
- Latency: the tied K with the highest rate, the lowest predicted mean TPOT (the smaller K on an exact tie).

Outside a tie both take the fastest K.
"""

from __future__ import annotations

from collections.abc import Sequence

from specpilot.api.v1alpha1 import AutotuneObjective


def choose_k(rates: Sequence[float], objective: AutotuneObjective, tie: float) -> int:
    """The K to run at one batch size; `rates[k]` is E_k/T(B, k) at K = k (tokens per ms of one request)."""
    if not rates:
        raise ValueError("choose_k needs the rate of at least K = 0")
    best = max(rates)
    tied = [k for k, rate in enumerate(rates) if rate >= best * (1 - tie)]
    if objective is AutotuneObjective.LATENCY:
        return max(tied, key=lambda k: (rates[k], -k))
    return tied[0]
