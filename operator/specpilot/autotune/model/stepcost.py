"""The step-cost model: time per engine step by batch size and K, and tokens per step from acceptance (pure).

- `StepCostModel` is the step time T(B, k) of the target plus drafter: a smooth roofline over the tokens verified
  per step, N = B·(k+1), plus the KV read per step, the drafter's term and the scheduler overhead
  (docs/design/cost-model.md). Its numbers are a calibrated simulator preset's (`step_cost_model`); the context
  length L̄ and the prompt tokens chunked into each step are measured when Prometheus has them
  (`with_context_length`, `with_prefill`), else MEAN_CONTEXT_TOKENS is assumed.
- `AcceptanceProfile` is the measured per-position survival r_j, so tokens per verification step are
  E_k = 1 + r_1 + ... + r_k.
- `tokens_per_ms`, `schedule_tokens_per_ms`, `speedup` and `best_k` combine the two; `k0_step_ms` prices the K = 0
  tax (one drafter forward per step while a dynamic-speculation engine speculates nowhere); `k_for_batch` is the K an
  intent runs at a batch size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from specpilot.api.v1alpha1 import AutotuneObjective
from specpilot.autotune.model.objective import choose_k
from specpilot.sim import presets
from specpilot.sim.presets import Preset
from specpilot.vllm.intent import SpeculationIntent


class Drafter(StrEnum):
    AUTOREGRESSIVE = "autoregressive"  # EAGLE, EAGLE-3, MTP heads: one forward per draft position
    PARALLEL = "parallel"  # P-EAGLE / DFlash / DSpark: one forward per block
    DRAFT_MODEL = "draft_model"  # a smaller model, k forwards at cost ratio c
    LOOKUP = "lookup"  # ngram / suffix: CPU-side matching, almost free


DRAFTER_BY_METHOD: dict[str, Drafter] = {
    "eagle": Drafter.AUTOREGRESSIVE,
    "eagle3": Drafter.AUTOREGRESSIVE,
    "mtp": Drafter.AUTOREGRESSIVE,
    "draft_model": Drafter.DRAFT_MODEL,
    "ngram": Drafter.LOOKUP,
    "suffix": Drafter.LOOKUP,
    "ngram_gpu": Drafter.LOOKUP,
    "dflash": Drafter.PARALLEL,
    "dspark": Drafter.PARALLEL,
}


@dataclass(frozen=True)
class StepCostModel:
    """Parameters of T_step(B, k) in milliseconds; every field is an assumption unless calibrated."""

    name: str
    verify_base_ms: float  # a: one memory-bound target step (weights read once)
    ridge_tokens: float  # N_r: tokens per step where compute starts to dominate
    ridge_sharpness: float  # p: how sharply the roofline bends
    kv_read_ns_per_token: float  # c_kv: attention reads of one cached token
    mean_context_tokens: float  # L̄: mean context of running requests
    sched_ms: float  # scheduler and sampling overhead per step
    drafter: Drafter
    draft_ms: float  # d_0: per draft position (autoregressive) or per block (parallel)
    draft_ms_per_request: float  # d_1
    draft_kv_ns_per_token: float  # d_kv: drafter attention over the context
    draft_model_cost_ratio: float  # c: draft forward / target forward, for Drafter.DRAFT_MODEL
    lookup_fraction: float  # lookup drafter cost as a fraction of T_verify
    spec_fixed_fraction: float  # cost of having speculation configured at all, even in steps with K = 0
    capture_limit_tokens: int | None  # CUDA-graph capture limit; None ignores the cliff
    eager_penalty_ms: float  # extra step time beyond the capture limit
    context_source: str = "assumed"  # where mean_context_tokens came from (with_context_length: measured)
    prefill_tokens_per_step: float = 0.0  # prompt tokens chunked into each step beside the decodes (with_prefill)
    prefill_batch: float = 1.0  # the batch size prefill_tokens_per_step was measured at; it scales with the batch
    prefill_k: int = 0  # the K the prefill was measured at (0 without speculation)
    prefill_prompt_tokens: float = 0.0  # mean prompt length of those chunks (0: unknown, no partial cliff)
    emitted_per_step: tuple[float, ...] = ()  # E_k for K = 0, 1, ... (with_emission); the prefill share scales with it
    sched_ms_per_request: float = 0.0  # s_1: engine work per request in the step (scheduling, inputs, sampling)

    def overhead_ms(self, batch: int) -> float:
        """The engine's own time per step at this batch size: T_sched + s_1·B."""
        return self.sched_ms + self.sched_ms_per_request * batch

    def verify_ms(self, batch: int, k: int, *, prefill: bool = True) -> float:
        """The target's forward over B·(k+1) verified tokens plus the prefill chunks that share the step.

        The prefill is spread over every step, but the CUDA-graph cliff is not: prompts arrive in some steps, not
        all. Spread, they would push a decode batch just under the capture limit (K = 1 at batch 255: 510 tokens) over
        the cliff in every step; ignored, they would never push it. `_cliff` charges the share of steps that carry
        one.
        """
        verified = batch * (k + 1)
        chunked = self.prefill_tokens_per_step * batch / self.prefill_batch * self.prefill_share(k) if prefill else 0.0
        tokens = verified + chunked
        bend = math.pow(1 + math.pow(tokens / self.ridge_tokens, self.ridge_sharpness), 1 / self.ridge_sharpness)
        roof = self.verify_base_ms * bend
        return (
            roof + self.kv_read_ns_per_token * 1e-6 * batch * self.mean_context_tokens + self._cliff(verified, chunked)
        )

    def _cliff(self, verified: int, chunked: float) -> float:
        """The eager penalty: in every step once the verified tokens pass the capture limit; below it, in the share
        of steps that carry a prompt chunk over the limit, 1 - exp(-prompts per step) for Poisson arrivals
        (docs/design/decisions.md)."""
        limit = self.capture_limit_tokens
        if limit is None:
            return 0.0
        if verified > limit:
            return self.eager_penalty_ms
        if chunked <= 0 or self.prefill_prompt_tokens <= 0 or verified + chunked <= limit:
            return 0.0
        return self.eager_penalty_ms * (1 - math.exp(-chunked / self.prefill_prompt_tokens))

    def prefill_share(self, k: int) -> float:
        """How the measured prefill per step changes at K: E_k / E at the measured K (1 until with_emission)."""
        if not self.emitted_per_step:
            return 1.0
        last = len(self.emitted_per_step) - 1
        return self.emitted_per_step[min(max(k, 0), last)] / self.emitted_per_step[min(self.prefill_k, last)]

    def draft_cost_ms(self, batch: int, k: int) -> float:
        if k <= 0:
            return 0.0
        kv = self.draft_kv_ns_per_token * 1e-6 * batch * self.mean_context_tokens
        if self.drafter is Drafter.AUTOREGRESSIVE:
            return k * (self.draft_ms + self.draft_ms_per_request * batch) + kv
        if self.drafter is Drafter.PARALLEL:
            return self.draft_ms + self.draft_ms_per_request * batch * k + kv
        if self.drafter is Drafter.DRAFT_MODEL:
            return k * self.draft_model_cost_ratio * self.verify_ms(batch, 0, prefill=False)
        return self.lookup_fraction * self.verify_ms(batch, k)

    def step_ms(self, batch: int, k: int, *, configured: bool = True) -> float:
        """One engine step at batch size `batch` proposing `k` tokens per request.

        `configured=False` is a deployment without any speculative config (no fixed overhead, K must be 0).
        """
        base = self.verify_ms(batch, k) + self.draft_cost_ms(batch, k) + self.overhead_ms(batch)
        return base * (1 + self.spec_fixed_fraction) if configured else base

    def to_dict(self) -> dict[str, Any]:
        """Every parameter of T_step, for the evidence: with it a fit can be recomputed by hand."""
        return {
            "name": self.name,
            "verifyBaseMs": self.verify_base_ms,
            "ridgeTokens": self.ridge_tokens,
            "ridgeSharpness": self.ridge_sharpness,
            "kvReadNsPerToken": self.kv_read_ns_per_token,
            "meanContextTokens": round(self.mean_context_tokens, 1),
            "meanContextSource": self.context_source,
            "prefillTokensPerStep": round(self.prefill_tokens_per_step, 1),
            "prefillAtBatch": round(self.prefill_batch, 2),
            "prefillK": self.prefill_k,
            "prefillPromptTokens": round(self.prefill_prompt_tokens, 1),
            "emittedPerStep": [round(e, 4) for e in self.emitted_per_step],
            "schedMs": self.sched_ms,
            "schedMsPerRequest": self.sched_ms_per_request,
            "drafter": self.drafter.value,
            "draftMs": round(self.draft_ms, 4),
            "draftMsPerRequest": self.draft_ms_per_request,
            "draftKvNsPerToken": self.draft_kv_ns_per_token,
            "draftModelCostRatio": self.draft_model_cost_ratio,
            "lookupFraction": self.lookup_fraction,
            "specFixedFraction": self.spec_fixed_fraction,
            "captureLimitTokens": self.capture_limit_tokens,
            "eagerPenaltyMs": self.eager_penalty_ms,
        }


