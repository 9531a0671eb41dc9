"""Classification of Prometheus answers: only finite, single-series, well-evidenced numbers are Valid."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpilot.autotune.signals.measurements import (
    MAX_GROUPS,
    MAX_NOTES,
    Measurement,
    MeasurementClass,
    RawResult,
    classify,
    collect_warnings,
    count_errors,
    positions,
    split_answer,
    unavailable,
)
from specpilot.autotune.signals.promql import Query, Signal

VALID, NO_DATA, ERROR = MeasurementClass.VALID, MeasurementClass.NO_DATA, MeasurementClass.ERROR
ACCEPTANCE = Query(Signal.ACCEPTANCE_RATE, "sum(rate(a[5m])) / (sum(rate(d[5m])) > 0)", "ratio")
BY_POSITION = Query(Signal.ACCEPTANCE_BY_POSITION, "sum by (position) (...)", "ratio", group_by="position")


def vector(*values: str, labels: list[dict[str, str]] | None = None) -> dict[str, Any]:
    metrics = labels or [{} for _ in values]
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1795654091.5, val]} for m, val in zip(metrics, values, strict=True)],
        },
    }


def answer(body: dict[str, Any], http_status: int = 200) -> RawResult:
    return RawResult.from_response(http_status, body)


@pytest.mark.parametrize(
    ("raw", "klass", "value", "detail"),
    [
        (answer(vector("0.7")), VALID, 0.7, "0.7"),
        (answer(vector("0")), VALID, 0.0, "0"),
        (
            answer({"status": "success", "data": {"resultType": "scalar", "result": [1795654091.5, "3.5"]}}),
            VALID,
            3.5,
            "3.5",
        ),
        (answer(vector()), NO_DATA, None, "empty result"),
        (answer(vector("NaN")), NO_DATA, None, "NaN"),
        (answer(vector("+Inf")), NO_DATA, None, "+Inf"),
        (answer(vector("-Inf")), NO_DATA, None, "-Inf"),
        (
            answer(vector("0.5", "0.9", labels=[{"pod": "a"}, {"pod": "b"}])),
            ERROR,
            None,
            "2 series returned, expected exactly one ({pod=a}; {pod=b})",
        ),
        (
            answer({"status": "success", "data": {"resultType": "matrix", "result": []}}),
            ERROR,
            None,
            "unexpected result type 'matrix'",
        ),
        (
            answer({"status": "error", "errorType": "bad_data", "error": "parse error at char 4"}, 400),
            ERROR,
            None,
            "HTTP 400 bad_data: parse error at char 4",
        ),
        (
            answer({"status": "error", "errorType": "timeout", "error": "query timed out"}, 503),
            ERROR,
            None,
            "HTTP 503 timeout",
        ),
        (answer(vector("0.7"), 502), ERROR, None, "HTTP 502"),
        (answer(["not", "an", "object"]), ERROR, None, "not a JSON object"),  # type: ignore[arg-type]
        (answer({"status": "weird"}), ERROR, None, "unexpected response status 'weird'"),
        (answer(vector("abc")), ERROR, None, "'abc' is not a number"),
        (
            answer({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}),
            ERROR,
            None,
            "malformed sample",
        ),
        (
            answer(
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "histogram": {}}]}}
            ),
            ERROR,
            None,
            "native histogram",
        ),
        (RawResult.from_transport_error("ConnectError: [Errno 111] Connection refused"), ERROR, None, "transport"),
        (RawResult.from_transport_error("ReadTimeout: timed out", timed_out=True), ERROR, None, "timeout: ReadTimeout"),
    ],
)
def test_classify(raw: RawResult, klass: MeasurementClass, value: float | None, detail: str) -> None:
    m = classify(ACCEPTANCE, raw)
    assert m.klass is klass
    assert m.value == value
    assert detail in m.detail
    assert m.query == ACCEPTANCE.promql, "the resolved query is kept so people can paste it into Prometheus"


@pytest.mark.parametrize("text", ["NaN", "+Inf", "-Inf"])
def test_non_finite_is_never_replaced_by_zero(text: str) -> None:
    m = classify(ACCEPTANCE, answer(vector(text)))
    assert m.value is None
    assert not m.valid


def test_warnings_and_infos_are_recorded() -> None:
    body = {
        **vector("0.7"),
        "warnings": ["PromQL warning: something"],
        "infos": ["PromQL info: metric might not be a counter"],
    }
    m = classify(ACCEPTANCE, answer(body))
    assert m.valid
    assert m.warnings == ("PromQL warning: something", "info: PromQL info: metric might not be a counter")
    assert collect_warnings({"a": m, "b": m}) == list(m.warnings)


LONG = 1_000_000
HOSTILE_ANSWERS = [
    ("a 1 MB warning", ACCEPTANCE, {**vector("0.7"), "warnings": ["w" * LONG]}, "[cut, 1000000 characters]"),
    ("100k warnings", ACCEPTANCE, {**vector("0.7"), "warnings": [str(i) for i in range(100_000)]}, "0"),
    ("warnings as one string", ACCEPTANCE, {**vector("0.7"), "warnings": "w" * LONG}, "[cut"),
    ("a warning that is an object", ACCEPTANCE, {**vector("0.7"), "warnings": [{"k": ["v" * LONG]}]}, "{'k'"),
    ("1 MB infos", ACCEPTANCE, {**vector("0.7"), "infos": ["i" * LONG] * 100}, "info: iii"),
    (
        "a 1 MB error",
        ACCEPTANCE,
        {"status": "error", "errorType": "t" * LONG, "error": "e" * LONG},
        "HTTP 200 ttt",
    ),
    ("a 1 MB status", ACCEPTANCE, {"status": "s" * LONG}, "unexpected response status 'sss"),
    ("a 1 MB result type", ACCEPTANCE, {"status": "success", "data": {"resultType": "r" * LONG}}, "result type"),
    (
        "two series, 1 MB labels",
        ACCEPTANCE,
        vector("1", "2", labels=[{"a": "x" * LONG}, {"b": "y" * LONG}]),
        "2 series",
    ),
    ("a 1 MB position", BY_POSITION, vector("0.5", labels=[{"position": "p" * LONG}]), "position ppp"),
    (
        "a series per position, 1000 of them",
        BY_POSITION,
        vector(*["0.5"] * 1000, labels=[{"position": str(i)} for i in range(1000)]),
        f"expected at most {MAX_GROUPS}",
    ),
]


@pytest.mark.parametrize(("case", "query", "body", "shown"), HOSTILE_ANSWERS, ids=[c[0] for c in HOSTILE_ANSWERS])
def test_what_an_answer_puts_into_a_measurement_is_bounded(
    case: str, query: Query, body: dict[str, Any], shown: str
) -> None:
    """Status, events and the CLI print measurements: an untrusted answer's strings and lists are cut on the way in."""
    m = classify(query, answer(body))
    stored = json.dumps(m.to_dict())
    assert shown in stored, stored[:2000]
    assert len(stored) < 4096, f"{case}: {len(stored)} characters"
    assert len(m.warnings) <= MAX_NOTES
    assert len(collect_warnings({str(i): m for i in range(100)})) <= 2 * MAX_NOTES


