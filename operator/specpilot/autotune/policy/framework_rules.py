"""The rest of the seed framework's judgements, made from measurements (pure).

A platform engineer makes four calls by hand today; the operator makes them here and says why, in conditions and
events, without changing the running config itself (a recommendation, never a silent change):

1. **Quantization penalty.** After a quantization change of target or draft, compare the acceptance of the first
   trustworthy window after it with the last one before it, at the same load bucket. A drop beyond
   `spec.autotune.acceptance.quantizationDropTolerance` (default 5 points, absolute) means the quantization costs
   too much: move the target from 4 to 8 bits, keep the draft precise, or relax the acceptance method. Windows at
   another load bucket or with another traffic mix (share of short responses) are not compared: "inconclusive".
2. **Acceptance method.** A quantized target whose acceptance sits between disableBelow and enableAbove is near
   break-even; the framework's lever is a relaxed acceptance method, recommended with what it renders to on this
   vLLM version (vllm/acceptance.py), or the lossless Block verification, or an upgrade where neither exists.
3. **Short outputs.** Under ~50 generated tokens the drafting overhead exceeds the gain. When at least
   `spec.autotune.workload.shortOutputFraction` of the window's responses are short, recommend speculation off,
   with the distribution (share short, median length) as evidence.
4. **Mixed workload.** P50 improves with speculation while P99 regresses: the P99/P50 ratio with speculation
   widens beyond `spec.autotune.workload.tailWideningTolerance` against speculation off at the same load (canary
   or baseline record). Turning speculation off for everyone loses the P50 gain; the recommendation is to split the
   traffic into a speculative and a plain deployment (docs/framework.md, examples/split-traffic.yaml).

Each rule returns a Finding: a condition (True = the rule fires, False = checked and fine, Unknown = inconclusive,
with the reason) and its evidence. `events_for` posts one event when a condition turns True.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from specpilot.api.durations import parse_duration
from specpilot.api.v1alpha1 import AcceptanceMethod, Quantization, SpeculativeDeploymentSpec
from specpilot.autotune.model.baseline import (
    AcceptanceWindow,
    BaselineEntry,
    ConfigKey,
    Mode,
    bucket_label,
    load_bucket,
    record_acceptance,
    summary,
)
from specpilot.autotune.policy.state import BASELINE_MAX_AGE, PolicyInputs
from specpilot.autotune.signals.measurements import Measurement, valid_value, why_not_valid
from specpilot.autotune.signals.promql import LATENCY_SIGNALS, Signal, short_output_bound
from specpilot.reconcile.conditions import (
    ACCEPTANCE_METHOD,
    MIXED_WORKLOAD,
    QUANTIZATION_PENALTY,
    SHORT_OUTPUTS,
    ConditionUpdate,
    Status,
)
from specpilot.vllm.acceptance import methods_available, relaxed_rendering
from specpilot.vllm.dialects import UnsupportedCombination, render_command
from specpilot.vllm.intent import SpeculationIntent
from specpilot.vllm.versions import Engine, VllmVersion

# The four condition types are named in conditions.py (FRAMEWORK_CONDITIONS, part of CONDITION_TYPES), so every
# object lists them from its first reconcile.
# Reasons whose condition is a problem: one Warning event when the condition turns True with one of these (the
# acceptance-method advice is a Normal event: a lever to consider, not a fault).
WARNING_REASONS = {
    QUANTIZATION_PENALTY: "QuantizationPenalty",
    SHORT_OUTPUTS: "ShortOutputs",
    MIXED_WORKLOAD: "MixedWorkload",
}
# Hysteresis: a rule that fired stays True until its signal is this far back on the other side of its threshold, so
# a workload hovering at a threshold does not post an event on every other evaluation.
SHORT_SHARE_HYSTERESIS = 0.1  # absolute share of short responses
TAIL_HYSTERESIS = 0.5  # fraction of tailWideningTolerance
TRAFFIC_MIX_TOLERANCE = 0.15  # absolute difference in the share of short responses that makes windows incomparable
# 4-bit weight formats: the framework's "INT4" target (plus weightBits 4 for formats that allow several widths).
FOUR_BIT = {
    Quantization.AWQ,
    Quantization.AWQ_MARLIN,
    Quantization.GPTQ,
    Quantization.GPTQ_MARLIN,
    Quantization.MXFP4,
    Quantization.MODELOPT_FP4,
    Quantization.BITSANDBYTES,
    Quantization.GGUF,
}


@dataclass(frozen=True)
class Finding:
    condition: str
    status: Status
    reason: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def update(self) -> ConditionUpdate:
        return ConditionUpdate(self.condition, self.status, self.reason, self.message)

    def to_dict(self) -> dict[str, Any]:
        return {
            "condition": self.condition,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class FrameworkState:
    """The per-configuration acceptance record (status.autotune.framework), bounded by baseline.record_acceptance."""

    acceptance: tuple[AcceptanceWindow, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"acceptance": [w.to_dict() for w in self.acceptance]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> FrameworkState:
        """A missing or unreadable record starts empty: a comparison then waits for new windows, never guesses."""
        try:
            return cls(tuple(AcceptanceWindow.from_dict(w) for w in (raw or {}).get("acceptance") or ()))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            return cls()


@dataclass(frozen=True)
class FrameworkInputs:
    spec: SpeculativeDeploymentSpec
    current: SpeculationIntent
    measurements: Mapping[str, Measurement]
    window_seconds: float
    engine: Engine = Engine.V1  # the engine that speculates (dialects.render_command)
    settled: bool = True  # the config ran a full window plus two scrapes, and no rollout is in flight
    canary: Mapping[str, Measurement] | None = None  # a plain canary on the same traffic, while speculating
    baseline: Sequence[BaselineEntry] = ()  # the policy's latency record (per mode, load bucket, metric)
    firing: frozenset[str] = frozenset()  # framework conditions True before this evaluation (for hysteresis)


def _count(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


def config_key(spec: SpeculativeDeploymentSpec, intent: SpeculationIntent) -> ConfigKey:
    speculation = spec.speculation
    acceptance = speculation.acceptance
    return ConfigKey(
        target_quantization=_quantization(spec.target.quantization, spec.target.weight_bits),
        draft_quantization=None
        if speculation.draft is None
        else _quantization(speculation.draft.quantization, speculation.draft.weight_bits),
        method=speculation.method.value,
        acceptance_method=(acceptance.method if acceptance is not None else AcceptanceMethod.EXACT).value,
        k=intent.num_speculative_tokens,
    )


def _quantization(quantization: Quantization, bits: int | None) -> str:
    return quantization.value if bits is None else f"{quantization.value}/{bits}bit"


def _is_four_bit(text: str) -> bool:
    name, _, bits = text.partition("/")
    return bits == "4bit" or name in {q.value for q in FOUR_BIT}


# ------------------------------------------------------------------------------------------------ record


def observe(inputs: FrameworkInputs, state: FrameworkState, now: datetime) -> FrameworkState:
    """File a settled window's acceptance under its configuration (only Valid acceptance and load count)."""
    m = inputs.measurements
    acceptance = valid_value(m, Signal.ACCEPTANCE_RATE)
    drafted = valid_value(m, Signal.DRAFT_TOKENS_IN_WINDOW)
    batch = valid_value(m, Signal.BATCH_SIZE)
    if not inputs.settled or not inputs.current.enabled or acceptance is None or drafted is None or batch is None:
        return state
    window = AcceptanceWindow(
        config=config_key(inputs.spec, inputs.current),
        bucket=load_bucket(batch),
        acceptance=round(acceptance, 4),
        draft_tokens=round(drafted),
        requests=valid_value(m, Signal.REQUESTS_IN_WINDOW),
        short_fraction=valid_value(m, Signal.OUTPUT_SHORT_FRACTION),
        at=now,
    )
    spacing = timedelta(seconds=inputs.window_seconds)
    return FrameworkState(record_acceptance(state.acceptance, window, min_spacing=spacing, now=now))