MEAN_CONTEXT_TOKENS = 1000.0  # L̄ of the operator's step model where nothing measured it (with_context_length)


def decode_context_tokens(mean_prompt_tokens: float, mean_output_tokens: float | None) -> float:
    """L̄, the mean context a decode step attends over, from the mean prompt and output lengths of finished requests.

    A request of prompt P and output n attends over P + i tokens at its i-th decode step, so over its decode it
    averages P + n/2. Weighting every request alike (what two means allow) gives P̄ + n̄/2. The true per-step mean
    weights long responses more (they run more steps): with lengths independent it is P̄ + E[n²]/(2n̄), larger by
    Var(n)/(2n̄), about n̄/2 more for the log-normal outputs of chat traffic. The error leans toward a cheaper KV
    term, and it matters only where outputs are long next to prompts, where the KV term is small anyway.
    Without a measured output length, the prompt alone.
    """
    return mean_prompt_tokens + (mean_output_tokens / 2 if mean_output_tokens is not None else 0.0)


def with_context_length(model: StepCostModel, mean_context_tokens: float | None) -> StepCostModel:
    """The same model with L̄ measured for this deployment (None or <= 0: unchanged, MEAN_CONTEXT_TOKENS assumed).

    At an assumed context the model cannot price long prompts, and the consistency check then refuses every fit
    (docs/design/decisions.md).
    """
    if mean_context_tokens is None or mean_context_tokens <= 0:
        return model
    return replace(model, mean_context_tokens=mean_context_tokens, context_source="measured")


