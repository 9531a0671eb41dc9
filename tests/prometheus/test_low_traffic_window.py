"""At low traffic the real Prometheus measures a window the spec's 5 minutes are too short for, over a wider one.

A simulated vLLM pod (Llama 8B + EAGLE-3, K=3) serves one request every 10 s (0.1 QPS) for 40 minutes, scraped every
15 s; its /metrics texts are backfilled into the real Prometheus with promtool, as in test_emulation_agreement. The
spec's window holds about 30 finished requests, under the default minimum of 50: the mean TPOT is NoData there. With
the configuration's start known the measurement extends the window until the minimum is met, and the bench's
Prometheus (bench.queries.SimQueryClient) chooses the same window and the same numbers.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from e2e.prometheus.fixture import PrometheusServer
from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.autotune.evaluate import measure, query_settings
from specpilot.autotune.signals.measurements import MeasurementClass
from specpilot.autotune.signals.promql import Signal
from specpilot.bench.prometheus import ScrapeClock
from specpilot.bench.queries import ScrapeHistory, SimQueryClient, snapshot
from specpilot.bench.specpilot_policy import bench_spec
from specpilot.sim.engine import SimRequest
from specpilot.sim.exposition import exposition
from specpilot.sim.presets import LLAMA8B_H100
from specpilot.vllm.metrics import metric_names_for
from tests.prometheus.test_emulation_agreement import SCOPE, VERSION, _engine, backfill

pytestmark = pytest.mark.prometheus

DURATION_S, ARRIVAL_EVERY_S = 2400.0, 10.0


def _quiet_run() -> tuple[ScrapeHistory, list[tuple[float, str]]]:
    """The bench's history and the /metrics text of every scrape of a pod at 0.1 QPS."""
    history, texts = ScrapeHistory(), []
    clock = ScrapeClock(15.0, 0.0, 0.0, seed=1)
    engine, n = _engine(1, 0.0), 0
    next_at, _ = clock.next()
    while engine.now < DURATION_S:
        while n * ARRIVAL_EVERY_S <= engine.now:
            engine.submit(SimRequest(f"r{n}", n * ARRIVAL_EVERY_S, 200 + 100 * (n % 5), 150))
            n += 1
        if engine.has_work():
            engine.step()
        else:
            engine.advance_idle(min(next_at, n * ARRIVAL_EVERY_S))
        while next_at <= engine.now:
            history.add(snapshot(engine.metrics, next_at))
            texts.append((next_at, exposition(engine)))
            next_at, _ = clock.next()
    return history, texts


def test_a_window_short_of_requests_is_measured_over_a_wider_one(
    prometheus_binary: Path, promtool_binary: Path, tmp_path: Path
) -> None:
    history, texts = _quiet_run()
    base = backfill(texts, DURATION_S, promtool_binary, tmp_path)
    spec = bench_spec(LLAMA8B_H100, "eagle3", 3, 256, 8192)
    assert spec.autotune.window == "5m"
    assert spec.autotune.min_samples.requests == 50
    at = datetime.fromtimestamp(base + DURATION_S, tz=UTC)
    started = datetime.fromtimestamp(base, tz=UTC)
    bench = SimQueryClient(metric_names_for(VERSION), SCOPE, history, lambda t: t.timestamp() - base,
                           *query_settings(spec))  # fmt: skip
    with (
        PrometheusServer(prometheus_binary, tmp_path / "prometheus", []).start() as server,
        PrometheusClient(PrometheusConnection(server.url, timeout_s=10)) as client,
    ):
        alone = measure(spec, SCOPE, client, at)  # the configuration's start unknown: the spec's window only
        assert alone.window.promql() == "5m"
        requests = alone[Signal.REQUESTS_IN_WINDOW]
        assert requests.valid
        assert 20 < (requests.value or 0) < 50, requests
        assert alone[Signal.TPOT_MEAN].klass is MeasurementClass.NO_DATA
        assert "too few samples" in alone[Signal.TPOT_MEAN].detail

        measured = measure(spec, SCOPE, client, at, since=started)
        assert measured.window.promql() == "10m", measured.window
        assert measured.window.note.startswith("window 5m extended to 10m: requests_in_window ")
        assert measured[Signal.TPOT_MEAN].valid, measured[Signal.TPOT_MEAN]
        assert all("[10m]" in m.query for m in measured.values() if m.query)

        # never further back than the configuration has run: 7 minutes give 6.5 settled, still too few requests
        young = measure(spec, SCOPE, client, at, since=at - timedelta(minutes=7))
        assert young.window.promql() == "5m"
        assert young[Signal.TPOT_MEAN].klass is MeasurementClass.NO_DATA

    simulated = measure(spec, SCOPE, bench, at, since=started)  # the bench's Prometheus, the same path
    assert simulated.window == measured.window
    for signal in (Signal.REQUESTS_IN_WINDOW, Signal.TPOT_MEAN, Signal.ACCEPTANCE_RATE, Signal.BATCH_SIZE):
        ours, theirs = simulated[signal], measured[signal]
        assert ours.klass is theirs.klass, (signal, ours, theirs)
        assert ours.value == pytest.approx(theirs.value, rel=1e-6), signal
