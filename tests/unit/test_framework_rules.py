"""The seed framework's four remaining rules (framework_rules.py): table-driven, pure, inconclusive cases included."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec, parse_spec
from specpilot.autotune.model.baseline import (
    ACCEPTANCE_WINDOWS_PER_CONFIG,
    AcceptanceWindow,
    BaselineEntry,
    ConfigKey,
    Mode,
    record_acceptance,
)
from specpilot.autotune.policy import framework_rules as fr
from specpilot.autotune.policy.framework_rules import (
    Finding,
    FrameworkInputs,
    FrameworkState,
    acceptance_method_advice,
    config_key,
    evaluate,
    events_for,
    mixed_workload,
    quantization_penalty,
    short_outputs,
)
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass
from specpilot.autotune.signals.promql import Signal
from specpilot.reconcile.conditions import SHORT_OUTPUTS
from specpilot.vllm.intent import SpeculationIntent
from specpilot.vllm.versions import Engine, v

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
ON = SpeculationIntent(True, 4)


def spec(target_q: str = "none", draft_q: str = "none", version: str = "0.33.0", **extra: Any) -> Any:
    raw: dict[str, Any] = {
        "engine": {"image": "vllm/vllm-openai", "version": version},
        "target": {"model": "meta-llama/Llama-3.1-70B-Instruct", "quantization": target_q},
        "speculation": {
            "method": "draft_model",
            "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct", "quantization": draft_q},
            "numSpeculativeTokens": 4,
            **extra.pop("speculation", {}),
        },
        "autotune": {"mode": "Recommend", **extra.pop("autotune", {})},
    }
    return parse_spec(raw)


def key(target_q: str = "none", draft_q: str | None = "none", method: str = "Exact", k: int = 4) -> ConfigKey:
    return ConfigKey(target_q, draft_q, "draft_model", method, k)


def window(
    config: ConfigKey, acceptance: float, at: int, bucket: int = 3, short: float | None = None
) -> AcceptanceWindow:
    return AcceptanceWindow(config, bucket, acceptance, 3000, 120, short, T0 + at * MIN)


def m(signal: Signal, value: float | None, klass: MeasurementClass = MeasurementClass.VALID) -> Measurement:
    return Measurement(signal.value, "q", klass, value, None, "detail")


def measured(**values: float | None) -> dict[str, Measurement]:
    out = {}
    for name, value in values.items():
        signal = Signal(name)
        out[name] = m(signal, value) if value is not None else m(signal, None, MeasurementClass.NO_DATA)
    return out


def inputs(s: SpeculativeDeploymentSpec, ms: dict[str, Measurement], **kw: Any) -> FrameworkInputs:
    return FrameworkInputs(spec=s, current=kw.pop("current", ON), measurements=ms, window_seconds=300, **kw)


# ------------------------------------------------------------------------------------------------ rule 1

FP16, INT4, INT8 = key("none"), key("awq"), key("fp8")

PENALTY_CASES: list[tuple[str, list[AcceptanceWindow], ConfigKey, str, str, tuple[str, ...]]] = [
    ("drop of 8 points, INT4 target", [window(FP16, 0.71, 0), window(FP16, 0.72, 10), window(INT4, 0.64, 30)],
     INT4, "True", "QuantizationPenalty",
     ("target none -> awq", "0.72", "0.64", "8.0 points", "3,000 draft tokens", "120 requests", "8-bit",
      "Relaxed (renders rejection_sample_method fly on vLLM 0.33.0)")),
    ("drop of 3 points is within tolerance", [window(FP16, 0.72, 0), window(INT8, 0.69, 30)],
     INT8, "False", "AcceptanceKept", ("3.0 points", "tolerance 5.0")),
    ("the last window before counts, not an older one", [window(FP16, 0.60, 0), window(FP16, 0.72, 10),
                                                         window(INT8, 0.70, 30)],
     INT8, "False", "AcceptanceKept", ("0.72",)),
    ("the first window after counts, not a later one", [window(FP16, 0.72, 0), window(INT8, 0.70, 30),
                                                        window(INT8, 0.50, 40)],
     INT8, "False", "AcceptanceKept", ("0.70",)),
    ("load differs: inconclusive", [window(FP16, 0.72, 0, bucket=2), window(INT4, 0.60, 30, bucket=4)],
     INT4, "Unknown", "Inconclusive", ("load differs", "[2,4)", "[8,16)")),
    ("same bucket found further back", [window(FP16, 0.72, 0, bucket=4), window(FP16, 0.70, 5, bucket=2),
                                        window(INT4, 0.60, 30, bucket=4)],
     INT4, "True", "QuantizationPenalty", ("0.72", "12.0 points")),
    ("traffic mix differs: inconclusive", [window(FP16, 0.72, 0, short=0.1), window(INT4, 0.60, 30, short=0.5)],
     INT4, "Unknown", "Inconclusive", ("traffic mix differs", "10%", "50%")),
    ("K changed too: not a quantization comparison", [window(key("none", k=3), 0.72, 0), window(INT4, 0.60, 30)],
     INT4, "False", "NoQuantizationChange", ()),
    ("no window of the new config yet", [window(FP16, 0.72, 0)], INT4, "Unknown", "NoEvidence", ()),
    ("reverted: the second run is compared with the config right before it",
     [window(FP16, 0.72, 0), window(INT4, 0.60, 30), window(FP16, 0.71, 60)], FP16, "False", "AcceptanceKept",
     ("target awq -> none", "0.60", "0.71", "-11.0 points")),
    ("an intermediate K change breaks the chain", [window(FP16, 0.72, 0), window(key("none", k=3), 0.70, 20),
                                                   window(INT4, 0.60, 40)],
     INT4, "False", "NoQuantizationChange", ("K=3",)),
    ("the new config's window before settling elsewhere is ignored: NoEvidence until its current run records",
     [window(INT4, 0.60, 0), window(FP16, 0.72, 10)], INT4, "Unknown", "NoEvidence", ()),
    ("draft quantized", [window(FP16, 0.72, 0), window(key("none", "fp8"), 0.62, 30)], key("none", "fp8"),
     "True", "QuantizationPenalty", ("draft none -> fp8", "keep the draft at none")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("record", "current", "status", "reason", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in PENALTY_CASES],
)
def test_quantization_penalty(
    record: list[AcceptanceWindow], current: ConfigKey, status: str, reason: str, words: tuple[str, ...]
) -> None:
    finding = quantization_penalty(record, current, tolerance=0.05, version=v("0.33.0"), engine=Engine.V1)
    assert (finding.status, finding.reason) == (status, reason), finding.message
    for word in words:
        assert word in finding.message


@pytest.mark.parametrize(
    ("version", "engine", "hint"),
    [
        ("0.9.2", Engine.V0, "renders typical_acceptance_sampler on vLLM 0.9.2"),
        ("0.26.0", Engine.V1, "no relaxed acceptance method; spec.speculation.acceptance.method: Block"),
        ("0.20.0", Engine.V1, "offers no acceptance method but Exact"),
    ],
)
def test_penalty_recommendation_names_what_the_version_offers(version: str, engine: Engine, hint: str) -> None:
    record = [window(FP16, 0.72, 0), window(INT4, 0.60, 30)]
    finding = quantization_penalty(record, INT4, tolerance=0.05, version=v(version), engine=engine)
    assert hint in finding.message


def test_record_keeps_the_first_window_after_a_change_and_the_latest() -> None:
    record: tuple[AcceptanceWindow, ...] = ()
    for i in range(6):
        record = record_acceptance(
            record, window(INT8, 0.7 + i / 100, i * 10), min_spacing=5 * MIN, now=T0 + i * 10 * MIN
        )
    assert len(record) == ACCEPTANCE_WINDOWS_PER_CONFIG
    assert [round(w.acceptance, 2) for w in record] == [0.70, 0.74, 0.75]
    # a window closer than the spacing repeats data: not recorded
    again = record_acceptance(record, window(INT8, 0.1, 52), min_spacing=5 * MIN, now=T0 + 52 * MIN)
    assert again == record


def test_framework_state_round_trips_and_survives_garbage() -> None:
    state = FrameworkState((window(FP16, 0.72, 0, short=0.25), window(INT4, 0.6, 30)))
    assert FrameworkState.from_dict(state.to_dict()) == state
    assert FrameworkState.from_dict({"acceptance": [{"config": {}}]}) == FrameworkState()


def test_config_key_from_spec() -> None:
    assert config_key(spec("gptq_marlin", "fp8"), ON) == ConfigKey("gptq_marlin", "fp8", "draft_model", "Exact", 4)
    bits = parse_spec(
        {
            "engine": {"image": "i", "version": "0.33.0"},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct", "quantization": "compressed-tensors",
                       "weightBits": 4},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3, "acceptance": {"method": "Block"}},
        }
    )  # fmt: skip
    assert config_key(bits, SpeculationIntent(True, 3)) == ConfigKey(
        "compressed-tensors/4bit", None, "ngram", "Block", 3
    )


# ------------------------------------------------------------------------------------------------ rule 2

METHOD_CASES: list[tuple[str, Any, dict[str, float | None], str, str, tuple[str, ...]]] = [
    ("quantized, between the thresholds", spec("awq"), {"acceptance_rate": 0.58, "draft_tokens_in_window": 4000},
     "True", "RelaxedAcceptanceRecommended", ("0.58", "disableBelow 0.50", "enableAbove 0.65", "4,000 draft tokens",
                                              "Relaxed (renders rejection_sample_method fly")),
    ("quantized, healthy", spec("awq"), {"acceptance_rate": 0.8}, "False", "NotNearBreakEven", ("at or above",)),
    ("quantized, below disableBelow", spec("awq"), {"acceptance_rate": 0.3}, "False", "NotNearBreakEven",
     ("below disableBelow",)),
    ("not quantized", spec(), {"acceptance_rate": 0.58}, "False", "TargetNotQuantized", ()),
    ("method already chosen", spec("awq", speculation={"acceptance": {"method": "Block"}}), {"acceptance_rate": 0.58},
     "False", "MethodChosen", ("Block",)),
    ("no acceptance evidence", spec("awq"), {"acceptance_rate": None}, "Unknown", "NoEvidence", ("NoData",)),
    ("0.32: Block instead", spec("awq", version="0.32.0"), {"acceptance_rate": 0.6}, "True",
     "RelaxedAcceptanceRecommended", ("no relaxed acceptance method", "Block")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("s", "values", "status", "reason", "words"), [pytest.param(*c[1:], id=c[0]) for c in METHOD_CASES]
)
def test_acceptance_method_advice(
    s: Any, values: dict[str, float | None], status: str, reason: str, words: tuple[str, ...]
) -> None:
    finding = acceptance_method_advice(inputs(s, measured(**values)), v(s.engine.version))
    assert (finding.status, finding.reason) == (status, reason), finding.message
    for word in words:
        assert word in finding.message


# ------------------------------------------------------------------------------------------------ rule 3

SHORT_CASES: list[tuple[str, dict[str, Any], dict[str, float | None], SpeculationIntent, str, str, tuple[str, ...]]] = [
    ("most short", {}, {"output_short_fraction": 0.7, "output_tokens_p50": 23, "requests_in_window": 400}, ON,
     "True", "ShortOutputs", ("70% of 400 responses generated <= 50 tokens", "median 23", "recommend speculation off")),
    ("few short", {}, {"output_short_fraction": 0.2, "requests_in_window": 400}, ON, "False", "OutputsLongEnough",
     ("20%",)),
    ("threshold at a bucket edge below", {"workload": {"shortOutputTokens": 64, "shortOutputFraction": 0.6}},
     {"output_short_fraction": 0.6}, ON, "True", "ShortOutputs", ("<= 50 tokens", "shortOutputFraction 60%")),
    ("short while off", {}, {"output_short_fraction": 0.9}, SpeculationIntent(False, 4), "True", "ShortOutputs",
     ("speculation is off",)),
    ("too few requests: inconclusive", {}, {"output_short_fraction": None}, ON, "Unknown", "NoEvidence", ("NoData",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("autotune", "values", "current", "status", "reason", "words"),
    [pytest.param(*c[1:], id=c[0]) for c in SHORT_CASES],
)
def test_short_outputs(
    autotune: dict[str, Any],
    values: dict[str, float | None],
    current: SpeculationIntent,
    status: str,
    reason: str,
    words: tuple[str, ...],
) -> None:
    finding = short_outputs(inputs(spec(autotune=autotune), measured(**values), current=current))
    assert (finding.status, finding.reason) == (status, reason), finding.message
    for word in words:
        assert word in finding.message


# ------------------------------------------------------------------------------------------------ rule 4


def off_entry(p50_ms: float, p99_ms: float, bucket: int = 3) -> BaselineEntry:
    return BaselineEntry(Mode.OFF, bucket, "tpot", p50_ms, p99_ms, None, None, 200, T0)


MIXED_CASES: list[tuple[str, dict[str, float | None], list[BaselineEntry], dict[str, float] | None, str, str,
                        tuple[str, ...]]] = [
    ("P50 better, tail much wider", {"tpot_p50": 0.010, "tpot_p99": 0.060, "batch_size": 5}, [off_entry(20, 40)], None,
     "True", "MixedWorkload", ("P99/P50 TPOT 6.00 with speculation", "2.00 without", "P50 improves -50%",
                               "tail widens +200%", "splitting the traffic")),
    ("P50 better, tail as before", {"tpot_p50": 0.010, "tpot_p99": 0.021, "batch_size": 5}, [off_entry(20, 40)], None,
     "False", "TailNotWidened", ()),
    ("P50 worse: not a mixed workload", {"tpot_p50": 0.030, "tpot_p99": 0.200, "batch_size": 5}, [off_entry(20, 40)],
     None, "False", "TailNotWidened", ()),
    ("no baseline at this load: inconclusive", {"tpot_p50": 0.010, "tpot_p99": 0.060, "batch_size": 20},
     [off_entry(20, 40)], None, "Unknown", "Inconclusive", ("[16,32)",)),
    ("canary at the same load", {"tpot_p50": 0.010, "tpot_p99": 0.060, "batch_size": 5}, [],
     {"tpot_p50": 0.020, "tpot_p99": 0.030, "batch_size": 6}, "True", "MixedWorkload", ("plain canary",)),
    ("canary at another load falls back to the record", {"tpot_p50": 0.010, "tpot_p99": 0.060, "batch_size": 5},
     [off_entry(20, 40)], {"tpot_p50": 0.020, "tpot_p99": 0.030, "batch_size": 30}, "True", "MixedWorkload",
     ("baseline record",)),
    ("no P99: no evidence", {"tpot_p50": 0.010, "tpot_p99": None, "batch_size": 5}, [off_entry(20, 40)], None,
     "Unknown", "NoEvidence", ("tpot_p99",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("values", "record", "canary", "status", "reason", "words"), [pytest.param(*c[1:], id=c[0]) for c in MIXED_CASES]
)
def test_mixed_workload(
    values: dict[str, float | None],
    record: list[BaselineEntry],
    canary: dict[str, float] | None,
    status: str,
    reason: str,
    words: tuple[str, ...],
) -> None:
    plain = None if canary is None else measured(**canary)
    finding = mixed_workload(inputs(spec(), measured(**values), canary=plain, baseline=record), T0 + MIN)
    assert (finding.status, finding.reason) == (status, reason), finding.message
    for word in words:
        assert word in finding.message


# ------------------------------------------------------------------------------------------------ together


def test_a_quantization_change_is_judged_on_its_first_settled_window_and_warns_once() -> None:
    """The record fills from evaluations; the INT4 target's first window after the change sets the condition, and
    only the transition posts an event."""
    before = {"acceptance_rate": 0.72, "draft_tokens_in_window": 3000, "batch_size": 5, "requests_in_window": 150}
    after = before | {"acceptance_rate": 0.64}
    state = FrameworkState()
    findings, state = evaluate(inputs(spec("none"), measured(**before)), state, T0)
    assert findings[0].reason == "NoQuantizationChange"
    # the rollout is still settling: the window is not recorded and nothing is judged
    findings, state = evaluate(inputs(spec("awq"), measured(**after), settled=False), state, T0 + 10 * MIN)
    assert findings[0].reason == "NoEvidence"
    findings, state = evaluate(inputs(spec("awq"), measured(**after)), state, T0 + 20 * MIN)
    assert (findings[0].status, findings[0].reason) == ("True", "QuantizationPenalty")
    assert "0.72" in findings[0].message
    assert "0.64" in findings[0].message
    events = events_for(findings, [])
    assert [e[:2] for e in events] == [("Warning", "QuantizationPenalty"), ("Normal", "RelaxedAcceptanceRecommended")]
    stored = [{"type": f.condition, "status": f.status, "reason": f.reason} for f in findings]
    findings, state = evaluate(inputs(spec("awq"), measured(**after)), state, T0 + 30 * MIN)
    assert findings[0].reason == "QuantizationPenalty"
    assert events_for(findings, stored) == []


def test_events_only_for_rules_that_fire() -> None:
    quiet = [Finding("MixedWorkload", "False", "TailNotWidened", ""), Finding("ShortOutputs", "Unknown", "X", "")]
    assert events_for(quiet, []) == []


# ------------------------------------------------------------------------------------------------ through the seams


def test_quantization_penalty_through_the_seams() -> None:
    """autotune.conclude -> reconcile -> status as the API server stores it (merge patch, pruned): the acceptance
    record survives in status.autotune.framework, a target quantized to AWQ is judged on its first settled window,
    QuantizationPenalty turns True with both numbers, and exactly one Warning event is posted."""
    import copy

    from tests.seams import ROUND_TRIP_SPEC, Cluster, window_measurements

    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["autotune"]["mode"] = "Recommend"
    cluster = Cluster(raw)
    cluster.reconcile()
    cluster.settle()
    for _ in range(2):
        cluster.advance(4)
        cluster.evaluate(window_measurements(speculating=True, acceptance=0.72, batch=5))
    stored = cluster.status["autotune"]["framework"]["acceptance"]
    assert [w["acceptance"] for w in stored] == [0.72, 0.72]
    penalty = next(c for c in cluster.status["conditions"] if c["type"] == "QuantizationPenalty")
    assert (penalty["status"], penalty["reason"]) == ("False", "NoQuantizationChange")

    cluster.spec["target"]["quantization"] = "awq"
    cluster.advance(1)
    cluster.reconcile()
    cluster.settle()
    cluster.advance(1)  # not settled yet (window 2m + 2 scrapes): the window is not recorded
    cluster.evaluate(window_measurements(speculating=True, acceptance=0.64, batch=5))
    assert len(cluster.status["autotune"]["framework"]["acceptance"]) == 2
    for _ in range(3):
        cluster.advance(4)
        cluster.evaluate(window_measurements(speculating=True, acceptance=0.64, batch=5))
    penalty = next(c for c in cluster.status["conditions"] if c["type"] == "QuantizationPenalty")
    assert (penalty["status"], penalty["reason"]) == ("True", "QuantizationPenalty")
    for words in ("target none -> awq", "0.72", "0.64", "8.0 points", "20,000 draft tokens", "400 requests"):
        assert words in penalty["message"]
    warnings = [e for e in cluster.events if e.reason == "QuantizationPenalty"]
    assert [e.type for e in warnings] == ["Warning"]
    assert cluster.status["recommendation"]["framework"][0]["condition"] == "QuantizationPenalty"


# ------------------------------------------------------------------------------------------------ in the simulator


@functools.cache
def simulated_window(
    alpha_multiplier: float, short_every: int = 0, seconds: float = 420, seed: int = 1
) -> dict[str, Measurement]:
    """specpilot's real `measure` over simulated scrapes (bench/queries.py) of 10 QPS on Llama 8B + EAGLE-3, K=3.

    `short_every`: 7 of every 10 responses are 20 tokens long when set, else all 150. `alpha_multiplier` scales the
    drafter's acceptance, as a quantized target that agrees less with its draft would."""
    from specpilot.autotune.evaluate import measure
    from specpilot.autotune.signals.promql import Scope
    from specpilot.bench.queries import ScrapeHistory, SimQueryClient, snapshot
    from specpilot.bench.specpilot_policy import bench_spec, to_datetime, to_seconds
    from specpilot.sim.engine import Engine, EngineConfig, SimRequest, SpecConfig
    from specpilot.sim.presets import LLAMA8B_H100
    from specpilot.vllm.metrics import metric_names_for
    from specpilot.vllm.versions import VllmVersion

    version = VllmVersion.parse("0.32.0")
    config = EngineConfig(LLAMA8B_H100, version, "bench", 256, speculation=SpecConfig("eagle3", 3))
    engine = Engine(config, seed=seed)
    history = ScrapeHistory()
    next_scrape, n = 15.0, 0
    while engine.now < seconds:
        while n * 0.1 <= engine.now:
            output = 20 if short_every and n % 10 < 7 else 150
            engine.submit(SimRequest(f"r{n}", n * 0.1, 200, output, alpha_multiplier=alpha_multiplier))
            n += 1
        if engine.has_work():
            engine.step()
        else:  # short responses finish before the next arrival: idle until it
            engine.advance_idle(n * 0.1)
        while next_scrape <= engine.now:
            history.add(snapshot(engine.metrics, next_scrape))
            next_scrape += 15.0
    s = bench_spec(LLAMA8B_H100, "eagle3", 3, 256, 8192)
    scope = Scope("bench", "bench", "sim")
    client = SimQueryClient(metric_names_for(version), scope, history, to_seconds, 50, 8192)
    return dict(measure(s, scope, client, to_datetime(seconds)))


