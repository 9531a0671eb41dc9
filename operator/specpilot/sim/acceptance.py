"""Per-request acceptance: how many draft tokens one verification step accepts (pure; docs/design/simulator.md).

- Positional (EAGLE-like heads, draft models): each request draws alpha_i ~ Beta(mu·kappa, (1-mu)·kappa) once, mu
  from the method's alpha at temperature T (alpha(T) = alpha0·(1 - s·min(T,1)) - 0.2·max(0, T-1)) times
  a drift multiplier; position j is accepted with a_j = alpha_i·rho^(j-1) given the earlier ones were. One uniform
  draw per step: accepted = #{j ≤ k : r_j > u} with r_j = prod a_i, the capped-geometric law without k draws.
- Bursty (n-gram): a two-state chain per request. In free text the lookup matches with P(match) and proposes k
  tokens (else nothing: no draft, no verify cost); the first is accepted with q1, later ones with alpha_h; a fully
  accepted step moves to the copy state, where drafts continue with alpha_h until one is rejected.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from specpilot.sim.presets import AcceptanceKind, DrafterPreset

HIGH_TEMPERATURE_SLOPE = 0.2


def mean_alpha(drafter: DrafterPreset, temperature: float, multiplier: float = 1.0) -> float:
    """mu_c(T): the method's mean acceptance at this temperature, after drift, clamped to (0.001, 0.999)."""
    t = max(0.0, temperature)
    alpha = drafter.alpha * (1 - drafter.temperature_slope * min(t, 1.0)) - HIGH_TEMPERATURE_SLOPE * max(0.0, t - 1)
    return min(max(alpha * multiplier, 0.001), 0.999)


@dataclass
class RequestAcceptance:
    """The acceptance state one request carries from step to step."""

    alpha: float  # alpha_i (positional) or the scale applied to q1 and alpha_h (bursty)
    hot: bool = False  # bursty: in the copy state


def start(drafter: DrafterPreset, temperature: float, multiplier: float, rng: random.Random) -> RequestAcceptance:
    mu = mean_alpha(drafter, temperature, multiplier)
    if drafter.acceptance is AcceptanceKind.BURSTY:
        return RequestAcceptance(alpha=mu / drafter.alpha if drafter.alpha > 0 else 0.0)
    kappa = max(drafter.kappa, 1e-3)
    return RequestAcceptance(alpha=rng.betavariate(mu * kappa, (1 - mu) * kappa))


def propose(drafter: DrafterPreset, state: RequestAcceptance, k: int, rng: random.Random) -> int:
    """Draft tokens the method proposes this step (n-gram proposes none without a match)."""
    if k <= 0:
        return 0
    if drafter.acceptance is AcceptanceKind.BURSTY and not state.hot and rng.random() >= drafter.match_probability:
        return 0
    return k


def accept(drafter: DrafterPreset, state: RequestAcceptance, proposed: int, rng: random.Random) -> int:
    """Accepted prefix length of `proposed` draft tokens (0..proposed); updates the bursty state."""
    if proposed <= 0:
        return 0
    u = rng.random()
    accepted = 0
    survival = 1.0
    if drafter.acceptance is AcceptanceKind.BURSTY:
        hot_alpha = min(drafter.alpha_hot * state.alpha, 0.999)
        first = hot_alpha if state.hot else min(drafter.first_accept * state.alpha, 0.999)
        for j in range(proposed):
            survival *= first if j == 0 else hot_alpha
            if survival <= u:
                break
            accepted += 1
        state.hot = accepted == proposed
        return accepted
    a = state.alpha
    for _ in range(proposed):
        survival *= a
        if survival <= u:
            break
        accepted += 1
        a *= drafter.rho
    return accepted


def expected_tokens(drafter: DrafterPreset, k: int, temperature: float = 0.0, multiplier: float = 1.0) -> float:
    """E_k for a request at the mean alpha (positional only; the bursty chain has no closed form here)."""
    a = mean_alpha(drafter, temperature, multiplier)
    total, survival = 1.0, 1.0
    for _ in range(k):
        survival *= a
        total += survival
        a *= drafter.rho
    return total