def gate(value: float | None, klass: MeasurementClass = VALID) -> Measurement:
    return Measurement("draft_tokens_in_window", "sum(increase(d[5m]))", klass, value, None, "")


@pytest.mark.parametrize(
    ("gate_measurement", "minimum", "klass", "value", "samples", "detail"),
    [
        (gate(41_000), 2000, VALID, 0.38, 41_000, "0.38"),
        (gate(2000), 2000, VALID, 0.38, 2000, "0.38"),
        (gate(1999), 2000, NO_DATA, 0.38, 1999, "too few samples: draft_tokens_in_window 1999 < minimum 2000"),
        (gate(0), 1, NO_DATA, 0.38, 0, "too few samples"),
        (gate(None, NO_DATA), 2000, NO_DATA, 0.38, None, "evidence gate draft_tokens_in_window is NoData"),
        (gate(None, ERROR), 2000, NO_DATA, 0.38, None, "evidence gate draft_tokens_in_window is Error"),
        (None, 2000, NO_DATA, 0.38, None, "too few samples: samples unknown"),
        (None, None, VALID, 0.38, None, "0.38"),
    ],
)
def test_sample_minimum(
    gate_measurement: Measurement | None,
    minimum: float | None,
    klass: MeasurementClass,
    value: float,
    samples: float | None,
    detail: str,
) -> None:
    m = classify(ACCEPTANCE, answer(vector("0.38")), gate=gate_measurement, min_samples=minimum)
    assert m.klass is klass
    assert m.value == value, "a thin sample keeps its number for people, but is not Valid"
    assert m.samples == samples
    assert detail in m.detail


def test_empty_answer_stays_nodata_even_with_enough_samples() -> None:
    assert classify(ACCEPTANCE, answer(vector()), gate=gate(50_000), min_samples=10).klass is NO_DATA


