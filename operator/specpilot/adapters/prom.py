"""Prometheus HTTP API: run instant and range queries, hand back raw answers (I/O only; judging is measurements.py).

Built on httpx rather than prometheus-api-client because `PrometheusConnect.custom_query` returns only
`data.result`: it drops `warnings`/`infos` (which status must surface) and `resultType` (scalar vs vector), takes a
CA bundle only as a file path (we hold the PEM from a Secret in memory), retries connection failures with backoff by
default, which turns "Prometheus is down" into seconds of blocking per query, and reads and parses whole bodies,
which no byte, depth or time limit can then bound.

Synchronous interface: one evaluation is a handful of small queries, and the operator's rounds and the CLI call it
from a thread of their own. Credentials arrive as values (from the administrator's connections,
adapters.connections, or the CLI's files). A PrometheusConnection that could not work is refused when it is built:
a malformed URL or port, a timeout outside (0, MAX_QUERY_TIMEOUT], header names or values with CR/LF or non-ASCII
characters, a CA bundle that does not parse, and credentials over plain http:// unless `allow_plain_http`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import threading
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, cast

import httpx
import pydantic_core

from specpilot.api.durations import format_duration
from specpilot.api.v1alpha1 import HEADER_NAME_PATTERN, HEADER_VALUE_PATTERN, MAX_QUERY_TIMEOUT_S, URL_PATTERN
from specpilot.autotune.signals.measurements import RawResult

QUERY_PATH = "api/v1/query"
QUERY_RANGE_PATH = "api/v1/query_range"
# An answer of the operator's own queries is a few kB; a fleet round's grouped query at 1,000 objects about 1.5 MB.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
# Parsed JSON costs ~70 bytes of Python objects per array or object: counting values (commas and brackets) before
# parsing keeps a 4 MiB body of empty arrays from becoming ~100 MiB of lists. A fleet answer has ~10 per series.
MAX_ANSWER_VALUES = 250_000


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
        if not 0 < self.timeout_s <= MAX_QUERY_TIMEOUT_S:
            raise ValueError(
                f"prometheus timeout must be positive and at most {format_duration(MAX_QUERY_TIMEOUT_S)} "
                f"(got {self.timeout_s:g}s)"
            )
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
    """Instant queries against one Prometheus (or a compatible API: Thanos, Mimir, VictoriaMetrics).

    Every answer is untrusted: a query ends within `timeout_s` in total (status line, headers and body together, not
    per read, so a server dripping a byte at a time cannot hold it), its body is read as it arrives and refused past
    MAX_ANSWER_BYTES or MAX_ANSWER_VALUES, and it is parsed with a nesting limit. Redirects are not followed and
    only a JSON, unencoded body is read. httpx's timeouts are per operation, so the total deadline is asyncio's:
    the client runs its own event loop, driven from the calling thread (one query at a time per client; never call it
    from a coroutine, whose thread already runs a loop).
    """

    def __init__(self, connection: PrometheusConnection, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        # Identity: a compressed body could expand past the byte cap inside one read, before it can be counted.
        headers = {**connection.headers, "Accept-Encoding": "identity"}
        if connection.bearer_token:
            headers["Authorization"] = f"Bearer {connection.bearer_token}"
        auth = (
            httpx.BasicAuth(connection.username, connection.password)
            if connection.username is not None and connection.password is not None
            else None
        )
        base = connection.url if connection.url.endswith("/") else connection.url + "/"
        self.connection = connection
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._client = httpx.AsyncClient(
            base_url=base,
            headers=headers,
            auth=auth,
            verify=_verify(connection),
            timeout=httpx.Timeout(connection.timeout_s),
            trust_env=connection.trust_env,
            transport=transport,
            follow_redirects=False,
        )

    def query(self, promql: str, at: datetime | None = None) -> RawResult:
        """POST /api/v1/query (form-encoded, so long queries fit); never raises for Prometheus or network failures."""
        form = {"query": promql, "timeout": prometheus_duration(self.connection.timeout_s)}
        if at is not None:
            form["time"] = f"{at.timestamp():.3f}"
        return self._post(QUERY_PATH, form)

    def query_range(self, promql: str, start: datetime, end: datetime, step_s: int) -> RawResult:
        """POST /api/v1/query_range over [start, end] every `step_s` seconds; never raises, like `query`."""
        form = {
            "query": promql,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{step_s}s",
            "timeout": prometheus_duration(self.connection.timeout_s),
        }
        return self._post(QUERY_RANGE_PATH, form)

    def _post(self, path: str, form: Mapping[str, str]) -> RawResult:
        with self._lock:
            return self._loop.run_until_complete(self._bounded(path, form))

    async def _bounded(self, path: str, form: Mapping[str, str]) -> RawResult:
        limit = self.connection.timeout_s
        try:
            async with asyncio.timeout(limit):
                return await self._exchange(path, form)
        except TimeoutError:
            return RawResult.from_transport_error(f"no complete answer within {limit:g}s", timed_out=True)
        except httpx.TimeoutException as err:
            return RawResult.from_transport_error(_describe(err), timed_out=True)
        except httpx.HTTPError as err:
            return RawResult.from_transport_error(_describe(err))

    async def _exchange(self, path: str, form: Mapping[str, str]) -> RawResult:
        async with self._client.stream("POST", path, data=form) as response:
            refused = _refuse_before_reading(response)
            if refused is not None:
                return refused
            body = bytearray()
            # closed here when the cap is hit, not left half-read for the loop's finaliser
            async with contextlib.aclosing(cast(AsyncGenerator[bytes], response.aiter_raw())) as chunks:
                async for chunk in chunks:
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        return _too_large(response.status_code, f"more than the limit of {MAX_ANSWER_BYTES} bytes")
        return parse_answer(response.status_code, bytes(body))

    def close(self) -> None:
        with self._lock:
            self._loop.run_until_complete(self._client.aclose())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def prometheus_duration(seconds: float) -> str:
    """A duration Prometheus' API accepts: whole seconds or whole milliseconds (it refuses 1.5s and 3.6e+06s)."""
    millis = max(1, round(seconds * 1000))
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def _not_an_answer(status: int, why: str) -> RawResult:
    # Only the shape, never the body: the URL may come from a CR, and echoing what an arbitrary endpoint answered
    # into status would let its author read services only the operator can reach.
    return RawResult(http_status=status, error_type="bad_response", error=f"not a Prometheus API answer: {why}")


