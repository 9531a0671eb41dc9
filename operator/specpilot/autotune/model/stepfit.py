"""The step-cost curve T(B, k) fitted online from the deployment's own windows (pure; docs/design/cost-model.md).

Each settled evaluation window gives one point from the measurements every evaluation takes: the step time is the
mean time per output token times the tokens one step emits, T = TPOT_mean x E (E = mean acceptance length with
speculation, 1 without), at the window's batch (running requests per engine), the K the running intent uses at that
batch, and the window's measured mean context (mean_context_tokens), so windows of different context lengths are
each priced at their own. The fit keeps
the assumed profile's shape (smooth roofline for the target, the method's drafter term, scheduler overhead) and
solves three scales for this hardware and model: verify alpha (with the per-request engine work s_1, which grows
with the batch as the verify does), drafter beta and per-step overhead gamma, by least
squares on relative error with a weak pull toward the profile, so a term the data cannot see (the drafter, while
every window ran the same K) stays at its assumed value instead of drifting. Until the data are thick enough
(MIN_SAMPLES points over MIN_BUCKETS load buckets), or while the fit misses its own points by more than MAX_ERROR,
the profile is used, and the evidence says which.

Where the profile is another set-up's (a GPU no profile was calibrated on) and its shape is refused, the roofline's
ridge is a fourth unknown: the three scales are solved at each of RIDGE_SCALES x the profile's ridge. Such a fit is
used only where the windows identify the ridge: every ridge that fits them about as well as the best
(EQUALLY_GOOD) lies within RIDGE_SPREAD of it. Windows that all ran one K rarely do (the ridge trades off against
the drafter term); windows of plain beside them do. Where the prior's own ridge fits within MAX_ERROR but other ridges
fit as well and the ridge is not identified, the fit is used with those others as its rivals (`StepFit.rivals`): a
change goes in only where every one of them prices it so too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specpilot.autotune.model.baseline import load_bucket
from specpilot.autotune.model.stepcost import StepCostModel, decode_context_tokens, with_context_length, with_prefill
from specpilot.autotune.signals.measurements import Measurement, valid_value
from specpilot.autotune.signals.promql import Signal

MIN_SAMPLES = 6
MIN_BUCKETS = 3
MAX_ERROR = 0.15  # RMS relative error on its own points above which the fit is not trusted
# The roofline ridges tried, as factors of the prior's, where the prior is another set-up's profile and its own ridge
# is refused: the ridge is FLOP/s over bandwidth, a property of the GPU (an A100's is about half an H100's), and no
# scale of the prior's terms moves where its steps turn compute-bound.
RIDGE_SCALES = (0.5, 0.6, 0.7, 0.85, 1.2, 1.4, 1.7, 2.0)
EQUALLY_GOOD = 1.1  # a ridge whose RMS error is within this factor of the best's fits the windows as well
RIDGE_SPREAD = 1.25  # the equally good ridges must lie within this factor of each other for the ridge to be known
MAX_SAMPLES = 48  # kept in status.autotune; the oldest go first
PRIOR_WEIGHT = 0.005  # pull toward the profile (alpha = beta = 1, gamma = sched): weak next to 6+ points


@dataclass(frozen=True)
class StepSample:
    batch: float
    k: int  # tokens proposed per step at this batch (0: plain or K = 0)
    configured: bool  # speculation configured (its fixed overhead applies)
    step_ms: float
    context_tokens: float | None = None  # L̄ measured in that window (None: not measured, the prior's is used)
    prefill_tokens: float | None = None  # prompt tokens per step in that window (None: not measured, none)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "batch": round(self.batch, 2),
            "k": self.k,
            "configured": self.configured,
            "stepMs": round(self.step_ms, 3),
        }
        if self.context_tokens is not None:
            out["contextTokens"] = round(self.context_tokens, 1)
        if self.prefill_tokens is not None:
            out["prefillTokens"] = round(self.prefill_tokens, 1)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StepSample:
        context, prefill = raw.get("contextTokens"), raw.get("prefillTokens")
        return cls(
            float(raw["batch"]),
            int(raw["k"]),
            bool(raw["configured"]),
            float(raw["stepMs"]),
            None if context is None else float(context),
            None if prefill is None else float(prefill),
        )


def mean_output_tokens(m: Mapping[str, Measurement]) -> float | None:
    """Tokens per response in the window: generated tokens per second over finished requests per second."""
    tokens, requests = valid_value(m, Signal.GENERATION_TOKEN_RATE), valid_value(m, Signal.REQUEST_RATE)
    if tokens is None or requests is None or requests <= 0 or tokens <= 0:
        return None
    return tokens / requests


def mean_context_tokens(m: Mapping[str, Measurement]) -> float | None:
    """L̄ of the window (stepcost.decode_context_tokens) from the measured mean prompt and output lengths; None
    without a Valid mean prompt length (the cost model then keeps its assumed L̄)."""
    prompt = valid_value(m, Signal.MEAN_PROMPT_TOKENS)
    if prompt is None or prompt <= 0:
        return None
    return decode_context_tokens(prompt, mean_output_tokens(m))


def prefill_tokens_per_step(m: Mapping[str, Measurement], step_ms: float) -> float | None:
    """Prompt tokens chunked into each step of `step_ms` (stepcost.with_prefill): finished requests per second times
    their mean prompt, per engine (running requests over running requests per engine), times the step time. None
    without a Valid request rate and mean prompt length."""
    rate, prompt = valid_value(m, Signal.REQUEST_RATE), valid_value(m, Signal.MEAN_PROMPT_TOKENS)
    if rate is None or prompt is None or rate <= 0 or prompt <= 0 or step_ms <= 0:
        return None
    running, batch = valid_value(m, Signal.RUNNING_REQUESTS), valid_value(m, Signal.BATCH_SIZE)
    engines = running / batch if running is not None and batch is not None and running > 0 and batch > 0 else 1.0
    return rate * prompt / max(engines, 1.0) * step_ms / 1000


def sample_from_window(measurements: Mapping[str, Measurement], *, speculating: bool, k_at: Any) -> StepSample | None:
    """One point from a window: T = TPOT_mean x tokens per step; None unless the needed signals are Valid.

    `k_at(batch) -> int` is the K the running intent uses at that batch.
    """

    tpot, batch = valid_value(measurements, Signal.TPOT_MEAN), valid_value(measurements, Signal.BATCH_SIZE)
    if tpot is None or batch is None or batch < 1 or tpot <= 0:
        return None
    # rounded as to_dict rounds, so a sample read back from status equals the one in memory
    measured = mean_context_tokens(measurements)
    context = None if measured is None else round(measured, 1)
    length = valid_value(measurements, Signal.MEAN_ACCEPTANCE_LENGTH) if speculating else 1.0
    if length is None:
        return None
    step_ms = round(tpot * 1000 * length, 3)
    prefill = prefill_tokens_per_step(measurements, step_ms)
    prefill = None if prefill is None else round(prefill, 1)
    if not speculating:
        return StepSample(round(batch, 2), 0, False, step_ms, context, prefill)
    return StepSample(round(batch, 2), int(k_at(max(1, round(batch)))), True, step_ms, context, prefill)


@dataclass(frozen=True)
class StepFit:
    model: StepCostModel | None  # None: data too thin or the fit refused (`note` says which and why)
    verify_scale: float
    draft_scale: float
    overhead_ms: float
    rms_error: float | None
    samples: int
    buckets: int
    note: str
    ridge_scale: float = 1.0  # the fitted roofline ridge over the prior's
    # fits at other ridges about as good where the ridge is not identified (_with_rivals); a change is made only
    # where every one of them prices it so too (proposals.agreed_by_rivals)
    rivals: tuple[StepFit, ...] = ()

    @property
    def too_thin(self) -> bool:
        """Too few windows, or load buckets, for a fit to be tried (MIN_SAMPLES, MIN_BUCKETS)."""
        return self.samples < MIN_SAMPLES or self.buckets < MIN_BUCKETS

    def to_dict(self) -> dict[str, Any]:
        return {
            "used": self.model is not None,
            "verifyScale": round(self.verify_scale, 4),
            "ridgeScale": round(self.ridge_scale, 4),
            "draftScale": round(self.draft_scale, 4),
            "overheadMs": round(self.overhead_ms, 4),
            "rmsRelativeError": None if self.rms_error is None else round(self.rms_error, 4),
            "samples": self.samples,
            "loadBuckets": self.buckets,
            "note": self.note,
            "rivalRidgeScales": [round(r.ridge_scale, 4) for r in self.rivals],
        }


def _features(prior: StepCostModel, s: StepSample) -> tuple[float, float, float]:
    """The prior's terms at the sample's batch, K and context: each window is priced at the L̄ it ran with, so a
    context that grew between windows is not read as a slower target."""
    batch = max(1, round(s.batch))
    fixed = 1 + prior.spec_fixed_fraction if s.configured else 1.0
    at = _as_sampled(prior, s)
    target = at.verify_ms(batch, s.k) + at.sched_ms_per_request * batch  # the per-request work scales with alpha
    return target * fixed, at.draft_cost_ms(batch, s.k) * fixed, fixed


def _as_sampled(model: StepCostModel, s: StepSample) -> StepCostModel:
    """The model at the context and prefill the sample's window ran with (unchanged where they were not measured)."""
    return with_prefill(with_context_length(model, s.context_tokens), s.prefill_tokens, max(1, round(s.batch)))