# ------------------------------------------------------------------------------------------------ rule 1


def quantization_penalty(
    record: Sequence[AcceptanceWindow], current: ConfigKey, *, tolerance: float, version: VllmVersion, engine: Engine
) -> Finding:
    """Compare the first window of `current` with the last window, before it, of a config differing only in
    quantization; the same load bucket and traffic mix, or inconclusive."""
    pair = _quantization_pair(record, current)
    if isinstance(pair, Finding):
        return pair
    first, previous, before_same_config = pair
    before = next((w for w in reversed(before_same_config) if w.bucket == first.bucket), None)
    evidence: dict[str, Any] = {"after": first.to_dict(), "tolerance": tolerance}
    change = _change_text(previous, current)
    if before is None:
        last = before_same_config[-1]
        evidence["before"] = last.to_dict()
        return Finding(
            QUANTIZATION_PENALTY,
            "Unknown",
            "Inconclusive",
            f"{change}: inconclusive, load differs (last window before at batch {bucket_label(last.bucket)}, first "
            f"after at {bucket_label(first.bucket)}); waiting for a window after the change at the same load",
            evidence,
        )
    evidence["before"] = before.to_dict()
    if (
        before.short_fraction is not None
        and first.short_fraction is not None
        and abs(before.short_fraction - first.short_fraction) > TRAFFIC_MIX_TOLERANCE
    ):
        return Finding(
            QUANTIZATION_PENALTY,
            "Unknown",
            "Inconclusive",
            f"{change}: inconclusive, traffic mix differs (short responses {before.short_fraction:.0%} before vs "
            f"{first.short_fraction:.0%} after, more than {TRAFFIC_MIX_TOLERANCE:.0%} apart)",
            evidence,
        )
    recommend = lambda: recommend_after_penalty(previous, current, version, engine)  # noqa: E731
    return _acceptance_drop(before, first, change, evidence, tolerance, recommend)