def _too_large(status: int, size: str) -> RawResult:
    return RawResult(http_status=status, error_type="too_large", error=f"answer too large: {size}")


def _refuse_before_reading(response: httpx.Response) -> RawResult | None:
    """What the status line and headers already rule out: redirects, non-JSON or encoded bodies, a huge length."""
    status = response.status_code
    if 300 <= status < 400:
        return _not_an_answer(status, "a redirect (not followed)")
    kind = response.headers.get("content-type", "")
    if kind.split(";")[0].strip().lower() != "application/json":
        return _not_an_answer(status, f"content type {kind or 'none'!r:.60}, not application/json")
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        return _not_an_answer(status, f"content encoding {encoding!r:.40} although identity was asked for")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        return _too_large(status, f"Content-Length {declared}, over the limit of {MAX_ANSWER_BYTES} bytes")
    return None


def parse_answer(status: int, body: bytes) -> RawResult:
    """Parse a body of at most MAX_ANSWER_BYTES with bounded cost: values counted first, nesting limited."""
    values = body.count(b",") + body.count(b"[") + body.count(b"{")
    if values > MAX_ANSWER_VALUES:
        return _too_large(status, f"about {values} JSON values, over the limit of {MAX_ANSWER_VALUES}")
    try:
        parsed = pydantic_core.from_json(body)
    except ValueError as err:
        why = "nested too deeply" if "recursion limit" in str(err) else "body is not JSON"
        return _not_an_answer(status, f"{why} ({str(err)[:80]}, {len(body)} bytes)")
    return RawResult.from_response(status, parsed)


def _describe(err: httpx.HTTPError) -> str:
    text = str(err) or "no detail"
    return f"{type(err).__name__}: {text}"
