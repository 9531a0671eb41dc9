"""`specpilot loadgen --trace FILE --url URL`: replay a trace against a live OpenAI-compatible server (shell).

Each request of the trace is sent at its (scaled) arrival time to `/v1/completions`, streaming, with a prompt of
exactly its recorded length (token ids, so no tokenizer is needed and no two prompts share a prefix) and its
recorded output length forced: `max_tokens` and `min_tokens` at that length and `ignore_eos`. At most
`--concurrency` requests are in flight; a request due while the bound is reached waits for a slot. Every read is
bounded: bytes per response, bytes per event line, and time per request; the run as a whole ends at the duration
cap plus one request timeout.

Per request it measures TTFT (send to the first streamed choice: a token whose text may still be empty, as a byte of
a multi-byte character), TPOT ((E2E - TTFT) / (tokens - 1)) and E2E, and
prints percentiles, the errors by kind, and the requests whose output came back shorter than forced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from specpilot.bench.main import positive
from specpilot.bench.trace import TraceError, TraceRequest, read_trace

MAX_RESPONSE_BYTES = 8 * 1024 * 1024  # a 16k-token stream is ~3 MB of events
MAX_EVENT_BYTES = 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
# Prompt token ids are drawn from here: ordinary tokens inside any vocabulary (vLLM refuses an id past the model's
# vocabulary; the tiny test models have 462 tokens), above the few special ids some tokenizers put first.
TOKEN_IDS = (100, 400)


@dataclass(frozen=True)
class Result:
    index: int
    at: float  # scheduled send time, seconds after the start
    ok: bool
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    tokens: int = 0
    expected_tokens: int = 0
    error: str | None = None  # "kind: detail"


def planned(
    requests: Sequence[TraceRequest], time_scale: float, duration_s: float | None, limit: int | None
) -> list[TraceRequest]:
    """The requests to send: arrival times x time_scale, those before the duration cap, the first `limit`."""
    out = [TraceRequest(r.at * time_scale, r.prompt_tokens, r.output_tokens) for r in requests]
    if duration_s is not None:
        out = [r for r in out if r.at < duration_s]
    return out[:limit] if limit is not None else out


def prompt_ids(index: int, length: int, seed: int) -> list[int]:
    rng = random.Random(f"loadgen:{seed}:{index}")
    return [rng.randrange(*TOKEN_IDS) for _ in range(length)]


class _Failure(Exception):
    """A request that failed; its message is `kind: detail`."""


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of a server-sent event stream, bounded in total bytes and per line, until [DONE]; a stream
    that ends without [DONE] was cut (the server aborted it, e.g. a pod stopped without drain) and is a failure."""
    total = 0
    pending = b""
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > MAX_RESPONSE_BYTES:
            raise _Failure(f"response too large: more than {MAX_RESPONSE_BYTES:,} bytes")
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_EVENT_BYTES:
            raise _Failure(f"bad stream: an event line longer than {MAX_EVENT_BYTES:,} bytes")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            try:
                event = json.loads(data)
            except (ValueError, RecursionError):
                raise _Failure(f"bad stream: an event is not JSON: {data[:80]!r}") from None
            if not isinstance(event, dict):
                raise _Failure(f"bad stream: an event is not a JSON object: {data[:80]!r}")
            yield event
    raise _Failure("stream cut: the response ended before [DONE]")


async def _send(client: httpx.AsyncClient, model: str, index: int, r: TraceRequest, seed: int) -> Result:
    body = {"model": model, "prompt": prompt_ids(index, r.prompt_tokens, seed), "max_tokens": r.output_tokens,
            "min_tokens": r.output_tokens, "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    started = time.perf_counter()
    first: float | None = None
    usage: int | None = None
    streamed = 0
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise _Failure(f"HTTP {response.status_code}: {await _error_message(response)}")
        async for event in _events(response):
            if "error" in event:
                raise _Failure(f"server error: {str(event['error'])[:200]}")
            choices = event.get("choices")
            if isinstance(choices, list) and choices:  # a token came, even one with no text yet
                streamed += 1
                if first is None:
                    first = time.perf_counter()
            counted = event.get("usage")
            if isinstance(counted, dict) and isinstance(counted.get("completion_tokens"), int):
                usage = counted["completion_tokens"]
    end = time.perf_counter()
    if first is None:
        raise _Failure("empty response: no token streamed")
    tokens = usage if usage is not None else streamed  # without usage: the token events that arrived
    tpot = (end - first) / (tokens - 1) if tokens > 1 else None
    return Result(index, 0.0, True, first - started, tpot, end - started, tokens, r.output_tokens)


async def _error_message(response: httpx.Response) -> str:
    raw = b""
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) > MAX_ERROR_BYTES:
            break
    try:
        message = json.loads(raw[:MAX_ERROR_BYTES]).get("error", {}).get("message")
    except (ValueError, AttributeError, RecursionError):
        message = None
    return str(message or raw[:200].decode("utf-8", "replace")).replace("\n", " ")[:200]