def _quantization_pair(
    record: Sequence[AcceptanceWindow], current: ConfigKey
) -> tuple[AcceptanceWindow, ConfigKey, list[AcceptanceWindow]] | Finding:
    """The first window of `current`'s run, the config that ran right before it and that config's windows; a
    Finding where there is nothing to compare: no settled window yet, or a previous config that differs in more than
    quantization."""
    # This config's current run: its windows since the last window of any other config (A -> B -> A compares
    # the second A with B, not with the first A).
    last_other = max((w.at for w in record if w.config != current), default=None)
    mine = sorted(
        (w for w in record if w.config == current and (last_other is None or w.at > last_other)), key=lambda w: w.at
    )
    if not mine:
        return Finding(
            QUANTIZATION_PENALTY, "Unknown", "NoEvidence", "no settled acceptance window for this config yet"
        )
    first = mine[0]
    earlier = sorted((w for w in record if w.at < first.at), key=lambda w: w.at)
    # Only the config that ran right before is compared, and only when quantization is all that changed.
    before_all = [w for w in earlier if earlier and w.config == earlier[-1].config]
    if not before_all or not current.same_except_quantization(before_all[-1].config):
        what = "no earlier config" if not before_all else f"the previous config was {before_all[-1].config.describe()}"
        return Finding(
            QUANTIZATION_PENALTY,
            "False",
            "NoQuantizationChange",
            f"{what}; now {current.describe()}",
        )
    previous = before_all[-1].config
    return first, previous, [w for w in before_all if w.config == previous]


def _acceptance_drop(
    before: AcceptanceWindow,
    first: AcceptanceWindow,
    change: str,
    evidence: dict[str, Any],
    tolerance: float,
    recommend: Callable[[], str],
) -> Finding:
    """The verdict on two windows at the same load and traffic mix: a penalty where acceptance fell by more than
    `tolerance`, with the step `recommend` gives after it; kept otherwise."""
    drop = before.acceptance - first.acceptance
    numbers = (
        f"acceptance {before.acceptance:.2f} ({_count(before.draft_tokens)} draft tokens, "
        f"{_count(before.requests)} requests) before vs {first.acceptance:.2f} ({_count(first.draft_tokens)} draft "
        f"tokens, {_count(first.requests)} requests) after, at batch {bucket_label(first.bucket)}"
    )
    evidence["drop"] = round(drop, 4)
    if drop > tolerance:
        step = recommend()
        evidence["recommendation"] = step
        return Finding(
            QUANTIZATION_PENALTY,
            "True",
            "QuantizationPenalty",
            f"{change}: {numbers}, a drop of {drop * 100:.1f} points > quantizationDropTolerance "
            f"{tolerance * 100:.1f}; {step}",
            evidence,
        )
    return Finding(
        QUANTIZATION_PENALTY,
        "False",
        "AcceptanceKept",
        f"{change}: {numbers}, a drop of {drop * 100:.1f} points (tolerance {tolerance * 100:.1f})",
        evidence,
    )


def _change_text(before: ConfigKey, after: ConfigKey) -> str:
    parts = []
    if before.target_quantization != after.target_quantization:
        parts.append(f"target {before.target_quantization} -> {after.target_quantization}")
    if before.draft_quantization != after.draft_quantization:
        parts.append(f"draft {before.draft_quantization} -> {after.draft_quantization}")
    return "quantization changed (" + ", ".join(parts) + ")"