def bench_target(quantization: str) -> SpeculativeDeploymentSpec:
    from specpilot.bench.specpilot_policy import bench_spec
    from specpilot.sim.presets import LLAMA8B_H100

    raw = bench_spec(LLAMA8B_H100, "eagle3", 3, 256, 8192).model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["target"]["quantization"] = quantization
    return parse_spec(raw)


def test_short_outputs_from_the_simulators_generation_token_histogram() -> None:
    """A simulated workload where 7 of 10 responses are 20 tokens long: the share at or below 50 tokens comes out
    near 0.7, the median inside the 10-20 bucket, and the rule fires."""
    measurements = simulated_window(1.0, short_every=10)
    share = measurements[Signal.OUTPUT_SHORT_FRACTION]
    assert share.valid, share.detail
    assert 0.6 < (share.value or 0) < 0.8
    median = measurements[Signal.OUTPUT_TOKENS_P50].value or 0
    assert 10 < median <= 20
    finding = short_outputs(inputs(bench_target("none"), measurements))
    assert (finding.status, finding.reason) == ("True", "ShortOutputs")
    long = short_outputs(inputs(bench_target("none"), simulated_window(1.0)))
    assert (long.status, long.reason) == ("False", "OutputsLongEnough")


@pytest.mark.parametrize(("multiplier", "reason"), [(0.87, "QuantizationPenalty"), (0.98, "AcceptanceKept")])
def test_a_simulated_quantization_change_is_judged_right(multiplier: float, reason: str) -> None:
    """The simulator's drafter loses acceptance after the target is quantized to AWQ (alpha x multiplier): a drop
    of about 8 points is a penalty, one of about 1 point is not; the numbers are what `measure` read."""
    before, after = simulated_window(1.0), simulated_window(multiplier, seed=2)
    state = FrameworkState()
    _, state = evaluate(inputs(bench_target("none"), before), state, T0)
    findings, state = evaluate(inputs(bench_target("awq"), after), state, T0 + 30 * MIN)
    a0, a1 = before[Signal.ACCEPTANCE_RATE].value, after[Signal.ACCEPTANCE_RATE].value
    assert a0 is not None
    assert a1 is not None
    assert findings[0].reason == reason, findings[0].message
    assert findings[0].evidence["drop"] == pytest.approx(round(a0, 4) - round(a1, 4), abs=1e-4)
    print(f"x{multiplier}: acceptance {a0:.3f} -> {a1:.3f}: {findings[0].reason}")


