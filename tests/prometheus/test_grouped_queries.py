"""Fleet rounds against the real Prometheus binary: one grouped query per metric gives every deployment exactly the
measurements its own queries give (issue 12).

Six deployments over the fake vLLM pods, in two namespaces, one of them twice (same pods, two config hashes): a
speculating one, one with speculation off (acceptance NoData), two engines (sums across engines), counters that
reset, one with no series at all (everything NoData), one whose evidence minimum is out of reach (NoData: too few
samples), plus a deployment without a config hash and one on vLLM 0.8.4 (other query shapes: their own groups).
Every measurement, its class, value, sample count, detail and recorded query, must equal the per-deployment
`measure` at the same instant; a query that is not aggregated shows the "more than one series" Error survives the
split unchanged.
"""

from __future__ import annotations

import time

import pytest

from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec
from specpilot.autotune.evaluate import Subject, effective_window, measure, measure_many
from specpilot.autotune.model.rollcost import ttft_deadline_s
from specpilot.autotune.signals.measurements import MeasurementClass, classify, split_answer
from specpilot.autotune.signals.promql import Query, Scope, ScopeSet, Signal, build_queries
from specpilot.vllm.metrics import metric_names_for
from specpilot.vllm.versions import VllmVersion
from tests.prometheus.conftest import committed_instant, make_spec
from tests.prometheus.fake_vllm import Loopback

pytestmark = pytest.mark.prometheus

# (namespace, deployment, config hash, pod served)
TARGETS = [
    ("ml", "chat", "cfg-a", "spec"),
    ("ml", "chat", "cfg-b", "plain"),
    ("ml", "code", "cfg-a", "dp"),
    ("team", "chat", "cfg-c", "reset"),
    ("team", "rag", "cfg-d", "spec"),
]


@pytest.fixture(scope="module")
def fleet_prometheus(prometheus_factory: StartPrometheus, loopback: Loopback) -> PrometheusServer:
    jobs = [
        {
            "job_name": f"fleet-{namespace}-{deployment}-{config}",
            "metrics_path": f"/{pod}/metrics",
            "static_configs": [
                {
                    "targets": [loopback.address],
                    "labels": {
                        "namespace": namespace,
                        "specpilot_dev_deployment": deployment,
                        "specpilot_dev_config_hash": config,
                        "pod": f"{deployment}-{pod}",
                    },
                }
            ],
        }
        for namespace, deployment, config, pod in TARGETS
    ]
    return prometheus_factory(jobs)


def strict(version: str = "0.33.0") -> SpeculativeDeploymentSpec:
    """Same queries as make_spec, but an evidence minimum no window here reaches."""
    spec = make_spec(version)
    return spec.model_copy(
        update={
            "autotune": spec.autotune.model_copy(
                update={"min_samples": spec.autotune.min_samples.model_copy(update={"requests": 10**9})}
            )
        }
    )


def subjects() -> list[Subject]:
    base = make_spec()
    return [
        Subject("chat-a", base, Scope("ml", "chat", "cfg-a")),
        Subject("chat-b", base, Scope("ml", "chat", "cfg-b")),
        Subject("code-a", base, Scope("ml", "code", "cfg-a")),
        Subject("team-chat", base, Scope("team", "chat", "cfg-c")),
        Subject("ghost", base, Scope("ml", "ghost", "cfg-z")),
        Subject("rag-strict", strict(), Scope("team", "rag", "cfg-d")),
        Subject("chat-any-config", base, Scope("ml", "chat", None)),
        Subject("old-vllm", make_spec("0.8.4"), Scope("ml", "code", "cfg-a")),
    ]


def wait_for_full_windows(client: PrometheusClient) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        probes = [measure(make_spec(), Scope(*target[:3]), client, committed_instant()) for target in TARGETS]
        if all(p[Signal.REQUESTS_IN_WINDOW].valid and (p[Signal.REQUESTS_IN_WINDOW].value or 0) >= 400 for p in probes):
            return
        time.sleep(0.5)
    raise AssertionError("Prometheus did not fill a 6 s window in 30 s")


def test_grouped_round_equals_per_deployment_queries(fleet_prometheus: PrometheusServer) -> None:
    client = PrometheusClient(PrometheusConnection(fleet_prometheus.url, timeout_s=5))
    wait_for_full_windows(client)
    at = committed_instant()  # both sides read identical samples
    fleet = subjects()
    round_ = measure_many(fleet, client, at)
    for subject in fleet:
        alone = measure(subject.spec, subject.scope, client, at)
        assert round_.measurements[subject.key] == alone, subject.key
    # One query per available metric and query shape: three shapes (hash / no hash / 0.8.4), not eight deployments.
    assert round_.queries_sent == 2 * available_queries(make_spec()) + available_queries(make_spec("0.8.4"))
    classes = {
        key: {str(name): m.klass for name, m in measured.items()} for key, measured in round_.measurements.items()
    }
    # The round covered every case the per-deployment path knows (so the equality above is not vacuous).
    assert {k: m.detail for k, m in round_.measurements["chat-a"].items() if not m.valid} == {}
    assert classes["chat-b"][Signal.ACCEPTANCE_RATE] is MeasurementClass.NO_DATA
    assert set(classes["ghost"].values()) == {MeasurementClass.NO_DATA}
    assert "too few samples" in round_.measurements["rag-strict"][Signal.TPOT_P99].detail
    assert round_.measurements["code-a"][Signal.RUNNING_REQUESTS].value == 16, "two engines summed per deployment"
    assert round_.measurements["chat-any-config"][Signal.REQUESTS_IN_WINDOW].valid


def available_queries(spec: SpeculativeDeploymentSpec) -> int:
    names = metric_names_for(VllmVersion.parse(spec.engine.version))
    settings = (
        spec.autotune.workload.short_output_tokens,
        spec.engine.max_model_len,
        ttft_deadline_s(spec.autotune.latency),
    )
    queries = build_queries(names, Scope("x", "y", "z"), effective_window(spec.autotune), *settings)
    return sum(1 for q in queries if q.promql)


def test_one_series_too_many_survives_the_split(fleet_prometheus: PrometheusServer) -> None:
    """An unaggregated gauge: two engines give two series per deployment, an Error either way, word for word."""
    client = PrometheusClient(PrometheusConnection(fleet_prometheus.url, timeout_s=5))
    wait_for_full_windows(client)
    at = committed_instant()
    scopes = [Scope("ml", "code", "cfg-a"), Scope("ml", "chat", "cfg-a"), Scope("ml", "ghost", "cfg-z")]
    group = ScopeSet.of(scopes)
    grouped = Query(Signal.RUNNING_REQUESTS, f"vllm:num_requests_running{group.selector()}", "requests")
    split = split_answer(client.query(grouped.promql or "", at), group.labels(), [s.key() for s in scopes])
    verdicts = []
    for scope in scopes:
        own = Query(Signal.RUNNING_REQUESTS, f"vllm:num_requests_running{scope.selector()}", "requests")
        alone = classify(own, client.query(own.promql or "", at))
        together = classify(own, split[scope.key()])
        assert together == alone, scope
        verdicts.append((alone.klass, alone.detail))
    assert [klass for klass, _ in verdicts] == [
        MeasurementClass.ERROR,
        MeasurementClass.VALID,
        MeasurementClass.NO_DATA,
    ]
    assert "2 series returned, expected exactly one" in verdicts[0][1]