def _relaxed_hint(version: VllmVersion, engine: Engine) -> str:
    rendered = relaxed_rendering(version, engine)
    if rendered is not None:
        return f"set spec.speculation.acceptance.method: Relaxed (renders {rendered} on vLLM {version})"
    if AcceptanceMethod.BLOCK in methods_available(version, engine):
        return (
            f"vLLM {version} has no relaxed acceptance method; spec.speculation.acceptance.method: Block "
            "(lossless block verification) accepts more per step, and vLLM 0.33+ offers Relaxed (FLy)"
        )
    return f"vLLM {version} offers no acceptance method but Exact; vLLM 0.26+ has Block and 0.33+ Relaxed (FLy)"


def recommend_after_penalty(before: ConfigKey, after: ConfigKey, version: VllmVersion, engine: Engine) -> str:
    """The specific next step for a quantization that costs too much acceptance."""
    steps = []
    if after.target_quantization != before.target_quantization:
        if _is_four_bit(after.target_quantization):
            steps.append(
                f"move the target from 4-bit ({after.target_quantization}) to 8-bit weights (e.g. spec.target."
                "quantization: fp8)"
            )
        else:
            steps.append(f"revert spec.target.quantization to {before.target_quantization.split('/')[0]}")
    if after.draft_quantization != before.draft_quantization and after.draft_quantization is not None:
        steps.append(
            f"keep the draft at {before.draft_quantization} (spec.speculation.draft.quantization): it is small, "
            "so quantizing it saves little memory"
        )
    if after.acceptance_method == AcceptanceMethod.EXACT.value:
        steps.append(_relaxed_hint(version, engine))
    return "recommend: " + "; or ".join(steps)


# ------------------------------------------------------------------------------------------------ rule 2


def acceptance_method_advice(inputs: FrameworkInputs, version: VllmVersion) -> Finding:
    """A quantized target between disableBelow and enableAbove: recommend the method lever (never apply it)."""
    spec = inputs.spec
    below, above = spec.autotune.acceptance.disable_below, spec.autotune.acceptance.enable_above
    acceptance = valid_value(inputs.measurements, Signal.ACCEPTANCE_RATE)
    method = spec.speculation.acceptance.method if spec.speculation.acceptance else AcceptanceMethod.EXACT
    if spec.target.quantization is Quantization.NONE:
        return Finding(ACCEPTANCE_METHOD, "False", "TargetNotQuantized", "the target runs unquantized weights")
    if method is not AcceptanceMethod.EXACT:
        return Finding(ACCEPTANCE_METHOD, "False", "MethodChosen", f"acceptance method {method.value} already set")
    if not inputs.current.enabled or acceptance is None:
        why = (
            "speculation off"
            if not inputs.current.enabled
            else why_not_valid(inputs.measurements, Signal.ACCEPTANCE_RATE)
        )
        return Finding(ACCEPTANCE_METHOD, "Unknown", "NoEvidence", f"no acceptance to judge: {why}")
    evidence: dict[str, Any] = {"acceptance": round(acceptance, 4), "disableBelow": below, "enableAbove": above}
    if below <= acceptance < above:
        hint = _relaxed_hint(version, inputs.engine)
        evidence["recommendation"] = hint
        return Finding(
            ACCEPTANCE_METHOD,
            "True",
            "RelaxedAcceptanceRecommended",
            f"target quantized ({spec.target.quantization.value}) with acceptance {acceptance:.2f} between "
            f"disableBelow {below:.2f} and enableAbove {above:.2f} (near break-even, "
            f"{_count(valid_value(inputs.measurements, Signal.DRAFT_TOKENS_IN_WINDOW))} draft tokens): {hint}",
            evidence,
        )
    side = "at or above enableAbove" if acceptance >= above else "below disableBelow (the policy switches off)"
    return Finding(ACCEPTANCE_METHOD, "False", "NotNearBreakEven", f"acceptance {acceptance:.2f} is {side}", evidence)


# ------------------------------------------------------------------------------------------------ rule 3


