"""A hostile "Prometheus" on 127.0.0.1: every path prefix answers every query in one hostile way.

Each prefix is a base URL of its own (`http://127.0.0.1:PORT/huge` is queried at /huge/api/v1/query), so one server
plays every kind of bad Prometheus: an answer too large to hold, one nested too deeply to parse recursively, one
dripped a byte at a time, a valid answer carrying a warning of tens of MB, a web page, and a redirect to itself.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MB = 1_000_000
HUGE_BYTES = 60 * MB
WARNING_BYTES = 20 * MB
LONG_TEXT = 1 * MB  # under the adapter's byte cap: parsed, then every string copied out of it is truncated
NESTING = 100_000
GZIP_BYTES = 50 * MB
MANY_VALUES = 1_000_000
DRIP_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Hostile:
    """One kind of hostile answer: its path prefix and what it does, for the suite to print."""

    prefix: str
    what: str


KINDS = (
    Hostile("/huge", f"a {HUGE_BYTES // MB} MB answer, no Content-Length"),
    Hostile("/huge-declared", f"a {HUGE_BYTES // MB} MB answer announced by Content-Length"),
    Hostile("/many-values", f"a valid envelope whose result is {MANY_VALUES} empty arrays, under 4 MiB"),
    Hostile("/nested", f"a valid envelope whose result is nested {NESTING} levels deep"),
    Hostile("/drip", f"a valid answer sent one byte every {DRIP_INTERVAL_S} s, status line included"),
    Hostile("/warning", f"a valid answer carrying a {WARNING_BYTES // MB} MB warning"),
    Hostile("/gzip", f"a {GZIP_BYTES // MB} MB answer gzip-compressed to about 50 kB, although identity was asked for"),
    Hostile("/html", "HTTP 200 with a text/html page"),
    Hostile("/redirect", "HTTP 302 to itself, forever"),
)


def _valid(warnings: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    sample = {"metric": {"position": "0"}, "value": [time.time(), "1"]}
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [sample]},
        "warnings": warnings or [],
        **extra,
    }


def _huge_chunks(total: int) -> Iterator[bytes]:
    """A syntactically valid vector answer of about `total` bytes, in 1 MB pieces."""
    series = json.dumps({"metric": {"pod": "p" * 200}, "value": [0, "1"]}).encode() + b","
    chunk = series * (MB // len(series))
    yield b'{"status":"success","data":{"resultType":"vector","result":['
    for _ in range(total // len(chunk)):
        yield chunk
    yield series[:-1] + b"]}}"


def _bodies() -> dict[str, bytes]:
    """The answers with a fixed body, built once before serving (so that building them is not measured)."""
    long_strings = _valid(["w" * LONG_TEXT, "second"], infos=["i" * LONG_TEXT])
    long_strings["data"]["result"][0]["metric"]["position"] = "p" * LONG_TEXT
    nested = b"[" * NESTING + b"]" * NESTING
    return {
        "/nested": b'{"status":"success","data":{"resultType":"vector","result":' + nested + b"}}",
        "/many-values": b'{"status":"success","data":{"resultType":"vector","result":['
        + b"[]," * (MANY_VALUES - 1)
        + b"[]]}}",
        "/warning": json.dumps(_valid(["w" * WARNING_BYTES])).encode(),
        "/long-strings": json.dumps(long_strings).encode(),  # under the byte cap: measured, every string cut
        "/good": json.dumps(_valid()).encode(),
        "/gzip": gzip.compress(b'{"status":"success","warnings":["' + b"w" * GZIP_BYTES + b'"]}', compresslevel=9),
    }


def _handler(bodies: dict[str, bytes]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return

        def _headers(self, status: int, content_type: str, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            prefix = "/" + self.path.strip("/").split("/")[0]
            # the client hangs up on every hostile answer: that is the behaviour under test
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._answer(prefix)

        do_GET = do_POST  # Prometheus answers both; some clients (prometheus-api-client) use GET

        def _answer(self, prefix: str) -> None:
            if prefix == "/drip":
                self._drip(bodies["/good"])
            elif prefix in ("/huge", "/huge-declared"):
                declared = prefix == "/huge-declared"
                self._headers(200, "application/json", sum(map(len, _huge_chunks(HUGE_BYTES))) if declared else None)
                for chunk in _huge_chunks(HUGE_BYTES):
                    self.wfile.write(chunk)
            elif prefix == "/redirect":
                self.send_response(302)
                self.send_header("Location", self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif prefix == "/gzip":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(bodies[prefix])))
                self.end_headers()
                self.wfile.write(bodies[prefix])
            elif prefix == "/html":
                page = b"<html><body>" + b"<p>not an API</p>" * 1000 + b"</body></html>"
                self._headers(200, "text/html", len(page))
                self.wfile.write(page)
            else:
                body = bodies.get(prefix, bodies["/good"])
                self._headers(200, "application/json", len(body))
                self.wfile.write(body)

        def _drip(self, body: bytes) -> None:
            head = f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            for byte in head.encode() + body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(DRIP_INTERVAL_S)

    return Handler


@contextlib.contextmanager
def hostile_server() -> Iterator[str]:
    """Serve every hostile kind on a free port; yields http://127.0.0.1:PORT."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(_bodies()))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="hostile-prometheus", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