def with_prefill(
    model: StepCostModel,
    tokens_per_step: float | None,
    batch: float = 1.0,
    k: int = 0,
    mean_prompt_tokens: float | None = None,
) -> StepCostModel:
    """The same model with this many prompt tokens chunked into every step (None or <= 0: unchanged, none).

    vLLM V1 schedules prefill chunks into the decode steps, so every step of a deployment that admits P prompt
    tokens per second per engine carries P·T_step of them on average. Measured at the running config's step time,
    batch `batch` and K `k` (0 without speculation), and scaled by Little's law: each running request brings P̄/n̄
    prompt tokens per token it emits, so a step of B requests at K carries about B·E_k·P̄/n̄ (the simulator at batch
    255: 260 and 199 prompt tokens per step at K = 3 and 1, this formula 260 and 196). The batch scaling applies at
    once; the E_k scaling once with_emission has given the model the acceptance profile's E_k (relative to E at the
    measured K, so the measured config keeps its measured prefill exactly). `mean_prompt_tokens` tells how many
    prompts that is per step, for the CUDA-graph cliff of the steps that carry one.

    Without the prefill a busy engine reads as purely verify-bound and small K looks better than it is; unscaled
    by the batch, low-load hours read as compute-bound (docs/design/decisions.md).
    """
    if tokens_per_step is None or tokens_per_step <= 0:
        return model
    return replace(
        model,
        prefill_tokens_per_step=tokens_per_step,
        prefill_batch=max(batch, 1.0),
        prefill_k=max(k, 0),
        prefill_prompt_tokens=mean_prompt_tokens if mean_prompt_tokens is not None and mean_prompt_tokens > 0 else 0.0,
    )


def with_emission(model: StepCostModel, profile: AcceptanceProfile) -> StepCostModel:
    """The model with the profile's tokens per request per step at each K, so a K's prefill share follows it.

    A step emitting E_k tokens per request carries E_k times a plain step's prompt tokens at the same batch
    (Little's law); priced with a speculating step's prefill, plain looks slower than it is
    (docs/design/decisions.md).
    """
    if model.prefill_tokens_per_step <= 0:
        return model
    return replace(model, emitted_per_step=tuple(profile.expected_tokens(k) for k in range(profile.max_k + 1)))