@pytest.mark.parametrize(
    ("values", "firing", "status"),
    [
        ({"output_short_fraction": 0.45}, frozenset(), "False"),  # below 0.5: not firing
        ({"output_short_fraction": 0.45}, frozenset({"ShortOutputs"}), "True"),  # fired: stays until < 0.4
        ({"output_short_fraction": 0.35}, frozenset({"ShortOutputs"}), "False"),
    ],
)
def test_short_outputs_hysteresis(values: dict[str, float], firing: frozenset[str], status: str) -> None:
    assert short_outputs(inputs(spec(), measured(**values), firing=firing)).status == status


@pytest.mark.parametrize(
    ("p99", "firing", "status"),
    [
        (0.024, frozenset(), "False"),  # ratio 2.4 vs 2.0: +20% < 25%
        (0.024, frozenset({"MixedWorkload"}), "True"),  # fired: stays while wider than +12.5%
        (0.022, frozenset({"MixedWorkload"}), "False"),  # +10%: clears
    ],
)
def test_mixed_workload_hysteresis(p99: float, firing: frozenset[str], status: str) -> None:
    ms = measured(tpot_p50=0.010, tpot_p99=p99, batch_size=5)
    finding = mixed_workload(inputs(spec(), ms, baseline=[off_entry(20, 40)], firing=firing), T0 + MIN)
    assert finding.status == status, finding.message


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        ({"status": "True", "reason": "ShortOutputs", "message": "90% short"}, ("True", "ShortOutputs", "90% short")),
        ({"status": "False", "reason": "OutputsLongEnough", "message": "5%"}, ("False", "OutputsLongEnough", "5%")),
        ({"status": "Unknown", "reason": "NoEvidence", "message": "x"}, ("Unknown", "NoEvidence", "no responses")),
        (None, ("Unknown", "NoEvidence", "no responses")),
    ],
)
def test_an_inconclusive_window_keeps_the_last_verdict_and_tells_nothing_again(
    previous: dict[str, str] | None, expected: tuple[str, str, str]
) -> None:
    """A rollout's warm-up window has too few responses (Unknown); ShortOutputs stays True and no second event."""
    inconclusive = fr.Finding(SHORT_OUTPUTS, "Unknown", "NoEvidence", "no responses")
    before = [] if previous is None else [{"type": SHORT_OUTPUTS, **previous}]
    kept = fr.keep_verdicts([inconclusive], before)
    assert [(f.status, f.reason, f.message) for f in kept] == [expected]
    assert fr.events_for(kept, before) == []
    conclusive_again = fr.Finding(SHORT_OUTPUTS, "True", "ShortOutputs", "91% short")
    told = fr.events_for(fr.keep_verdicts([conclusive_again], before), before)
    assert len(told) == (0 if previous and previous["status"] == "True" else 1)
