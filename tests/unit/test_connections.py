"""Prometheus credentials come only from an administrator's connections, only where and how the administrator allows.

The credential cases end at a real HTTP server on 127.0.0.1 (a thread of the test) that records what arrived, so
"the token is sent" and "nothing is sent" are observed on the wire, not inferred.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from specpilot.adapters import connections
from specpilot.adapters.connections import ConnectionsError, Registry, UnavailablePrometheus, open_client, resolve
from specpilot.api.v1alpha1 import PrometheusSpec
from specpilot.autotune.signals.measurements import classify
from specpilot.autotune.signals.promql import Query, Signal


class Recorder:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.headers.append(dict(self.headers.items()))
                body = json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [0, "1"]}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

        return Handler


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    rec.thread.start()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


def write_registry(tmp_path: Path, connections_: dict[str, Any], **top: Any) -> Path:
    path = tmp_path / "connections.json"
    path.write_text(json.dumps({"connections": connections_, **top}))
    return path


def secret_dir(tmp_path: Path, **files: str) -> str:
    directory = tmp_path / "secret"
    directory.mkdir(exist_ok=True)
    for name, value in files.items():
        (directory / name.replace("_", ".")).write_text(value)
    return str(directory)


QUERY = Query(Signal.BATCH_SIZE, "vector(1)", "requests")


def test_a_named_connection_sends_its_token_only_from_allowed_namespaces(tmp_path: Path, recorder: Recorder) -> None:
    creds = secret_dir(tmp_path, token="s3cret\n")
    registry = Registry.load(
        write_registry(
            tmp_path,
            {"main": {"url": recorder.url, "credentialsDir": creds, "namespaces": ["ml"], "allowPlainHTTP": True}},
        )
    )
    spec = PrometheusSpec(connection="main")
    resolution = resolve(registry, spec, "ml")
    assert resolution.connection is not None
    assert "s3cret" not in repr(resolution)
    from specpilot.adapters.prom import PrometheusClient

    with PrometheusClient(resolution.connection) as client:
        assert classify(QUERY, client.query("vector(1)")).value == 1.0
    assert recorder.headers[-1]["Authorization"] == "Bearer s3cret"

    refused = resolve(registry, spec, "other")
    assert refused.connection is None
    assert (
        refused.problem == "spec.autotune.prometheus.connection: connection 'main' is not available in namespace other"
    )


def test_a_spec_url_never_carries_credentials(tmp_path: Path, recorder: Recorder) -> None:
    registry = Registry.load(
        write_registry(
            tmp_path,
            {"main": {"url": recorder.url, "credentialsDir": secret_dir(tmp_path, token="t"), "allowPlainHTTP": True}},
        )
    )
    resolution = resolve(registry, PrometheusSpec(url=recorder.url, headers={"X-Scope-OrgID": "a"}), "ml")
    assert resolution.connection is not None
    from specpilot.adapters.prom import PrometheusClient

    with PrometheusClient(resolution.connection) as client:
        client.query("vector(1)")
    sent = recorder.headers[-1]
    assert "Authorization" not in sent
    assert sent["X-Scope-OrgID"] == "a"


def test_spec_urls_can_be_switched_off(tmp_path: Path) -> None:
    registry = Registry.load(write_registry(tmp_path, {"main": {"url": "https://p:9090"}}, allowSpecURLs=False))
    resolution = resolve(registry, PrometheusSpec(url="http://evil.example:80"), "ml")
    assert resolution.connection is None
    assert resolution.problem == (
        "spec.autotune.prometheus.url: the administrator allows only named connections (choose one of: main)"
    )


@pytest.mark.parametrize(
    ("entry", "files", "problem"),
    [
        ({"url": "https://p:9090"}, {"username": "u"}, "connection main: prometheus basic auth needs both"),
        ({"url": "https://p:9090"}, {"token": "t", "username": "u", "password": "p"}, "not both"),
        (
            {"url": "https://p:9090"},
            {"ca_crt": "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n"},
            "connection main: ca.crt is not a PEM CA bundle",
        ),
        ({"url": "https://p:9090"}, {"token": "s3cr3t\r\nX-Injected: 1"}, "no CR/LF"),
    ],
)
def test_credentials_that_cannot_work_are_refused_by_name(
    tmp_path: Path, entry: dict[str, Any], files: dict[str, str], problem: str
) -> None:
    """The Secret is checked at each use (rotation may break it): the evaluation reports why, the token never leaks."""
    creds = secret_dir(tmp_path, **files)
    registry = Registry(
        connections={
            "main": connections.ConnectionConfig(url=entry["url"], credentials_dir=creds, allow_plain_http=False)
        }
    )
    client, resolution = open_client_with(registry, PrometheusSpec(connection="main"))
    assert isinstance(client, UnavailablePrometheus)
    assert resolution.problem is not None
    assert problem in resolution.problem
    assert "s3cr3t" not in resolution.problem
    raw = client.query("up")
    assert raw.transport_error is not None
    assert raw.transport_error.startswith("no Prometheus connection: connection main")


def open_client_with(registry: Registry, spec: PrometheusSpec) -> tuple[Any, connections.Resolution]:
    connections._registry = registry  # the operator's start-up configure() would set it from the file
    try:
        return open_client(spec, "ml")
    finally:
        connections._registry = None


def test_an_unknown_connection_names_the_known_ones(tmp_path: Path) -> None:
    registry = Registry.load(write_registry(tmp_path, {"main": {"url": "https://p:9090"}}))
    resolution = resolve(registry, PrometheusSpec(connection="other"), "ml")
    assert resolution.problem == "spec.autotune.prometheus.connection: no connection named 'other' (known: main)"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{", "cannot read Prometheus connections"),
        (json.dumps({"connections": {"Main": {"url": "https://p:9090"}}}), "must be a DNS label"),
        (
            json.dumps({"connections": {"main": {"url": "http://p:9090", "credentialsDir": "/x"}}}),
            "plain http:// but the connection has credentials: use https:// or set allowPlainHTTP: true",
        ),
        (json.dumps({"connections": {"main": {"url": "https://p:9090", "namespaces": "ml"}}}), "valid list"),
        (json.dumps({"connections": {"main": {"url": "https://p:9090", "extra": 1}}}), "Extra inputs"),
    ],
)
def test_a_bad_connections_file_stops_the_operator_with_a_reason(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "connections.json"
    path.write_text(content)
    with pytest.raises(ConnectionsError, match=r".*") as caught:
        Registry.load(path)
    assert str(caught.value).startswith(str(path))
    assert problem in str(caught.value)


def test_run_refuses_to_start_with_a_bad_connections_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specpilot.cli.main import main

    path = tmp_path / "connections.json"
    path.write_text("not json")
    assert main(["run", "--prometheus-connections", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"error: {path}: cannot read Prometheus connections")
