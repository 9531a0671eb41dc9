"""The bench's Prometheus agrees with the real one on the controller's own queries.

A simulated vLLM pod (Llama 8B + EAGLE-3, K=3, 10 QPS) is scraped by the bench's scrape loop (bench.prometheus.
ScrapeClock: 15 s with jitter, one scrape in five missed) for 15 minutes, with a restart at 7.5 minutes that starts
its counters from zero again. Every successful scrape is kept twice: as the bench stores it (bench.queries.snapshot)
and as the pod's /metrics text (sim.exposition), which is backfilled into the real Prometheus with promtool. Then
every query of promql.build_queries (rate(), increase(), histogram_quantile() over bucket rates, avg/max_over_time)
is answered by both at evaluation times whose 5 minute window holds the reset, missed scrapes, or neither.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.prometheus.fixture import PrometheusServer
from specpilot.autotune.signals.promql import Scope, Window, build_queries
from specpilot.bench.prometheus import ScrapeClock
from specpilot.bench.queries import ScrapeHistory, SimQueryClient, snapshot
from specpilot.sim.engine import Engine, EngineConfig, SimRequest, SpecConfig
from specpilot.sim.exposition import exposition
from specpilot.sim.presets import LLAMA8B_H100
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion

pytestmark = pytest.mark.prometheus

VERSION = VllmVersion.parse("0.32.0")
SCOPE = Scope("bench", "bench", "sim")
DURATION_S, RESTART_AT_S = 900.0, 450.0
SCOPE_LABELS = {"namespace": "bench", "specpilot_dev_deployment": "bench", "specpilot_dev_config_hash": "sim"}


def _engine(seed: int, now: float) -> Engine:
    config = EngineConfig(LLAMA8B_H100, VERSION, "bench", 256, speculation=SpecConfig("eagle3", 3))
    return Engine(config, seed=seed, now=now)


def _scrape_run() -> tuple[ScrapeHistory, list[tuple[float, str]], int]:
    """The bench's history, the /metrics text of every successful scrape, and how many scrapes were missed."""
    history, texts, missed = ScrapeHistory(), [], 0
    clock = ScrapeClock(15.0, 1.0, 0.2, seed=3)
    engine, n, restarted = _engine(1, 0.0), 0, False
    next_at, miss = clock.next()
    while engine.now < DURATION_S:
        if engine.now >= RESTART_AT_S and not restarted:  # the pod restarts: what ran is lost, counters from zero
            engine, restarted = _engine(2, engine.now), True
        while n * 0.1 <= engine.now:
            engine.submit(SimRequest(f"r{n}", n * 0.1, 200 + 100 * (n % 5), 150))
            n += 1
        engine.step()
        while next_at <= engine.now:
            if miss:
                history.scrape_failed(next_at)
                missed += 1
            else:
                history.add(snapshot(engine.metrics, next_at))
                texts.append((next_at, exposition(engine)))
            next_at, miss = clock.next()
    return history, texts, missed


def backfill(texts: list[tuple[float, str]], duration_s: float, promtool_binary: Path, tmp_path: Path) -> float:
    """Write the scraped `texts` of a `duration_s` run as TSDB blocks under tmp_path/prometheus/data with promtool,
    the last sample a minute old (within the 1 h retention); the wall-clock time of the run's second 0."""
    base = float(int(time.time()) - 60 - int(duration_s))
    source = tmp_path / "scrapes.om"
    source.write_text(_openmetrics(texts, base))
    done = subprocess.run([str(promtool_binary), "tsdb", "create-blocks-from", "openmetrics", str(source),
                           str(tmp_path / "prometheus" / "data")], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return base


def _openmetrics(texts: list[tuple[float, str]], base: float) -> str:
    by_family: dict[str, list[str]] = {}
    for at, text in texts:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in sorted({**s.labels, **SCOPE_LABELS}.items()))
                by_family.setdefault(s.name, []).append(f"{s.name}{{{labels}}} {s.value!r} {base + at:.3f}")
    lines: list[str] = []
    for name in sorted(by_family):  # one name's samples together, each series in time order
        lines.extend(sorted(by_family[name], key=lambda line: (line.rsplit(" ", 2)[0], float(line.rsplit(" ", 1)[1]))))
    return "\n".join([*lines, "# EOF", ""])


def _query(server: PrometheusServer, promql: str, at: float) -> float | None:
    url = f"{server.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read(1 << 20))
    assert body["status"] == "success", body
    result = body["data"]["result"]
    if not result:
        return None
    if len(result) > 1:  # acceptance by position: compared as the sum of its positions
        return sum(float(r["value"][1]) for r in result)
    return float(result[0]["value"][1])


def test_the_bench_answers_the_controllers_queries_as_prometheus_does(
    prometheus_binary: Path, promtool_binary: Path, tmp_path: Path
) -> None:
    history, texts, missed = _scrape_run()
    assert missed >= 5, "the run must miss scrapes"
    base = backfill(texts, DURATION_S, promtool_binary, tmp_path)
    window = Window(300.0, 300.0, "")
    names = metric_names_for(VERSION)
    queries = [q for q in build_queries(names, SCOPE, window, 50, 8192, 3.0) if q.promql is not None]
    client = SimQueryClient(names, SCOPE, history, lambda at: at.timestamp() - base, 50, 8192, 3.0)
    compared = 0
    with PrometheusServer(prometheus_binary, tmp_path / "prometheus", []).start() as server:
        for t in (400.0, 455.5, 600.25, 720.0, 899.9):  # 455.5-720: the window holds the reset
            for q in queries:
                assert q.promql is not None
                ours = client.query(q.promql, datetime.fromtimestamp(base + t, tz=UTC)).result
                mine = None if not ours else sum(float(r["value"][1]) for r in ours)
                theirs = _query(server, q.promql, base + t)
                assert (mine is None) == (theirs is None), (t, q.signal, mine, theirs)
                if mine is not None and theirs is not None:
                    assert (math.isnan(mine) and math.isnan(theirs)) or mine == pytest.approx(theirs, rel=1e-6), (
                        t, q.signal, mine, theirs)  # fmt: skip
                    compared += 1
    assert compared >= 5 * 20
