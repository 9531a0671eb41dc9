"""What specpilot's own fit would install on a bench scenario: the reference the bench's oracle is checked against.

The bench's oracle searches its schedules without the policy (bench/oracles.py); tests/unit/test_bench.py holds its
search to at least as good as the schedules the policy's fit (schedule.fit_schedule) makes from each window's true
acceptance.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from specpilot.autotune.model import schedule, stepcost
from specpilot.bench.scenarios import Arrival, Scenario
from specpilot.sim.acceptance import mean_alpha
from specpilot.sim.presets import AcceptanceKind, DrafterPreset, Preset
from specpilot.vllm.intent import SpeculationIntent


def true_survival(drafter: DrafterPreset, temperature: float, multiplier: float, k: int) -> tuple[float, ...]:
    """r_1..r_k of one request of the simulator's positional acceptance model (sim/acceptance.py), exactly.

    alpha_i ~ Beta(a, b) with a = mu·kappa, b = (1 - mu)·kappa, position j accepted with alpha_i·rho^(j-1) given the
    earlier ones: r_j = E[alpha_i^j]·rho^(j(j-1)/2), E[X^j] = prod_{i<j} (a + i)/(a + b + i).
    """
    mu = mean_alpha(drafter, temperature, multiplier)
    kappa = max(drafter.kappa, 1e-3)
    a, b = mu * kappa, (1 - mu) * kappa
    out: list[float] = []
    moment = 1.0
    for j in range(1, k + 1):
        moment *= (a + j - 1) / (a + b + j - 1)
        out.append(moment * drafter.rho ** (j * (j - 1) / 2))
    return tuple(out)


def window_fit(
    items: Sequence[Arrival], drafter: DrafterPreset, model: stepcost.StepCostModel, k: int, scenario: Scenario
) -> SpeculationIntent:
    """The schedule specpilot's fit would install if it measured these requests' acceptance without noise.

    What the operator measures, computed from the truth: survival per position as a step-weighted mean over the
    requests (a request is in ~n/E_k verification steps; vLLM's per-position counter over drafts is such a mean),
    responses' mean length (stepcost.with_output_length), and the model's mean context L̄ as the decode-step-weighted
    mean of prompt + half the output. The fit is schedule.fit_schedule with the bench spec's batchThreshold bounds
    (min 8, max maxNumSeqs), the intent built as decision.py builds it (K, threshold = first K = 0, schedule).
    """
    totals = [0.0] * k
    steps_sum = context_sum = tokens = 0.0
    for a in items:
        r = true_survival(drafter, a.temperature, a.alpha_multiplier, k)
        steps = a.output_tokens / (1 + sum(r))
        steps_sum += steps
        for j in range(k):
            totals[j] += steps * r[j]
        context_sum += a.output_tokens * (a.prompt_tokens + a.output_tokens / 2)
        tokens += a.output_tokens
    profile = stepcost.with_output_length(
        stepcost.AcceptanceProfile(tuple(t / steps_sum for t in totals), "true (scenario)"), tokens / len(items)
    )
    fit = schedule.fit_schedule(
        profile,
        replace(model, mean_context_tokens=context_sum / tokens),
        max_k=k,
        max_num_seqs=scenario.max_num_seqs,
        bounds=(8, scenario.max_num_seqs),
    )
    return SpeculationIntent(
        enabled=True, num_speculative_tokens=k, disable_above_batch_size=fit.threshold, batch_schedule=fit.schedule
    )


def fitted_schedules(
    scenario: Scenario, items: Sequence[Arrival], preset: Preset, limit: int = 4
) -> tuple[SpeculationIntent, ...]:
    """The per-batch-size schedules the oracles add to Theta: specpilot's fit over each window's true acceptance.

    One fit per window (`window_fit`, the preset's own step model: the cost model the operator uses for this set-up).
    Fits of neighbouring windows differ by a batch size or two at each crossover, differences the policy itself
    cannot see (its gain and payback are priced at one representative batch per power-of-two load bucket,
    schedule.representative_batch), so fits that give the same K at every representative batch are one candidate,
    the one fitted most often standing for them. The `limit` classes that cover the most windows are kept (each costs
    one simulation of the whole trace). The n-gram (bursty) acceptance has no closed form: no fitted schedules.
    """
    drafter = preset.drafter(scenario.method)
    k = scenario.num_speculative_tokens
    if drafter.acceptance is not AcceptanceKind.POSITIONAL or not items:
        return ()
    model = stepcost.model_for_method(stepcost.step_cost_model(preset), scenario.method)
    count = max(1, math.ceil(scenario.duration_s / scenario.window_s))
    per_window: list[list[Arrival]] = [[] for _ in range(count)]
    for a in items:
        per_window[min(count - 1, int(a.at // scenario.window_s))].append(a)
    fits = [window_fit(chunk, drafter, model, k, scenario) for chunk in per_window if chunk]
    buckets = range(scenario.max_num_seqs.bit_length() + 1)  # the load buckets up to maxNumSeqs (0: idle)
    classes: dict[tuple[int, ...], Counter[SpeculationIntent]] = {}
    for fit in fits:
        key = tuple(stepcost.k_for_batch(fit, schedule.representative_batch(b), k) for b in buckets)
        classes.setdefault(key, Counter())[fit] += 1
    ranked = sorted(classes.values(), key=lambda c: -sum(c.values()))
    return tuple(c.most_common(1)[0][0] for c in ranked[:limit])