def scaled(prior: StepCostModel, alpha: float, beta: float, gamma: float) -> StepCostModel:
    """The profile with the target's step x alpha, the drafter x beta, and gamma ms of per-step overhead."""
    return replace(
        prior,
        name=f"{prior.name} (fitted online)",
        verify_base_ms=prior.verify_base_ms * alpha,
        kv_read_ns_per_token=prior.kv_read_ns_per_token * alpha,
        eager_penalty_ms=prior.eager_penalty_ms * alpha,
        sched_ms_per_request=prior.sched_ms_per_request * alpha,
        sched_ms=gamma,
        draft_ms=prior.draft_ms * beta,
        draft_ms_per_request=prior.draft_ms_per_request * beta,
        draft_kv_ns_per_token=prior.draft_kv_ns_per_token * beta,
        draft_model_cost_ratio=prior.draft_model_cost_ratio * beta,
        lookup_fraction=prior.lookup_fraction * beta,
    )


def _solve3(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting for a 3x3 system; None when singular."""
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, 3):
            f = m[r][col] / m[col][col]
            for c in range(col, 4):
                m[r][c] -= f * m[col][c]
    x = [0.0, 0.0, 0.0]
    for r in (2, 1, 0):
        x[r] = (m[r][3] - sum(m[r][c] * x[c] for c in range(r + 1, 3))) / m[r][r]
    return x


def fit_step_cost(samples: Sequence[StepSample], prior: StepCostModel, *, fit_ridge: bool = False) -> StepFit:
    """Fit (alpha, beta, gamma) on relative error with a weak prior; the fitted model, or None with the reason.
    `fit_ridge`: the prior is another set-up's profile, so where its own ridge is refused, the ridge is fitted too
    (_fit_ridge)."""
    buckets = len({load_bucket(s.batch) for s in samples})
    n = len(samples)
    if n < MIN_SAMPLES or buckets < MIN_BUCKETS:
        return StepFit(
            None, 1.0, 1.0, prior.sched_ms, None, n, buckets,
            f"{n} windows over {buckets} load buckets (a fit needs {MIN_SAMPLES} over {MIN_BUCKETS})",
        )  # fmt: skip
    own = _fit_at(samples, prior, 1.0, buckets)
    if own.rms_error is not None and own.rms_error <= MAX_ERROR:
        used = replace(own, note=f"fitted from this deployment: {own.note}")
        return _with_rivals(samples, prior, buckets, used) if fit_ridge else used
    return _fit_ridge(samples, prior, buckets, own) if fit_ridge else _refused(own)


def _ridge_fits(samples: Sequence[StepSample], prior: StepCostModel, buckets: int) -> list[StepFit]:
    """The three scales solved at each of RIDGE_SCALES x the prior's ridge."""
    return [_fit_at(samples, replace(prior, ridge_tokens=prior.ridge_tokens * r), r, buckets) for r in RIDGE_SCALES]


def _with_rivals(samples: Sequence[StepSample], prior: StepCostModel, buckets: int, used: StepFit) -> StepFit:
    """`used` (the prior's own ridge, within MAX_ERROR) with the other ridges that fit the windows about as well as the
    best (EQUALLY_GOOD) as its rivals, where they and the prior's own spread beyond RIDGE_SPREAD: the windows then do
    not tell which split of the step between target and drafter is this hardware's."""
    assert used.rms_error is not None
    solved = [f for f in _ridge_fits(samples, prior, buckets) if f.rms_error is not None]
    best = min([used.rms_error, *(f.rms_error or 0.0 for f in solved)])
    alike = [f for f in solved if (f.rms_error or 0.0) <= best * EQUALLY_GOOD]
    scales = [1.0, *(f.ridge_scale for f in alike)]
    if not alike or max(scales) / min(scales) <= RIDGE_SPREAD:
        return used
    why = f"ridge not identified: x{min(scales):g} to x{max(scales):g} fit within {EQUALLY_GOOD - 1:.0%} of the best"
    return replace(used, note=f"{used.note}; {why}, and a change needs every one of them", rivals=tuple(alike))


def _refused(fit: StepFit) -> StepFit:
    """A solved fit whose error is above MAX_ERROR, as refused (an unsolved one says why already)."""
    if fit.rms_error is None:
        return fit
    return replace(fit, model=None, note=f"fit too poor ({fit.note})")


def _fit_ridge(samples: Sequence[StepSample], prior: StepCostModel, buckets: int, own: StepFit) -> StepFit:
    """The closest fit over the prior's own ridge (`own`, refused) and RIDGE_SCALES x it, used only where the windows
    identify the ridge (every ridge within EQUALLY_GOOD of the best error lies within RIDGE_SPREAD of the best);
    else `own` refused, with why."""
    refused = _refused(own)
    tried = [own, *_ridge_fits(samples, prior, buckets)]
    solved = [f for f in tried if f.rms_error is not None]
    if not solved:
        return refused
    best = min(solved, key=lambda f: f.rms_error or 0.0)
    assert best.rms_error is not None
    if best.rms_error > MAX_ERROR:
        return replace(refused, note=f"{refused.note}; no ridge from x{RIDGE_SCALES[0]:g} to x{RIDGE_SCALES[-1]:g} "
                                     f"fits within {MAX_ERROR:.0%}")  # fmt: skip
    alike = [f.ridge_scale for f in solved if (f.rms_error or 0.0) <= best.rms_error * EQUALLY_GOOD]
    if max(alike) / min(alike) > RIDGE_SPREAD:
        why = (
            f"ridge not identified: x{min(alike):g} to x{max(alike):g} fit within {EQUALLY_GOOD - 1:.0%} of the best "
            f"({best.note})"
        )
        return replace(refused, note=f"{refused.note}; {why}")
    return replace(best, note=f"fitted from this deployment: {best.note}")


def _fit_at(samples: Sequence[StepSample], prior: StepCostModel, ridge_scale: float, buckets: int) -> StepFit:
    """The three scales solved on `prior` (its ridge already `ridge_scale` x the profile's) with their RMS relative
    error on the samples, its model set whatever that error; no error where the system is singular or a scale is out
    of range."""
    n = len(samples)
    # rows: (v, d, fixed)/t . (alpha, beta, gamma) = 1, plus sqrt(w) * (unit rows pulling toward the prior)
    ata = [[0.0] * 3 for _ in range(3)]
    atb = [0.0] * 3
    rows: list[tuple[list[float], float]] = []
    for s in samples:
        v, d, fixed = _features(prior, s)
        rows.append(([v / s.step_ms, d / s.step_ms, fixed / s.step_ms], 1.0))
    w = PRIOR_WEIGHT * n
    rows += [([w, 0.0, 0.0], w), ([0.0, w, 0.0], w), ([0.0, 0.0, w / prior.sched_ms], w)]
    for x, y in rows:
        for i in range(3):
            atb[i] += x[i] * y
            for j in range(3):
                ata[i][j] += x[i] * x[j]
    solution = _solve3(ata, atb)
    ridge = "" if ridge_scale == 1 else f", ridge x{ridge_scale:g}"
    if solution is None:
        return StepFit(None, 1.0, 1.0, prior.sched_ms, None, n, buckets, f"fit singular{ridge}",
                       ridge_scale)  # fmt: skip
    alpha, beta, gamma = solution
    if alpha <= 0 or beta < 0 or gamma < 0:
        return StepFit(
            None, alpha, beta, gamma, None, n, buckets,
            f"fit out of range (verify x{alpha:.2f}, drafter x{beta:.2f}, overhead {gamma:.2f} ms{ridge})",
            ridge_scale,
        )  # fmt: skip
    model = scaled(prior, alpha, beta, gamma)
    errors = [
        _as_sampled(model, s).step_ms(max(1, round(s.batch)), s.k, configured=s.configured) / s.step_ms - 1
        for s in samples
    ]
    rms = math.sqrt(sum(e * e for e in errors) / n)
    shown = (
        f"verify x{alpha:.2f}, drafter x{beta:.2f}, overhead {gamma:.2f} ms{ridge}; RMS error {rms:.1%} on {n} windows"
    )
    return StepFit(model, alpha, beta, gamma, rms, n, buckets, shown, ridge_scale)


def add_sample(samples: Sequence[StepSample], sample: StepSample) -> tuple[StepSample, ...]:
    return (*samples, sample)[-MAX_SAMPLES:]
