"""PromQL builders: scoping, window clamping, per-version names, and the one-series rule."""

from __future__ import annotations

import re

import pytest

from specpilot.autotune.signals import promql
from specpilot.autotune.signals.promql import Scope, Signal, Window, build_queries, resolve_window
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import v

SCOPE = Scope(namespace="ml", deployment="chat", config_hash="9f2c1a")
WINDOW = Window(300, 300, "")
SELECTOR = '{namespace="ml",specpilot_dev_deployment="chat",specpilot_dev_config_hash="9f2c1a"}'


def test_scope_selector_uses_the_documented_label_contract() -> None:
    assert SCOPE.selector() == SELECTOR


def test_scope_without_config_hash_matches_every_configuration() -> None:
    assert Scope("ml", "chat", None).selector() == '{namespace="ml",specpilot_dev_deployment="chat"}'


def test_scope_with_custom_label_names() -> None:
    scope = Scope("ml", "chat", "abc", namespace_label="kube_ns", deployment_label="app", config_hash_label="cfg")
    assert scope.selector() == '{kube_ns="ml",app="chat",cfg="abc"}'


@pytest.mark.parametrize(
    ("value", "escaped"),
    [('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ("plain-1.2", "plain-1.2")],
)
def test_label_values_are_escaped(value: str, escaped: str) -> None:
    assert promql.escape_label_value(value) == escaped
    assert f'specpilot_dev_deployment="{escaped}"' in Scope("ml", value, None).selector()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"deployment_label": "specpilot.dev/deployment"}, "deployment_label"),
        ({"namespace_label": "1ns"}, "namespace_label"),
        ({"config_hash": ""}, "config_hash"),
        ({"namespace": ""}, "must not be empty"),
    ],
)
def test_scope_rejects_bad_values(kwargs: dict[str, str], message: str) -> None:
    base: dict[str, str | None] = {"namespace": "ml", "deployment": "chat", "config_hash": "x"}
    base.update(kwargs)
    with pytest.raises(ValueError, match=message):
        Scope(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("window", "scrape", "interval", "seconds", "rendered", "note"),
    [
        (300, 15, 60, 300, "5m", ""),
        (30, 15, None, 60, "1m", "4 x scrape interval 15s"),
        (30, 15, 120, 120, "2m", "the evaluation interval 2m"),
        (10, 30, 60, 120, "2m", "4 x scrape interval 30s"),
        (4, 1, None, 4, "4s", ""),
        (90, 15, 60, 90, "90s", ""),
        (3600, 15, 60, 3600, "1h", ""),
    ],
)
def test_window_is_at_least_four_scrapes_and_one_interval(
    window: float, scrape: float, interval: float | None, seconds: float, rendered: str, note: str
) -> None:
    resolved = resolve_window(window, scrape, interval)
    assert resolved.seconds == seconds
    assert resolved.promql() == rendered
    if note:
        assert note in resolved.note
        assert "raised" in resolved.note
    else:
        assert resolved.note == ""


def test_window_renders_sub_second_as_milliseconds() -> None:
    assert Window(1.5, 1.5, "").promql() == "1500ms"


def test_window_rejects_non_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        resolve_window(0, 15)


def test_acceptance_rate_guards_the_denominator() -> None:
    query = promql.acceptance_rate(metric_names_for(v("0.33.0")), SCOPE, WINDOW)
    assert query.promql == (
        f"sum(rate(vllm:spec_decode_num_accepted_tokens_total{SELECTOR}[5m])) / "
        f"(sum(rate(vllm:spec_decode_num_draft_tokens_total{SELECTOR}[5m])) > 0)"
    )
    assert query.gate is Signal.DRAFT_TOKENS_IN_WINDOW


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.33.0", "1 + sum(rate(vllm:spec_decode_num_accepted_tokens_total"),
        ("0.9.0", "1 + sum(rate(vllm:spec_decode_num_accepted_tokens_total"),
        ("0.8.5", "sum(rate(vllm:spec_decode_num_accepted_tokens_total"),
        ("0.8.4", None),
    ],
)
def test_mean_acceptance_length_follows_the_version_formula(version: str, expected: str | None) -> None:
    query = promql.mean_acceptance_length(metric_names_for(v(version)), SCOPE, WINDOW)
    if expected is None:
        assert query.promql is None
        assert "drafts counter" in query.unavailable
        return
    assert query.promql is not None
    assert query.promql.startswith(expected)
    assert "vllm:spec_decode_num_drafts_total" in query.promql


