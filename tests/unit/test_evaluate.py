"""One evaluation's orchestration: gates before dependents, minimums from the spec, unreachable short-circuit."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec, parse_spec
from specpilot.evaluate import effective_window, evaluate_once, measure, render_text
from specpilot.measurements import MeasurementClass, RawResult
from specpilot.promql import Scope, Signal

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
SCOPE = Scope("ml", "chat", "9f2c1a")


class CannedPrometheus:
    """Answers by the first matching fragment of the query; records what was asked (a fake, not a mock)."""

    def __init__(self, answers: list[tuple[str, RawResult]], default: RawResult | None = None) -> None:
        self.answers = answers
        self.default = default or RawResult.from_response(
            200, {"status": "success", "data": {"resultType": "vector", "result": []}}
        )
        self.asked: list[str] = []

    def query(self, promql: str, at: datetime | None = None) -> RawResult:
        assert at == NOW, "every query of one evaluation is evaluated at the same instant"
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
    assert {m.klass for m in result.values()} == {MeasurementClass.ERROR}
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
    assert len(client.asked) == len(result) - 3  # TPOT P50, P99 and mean are unavailable before 0.11


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
            ("num_accepted_tokens_total", scalar("0.38")),
            ("num_requests_running", scalar("12")),
        ]
    )
    out = evaluate_once(spec(), SCOPE, client, NOW)
    assert set(out) == {"scope", "window", "evaluatedAt", "current", "measurements", "warnings", "decision"}
    json.dumps(out)
    assert out["measurements"]["acceptance_rate"] == {
        "class": "Valid",
        "value": 0.38,
        "samples": 41000.0,
        "query": client.asked[2],
        "detail": "0.38",
    }
    assert out["decision"]["action"] == "DisableSpeculation"
    assert out["decision"]["reason"] == "acceptance 0.38 < disableBelow 0.50 over 5m, 41k draft tokens"
    text = render_text(out)
    assert "decision DisableSpeculation: acceptance 0.38 < disableBelow 0.50" in text
    assert "tpot_p99                NoData  -  empty result" in text
