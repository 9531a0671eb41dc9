"""`specpilot report`'s pure core: range queries, histogram arithmetic, per-mode aggregation, the verdict, Markdown."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from specpilot.autotune.signals.promql import Scope, Window
from specpilot.cli.main import main
from specpilot.report.analysis import (
    Actuation,
    Distribution,
    LatencyStats,
    LoadStats,
    Mode,
    Sample,
    VerdictKind,
    analyse,
    decide,
    histogram_quantile,
    percentile,
    render_markdown,
)
from specpilot.report.queries import Series, build_range_queries
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import v

INF = math.inf


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.5, {0.1: 0, 0.5: 1, 1: 2, INF: 2}, 0.5),  # same numbers as the promtool case of the recording rules
        (0.99, {0.1: 0, 0.5: 1, 1: 2, INF: 2}, 0.99),
        (0.5, {0.1: 0, 0.5: 1, 1: 3, INF: 4}, 0.75),
        (0.99, {0.1: 0, 0.5: 1, 1: 3, INF: 4}, 1.0),  # rank in +Inf: the largest finite bound
        (0.5, {0.2: 4, INF: 4}, 0.1),  # first bucket interpolates from 0
        (0.5, {0.1: 0, INF: 0}, None),  # no observations: NaN in Prometheus
        (0.5, {INF: 3}, None),  # fewer than two buckets
        (0.5, {0.1: 1, 1.0: 2}, None),  # no +Inf bucket
        (0.5, {0.1: 2, 0.5: 1.5, INF: 4}, 0.1),  # non-monotonic (extrapolated) counts are fixed upwards
    ],
)
def test_histogram_quantile_matches_prometheus(q: float, buckets: dict[float, float], expected: float | None) -> None:
    got = histogram_quantile(q, buckets)
    assert got == pytest.approx(expected) if expected is not None else got is None


@pytest.mark.parametrize(
    ("values", "q", "expected"), [([3.0], 0.9, 3.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5), ([4.0, 1.0, 3.0], 0.1, 1.4)]
)
def test_percentile_interpolates_like_numpy(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_range_queries_group_by_config_hash_and_refuse_a_hashed_scope() -> None:
    names = metric_names_for(v("0.32.0"))
    scope = Scope(namespace="ml", deployment="chat", config_hash=None)
    queries = {q.series: q.promql for q in build_range_queries(names, scope, Window(30, 30, ""))}
    assert set(queries) == set(Series)
    sel = '{namespace="ml",specpilot_dev_deployment="chat"}'
    assert queries[Series.TPOT] == (
        "sum by (specpilot_dev_config_hash, le) "
        f"(increase(vllm:request_time_per_output_token_seconds_bucket{sel}[30s]))"
    )
    assert queries[Series.ACCEPTED] == (
        f"sum by (specpilot_dev_config_hash) (increase(vllm:spec_decode_num_accepted_tokens_total{sel}[30s]))"
    )
    with pytest.raises(ValueError, match="without a config hash"):
        build_range_queries(names, scope.with_config_hash("abc"), Window(30, 30, ""))


def test_range_queries_skip_series_an_old_version_lacks() -> None:
    names = metric_names_for(v("0.10.0"))
    series = {q.series for q in build_range_queries(names, Scope("ml", "chat", None), Window(60, 60, ""))}
    assert Series.TPOT not in series
    assert Series.DRAFTS in series


def _stats(p50: float, p99: float, requests: float = 100) -> LatencyStats:
    return LatencyStats({0.5: p50, 0.95: (p50 + p99) / 2, 0.99: p99}, requests)


def _load(running: float) -> LoadStats:
    return LoadStats(10, running, 100.0, 1.0, 0.2, 0.3)


ACC = Distribution(0.4, 0.6, 0.8, 0.6, 10, 5000)


@pytest.mark.parametrize(
    ("spec", "plain", "expected"),
    [
        (_stats(0.010, 0.030), _stats(0.020, 0.031), VerdictKind.HELPING),
        (_stats(0.010, 0.040), _stats(0.020, 0.030), VerdictKind.HURTING),  # median gain, tail +33%
        (_stats(0.022, 0.030), _stats(0.020, 0.030), VerdictKind.HURTING),
        (_stats(0.0195, 0.0305), _stats(0.020, 0.030), VerdictKind.NEUTRAL),
        (_stats(0.010, 0.020, requests=5), _stats(0.020, 0.030), VerdictKind.TOO_FEW),
        (None, _stats(0.020, 0.030), VerdictKind.NO_SPECULATION),
        (_stats(0.010, 0.020), None, VerdictKind.NO_BASELINE),
    ],
)
def test_verdict(spec: LatencyStats | None, plain: LatencyStats | None, expected: VerdictKind) -> None:
    by_mode = {m: s for m, s in ((Mode.SPECULATING, spec), (Mode.PLAIN, plain)) if s is not None}
    verdict = decide({Series.TPOT: by_mode}, {Mode.SPECULATING: _load(2), Mode.PLAIN: _load(2)}, ACC, 2.8)
    assert verdict.kind == expected


def test_verdict_states_a_load_mismatch() -> None:
    latency = {Series.TPOT: {Mode.SPECULATING: _stats(0.010, 0.020), Mode.PLAIN: _stats(0.020, 0.030)}}
    verdict = decide(latency, {Mode.SPECULATING: _load(1), Mode.PLAIN: _load(4)}, ACC, None)
    assert verdict.kind == VerdictKind.HELPING
    assert any("confounded" in r for r in verdict.reasons)


def _sample(cfg: str, points: list[tuple[float, float]], **labels: str) -> Sample:
    return Sample({"specpilot_dev_config_hash": cfg, **labels}, tuple(points))


def test_analyse_classifies_configs_and_sums_buckets_per_mode() -> None:
    # Config "s" speculates in windows 60 and 90, config "p" serves plain in windows 120 and 150.
    data = {
        Series.DRAFTED: [_sample("s", [(60, 100), (90, 300)]), _sample("p", [(120, 0), (150, 0)])],
        Series.ACCEPTED: [_sample("s", [(60, 90), (90, 60)])],
        Series.DRAFTS: [_sample("s", [(60, 50), (90, 100)])],
        Series.TPOT: [
            *(_sample("s", [(60, c), (90, c)], le=le) for le, c in (("0.01", 10), ("0.02", 20), ("+Inf", 20))),
            *(_sample("p", [(120, c), (150, c)], le=le) for le, c in (("0.01", 0), ("0.02", 10), ("+Inf", 20))),
        ],
        Series.E2E: [_sample("s", [(60, 20), (90, 20)], le="+Inf"), _sample("p", [(120, 20)], le="+Inf")],
        Series.RUNNING: [_sample("s", [(60, 2), (90, 4)]), _sample("p", [(120, 3), (150, 3)])],
        Series.GENERATED: [_sample("s", [(60, 300), (90, 300)]), _sample("p", [(120, 150), (150, 150)])],
        Series.KV_CACHE: [_sample("s", [(60, 0.2), (90, 0.4)]), _sample("p", [(120, 0.1), (150, 0.1)])],
    }
    report = analyse(
        data,
        namespace="ml",
        name="chat",
        start=30,
        end=150,
        step_s=30,
        config_label="specpilot_dev_config_hash",
        actuations=[Actuation(100, "SpeculationDisabled: acceptance 0.375 < 0.45")],
    )
    assert report.modes == {"s": Mode.SPECULATING, "p": Mode.PLAIN}
    assert report.acceptance_windows == ((60, 0.9), (90, 0.2))
    assert report.acceptance is not None
    assert report.acceptance.overall == pytest.approx(150 / 400)
    assert report.acceptance.p50 == pytest.approx(0.55)
    assert report.mean_acceptance_length == pytest.approx(1 + 150 / 150)
    tpot = report.latency[Series.TPOT]
    assert tpot[Mode.SPECULATING].quantiles[0.5] == pytest.approx(0.01)  # 20 of 40 observations under 10 ms
    assert tpot[Mode.PLAIN].quantiles[0.5] == pytest.approx(0.02)  # 20 of 40 under 20 ms
    assert tpot[Mode.SPECULATING].requests == 40
    assert report.load[Mode.SPECULATING].running_mean == 3
    assert report.load[Mode.SPECULATING].tokens_per_s == 10
    assert report.load[Mode.PLAIN].kv_max == 0.1
    assert [a.label for a in report.actuations] == [
        "SpeculationDisabled: acceptance 0.375 < 0.45",
        "config p (plain) starts",
    ]
    assert report.verdict.kind == VerdictKind.HELPING
    markdown = render_markdown(report, ["acceptance.png"])
    assert "**Speculation is helping at this load" in markdown
    assert "| 27.0% | 55.0% | 83.0% | 37.5% | 2 | 400 | 2.00 |" in markdown  # P10/P50/P90 of windows 0.9 and 0.2
    assert "![acceptance.png](acceptance.png)" in markdown


def ngram_cr(tmp_path: Path) -> Path:
    """A valid SpeculativeDeployment file (8B target, n-gram K = 3) whose report gets as far as asking Prometheus."""
    spec = {
        "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0"},
        "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
    }
    doc = {"apiVersion": "specpilot.dev/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"}}
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump({**doc, "spec": spec}))
    return path


def test_report_explains_an_unreachable_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cr = ngram_cr(tmp_path)
    assert main(["report", str(cr), "--prometheus", "http://127.0.0.1:9", "--since", "1h"]) == 1
    err = capsys.readouterr().err
    assert "error: Prometheus http://127.0.0.1:9: accepted_tokens:" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("since", [None, "7d", "2w", "36h"])
def test_report_reads_its_documented_periods(
    since: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default --since 7d (and the other Prometheus-style spellings) get as far as asking Prometheus."""
    cr = ngram_cr(tmp_path)
    period = [] if since is None else ["--since", since]
    assert main(["report", str(cr), "--prometheus", "http://127.0.0.1:9", *period]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Prometheus http://127.0.0.1:9: "), err


@pytest.mark.parametrize(
    ("until", "said"),
    [
        ("2026-11-29T10:00:00Z", "error: Prometheus http://127.0.0.1:9: "),  # a time: as far as asking Prometheus
        ("2026-11-29T10:00:00", "error: --until: '2026-11-29T10:00:00' has no time zone (RFC 3339 needs Z or an"),
        ("noon", "error: --until: Invalid isoformat string: 'noon'"),
    ],
)
def test_report_until_is_an_rfc3339_time_with_a_zone(
    until: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cr = ngram_cr(tmp_path)
    assert main(["report", str(cr), "--prometheus", "http://127.0.0.1:9", "--until", until]) == 1
    assert capsys.readouterr().err.startswith(said)


def test_report_names_the_file_and_field_of_a_bad_resource(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = {"apiVersion": "specpilot.dev/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "chat"}}
    (tmp_path / "cr.yaml").write_text(yaml.safe_dump({**doc, "spec": {"target": {"model": "m"}}}))
    assert main(["report", str(tmp_path / "cr.yaml"), "--prometheus", "http://127.0.0.1:9"]) == 1
    assert f"{tmp_path / 'cr.yaml'}: spec.engine" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kubeconfig", "expected"),
    [
        ("missing", "no usable kubeconfig"),  # no such file
        ("unreachable", "cannot reach the API server"),  # a kubeconfig whose server does not answer
    ],
)
def test_report_of_a_live_object_explains_a_missing_cluster(
    kubeconfig: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """NAME -n NAMESPACE without a usable cluster: one line naming the object, never a traceback (the API server's
    own answers, e.g. 404, are tests/prometheus/test_report_on_recorded_run.py's)."""
    path = tmp_path / "kubeconfig"
    if kubeconfig == "unreachable":
        cluster = {"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}
        context = {"name": "c", "context": {"cluster": "c", "user": "u"}}
        doc = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "contexts": [context],
               "users": [{"name": "u", "user": {}}], "current-context": "c"}  # fmt: skip
        path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert main(["report", "chat", "-n", "ml", "--prometheus", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: SpeculativeDeployment ml/chat: {expected}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe not text", "not UTF-8 text (invalid byte 0xff at offset 0)"),
        (b"kind: [unclosed", "YAML error"),
        (b"a: &a [1]\nb: *missing\n", "YAML error"),
        (b"kind: SpeculativeDeployment\nkind: Other\n", "duplicate key"),
        (b"kind: ConfigMap\nmetadata: {name: x}\n", "no SpeculativeDeployment document"),
    ],
)
def test_report_reads_its_file_with_the_hardened_loader(
    content: bytes, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report's FILE goes through the same loader as validate/render/plan: one line naming the file."""
    path = tmp_path / "cr.yaml"
    path.write_bytes(content)
    assert main(["report", str(path), "--prometheus", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: "), err
    assert expected in err, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
