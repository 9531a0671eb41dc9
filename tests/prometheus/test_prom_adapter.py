"""The real Prometheus binary scraping fake vLLM pods: every query parses, numbers come out exact, failures classify.

Windows are 6 s over a 1 s scrape interval (the 4-scrape floor plus margin), so the tier runs in seconds.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import yaml

from e2e.prometheus.fixture import PrometheusServer, StartPrometheus
from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.autotune.evaluate import effective_window, evaluate_once, measure
from specpilot.autotune.policy.decision import decide
from specpilot.autotune.policy.state import PolicyInputs, PolicyState
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass, classify
from specpilot.autotune.signals.promql import Query, Scope, Signal
from specpilot.vllm.intent import SpeculationIntent
from tests.prometheus.conftest import DEPLOYMENT, NAMESPACE, committed_instant, make_spec
from tests.prometheus.fake_vllm import Loopback

pytestmark = pytest.mark.prometheus

VALID, NO_DATA, ERROR = MeasurementClass.VALID, MeasurementClass.NO_DATA, MeasurementClass.ERROR
ON = SpeculationIntent(True, 3)


def scope(config: str) -> Scope:
    return Scope(NAMESPACE, DEPLOYMENT, f"cfg-{config}")


@pytest.fixture
def client(prometheus: PrometheusServer) -> PrometheusClient:
    return PrometheusClient(PrometheusConnection(prometheus.url, timeout_s=5))


def settled(
    client: PrometheusClient, scope_: Scope, ready: Callable[[dict[str, Measurement]], bool], timeout_s: float = 30
) -> dict[str, Measurement]:
    """Measure until `ready` holds (Prometheus needs a few scrapes in the window); bounded."""
    spec = make_spec()
    deadline = time.monotonic() + timeout_s
    while True:
        result = dict(measure(spec, scope_, client, committed_instant()))
        if ready(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def full_window(result: dict[str, Measurement]) -> bool:
    gate = result[Signal.REQUESTS_IN_WINDOW]
    return gate.valid and (gate.value or 0) >= 400 and result[Signal.TPOT_P99].valid


def full_speculating_window(result: dict[str, Measurement]) -> bool:
    return full_window(result) and result[Signal.DRAFT_TOKENS_IN_WINDOW].valid


EXACT = {
    Signal.ACCEPTANCE_RATE: 0.7,
    Signal.MEAN_ACCEPTANCE_LENGTH: 3.1,
    Signal.TPOT_P50: 0.01,
    Signal.TPOT_P99: 0.0475,
    Signal.TPOT_MEAN: 0.015,
    Signal.TTFT_P50: 0.015,
    Signal.TTFT_P99: 0.0199,
    Signal.E2E_P50: 0.25,
    Signal.E2E_P99: 0.495,
    Signal.RUNNING_REQUESTS: 8,
    Signal.BATCH_SIZE: 8,
    Signal.BATCH_SIZE_PEAK: 8,
    Signal.WAITING_REQUESTS: 2,
    Signal.KV_CACHE_USAGE: 0.25,
    Signal.PREEMPTION_RATE: 0.0,
    Signal.OUTPUT_SHORT_FRACTION: 1.0,
    Signal.OUTPUT_TOKENS_P50: 2 + 3 * 40 / 90,
    Signal.MEAN_PROMPT_TOKENS: 740.0,  # the histogram's sum over its count, not a bucket interpolation
    Signal.TTFT_WITHIN_DEADLINE: 1.0,  # le="0.02" over the count: every first token within the 20 ms deadline
}


def test_measurements_come_out_exact(client: PrometheusClient) -> None:
    result = settled(client, scope("spec"), full_speculating_window)
    problems = {name: f"{m.klass.value}: {m.detail}" for name, m in result.items() if not m.valid}
    assert problems == {}, "every query of 0.33 parses and answers on a speculating pod"
    for signal, expected in EXACT.items():
        assert result[signal].value == pytest.approx(expected, rel=1e-9, abs=1e-12), signal
    assert dict(result[Signal.ACCEPTANCE_BY_POSITION].by_label) == pytest.approx({"0": 0.9, "1": 0.7, "2": 0.5})
    # rates depend on scrape timing; the ratios between them do not
    request_rate = result[Signal.REQUEST_RATE].value or 0
    assert (result[Signal.GENERATION_TOKEN_RATE].value or 0) / request_rate == pytest.approx(3.1)
    assert result[Signal.ACCEPTANCE_RATE].samples == result[Signal.DRAFT_TOKENS_IN_WINDOW].value
    assert result[Signal.DRAFT_TOKENS_IN_WINDOW].value == pytest.approx(
        3 * (result[Signal.REQUESTS_IN_WINDOW].value or 0)
    )
    assert 'specpilot_dev_config_hash="cfg-spec"' in (result[Signal.ACCEPTANCE_RATE].query or "")


@pytest.mark.parametrize("version", ["0.7.3", "0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.24.0"])
def test_every_version_dialect_parses(client: PrometheusClient, version: str) -> None:
    settled(client, scope("spec"), full_speculating_window)
    result = measure(make_spec(version), scope("spec"), client, committed_instant())
    errors = {name: m.detail for name, m in result.items() if m.klass is ERROR}
    assert errors == {}


def test_speculation_off_is_nodata_not_error(client: PrometheusClient) -> None:
    result = settled(client, scope("plain"), full_window)
    for signal in (
        Signal.ACCEPTANCE_RATE,
        Signal.MEAN_ACCEPTANCE_LENGTH,
        Signal.ACCEPTANCE_BY_POSITION,
        Signal.DRAFT_TOKENS_IN_WINDOW,
    ):
        assert result[signal].klass is NO_DATA, signal
        assert result[signal].value is None, "absent counters are never read as 0"
    assert result[Signal.TPOT_P99].value == pytest.approx(0.0475)
    out = evaluate_once(make_spec(), scope("plain"), client, committed_instant(), current=ON.without_speculation())
    assert out["decision"]["action"] == "Keep"
    assert "speculation off" in out["decision"]["reason"]


def test_absent_series_are_nodata(client: PrometheusClient) -> None:
    result = measure(make_spec(), scope("missing"), client, datetime.now(UTC))
    assert {m.klass for m in result.values()} == {NO_DATA}
    assert "empty result" in result[Signal.BATCH_SIZE].detail


def test_more_than_one_series_is_an_error(client: PrometheusClient) -> None:
    result = settled(client, scope("dp"), full_speculating_window)
    assert result[Signal.RUNNING_REQUESTS].value == 16, "two engines summed"
    assert result[Signal.BATCH_SIZE].value == 8, "per engine"
    assert result[Signal.ACCEPTANCE_RATE].value == pytest.approx(0.7)
    raw_gauge = f"vllm:num_requests_running{scope('dp').selector()}"
    m = classify(Query(Signal.RUNNING_REQUESTS, raw_gauge, "requests"), client.query(raw_gauge))
    assert m.klass is ERROR
    assert "2 series returned, expected exactly one" in m.detail


def test_counter_resets_keep_rates_exact(client: PrometheusClient, loopback: Loopback) -> None:
    pod = loopback.pods["reset"]
    result = settled(client, scope("reset"), lambda r: pod.scrapes >= 10 and full_speculating_window(r))
    assert pod.scrapes >= 10, "at least two restarts happened inside the window"
    assert result[Signal.ACCEPTANCE_RATE].value == pytest.approx(0.7, rel=1e-9)
    assert result[Signal.TPOT_P99].value == pytest.approx(0.0475, rel=1e-9)
    assert (result[Signal.DRAFT_TOKENS_IN_WINDOW].value or 0) > 0


def test_evaluate_once_reports_measurements_and_holds_on_acceptance_alone(client: PrometheusClient) -> None:
    """Acceptance 0.70 under a disableBelow of 0.80, with no plain comparison and no cost model this deployment's
    windows confirm: acceptance alone never switches speculation off, so the evaluation holds and says why."""
    settled(client, scope("spec"), full_speculating_window)
    out = evaluate_once(make_spec(disableBelow=0.8, enableAbove=0.9), scope("spec"), client, committed_instant())
    json.dumps(out)
    decision = out["decision"]
    assert decision["action"] == "Keep"
    assert decision["reason"].startswith("holding: acceptance 0.70 < disableBelow 0.80 over 6s, ")
    assert decision["reason"].endswith("acceptance alone never switches speculation off")
    assert decision["to"]["enabled"] is True
    acceptance = out["measurements"]["acceptance_rate"]
    assert acceptance["class"] == "Valid"
    assert acceptance["query"].startswith("sum(rate(vllm:spec_decode_num_accepted_tokens_total{")
    assert out["window"] == {"value": "6s", "requested": "6s", "note": ""}


def test_cli_evaluate_prints_json(prometheus: PrometheusServer, client: PrometheusClient, tmp_path: Path) -> None:
    settled(client, scope("spec"), full_speculating_window)
    resource = {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": make_spec().model_dump(by_alias=True, mode="json", exclude_none=True),
        "status": {"effective": {"speculation": True, "configHash": "cfg-spec"}},
    }
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(resource))
    done = subprocess.run(
        [sys.executable, "-m", "specpilot", "evaluate", str(path), "--prometheus", prometheus.url, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["decision"]["action"] == "Keep"
    assert out["measurements"]["acceptance_rate"]["value"] == pytest.approx(0.7)
    assert out["scope"]["configHash"] == "cfg-spec"
    framework = {f["condition"]: f["status"] for f in out["framework"]}
    assert list(framework) == ["QuantizationPenalty", "AcceptanceMethod", "ShortOutputs", "MixedWorkload"]
    assert framework["AcceptanceMethod"] == "False"  # the target is unquantized: checked and fine
    text = subprocess.run(
        [sys.executable, "-m", "specpilot", "evaluate", str(path), "--prometheus", prometheus.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "decision Keep: acceptance 0.70 >= disableBelow 0.50" in text.stdout
    assert "AcceptanceMethod     False   TargetNotQuantized: the target runs unquantized weights" in text.stdout


def test_bad_query_is_an_error(client: PrometheusClient) -> None:
    m = classify(Query(Signal.BATCH_SIZE, "sum(", "requests"), client.query("sum("))
    assert m.klass is ERROR
    assert "HTTP 400 bad_data" in m.detail


def test_stopped_prometheus_is_an_error_and_holds(prometheus_factory: StartPrometheus) -> None:
    server = prometheus_factory([])
    url = server.url
    server.stop()
    spec = make_spec()
    with PrometheusClient(PrometheusConnection(url, timeout_s=2)) as dead:
        result = measure(spec, scope("spec"), dead, datetime.now(UTC))
    assert {m.klass for m in result.values()} == {ERROR}
    assert "transport: ConnectError" in result[Signal.ACCEPTANCE_RATE].detail
    state, events, acted = PolicyState(), [], []
    for i in range(5):
        inputs = PolicyInputs(spec=spec, current=ON, measurements=result, window=effective_window(spec.autotune))
        decision, state = decide(inputs, state, datetime(2026, 11, 26, tzinfo=UTC) + timedelta(minutes=i))
        events += [e.reason for e in decision.events]
        acted.append(decision.actuate)
    assert state.metrics_available is False
    assert events == ["MetricsUnavailable"]
    assert not any(acted)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI to make a test certificate")
def test_tls_with_a_ca_bundle(prometheus_factory: StartPrometheus, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    server = prometheus_factory(
        [], web_config={"tls_server_config": {"cert_file": str(cert), "key_file": str(key)}}, ca_file=cert
    )
    assert server.url.startswith("https://")
    query = Query(Signal.BATCH_SIZE, "vector(1)", "requests")
    with PrometheusClient(PrometheusConnection(server.url, ca_pem=cert.read_text())) as trusted:
        assert classify(query, trusted.query("vector(1)")).value == 1.0
    with PrometheusClient(PrometheusConnection(server.url, trust_env=False)) as strict:
        refused = classify(query, strict.query("vector(1)"))
        assert refused.klass is ERROR
        assert "CERTIFICATE_VERIFY_FAILED" in refused.detail
    with PrometheusClient(PrometheusConnection(server.url, insecure_skip_verify=True)) as insecure:
        assert classify(query, insecure.query("vector(1)")).value == 1.0


def api(loopback: Loopback, prefix: str = "") -> str:
    return f"http://{loopback.address}{prefix}"


def last_request(loopback: Loopback) -> dict[str, Any]:
    return loopback.api_requests[-1]


def test_adapter_sends_bearer_token_headers_and_the_evaluation_time(loopback: Loopback) -> None:
    at = datetime(2026, 11, 26, 12, 0, 30, tzinfo=UTC)
    conn = PrometheusConnection(
        api(loopback, "/tenant"),
        timeout_s=3,
        bearer_token="s3cret",
        headers={"X-Scope-OrgID": "team-a"},
        allow_plain_http=True,  # the loopback API speaks plain HTTP
    )
    assert "s3cret" not in repr(conn), "secrets never reach a log line"
    with PrometheusClient(conn) as prom:
        raw = prom.query("up", at)
    sent = last_request(loopback)
    assert sent["path"] == "/tenant/api/v1/query"
    assert sent["headers"]["Authorization"] == "Bearer s3cret"
    assert sent["headers"]["X-Scope-OrgID"] == "team-a"
    form = parse_qs(sent["form"])
    assert form == {"query": ["up"], "timeout": ["3s"], "time": [f"{at.timestamp():.3f}"]}
    m = classify(Query(Signal.BATCH_SIZE, "up", ""), raw)
    assert m.value == 0.7
    assert m.warnings == ("this answer comes from the loopback API", "info: PromQL info: only a test")


def test_adapter_sends_basic_auth(loopback: Loopback) -> None:
    connection = PrometheusConnection(api(loopback), username="ops", password="pw", allow_plain_http=True)
    with PrometheusClient(connection) as prom:
        prom.query("up")
    expected = "Basic " + base64.b64encode(b"ops:pw").decode()
    assert last_request(loopback)["headers"]["Authorization"] == expected


@pytest.mark.parametrize(
    ("prefix", "timeout_s", "detail"),
    [
        ("/slow", 0.3, "timeout: no complete answer within 0.3s"),
        ("/broken", 3, "HTTP 502 bad_response: not a Prometheus API answer"),
    ],
)
def test_adapter_failures_are_errors(loopback: Loopback, prefix: str, timeout_s: float, detail: str) -> None:
    with PrometheusClient(PrometheusConnection(api(loopback, prefix), timeout_s=timeout_s)) as prom:
        m = classify(Query(Signal.BATCH_SIZE, "up", ""), prom.query("up"))
    assert m.klass is ERROR
    assert detail in m.detail


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "prometheus:9090"}, "is not http"),
        ({"url": "http://prometheus:99999"}, "port 1-65535"),
        ({"url": "http://prometheus:9090/\r\nX: y"}, "is not http"),
        ({"bearer_token": "t", "url": "http://prometheus:9090"}, "plain http://"),
        ({"headers": {"X-Scope-OrgID": "a\r\nInjected: 1"}}, "no CR/LF"),
        ({"headers": {"X-Scope-OrgID": "équipe"}}, "no non-ASCII"),
        ({"headers": {"Bad Name": "x"}}, "not an HTTP token"),
        ({"ca_pem": "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"}, "not a PEM CA bundle"),
        ({"bearer_token": "t", "username": "u", "password": "p"}, "not both"),
        ({"username": "u"}, "needs both"),
        ({"bearer_token": "t", "headers": {"authorization": "x"}}, "must not set Authorization"),
        ({"timeout_s": 0}, "positive"),
    ],
)
def test_connection_rejects_contradictions(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrometheusConnection(**{"url": "https://prometheus:9090", **kwargs})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("{loopback}/broken", "error: the URL does not answer like a Prometheus API (HTTP 502 bad_response"),
        ("{loopback}/error", "error: every evidence gate is an Error (HTTP 422 execution: query processing would"),
        ("{prometheus}/wrong-prefix", "error: the URL does not answer like a Prometheus API (HTTP 404"),
    ],
)
def test_cli_evaluate_tells_a_failed_measurement_from_a_decision(
    prometheus: PrometheusServer, loopback: Loopback, tmp_path: Path, url: str, message: str
) -> None:
    """Exit 3 when Prometheus could not answer (0 is a decision, 1 bad input); the body is never echoed."""
    resource = {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": make_spec().model_dump(by_alias=True, mode="json", exclude_none=True),
    }
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(resource))
    target = url.format(loopback=api(loopback), prometheus=prometheus.url)
    done = subprocess.run(
        [sys.executable, "-m", "specpilot", "evaluate", str(path), "--prometheus", target],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert message in done.stderr
    assert "bad gateway" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("timeout_s", [1.5, 0.25, 10, 59.9995, 60])
def test_every_timeout_is_sent_as_a_duration_prometheus_accepts(prometheus: PrometheusServer, timeout_s: float) -> None:
    """Prometheus parses the `timeout` parameter with its own duration syntax: 1.5s is a 400 bad_data there."""
    with PrometheusClient(PrometheusConnection(prometheus.url, timeout_s=timeout_s)) as prom:
        m = classify(Query(Signal.BATCH_SIZE, "vector(1)", ""), prom.query("vector(1)"))
    assert m.valid, m.detail