def step_cost_model(preset: Preset) -> StepCostModel:
    """The operator's step model of one simulator preset: the same calibrated numbers (sim/presets.py), one
    source of truth. The drafter term defaults to the autoregressive head's; `model_for_method` switches it."""
    head = preset.drafter("eagle3")
    return StepCostModel(
        name=preset.name,
        verify_base_ms=preset.verify_base_ms,
        ridge_tokens=preset.ridge_tokens,
        ridge_sharpness=preset.ridge_sharpness,
        kv_read_ns_per_token=preset.kv_ns_per_token,
        mean_context_tokens=MEAN_CONTEXT_TOKENS,
        sched_ms=preset.sched_ms,
        sched_ms_per_request=preset.sched_ms_per_request,
        drafter=Drafter.AUTOREGRESSIVE,
        draft_ms=head.draft_ms,
        draft_ms_per_request=head.draft_ms_per_request,
        draft_kv_ns_per_token=head.draft_kv_ns,
        draft_model_cost_ratio=preset.drafter("draft_model").cost_ratio,
        lookup_fraction=preset.drafter("ngram").lookup_fraction,
        spec_fixed_fraction=preset.spec_fixed_fraction,
        capture_limit_tokens=preset.capture_limit,
        eager_penalty_ms=preset.eager_penalty_ms,
    )


# The calibrated set-ups (sim/presets.py; docs/design/simulator.md): `llama8b-h100` within 0.08x of SpecDecode-Bench,
# `llama70b-4xh100` fitted to its 70B curves. The capture limit is vLLM's default 512; the eager penalty an assumption.
PROFILES: dict[str, StepCostModel] = {
    p.name: step_cost_model(p) for p in presets.PRESETS.values() if p.target_model is not None
}


LLAMA8B_H100 = PROFILES[presets.LLAMA8B_H100.name]


LLAMA70B_4XH100 = PROFILES[presets.LLAMA70B_4XH100.name]


def model_for_method(model: StepCostModel, method: str) -> StepCostModel:
    """The same hardware profile with the drafter term of the speculation method in use."""
    return replace(model, drafter=DRAFTER_BY_METHOD.get(method, model.drafter))


TAIL_WASTE_STEPS = 0.5  # share of one verification step wasted past the end of a response (assumed)


@dataclass(frozen=True)
class AcceptanceProfile:
    """Unconditional survival r_1..r_K: probability that draft position j is accepted in a verification step."""

    survival: tuple[float, ...]
    source: str
    mean_output_tokens: float | None = None  # tokens per response (None: long enough not to matter)

    def expected_tokens(self, k: int) -> float:
        """E_k = 1 + r_1 + ... + r_k tokens per step (the bonus/correction token included), per response length.

        With `mean_output_tokens` n set, short responses shrink the gain: the first token comes from the prefill
        (speculation does not touch it), and the last verification step of each response runs past its end, wasting
        on average TAIL_WASTE_STEPS of a step (assumed). Over many responses a speculative config takes
        (n - 1)/E_k + TAIL_WASTE_STEPS steps where plain takes n - 1, so the effective tokens per step are
        (n - 1) / ((n - 1)/E_k + TAIL_WASTE_STEPS); long responses keep E_k, a 10-token one loses a fifth of it.
        """
        raw = 1.0 + sum(self.survival[: max(0, k)])
        n = self.mean_output_tokens
        if n is None or k <= 0:
            return raw
        decoded = max(n - 1, 1.0)
        return decoded / (decoded / raw + TAIL_WASTE_STEPS)

    @property
    def max_k(self) -> int:
        return len(self.survival)

    def extended(self, k: int) -> AcceptanceProfile:
        """The profile to `k` positions: past the measured ones each position survives the step before at the rate
        of the last measured step (r_K / r_(K-1); r_1 when one position is measured), the geometric acceptance of the
        speculative decoding papers. A guess, for proposing a larger K that a one-pod trial then measures."""
        if k <= self.max_k or not self.survival:
            return self
        last = self.survival[-1]
        before = self.survival[-2] if len(self.survival) > 1 else 1.0
        ratio = last / before if before > 0 else 0.0
        survival = list(self.survival)
        while len(survival) < k:
            survival.append(survival[-1] * ratio)
        extrapolated = f"positions {self.max_k + 1}-{k} extrapolated at x{ratio:.2f} per position"
        return replace(self, survival=tuple(survival), source=f"{self.source}; {extrapolated}")


def profile_from_positions(by_position: Mapping[int, float], num_speculative_tokens: int) -> AcceptanceProfile:
    """Measured survival per position; made non-increasing, since r_j can only fall with j, and clamped to [0, 1].

    Positions missing from the result count as 0 (vLLM pre-creates every position, so absence means none accepted).
    Under a batch-size schedule, drafts with fewer positions also count in the denominator, so later positions are
    underestimated: the error leans toward smaller K, the cheaper side.
    """
    survival: list[float] = []
    ceiling = 1.0
    for j in range(num_speculative_tokens):
        r = min(max(by_position.get(j, 0.0), 0.0), ceiling)
        survival.append(r)
        ceiling = r
    shown = ", ".join(f"{r:.2f}" for r in survival)
    return AcceptanceProfile(tuple(survival), f"measured per position [{shown}]")