async def replay(
    url: str, model: str, requests: Sequence[TraceRequest], *, concurrency: int, timeout_s: float, seed: int = 0
) -> list[Result]:
    """Send every request at its time (at most `concurrency` in flight); one Result each, in trace order."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
    slots = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:
        start = time.perf_counter()

        async def one(index: int, r: TraceRequest) -> Result:
            await asyncio.sleep(max(0.0, start + r.at - time.perf_counter()))
            async with slots:
                try:
                    result = await asyncio.wait_for(_send(client, model, index, r, seed), timeout_s)
                except _Failure as err:
                    result = Result(index, 0.0, False, expected_tokens=r.output_tokens, error=str(err))
                except (TimeoutError, httpx.TimeoutException):
                    result = Result(index, 0.0, False, expected_tokens=r.output_tokens,
                                    error=f"timeout: no complete response within {timeout_s:g} s")  # fmt: skip
                except httpx.HTTPError as err:
                    result = Result(index, 0.0, False, expected_tokens=r.output_tokens,
                                    error=f"connection: {type(err).__name__}: {err}"[:240])  # fmt: skip
            return Result(**{**asdict(result), "at": r.at})

        return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))


def served_model(url: str, timeout_s: float) -> str:
    """The first model /v1/models lists (bounded read)."""
    with httpx.Client(timeout=timeout_s) as client, client.stream("GET", f"{url}/v1/models") as response:
        raw = b""
        for chunk in response.iter_bytes():
            raw += chunk
            if len(raw) > MAX_ERROR_BYTES:
                raise ValueError(f"{url}/v1/models: answer larger than {MAX_ERROR_BYTES:,} bytes; pass --model")
        if response.status_code != 200:
            raise ValueError(f"{url}/v1/models: HTTP {response.status_code}; pass --model")
    try:
        return str(json.loads(raw)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        raise ValueError(f"{url}/v1/models: no model id in the answer; pass --model") from None


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(results: Sequence[Result], wall_s: float) -> dict[str, Any]:
    done = [r for r in results if r.ok]
    errors = Counter((r.error or "").split(":", 1)[0] for r in results if not r.ok)
    first_error = {kind: next(r.error for r in results if r.error and r.error.startswith(kind)) for kind in errors}
    out: dict[str, Any] = {
        "sent": len(results),
        "completed": len(done),
        "failed": len(results) - len(done),
        "short_outputs": sum(1 for r in done if r.tokens < r.expected_tokens),
        "wall_s": round(wall_s, 2),
        "errors": {kind: {"count": n, "first": first_error[kind]} for kind, n in errors.items()},
    }
    for name, values in (("ttft", [r.ttft_s for r in done]), ("tpot", [r.tpot_s for r in done]),
                         ("e2e", [r.e2e_s for r in done])):  # fmt: skip
        present = [v for v in values if v is not None]
        for q in (0.5, 0.9, 0.99):
            value = quantile(present, q)
            out[f"p{round(q * 100)}_{name}_ms"] = None if math.isnan(value) else round(value * 1000, 2)
    return out


def table(s: dict[str, Any]) -> str:
    lines = [f"sent {s['sent']}, completed {s['completed']}, failed {s['failed']}, outputs shorter than forced "
             f"{s['short_outputs']} ({s['wall_s']:g} s)", f"{'':8}{'p50':>10}{'p90':>10}{'p99':>10}"]  # fmt: skip
    for name in ("ttft", "tpot", "e2e"):
        cells = [s[f"p{q}_{name}_ms"] for q in (50, 90, 99)]
        lines.append(f"{name.upper() + ' ms':8}" + "".join(f"{'-' if c is None else c:>10}" for c in cells))
    lines += [f"error {kind}: {e['count']} (first: {e['first']})" for kind, e in s["errors"].items()]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", type=Path, required=True, metavar="FILE",
                   help="Azure LLM inference CSV, BurstGPT CSV or Mooncake JSONL (.gz read compressed)")  # fmt: skip
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="model name to send (default: the first one /v1/models lists)")
    p.add_argument("--time-scale", type=positive(float), default=1.0, metavar="FACTOR",
                   help="multiply arrival times (0.1: ten times the trace's rate; default 1)")  # fmt: skip
    p.add_argument("--duration", type=positive(float), metavar="SECONDS",
                   help="send only the requests due in the first SECONDS (after time scaling)")  # fmt: skip
    p.add_argument("--requests", type=positive(int), metavar="N", help="send only the first N requests")
    p.add_argument("--concurrency", type=positive(int), default=64, help="requests in flight at most (default 64)")
    p.add_argument("--timeout", type=positive(float), default=300.0, metavar="SECONDS",
                   help="a request's whole response must arrive within this (default 300)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the prompt token ids")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")


def main(args: argparse.Namespace) -> int:
    """Exit 0 when every request completed, 1 when some failed, 2 on bad input."""
    url = args.url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        print(f"error: --url: {args.url!r} is not an http:// or https:// URL", file=sys.stderr)
        return 2
    try:
        trace = read_trace(args.trace)
        model = args.model or served_model(url, min(args.timeout, 30.0))
    except (TraceError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except httpx.HTTPError as err:
        print(f"error: {url}/v1/models: {type(err).__name__}: {err}; pass --model or check --url", file=sys.stderr)
        return 2
    requests = planned(trace.requests, args.time_scale, args.duration, args.requests)
    started = time.perf_counter()
    results = asyncio.run(replay(url, model, requests, concurrency=args.concurrency, timeout_s=args.timeout,
                                 seed=args.seed))  # fmt: skip
    result = summary(results, time.perf_counter() - started)
    if args.output == "json":
        print(json.dumps({**result, "trace": trace.source, "model": model, "url": url}, indent=2))
    else:
        print(f"{trace.source} -> {url} ({model}), {len(requests)} requests, time x{args.time_scale:g}")
        print(table(result))
    return 0 if result["failed"] == 0 else 1
