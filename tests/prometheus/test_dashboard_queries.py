"""Every dashboard expression parses in real Prometheus, and those over vLLM series or recording rules return data
from a real vLLM CPU run (replayed, with the recording rules backfilled by promtool)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.dashboard_promql import dashboard_expressions, grafana_to_promql, references
from tests.prometheus.conftest import Replay

pytestmark = pytest.mark.prometheus
DASHBOARD = json.loads(
    (Path(__file__).resolve().parents[2] / "charts" / "specpilot" / "dashboards" / "specpilot.json").read_text()
)
EXPRESSIONS = dashboard_expressions(DASHBOARD)


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_dashboard_expression_on_real_data(replayed_prometheus: Replay, where: str, expr: str) -> None:
    replay = replayed_prometheus
    promql = grafana_to_promql(expr)
    answer = httpx.get(
        f"{replay.server.url}/api/v1/query_range",
        params={"query": promql, "start": replay.start, "end": replay.end + 60, "step": "15s"},
        timeout=30,
    ).json()
    assert answer["status"] == "success", f"{where}: {answer}"
    operator_only = all(s.name.startswith("specpilot_") for s in references(expr).selectors)
    if not operator_only:  # the replay holds vLLM series (and rules), not an operator's
        assert answer["data"]["result"], f"{where}: no data from a real vLLM run for {promql}"
