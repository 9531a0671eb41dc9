"""One evaluation's orchestration: gates before dependents, minimums from the spec, unreachable short-circuit."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec, parse_spec
from specpilot.autotune.evaluate import effective_window, evaluate_once, measure
from specpilot.autotune.signals.measurements import MeasurementClass, RawResult
from specpilot.autotune.signals.promql import Scope, Signal
from specpilot.cli.evaluate import render_text

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SCOPE = Scope("ml", "chat", "9f2c1a")


class CannedPrometheus:
    """Answers by the first matching fragment of the query; records what was asked (a fake, not a mock)."""

    def __init__(
        self, answers: list[tuple[str, RawResult]], default: RawResult | None = None, now: datetime = NOW
    ) -> None:
        self.answers, self.now = answers, now
        self.default = default or RawResult.from_response(
            200, {"status": "success", "data": {"resultType": "vector", "result": []}}
        )
        self.asked: list[str] = []

    def query(self, promql: str, at: datetime | None = None) -> RawResult:
        assert at == self.now, "every query of one evaluation is evaluated at the same instant"
        self.asked.append(promql)
        return next((raw for fragment, raw in self.answers if fragment in promql), self.default)


def scalar(value: str) -> RawResult:
    return RawResult.from_response(
        200, {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]}}
    )


def spec(version: str = "0.33.0", **autotune: Any) -> SpeculativeDeploymentSpec:
    return parse_spec(
        {
            "engine": {"image": "x", "version": version},
            "target": {"model": "tiny"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "autotune": {"window": "5m", "minSamples": {"draftTokens": 2000, "requests": 50}, **autotune},
        }
    )


def test_unreachable_prometheus_is_asked_once() -> None:
    client = CannedPrometheus([], default=RawResult.from_transport_error("ConnectError: refused"))
    result = measure(spec(), SCOPE, client, NOW)
    assert len(client.asked) == 1
    assert {m.klass for m in result.values() if not m.detail.startswith("unavailable:")} == {MeasurementClass.ERROR}
    assert result[Signal.TTFT_WITHIN_DEADLINE].detail.startswith("unavailable:"), "no ttftDeadline: not a query"
    assert "(later queries not sent)" in result[Signal.KV_CACHE_USAGE].detail


@pytest.mark.parametrize(("drafted", "klass"), [("1999", MeasurementClass.NO_DATA), ("2000", MeasurementClass.VALID)])
def test_acceptance_needs_the_spec_minimum_of_draft_tokens(drafted: str, klass: MeasurementClass) -> None:
    client = CannedPrometheus(
        [
            ("increase(vllm:spec_decode_num_draft_tokens_total", scalar(drafted)),
            ("num_accepted_tokens_total", scalar("0.4")),
        ]
    )
    result = measure(spec(), SCOPE, client, NOW)
    assert result[Signal.ACCEPTANCE_RATE].klass is klass
    assert result[Signal.ACCEPTANCE_RATE].samples == float(drafted)


def test_unavailable_series_are_not_queried() -> None:
    client = CannedPrometheus([])
    result = measure(spec("0.10.2"), SCOPE, client, NOW)
    assert result[Signal.TPOT_P99].detail.startswith("unavailable:")
    assert not any("request_time_per_output_token" in q for q in client.asked)
    # TPOT P50, P99 and mean are unavailable before 0.11; the share within the TTFT deadline without one
    assert len(client.asked) == len(result) - 4


def test_window_is_clamped_and_reported() -> None:
    window = effective_window(spec(window="30s", scrapeInterval="15s").autotune)
    assert window.promql() == "1m"
    client = CannedPrometheus([])
    out = evaluate_once(spec(window="30s"), SCOPE, client, NOW)
    assert out["window"]["note"] == "window 30s raised to 1m: 4 x scrape interval 15s"
    assert all("[1m]" in q for q in client.asked)


def test_evaluate_once_json_shape_and_text_view() -> None:
    client = CannedPrometheus(
        [
            ("increase(vllm:spec_decode_num_draft_tokens_total", scalar("41000")),
            ("increase(vllm:e2e_request_latency_seconds_count", scalar("800")),
            ("1 + ", scalar("2.14")),  # mean acceptance length: 1 + 0.38 x K=3
            ("num_accepted_tokens_total", scalar("0.38")),
            ("num_requests_running", scalar("12")),
        ]
    )
    out = evaluate_once(spec(), SCOPE, client, NOW)
    assert set(out) == {
        "scope",
        "window",
        "evaluatedAt",
        "current",
        "measurements",
        "canaryMeasurements",
        "warnings",
        "decision",
        "framework",
    }
    json.dumps(out)
    assert out["measurements"]["acceptance_rate"] == {
        "class": "Valid",
        "value": 0.38,
        "samples": 41000.0,
        "query": client.asked[2],
        "detail": "0.38",
    }
    # no mean TPOT, so neither a speed comparison nor a cost model: acceptance alone holds
    assert out["decision"]["action"] == "Keep"
    assert out["decision"]["reason"].startswith("holding: acceptance 0.38 < disableBelow 0.50 over 5m, 41k draft")
    text = render_text(out)
    assert "decision Keep: holding: acceptance 0.38 < disableBelow 0.50" in text
    assert "tpot_p99                NoData  -  empty result" in text


# ------------------------------------------------------------------------------------------------ framework findings

SHORT_SHARE = 'le=~"50|50[.]0"'
DRAFTED = "increase(vllm:spec_decode_num_draft_tokens_total"
REQUESTS = "increase(vllm:e2e_request_latency_seconds_count"
ACCEPTED = "sum(rate(vllm:spec_decode_num_accepted_tokens_total"
RUNNING = "avg(avg_over_time(vllm:num_requests_running"


@pytest.mark.parametrize(
    ("target", "answers", "firing"),
    [
        pytest.param({}, [], set(), id="nothing-measured"),
        pytest.param(
            {},
            [(SHORT_SHARE, "0.8"), (REQUESTS, "800"), (DRAFTED, "41000"), (ACCEPTED, "0.72"), (RUNNING, "4")],
            {"ShortOutputs"},
            id="short-outputs",
        ),
        pytest.param(
            {"quantization": "awq"},
            [(REQUESTS, "800"), (DRAFTED, "41000"), (ACCEPTED, "0.58"), (RUNNING, "4")],
            {"AcceptanceMethod"},
            id="quantized-near-break-even",
        ),
    ],
)
def test_dry_run_prints_the_framework_findings_the_operator_stores(
    target: dict[str, Any], answers: list[tuple[str, str]], firing: set[str]
) -> None:
    """The same stored status and the same Prometheus answers give `specpilot evaluate` exactly the findings the
    operator puts in status.recommendation.framework (both through framework_rules.assess), in JSON and in text."""
    import copy

    from specpilot.api.v1alpha1 import SpeculativeDeploymentStatus
    from specpilot.autotune.evaluation import conclude
    from specpilot.autotune.policy.state import PolicyState
    from specpilot.cli.evaluate import from_status
    from tests.seams import ROUND_TRIP_SPEC, Cluster

    raw = copy.deepcopy(ROUND_TRIP_SPEC)
    raw["autotune"]["mode"] = "Recommend"
    raw["target"].update(target)
    cluster = Cluster(raw)
    cluster.reconcile()
    cluster.settle()
    cluster.advance(4)  # past the first config's settling time
    s = parse_spec(cluster.spec)
    scope = Scope("inference", "chat", cluster.status["effective"]["configHash"])
    now = cluster.now
    client = CannedPrometheus([(fragment, scalar(value)) for fragment, value in answers], now=now)

    operator = conclude(
        s,
        annotations={},
        status=copy.deepcopy(cluster.status),
        deployment=cluster._observed(),
        measurements=measure(s, scope, client, now),
        canary=None,
        now=now,
    ).fields["recommendation"]["framework"]

    # The CLI's path: the stored status through the model it validates with, then from_status -> evaluate_once.
    stored = SpeculativeDeploymentStatus.model_validate(cluster.status).model_dump(by_alias=True, exclude_none=True)
    state, problem = PolicyState.from_status(stored.get("autotune"))
    assert problem is None
    context = from_status(stored, s, scope, state)
    out = evaluate_once(
        s,
        scope,
        client,
        now,
        current=context.current,
        state=state,
        canary_scope=context.canary_scope,
        framework=context.framework,
        conditions=context.conditions,
    )
    assert out["framework"] == operator
    assert [f["condition"] for f in out["framework"]] == [
        "QuantizationPenalty",
        "AcceptanceMethod",
        "ShortOutputs",
        "MixedWorkload",
    ]
    assert {f["condition"] for f in out["framework"] if f["status"] == "True"} == firing
    json.dumps(out)
    text = render_text(out)
    for finding in operator:
        assert f"{finding['status']:<7} {finding['reason']}: {finding['message']}" in text