@pytest.mark.parametrize(
    ("values", "labels", "klass", "by_label", "detail"),
    [
        (
            ("0.5", "0.3", "0.7"),
            [{"position": "1"}, {"position": "2"}, {"position": "0"}],
            VALID,
            (("0", 0.7), ("1", 0.5), ("2", 0.3)),
            "position 0: 0.7",
        ),
        (
            ("0.1", "0.2"),
            [{"position": "10"}, {"position": "2"}],
            VALID,
            (("2", 0.2), ("10", 0.1)),
            "position 2",
        ),
        (("0.5", "0.3"), [{"position": "0"}, {"position": "0"}], ERROR, (), "several series for position=0"),
        (("0.5",), [{"pod": "x"}], ERROR, (), "lacks the 'position' label"),
        (("NaN", "0.3"), [{"position": "0"}, {"position": "1"}], NO_DATA, (), "NaN"),
        ((), [], NO_DATA, (), "empty result"),
    ],
)
def test_grouped_by_position(
    values: tuple[str, ...],
    labels: list[dict[str, str]],
    klass: MeasurementClass,
    by_label: tuple[tuple[str, float], ...],
    detail: str,
) -> None:
    m = classify(BY_POSITION, answer(vector(*values, labels=labels)))
    assert m.klass is klass
    assert m.by_label == by_label
    assert m.value is None
    assert detail in m.detail


def test_positions_as_ints() -> None:
    m = classify(BY_POSITION, answer(vector("0.7", "0.4", labels=[{"position": "0"}, {"position": "1"}])))
    assert positions(m) == {0: 0.7, 1: 0.4}


def test_unavailable_is_nodata_with_the_reason() -> None:
    query = Query(Signal.TPOT_P99, None, "seconds", unavailable="needs vLLM 0.11+")
    m = unavailable(query)
    assert m.klass is NO_DATA
    assert m.value is None
    assert m.detail == "unavailable: needs vLLM 0.11+"


def test_count_errors() -> None:
    ok = classify(ACCEPTANCE, answer(vector("0.5")))
    bad = classify(ACCEPTANCE, RawResult.from_transport_error("refused"))
    assert count_errors({"a": ok, "b": bad, "c": bad}) == [bad, bad]


@pytest.mark.parametrize(
    "raw",
    [
        answer(vector("0.7")),
        answer(vector("0.5", "0.3", labels=[{"position": "0"}, {"position": "1"}])),
        RawResult.from_transport_error("refused"),
    ],
)
def test_measurement_round_trips_through_json(raw: RawResult) -> None:
    for query in (ACCEPTANCE, BY_POSITION):
        m = classify(query, raw, gate=gate(5000), min_samples=100)
        assert Measurement.from_dict(m.name, m.to_dict()) == m


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)))
def test_any_sample_value_classifies_without_raising(value: float | str) -> None:
    text = value if isinstance(value, str) else repr(value).replace("inf", "Inf").replace("nan", "NaN")
    m = classify(ACCEPTANCE, answer(vector(text)))
    try:
        number: float | None = float(text)
    except ValueError:
        number = None
    if number is None:
        assert m.klass is ERROR
    elif math.isfinite(number) and number < 0:
        assert m.klass is ERROR  # no signal specpilot reads can be negative
    elif math.isfinite(number):
        assert m.klass is VALID
        assert m.value == number
    else:
        assert m.klass is NO_DATA
        assert m.value is None


# --- fleet rounds (issue 12): one grouped answer split per scope ---
def _series(ns: str, dep: str, value: str, **extra: str) -> dict[str, Any]:
    return {"metric": {"namespace": ns, "dep": dep, **extra}, "value": [1.0, value]}


SPLIT_LABELS = ("namespace", "dep")


def test_split_gives_each_scope_its_own_series_empty_or_several() -> None:
    raw = RawResult(
        status="success",
        result_type="vector",
        result=[
            _series("ml", "a", "0.5"),
            _series("ml", "b", "1", engine="0"),
            _series("ml", "b", "2", engine="1"),
            _series("ml", "x", "9"),  # a cross-product combination nobody asked for
        ],
        warnings=("w",),
        http_status=200,
    )
    split = split_answer(raw, SPLIT_LABELS, [("ml", "a"), ("ml", "b"), ("ml", "c")])
    assert split[("ml", "a")].result == [_series("ml", "a", "0.5")]
    assert [s["metric"]["engine"] for s in split[("ml", "b")].result] == ["0", "1"]
    assert split[("ml", "c")].result == []
    assert all(r.warnings == ("w",) and r.status == "success" for r in split.values())
    q = Query(Signal.BATCH_SIZE, "x", "requests")
    assert classify(q, split[("ml", "a")]).value == 0.5
    assert classify(q, split[("ml", "b")]).klass is MeasurementClass.ERROR
    assert classify(q, split[("ml", "c")]).klass is MeasurementClass.NO_DATA


def test_a_failed_grouped_answer_fails_every_scope_alike() -> None:
    keys = [("ml", "a"), ("ml", "b")]
    down = RawResult.from_transport_error("connection refused")
    assert split_answer(down, SPLIT_LABELS, keys) == dict.fromkeys(keys, down)
    scalar = RawResult(status="success", result_type="scalar", result=[0, "1"], http_status=200)
    for raw in split_answer(scalar, SPLIT_LABELS, keys).values():
        assert classify(Query(Signal.BATCH_SIZE, "x", "requests"), raw).klass is MeasurementClass.ERROR
        assert "want vector" in (raw.error or "")