def short_outputs(inputs: FrameworkInputs) -> Finding:
    """Most responses short -> recommend speculation off, with the distribution as evidence."""
    workload = inputs.spec.autotune.workload
    m = inputs.measurements
    share = valid_value(m, Signal.OUTPUT_SHORT_FRACTION)
    bound = short_output_bound(workload.short_output_tokens)
    if share is None:
        return Finding(SHORT_OUTPUTS, "Unknown", "NoEvidence", why_not_valid(m, Signal.OUTPUT_SHORT_FRACTION))
    median = valid_value(m, Signal.OUTPUT_TOKENS_P50)
    requests = valid_value(m, Signal.REQUESTS_IN_WINDOW)
    evidence: dict[str, Any] = {
        "shortFraction": round(share, 4),
        "shortTokens": bound,
        "medianTokens": None if median is None else round(median, 1),
        "requests": None if requests is None else round(requests),
        "threshold": workload.short_output_fraction,
    }
    text = (
        f"{share:.0%} of {_count(requests)} responses generated <= {bound} tokens"
        + ("" if median is None else f" (median {median:.0f})")
        + f"; shortOutputFraction {workload.short_output_fraction:.0%}"
    )
    fraction = workload.short_output_fraction
    if share >= (fraction - SHORT_SHARE_HYSTERESIS if SHORT_OUTPUTS in inputs.firing else fraction):
        advice = (
            "recommend speculation off (spec.speculation.enabled: false or overrides.speculation: ForceOff): "
            "drafting overhead exceeds the gain on short responses"
            if inputs.current.enabled
            else "speculation is off, as short responses favour"
        )
        return Finding(SHORT_OUTPUTS, "True", "ShortOutputs", f"{text}; {advice}", evidence)
    return Finding(SHORT_OUTPUTS, "False", "OutputsLongEnough", text, evidence)


# ------------------------------------------------------------------------------------------------ rule 4


def mixed_workload(inputs: FrameworkInputs, now: datetime) -> Finding:
    """P50 better and P99/P50 wider with speculation than without it at the same load: recommend a traffic split."""
    spec = inputs.spec
    metric = spec.autotune.latency.metric.value
    tolerance = spec.autotune.workload.tail_widening_tolerance
    p50_signal, p99_signal = LATENCY_SIGNALS[metric]
    m = inputs.measurements
    if not inputs.current.enabled:
        return Finding(MIXED_WORKLOAD, "Unknown", "NoEvidence", "speculation off: nothing to compare")
    p50, p99, batch = valid_value(m, p50_signal), valid_value(m, p99_signal), valid_value(m, Signal.BATCH_SIZE)
    if p50 is None or p99 is None or batch is None or p50 <= 0:
        missing = next(s for s, v in ((p50_signal, p50), (p99_signal, p99), (Signal.BATCH_SIZE, batch)) if not v)
        return Finding(MIXED_WORKLOAD, "Unknown", "NoEvidence", why_not_valid(m, missing))
    bucket = load_bucket(batch)
    reference = _plain_reference(inputs, metric, bucket, now)
    if isinstance(reference, str):
        return Finding(MIXED_WORKLOAD, "Unknown", "Inconclusive", reference)
    base_p50, base_p99, source = reference
    ratio_on, ratio_off = p99 / p50, base_p99 / base_p50
    name = metric.upper()
    evidence = {
        "source": source,
        "bucket": bucket_label(bucket),
        "speculative": {"p50Ms": round(p50 * 1000, 3), "p99Ms": round(p99 * 1000, 3), "ratio": round(ratio_on, 3)},
        "plain": {"p50Ms": round(base_p50 * 1000, 3), "p99Ms": round(base_p99 * 1000, 3), "ratio": round(ratio_off, 3)},
        "tolerance": tolerance,
    }
    text = (
        f"P99/P50 {name} {ratio_on:.2f} with speculation ({p99 * 1000:.1f}/{p50 * 1000:.1f} ms) vs {ratio_off:.2f} "
        f"without ({base_p99 * 1000:.1f}/{base_p50 * 1000:.1f} ms, {source}) at batch {bucket_label(bucket)}"
    )
    needed = tolerance * (TAIL_HYSTERESIS if MIXED_WORKLOAD in inputs.firing else 1.0)
    if p50 < base_p50 and ratio_on > ratio_off * (1 + needed):
        return Finding(
            MIXED_WORKLOAD,
            "True",
            "MixedWorkload",
            f"{text}: P50 improves {p50 / base_p50 - 1:+.0%} while the tail widens {ratio_on / ratio_off - 1:+.0%} "
            f"(tolerance {tolerance:.0%}); recommend splitting the traffic into a speculative and a plain "
            "SpeculativeDeployment (docs/framework.md) rather than switching speculation off for everyone",
            evidence,
        )
    return Finding(MIXED_WORKLOAD, "False", "TailNotWidened", text, evidence)


