"""Prometheus HTTP API: run instant queries and hand back raw answers (I/O only; judging is measurements.py).

Built on httpx rather than prometheus-api-client because `PrometheusConnect.custom_query` returns only
`data.result`: it drops `warnings`/`infos` (which status must surface, control-loop rule 10) and `resultType`
(scalar vs vector), takes a CA bundle only as a file path (we hold the PEM from a Secret in memory), and retries
connection failures with backoff by default, which turns "Prometheus is down" into seconds of blocking per query.

Synchronous on purpose: one evaluation is a handful of small queries. kopf handlers call it from a thread
(`def` handler or `asyncio.to_thread`, style.md §2.3). Credentials arrive as values; reading the Secret is the
Kubernetes adapter's job.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType

import httpx

from specpilot.api.durations import parse_duration
from specpilot.api.v1alpha1 import PrometheusSpec
from specpilot.measurements import RawResult

QUERY_PATH = "api/v1/query"


@dataclass(frozen=True)
class PrometheusConnection:
    """Where and how to reach Prometheus. Secrets are excluded from repr so they never reach a log line."""

    url: str
    timeout_s: float = 10.0
    bearer_token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_pem: str | None = field(default=None, repr=False)
    insecure_skip_verify: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    trust_env: bool = True  # honour HTTP(S)_PROXY / NO_PROXY like other in-cluster clients

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"prometheus url {self.url!r} must start with http:// or https://")
        if self.timeout_s <= 0:
            raise ValueError("prometheus timeout must be positive")
        if self.bearer_token and (self.username or self.password):
            raise ValueError("prometheus auth: give a bearer token or basic auth (username/password), not both")
        if (self.username is None) != (self.password is None):
            raise ValueError("prometheus basic auth needs both username and password")
        if any(name.lower() == "authorization" for name in self.headers) and (self.bearer_token or self.username):
            raise ValueError("prometheus headers must not set Authorization when a token or basic auth is given")


def connection_from_spec(
    spec: PrometheusSpec,
    *,
    bearer_token: str | None = None,
    username: str | None = None,
    password: str | None = None,
    ca_pem: str | None = None,
) -> PrometheusConnection:
    """Combine spec.autotune.prometheus with credentials the caller read from the referenced Secret."""
    return PrometheusConnection(
        url=spec.url,
        timeout_s=parse_duration(spec.timeout),
        bearer_token=bearer_token,
        username=username,
        password=password,
        ca_pem=ca_pem,
        insecure_skip_verify=spec.insecure_skip_verify,
        headers=dict(spec.headers),
    )


def _verify(connection: PrometheusConnection) -> ssl.SSLContext | bool:
    if connection.insecure_skip_verify:
        return False
    if connection.ca_pem:
        return ssl.create_default_context(cadata=connection.ca_pem)
    return True


class PrometheusClient:
    """Instant queries against one Prometheus (or a compatible API: Thanos, Mimir, VictoriaMetrics)."""

    def __init__(self, connection: PrometheusConnection, *, transport: httpx.BaseTransport | None = None) -> None:
        headers = dict(connection.headers)
        if connection.bearer_token:
            headers["Authorization"] = f"Bearer {connection.bearer_token}"
        auth = (
            httpx.BasicAuth(connection.username, connection.password)
            if connection.username is not None and connection.password is not None
            else None
        )
        base = connection.url if connection.url.endswith("/") else connection.url + "/"
        self.connection = connection
        self._client = httpx.Client(
            base_url=base,
            headers=headers,
            auth=auth,
            verify=_verify(connection),
            timeout=httpx.Timeout(connection.timeout_s),
            trust_env=connection.trust_env,
            transport=transport,
        )

    def query(self, promql: str, at: datetime | None = None) -> RawResult:
        """POST /api/v1/query (form-encoded, so long queries fit); never raises for Prometheus or network failures."""
        form = {"query": promql, "timeout": f"{self.connection.timeout_s:g}s"}
        if at is not None:
            form["time"] = f"{at.timestamp():.3f}"
        try:
            response = self._client.post(QUERY_PATH, data=form)
        except httpx.TimeoutException as err:
            return RawResult.from_transport_error(_describe(err), timed_out=True)
        except httpx.HTTPError as err:
            return RawResult.from_transport_error(_describe(err))
        try:
            body = response.json()
        except ValueError:
            snippet = response.text[:200].strip()
            return RawResult(
                http_status=response.status_code, error_type="bad_response", error=f"body is not JSON: {snippet!r}"
            )
        return RawResult.from_response(response.status_code, body)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _describe(err: httpx.HTTPError) -> str:
    text = str(err) or "no detail"
    return f"{type(err).__name__}: {text}"