def with_output_length(profile: AcceptanceProfile, mean_output_tokens: float | None) -> AcceptanceProfile:
    """The same acceptance, priced for responses of this mean length (see AcceptanceProfile.expected_tokens)."""
    if mean_output_tokens is None or mean_output_tokens <= 0:
        return profile
    return replace(
        profile,
        mean_output_tokens=mean_output_tokens,
        source=f"{profile.source}; responses of {mean_output_tokens:.0f} tokens on average (short outputs shrink E_k)",
    )


def profile_geometric(acceptance_rate: float, num_speculative_tokens: int) -> AcceptanceProfile:
    """Assume i.i.d. acceptance alpha (Leviathan) and solve mean_j alpha^j = accepted / drafted by bisection.

    Used where vLLM exports no per-position counter (before 0.8.5, V0). Marked as assumed in the evidence.
    """
    k = num_speculative_tokens
    target = min(max(acceptance_rate, 0.0), 1.0)

    def mean_survival(alpha: float) -> float:
        return sum(alpha**j for j in range(1, k + 1)) / k

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_survival(mid) < target else (lo, mid)
    alpha = (lo + hi) / 2
    survival = tuple(alpha**j for j in range(1, k + 1))
    return AcceptanceProfile(survival, f"geometric alpha={alpha:.3f} fitted to acceptance rate {target:.3f} (assumed)")


def tokens_per_ms(profile: AcceptanceProfile, model: StepCostModel, batch: int, k: int) -> float:
    """Tokens one request gains per millisecond at this batch size and K, speculation configured."""
    return profile.expected_tokens(k) / model.step_ms(batch, k)


def k0_step_ms(model: StepCostModel, batch: int) -> float:
    """One step at K = 0 under a batch-size schedule: the target's step plus one drafter forward (the drafter keeps
    its KV in sync, vLLM #53420), with the configured overhead. V0's disable_by_batch_size
    skips the proposer instead, so this applies to schedules only."""
    one_forward = model.draft_cost_ms(batch, 1)
    return (model.verify_ms(batch, 0) + one_forward + model.overhead_ms(batch)) * (1 + model.spec_fixed_fraction)


def schedule_tokens_per_ms(profile: AcceptanceProfile, model: StepCostModel, batch: int, k: int) -> float:
    """tokens_per_ms under a batch-size schedule: a K = 0 range is priced with the drafter's per-step tax, so the
    fit never moves the crossover earlier than it pays (K = 0 there is not "off")."""
    if k <= 0:
        return 1.0 / k0_step_ms(model, batch)
    return tokens_per_ms(profile, model, batch, k)


def speedup(profile: AcceptanceProfile, model: StepCostModel, batch: int, k: int) -> float:
    """Per-token speedup of K at this batch over a deployment without speculation (S(B, k), cost-model.md)."""
    return profile.expected_tokens(k) * model.step_ms(batch, 0, configured=False) / model.step_ms(batch, k)


Rate = Callable[[AcceptanceProfile, StepCostModel, int, int], float]


def best_k(
    profile: AcceptanceProfile,
    model: StepCostModel,
    batch: int,
    max_k: int,
    prefer_within: float,
    rate: Rate = tokens_per_ms,
    objective: AutotuneObjective = AutotuneObjective.THROUGHPUT,
) -> int:
    """argmax_k E_k/T(B,k); Ks within `prefer_within` of the best tie, and `objective` breaks the tie
    (objective.choose_k: Throughput the smallest, Latency the lowest mean TPOT).

    `rate` prices K = 0: plain speculation-configured steps by default, `schedule_tokens_per_ms` under a schedule.
    """
    top = min(max_k, profile.max_k)
    return choose_k([rate(profile, model, batch, k) for k in range(top + 1)], objective, prefer_within)


def k_for_batch(intent: SpeculationIntent, batch: int, max_k: int) -> int:
    """K the engine uses at this batch size under an intent (schedule first, else threshold, else its K), at most
    `max_k`."""
    if not intent.enabled:
        return 0
    if intent.batch_schedule:
        k = intent.batch_schedule[0][2]
        for lo, _hi, range_k in intent.batch_schedule:
            if batch >= lo:  # gaps and the tail inherit the previous K (vLLM dynamic/utils.py)
                k = range_k
        return min(k, max_k)
    if intent.disable_above_batch_size is not None and batch >= intent.disable_above_batch_size:
        return 0
    return min(intent.num_speculative_tokens or max_k, max_k)