def test_per_position_acceptance_divides_by_drafts_and_keeps_only_position() -> None:
    query = promql.acceptance_by_position(metric_names_for(v("0.33.0")), SCOPE, WINDOW)
    assert query.group_by == "position"
    assert query.promql == (
        f"sum by (position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total{SELECTOR}[5m])) "
        f"/ on() group_left() (sum(rate(vllm:spec_decode_num_drafts_total{SELECTOR}[5m])) > 0)"
    )


@pytest.mark.parametrize(("version", "available"), [("0.33.0", True), ("0.11.0", True), ("0.10.2", False)])
def test_tpot_uses_the_per_request_histogram_never_inter_token(version: str, available: bool) -> None:
    names = metric_names_for(v(version))
    for query in (
        promql.tpot_quantile(Signal.TPOT_P99, 0.99, names, SCOPE, WINDOW),
        promql.tpot_quantile(Signal.TPOT_P50, 0.5, names, SCOPE, WINDOW),
        promql.tpot_mean(names, SCOPE, WINDOW),
    ):
        if available:
            assert query.promql is not None
            assert "vllm:request_time_per_output_token_seconds" in query.promql
            assert "inter_token" not in query.promql
            assert "vllm:time_per_output_token" not in query.promql
        else:
            assert query.promql is None
            assert "0.11" in query.unavailable


def test_p99_is_histogram_quantile_by_le() -> None:
    query = promql.quantile(Signal.E2E_P99, 0.99, "vllm:e2e_request_latency_seconds", SCOPE, WINDOW)
    assert query.promql == (
        f"histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{SELECTOR}[5m])))"
    )


@pytest.mark.parametrize(
    ("version", "kv_metric"), [("0.33.0", "vllm:kv_cache_usage_perc"), ("0.9.1", "vllm:gpu_cache_usage_perc")]
)
def test_kv_cache_usage_name_by_version(version: str, kv_metric: str) -> None:
    query = promql.kv_cache_usage(metric_names_for(v(version)), SCOPE, WINDOW)
    assert query.promql == f"max(avg_over_time({kv_metric}{SELECTOR}[5m]))"


@pytest.mark.parametrize("version", ["0.7.3", "0.8.4", "0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.24.0", "0.33.0"])
def test_every_query_is_scoped_windowed_and_yields_one_series(version: str) -> None:
    queries = build_queries(metric_names_for(v(version)), SCOPE, WINDOW)
    assert {q.signal for q in queries} == set(Signal), "every signal has a builder"
    for query in queries:
        if query.promql is None:
            assert query.unavailable, f"{query.signal} must say why it is unavailable"
            continue
        assert SELECTOR in query.promql, query.signal
        assert "[5m]" in query.promql, query.signal
        grouped_by = set(re.findall(r"by \(([^)]*)\)", query.promql))
        assert grouped_by <= {"le", "position"}, f"{query.signal} keeps labels {grouped_by}"
        if "position" in grouped_by:
            assert query.group_by == "position"
        # every selector sits inside an aggregation, so several pods still give one series
        assert re.match(r"^(1 \+ )?(sum|avg|max|histogram_quantile)( by \([a-z]+\) )?\(", query.promql), query.promql


