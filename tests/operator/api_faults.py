"""A fault-injecting HTTP proxy on 127.0.0.1 in front of the real kube-apiserver.

Every request is forwarded as it came (the client's bearer token included) and every answer streamed back, watches
included, until the test switches a fault on: then the requests the fault matches are answered the way a real API
server answers under contention, overload or restarts (409 Conflict, 429 Too Many Requests with Retry-After, 500,
an answer lost after the write was done, a watch answered "410 Gone: too old resource version"), and open watch
streams can be cut mid-stream. The proxy counts what each fault answered, so a test can prove its fault was met.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

# Hop-by-hop headers, and those the proxy's own client and server set (the proxy asks upstream for identity bodies).
_REQUEST_DROPPED = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding", "keep-alive"}
_ANSWER_DROPPED = {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}
_REASONS = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 500: "InternalError"}


@dataclass(frozen=True)
class Seen:
    """What a fault or a test matches on: one request as the proxy received it."""

    method: str
    path: str
    query: dict[str, str]

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")

    def in_namespace(self, namespace: str) -> bool:
        return f"/namespaces/{namespace}/" in self.path


def status_body(code: int, message: str, retry_after: int | None = None) -> dict[str, Any]:
    """A metav1.Status as the API server writes it for a failed request."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(code, "Unknown"),
        "code": code,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


@dataclass
class Fault:
    """One way of failing the requests `matches` selects, while switched on.

    `answer`: the HTTP status answered instead of forwarding; with `after_forwarding`, the request is forwarded
    first and its answer replaced (the write happened, its answer was lost). `watch_error`: a watch is answered 200 and
    one ERROR event with that code, as the API server answers one from an expired resourceVersion (410) or one that
    failed on the server (500: a storage or conversion error).
    """

    name: str
    matches: Callable[[Seen], bool]
    answer: int | None = None
    retry_after: int | None = None
    after_forwarding: bool = False
    watch_error: int | None = None
    active: bool = False
    hits: int = 0

    def describe(self) -> str:
        if self.watch_error is not None:
            return f"200 + an ERROR event {self.watch_error} {_REASONS.get(self.watch_error, '')}"
        retry = f" with Retry-After: {self.retry_after}" if self.retry_after is not None else ""
        lost = " after forwarding it (the write was done, its answer lost)" if self.after_forwarding else ""
        return f"HTTP {self.answer}{retry}{lost}"


@dataclass
class _Stream:
    seen: Seen
    transport: asyncio.Transport | None


@dataclass
class FaultProxy:
    """The proxy: `url` for a kubeconfig; `faults` switched with `injecting`; `seen` every request forwarded."""

    upstream: str
    ssl_context: ssl.SSLContext
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    _streams: list[_Stream] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def injecting(self, *faults: Fault) -> Iterator[None]:
        for fault in faults:
            fault.active = True
        try:
            yield
        finally:
            for fault in faults:
                fault.active = False

    def count(self, predicate: Callable[[Seen], bool]) -> int:
        with self._guard:
            return sum(1 for s in self.seen if predicate(s))

    def cut_watches(self, predicate: Callable[[Seen], bool]) -> int:
        """Close the open watch streams `predicate` selects, mid-stream, as a dropped connection would. Returns how
        many were cut."""
        assert self._loop is not None
        with self._guard:
            chosen = [s for s in self._streams if predicate(s.seen) and s.transport is not None]
        for stream in chosen:
            transport = stream.transport
            assert transport is not None
            self._loop.call_soon_threadsafe(transport.abort)
        return len(chosen)

    def _fault_for(self, seen: Seen) -> Fault | None:
        with self._guard:
            self.seen.append(seen)
            for fault in self.faults:
                if fault.active and fault.matches(seen):
                    fault.hits += 1
                    return fault
        return None

    async def _handle(self, request: web.Request, session: aiohttp.ClientSession) -> web.StreamResponse:
        seen = Seen(request.method, request.path, dict(request.query))
        fault = self._fault_for(seen)
        if fault is not None and fault.watch_error is not None:
            message = "too old resource version: 1 (2)" if fault.watch_error == 410 else "injected: storage error"
            event = {"type": "ERROR", "object": status_body(fault.watch_error, message)}
            return web.Response(text=json.dumps(event) + "\n", content_type="application/json")
        if fault is not None and not fault.after_forwarding:
            assert fault.answer is not None
            return _failure(fault)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _REQUEST_DROPPED}
        headers["Accept-Encoding"] = "identity"  # else aiohttp asks for gzip, and watch events arrive compressed
        body = await request.read()
        async with session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,  # no body, no Content-Type: the API server refuses a GET that names one
            ssl=self.ssl_context,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        ) as upstream:
            if fault is not None:
                await upstream.read()
                return _failure(fault)
            return await self._stream_back(request, seen, upstream)

    async def _stream_back(
        self, request: web.Request, seen: Seen, upstream: aiohttp.ClientResponse
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for key, value in upstream.headers.items():
            if key.lower() not in _ANSWER_DROPPED:
                response.headers[key] = value
        stream = _Stream(seen, request.transport)
        with self._guard:
            self._streams.append(stream)
        try:
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientError, RuntimeError):
            pass  # the client went away, or the stream was cut
        finally:
            with self._guard:
                self._streams.remove(stream)
        return response

    async def _serve(self, started: threading.Event, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession(auto_decompress=False) as session:

            async def handle(request: web.Request) -> web.StreamResponse:
                return await self._handle(request, session)

            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://127.0.0.1:{port}"
            started.set()
            await stop.wait()
            await runner.cleanup()

    @contextlib.contextmanager
    def running(self) -> Iterator[FaultProxy]:
        started, loop = threading.Event(), asyncio.new_event_loop()
        self._loop = loop
        stop = asyncio.Event()
        thread = threading.Thread(target=loop.run_until_complete, args=(self._serve(started, stop),), daemon=True)
        thread.start()
        if not started.wait(10):
            raise RuntimeError("the fault proxy did not start")
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(10)


def _failure(fault: Fault) -> web.Response:
    assert fault.answer is not None
    headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
    body = status_body(fault.answer, f"injected by the test's fault proxy: {fault.name}", fault.retry_after)
    return web.Response(status=fault.answer, text=json.dumps(body), content_type="application/json", headers=headers)


def proxy_for(admin_kubeconfig: Path) -> FaultProxy:
    """A proxy to the API server of `admin_kubeconfig`, trusting its CA (the proxy forwards clients' own tokens)."""
    config = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    return FaultProxy(upstream=str(cluster["server"]).rstrip("/"), ssl_context=context)


def through_proxy(kubeconfig: Path, proxy_url: str, path: Path) -> Path:
    """A copy of `kubeconfig` whose cluster is reached through the proxy (plain HTTP on loopback)."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"] = {"server": proxy_url}
    path.write_text(yaml.safe_dump(config))
    return path


def path_matches(pattern: str) -> Callable[[Seen], bool]:
    compiled = re.compile(pattern)
    return lambda seen: compiled.search(seen.path) is not None