def _plain_reference(
    inputs: FrameworkInputs, metric: str, bucket: int, now: datetime
) -> tuple[float, float, str] | str:
    """(P50 s, P99 s, source) without speculation at this load: the canary first, else the baseline record."""
    p50_signal, p99_signal = LATENCY_SIGNALS[metric]
    if inputs.canary is not None:
        c50, c99, cbatch = (valid_value(inputs.canary, s) for s in (p50_signal, p99_signal, Signal.BATCH_SIZE))
        if c50 and c99 and cbatch is not None and load_bucket(cbatch) == bucket:
            return c50, c99, "plain canary"
    base = summary(inputs.baseline, mode=Mode.OFF, bucket=bucket, metric=metric, now=now, max_age=BASELINE_MAX_AGE)
    if base is None or base.p50_ms <= 0:
        return f"inconclusive: no plain canary and no non-speculative baseline at batch {bucket_label(bucket)}"
    return base.p50_ms / 1000, base.p99_ms / 1000, f"baseline record, {base.windows} window(s)"


# ------------------------------------------------------------------------------------------------ together


def evaluate(inputs: FrameworkInputs, state: FrameworkState, now: datetime) -> tuple[list[Finding], FrameworkState]:
    """Every rule on one evaluation; the record is updated first so a change is judged on its first window."""
    state = observe(inputs, state, now)
    version = VllmVersion.parse(inputs.spec.engine.version)
    key = config_key(inputs.spec, inputs.current)
    findings = [
        quantization_penalty(
            state.acceptance,
            key,
            tolerance=inputs.spec.autotune.acceptance.quantization_drop_tolerance,
            version=version,
            engine=inputs.engine,
        ),
        acceptance_method_advice(inputs, version),
        short_outputs(inputs),
        mixed_workload(inputs, now),
    ]
    return findings, state


def assess(
    policy: PolicyInputs,
    baseline: Sequence[BaselineEntry],
    record: Mapping[str, Any] | None,
    previous: Sequence[Mapping[str, Any]],
    now: datetime,
) -> tuple[list[Finding], FrameworkState]:
    """The rules on what the policy saw, from the stored status (`record` = status.autotune.framework, `previous` =
    status.conditions): the operator's evaluation (autotune.conclude) and the `specpilot evaluate` dry run both call
    this, so the dry run prints exactly the findings the operator would put in status.recommendation.framework."""
    return evaluate(_inputs_from_policy(policy, baseline, now, previous), FrameworkState.from_dict(record), now)


def _inputs_from_policy(
    policy: PolicyInputs, baseline: Sequence[BaselineEntry], now: datetime, previous: Sequence[Mapping[str, Any]]
) -> FrameworkInputs:
    """The framework rules see what the policy saw; a window counts once the config settled."""
    spec = policy.spec
    settle = policy.window.seconds + 2 * parse_duration(spec.autotune.scrape_interval)
    settled = not policy.rollout_in_progress and (
        policy.config_since is None or now >= policy.config_since + timedelta(seconds=settle)
    )
    try:
        engine = render_command(spec, policy.current.with_speculation()).engine
    except UnsupportedCombination:
        engine = Engine.V1
    return FrameworkInputs(
        spec=spec,
        current=policy.current,
        measurements=policy.measurements,
        window_seconds=policy.window.seconds,
        engine=engine,
        settled=settled,
        canary=policy.canary if policy.current.enabled else None,
        baseline=baseline,
        firing=frozenset(str(c.get("type")) for c in previous if c.get("status") == "True"),
    )


def keep_verdicts(findings: Sequence[Finding], previous: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """An inconclusive window (Unknown: too few responses while a new pod warms up, a rollout) keeps the condition's
    last verdict, so a rule that holds is told once, not again after every rollout."""
    before = {str(c.get("type")): c for c in previous}
    kept = []
    for finding in findings:
        old = before.get(finding.condition) or {}
        if finding.status == "Unknown" and old.get("status") in ("True", "False"):
            finding = replace(
                finding, status=old["status"], reason=str(old.get("reason", "")), message=str(old.get("message", ""))
            )
        kept.append(finding)
    return kept


def events_for(findings: Sequence[Finding], previous: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(type, reason, message) once per rule turning True (or changing its True reason): one event, not one per tick."""
    before = {str(c.get("type")): c for c in previous}
    out = []
    for finding in findings:
        old = before.get(finding.condition) or {}
        if finding.status != "True" or (old.get("status"), old.get("reason")) == ("True", finding.reason):
            continue
        kind = "Warning" if finding.reason == WARNING_REASONS.get(finding.condition) else "Normal"
        out.append((kind, finding.reason, finding.message))
    return out