@pytest.mark.parametrize(
    ("deadline_s", "le"),
    [
        (2.0, 'le=~"2[.]5|2[.]5[.]0"'),  # no 2 s bucket: the next bound up, so the share errs toward in time
        (2.5, 'le=~"2[.]5|2[.]5[.]0"'),
        (1.0, 'le=~"1|1[.]0"'),  # Prometheus 2 keeps "1.0", Prometheus 3 may write "1"
        (0.001, 'le=~"0[.]001|0[.]001[.]0"'),
        (3000.0, 'le="+Inf"'),  # past the largest finite bound: every first token counts
    ],
)
def test_ttft_within_deadline_counts_at_a_bucket_bound(deadline_s: float, le: str) -> None:
    names = metric_names_for(v("0.32.0"))
    query = promql.ttft_within_deadline(names, SCOPE, WINDOW, deadline_s)
    bucket_selector = SELECTOR[:-1] + "," + le + "}"
    assert query.promql == (
        f"sum(rate(vllm:time_to_first_token_seconds_bucket{bucket_selector}[5m])) / "
        f"(sum(rate(vllm:time_to_first_token_seconds_count{SELECTOR}[5m])) > 0)"
    )
    assert query.gate is Signal.REQUESTS_IN_WINDOW
    with_deadline = build_queries(names, SCOPE, WINDOW, 50, None, deadline_s)
    assert query in with_deadline


def test_ttft_within_deadline_needs_a_declared_deadline() -> None:
    query = promql.ttft_within_deadline(metric_names_for(v("0.32.0")), SCOPE, WINDOW, None)
    assert query.promql is None
    assert "ttftDeadline" in query.unavailable


def test_gates_come_first_so_dependents_can_use_them() -> None:
    signals = [q.signal for q in build_queries(metric_names_for(v("0.33.0")), SCOPE, WINDOW)]
    for signal, gate in promql.EVIDENCE_GATES.items():
        assert signals.index(gate) < signals.index(signal)


def test_evidence_gates_count_with_increase() -> None:
    names = metric_names_for(v("0.33.0"))
    assert promql.draft_tokens_in_window(names, SCOPE, WINDOW).promql == (
        f"sum(increase(vllm:spec_decode_num_draft_tokens_total{SELECTOR}[5m]))"
    )
    assert promql.requests_in_window(names, SCOPE, WINDOW).promql == (
        f"sum(increase(vllm:e2e_request_latency_seconds_count{SELECTOR}[5m]))"
    )


# --- fleet rounds (issue 12): one query for many scopes, grouped by the scope labels ---
FLEET = promql.ScopeSet.of(
    [Scope("ml", "chat", "9f2c1a"), Scope("ml", "code", "77aa"), Scope("team.a", "chat", "9f2c1a")]
)


def test_scope_set_selector_uses_escaped_set_matchers() -> None:
    assert FLEET.selector() == (
        '{namespace=~"ml|team\\\\.a",specpilot_dev_deployment=~"chat|code",specpilot_dev_config_hash=~"77aa|9f2c1a"}'
    )
    assert promql.ScopeSet.of([SCOPE, SCOPE]).selector() == SELECTOR, "one value: a plain equality matcher"


def test_scope_set_refuses_mixed_shapes() -> None:
    with pytest.raises(ValueError, match="share label names"):
        promql.ScopeSet((SCOPE, Scope("ml", "chat", None)))
    with pytest.raises(ValueError, match="at least one"):
        promql.ScopeSet(())


@pytest.mark.parametrize("version", ["0.8.4", "0.11.0", "0.33.0"])
def test_grouped_queries_are_the_per_scope_queries_with_scope_labels_kept(version: str) -> None:
    """Same text as one scope's query, except the selector and the scope labels added to every by/on."""
    names = metric_names_for(v(version))
    labels = "namespace, specpilot_dev_deployment, specpilot_dev_config_hash"
    for alone, grouped in zip(build_queries(names, SCOPE, WINDOW), build_queries(names, FLEET, WINDOW), strict=True):
        assert (alone.signal, alone.unit, alone.group_by) == (grouped.signal, grouped.unit, grouped.group_by)
        if alone.promql is None:
            assert grouped.promql is None
            continue
        assert grouped.promql is not None
        expected = (
            alone.promql.replace(SELECTOR, FLEET.selector())
            .replace(SELECTOR[:-1] + ",", FLEET.selector()[:-1] + ",")  # a selector with a matcher added (le)
            .replace("sum(", f"sum by ({labels}) (")
            .replace("avg(", f"avg by ({labels}) (")
            .replace("max(", f"max by ({labels}) (")
            .replace("by (le)", f"by ({labels}, le)")
            .replace("by (position)", f"by ({labels}, position)")
            .replace("on()", f"on({labels})")
        )
        assert grouped.promql == expected
