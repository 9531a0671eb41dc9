"""Prometheus HTTP API: run instant queries and hand back raw answers (I/O only; judging is measurements.py).

Built on httpx rather than prometheus-api-client because `PrometheusConnect.custom_query` returns only
`data.result`: it drops `warnings`/`infos` (which status must surface) and `resultType`
(scalar vs vector), takes a CA bundle only as a file path (we hold the PEM from a Secret in memory), and retries
connection failures with backoff by default, which turns "Prometheus is down" into seconds of blocking per query.

Synchronous on purpose: one evaluation is a handful of small queries. kopf handlers call it from a thread (`def` handler
or `asyncio.to_thread`), so a slow Prometheus never blocks the event loop. Credentials arrive as values (from the
administrator's connections, adapters.connections, or the CLI's files). A PrometheusConnection that could not work is
refused when it is built: a malformed URL or port, header names or values with CR/LF or non-ASCII characters, a CA
bundle that does not parse, and credentials over plain http:// unless `allow_plain_http`.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from specpilot.api.v1alpha1 import HEADER_NAME_PATTERN, HEADER_VALUE_PATTERN, URL_PATTERN
from specpilot.autotune.signals.measurements import RawResult

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
    allow_plain_http: bool = False  # send credentials over http:// (an administrator's explicit choice)

    def __post_init__(self) -> None:
        if not re.fullmatch(URL_PATTERN, self.url):
            raise ValueError(
                f"prometheus url {self.url!r:.100} is not http(s)://host[:port][/path] (port 1-65535, no spaces, "
                "query or fragment)"
            )
        if not self.timeout_s > 0:
            raise ValueError("prometheus timeout must be positive")
        for name, value in self.headers.items():
            if not re.fullmatch(HEADER_NAME_PATTERN, name):
                raise ValueError(f"prometheus header name {name!r:.60} is not an HTTP token")
            if not re.fullmatch(HEADER_VALUE_PATTERN, value):
                raise ValueError(
                    f"prometheus header {name}: the value may hold only visible ASCII, space and tab "
                    "(no CR/LF, no non-ASCII characters)"
                )
        credentials = bool(self.bearer_token or self.username or self.password)
        if credentials and self.url.startswith("http://") and not self.allow_plain_http:
            raise ValueError(
                f"prometheus url {self.url} is plain http://: credentials are sent only over https:// "
                "(unless explicitly allowed)"
            )
        for label, secret in (
            ("bearer token", self.bearer_token),
            ("username", self.username),
            ("password", self.password),
        ):
            if secret is not None and not re.fullmatch(HEADER_VALUE_PATTERN, secret):
                raise ValueError(f"prometheus {label}: only characters an HTTP header can carry (no CR/LF, ASCII)")
        if self.ca_pem is not None:
            check_ca_bundle(self.ca_pem, "the prometheus CA bundle")
        if self.bearer_token and (self.username or self.password):
            raise ValueError("prometheus auth: give a bearer token or basic auth (username/password), not both")
        if (self.username is None) != (self.password is None):
            raise ValueError("prometheus basic auth needs both username and password")
        if any(name.lower() == "authorization" for name in self.headers) and (self.bearer_token or self.username):
            raise ValueError("prometheus headers must not set Authorization when a token or basic auth is given")

    def identity(self) -> tuple[Any, ...]:
        """Everything that makes two connections the same one (fleet rounds share a client between them)."""
        return (
            self.url,
            self.timeout_s,
            self.bearer_token,
            self.username,
            self.password,
            self.ca_pem,
            self.insecure_skip_verify,
            tuple(sorted(self.headers.items())),
            self.trust_env,
            self.allow_plain_http,
        )


def check_ca_bundle(pem: str, what: str) -> None:
    """Refuse a CA bundle that does not parse now, rather than failing every TLS handshake later."""
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError) as err:
        raise ValueError(f"{what} is not a PEM CA bundle: {err}") from None


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
            # Only the shape, never the body: the URL may come from a CR, and echoing what an arbitrary endpoint
            # answered into status would let its author read services only the operator can reach.
            kind = response.headers.get("content-type", "no content type")
            return RawResult(
                http_status=response.status_code,
                error_type="bad_response",
                error=f"not a Prometheus API answer: body is not JSON ({kind!r:.60}, {len(response.content)} bytes)",
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
