"""A tiny load generator for a local vLLM server, and the spec-decode counters of its ``/metrics``.

Loopback only (127.0.0.0/8, localhost, ::1), bounded in request count and wall time, standard library only.

``python -m e2e.vllm.load --url http://127.0.0.1:PORT -n 20 -c 2 -t 0.0 --model tiny`` prints one JSON line.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import ipaddress
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass

MAX_REQUESTS = 10_000
DEFAULT_PROMPTS: tuple[str, ...] = (
    "the quick brown fox jumps over the lazy dog the quick brown fox jumps over the lazy dog",
    "kubernetes operator pod node cluster service deployment replica scale",
    "speculative decoding draft model target accept reject cache memory cpu speculative decoding draft model",
    "Hello world. This is a test of the vLLM server on CPU",
)

_SPEC = "vllm:spec_decode_num_"
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


@dataclass(frozen=True)
class SpecCounters:
    """Sums over all label sets of vLLM's V1 spec-decode counters (absent families count as 0)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    present: bool = False  # whether /metrics had the families at all (they exist only with a speculative config)

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        return SpecCounters(
            drafts=self.drafts - other.drafts,
            draft_tokens=self.draft_tokens - other.draft_tokens,
            accepted_tokens=self.accepted_tokens - other.accepted_tokens,
            present=self.present,
        )

    @property
    def acceptance(self) -> float | None:
        """accepted / draft tokens, None without draft tokens."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts (tokens per verification step, bonus token included), None without drafts."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None


def metric_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Parse Prometheus text exposition into (name, labels, value) samples (comments skipped)."""
    out: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group("labels") or ""))
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        out.append((m.group("name"), labels, value))
    return out


def metric_sum(text: str, name: str, **labels: str) -> float | None:
    """Sum of all samples of ``name`` whose labels include ``labels``; None if there is none."""
    vals = [v for n, lb, v in metric_samples(text) if n == name and all(lb.get(k) == x for k, x in labels.items())]
    return sum(vals) if vals else None


def parse_spec_counters(text: str) -> SpecCounters:
    drafts = metric_sum(text, _SPEC + "drafts_total")
    draft_tokens = metric_sum(text, _SPEC + "draft_tokens_total")
    accepted = metric_sum(text, _SPEC + "accepted_tokens_total")
    return SpecCounters(
        drafts=drafts or 0.0,
        draft_tokens=draft_tokens or 0.0,
        accepted_tokens=accepted or 0.0,
        present=draft_tokens is not None,
    )


@dataclass(frozen=True)
class LoadResult:
    requests: int
    ok: int
    errors: int
    completion_tokens: int
    wall_s: float
    tokens_per_s: float
    mean_latency_s: float
    first_error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def check_loopback(url: str) -> None:
    """Refuse anything but a loopback address: load is only ever sent to servers this machine runs."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"refusing to send load to {host!r}: loopback addresses only")


def run_load(
    url: str,
    *,
    model: str = "tiny",
    n: int = 10,
    concurrency: int = 1,
    temperature: float = 0.0,
    max_tokens: int = 64,
    time_limit_s: float = 120.0,
    request_timeout_s: float = 60.0,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    ignore_eos: bool = True,
    seed_base: int = 0,
) -> LoadResult:
    """Send ``n`` completions (``max_tokens`` each, ``ignore_eos``) with ``concurrency`` in flight.

    Requests not started within ``time_limit_s`` are skipped (counted as errors); each request has its own timeout.
    Request i uses prompt ``i % len(prompts)`` and seed ``seed_base + i``.
    """
    check_loopback(url)
    if not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"n must be in 1..{MAX_REQUESTS}")
    if not 1 <= concurrency <= 64:
        raise ValueError("concurrency must be in 1..64")
    endpoint = url.rstrip("/") + "/v1/completions"
    deadline = time.monotonic() + time_limit_s

    def one(i: int) -> tuple[float, int, str | None]:
        if time.monotonic() > deadline:
            return 0.0, 0, "skipped: time limit reached"
        body = {
            "model": model,
            "prompt": prompts[i % len(prompts)],
            "max_tokens": max_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
            "seed": seed_base + i,
        }
        req = urllib.request.Request(
            endpoint,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=request_timeout_s) as resp:
                data = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            detail = exc.read().decode(errors="replace")[:300] if isinstance(exc, urllib.error.HTTPError) else ""
            return time.monotonic() - t0, 0, f"{type(exc).__name__}: {exc} {detail}".strip()
        return time.monotonic() - t0, int(data["usage"]["completion_tokens"]), None

    t_start = time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=concurrency) as ex:
        results = list(ex.map(one, range(n)))
    wall = time.monotonic() - t_start
    ok = [r for r in results if r[2] is None]
    errors = [r[2] for r in results if r[2] is not None]
    tokens = sum(r[1] for r in ok)
    return LoadResult(
        requests=n,
        ok=len(ok),
        errors=len(errors),
        completion_tokens=tokens,
        wall_s=round(wall, 3),
        tokens_per_s=round(tokens / wall, 1) if wall > 0 else 0.0,
        mean_latency_s=round(sum(r[0] for r in ok) / len(ok), 3) if ok else 0.0,
        first_error=errors[0] if errors else None,
    )


MAX_STREAM_BYTES = 4 * 1024 * 1024
MAX_SSE_LINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class StreamResult:
    """One streamed completion as the client saw it."""

    chunks: int  # SSE events that carried generated text
    completion_tokens: int | None  # from the final usage chunk; None if the stream ended before it
    finish_reason: str | None  # "length", "stop", "abort", ... of the last choice that had one
    done: bool  # the stream ended with data: [DONE]
    error: str | None = None  # HTTP status or connection error, when the request failed or broke off

    @property
    def complete(self) -> bool:
        return self.done and self.error is None and self.finish_reason in ("length", "stop")


def stream_completion(
    url: str,
    *,
    model: str = "tiny",
    prompt: str = DEFAULT_PROMPTS[0],
    max_tokens: int = 64,
    timeout_s: float = 120.0,
    first_chunk: threading.Event | None = None,
) -> StreamResult:
    """POST a streaming /v1/completions (ignore_eos, temperature 0) and read it to its end or its failure.

    ``first_chunk`` is set once text arrives. Bounded: ``timeout_s`` per read and in total, 4 MiB and 64 KiB a line.
    """
    check_loopback(url)
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    chunks, tokens, finish, done, received = 0, None, None, False, 0
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            while not done and time.monotonic() < deadline and received < MAX_STREAM_BYTES:
                line = resp.readline(MAX_SSE_LINE_BYTES)
                if not line:
                    break
                received += len(line)
                payload = line.decode("utf-8", "replace").strip().removeprefix("data:").strip()
                if not line.startswith(b"data:") or not payload:
                    continue
                if payload == "[DONE]":
                    done = True
                    continue
                event = json.loads(payload)
                for choice in event.get("choices") or []:
                    if choice.get("text"):
                        chunks += 1
                        if first_chunk is not None:
                            first_chunk.set()
                    finish = choice.get("finish_reason") or finish
                usage = event.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    tokens = usage["completion_tokens"]
    except urllib.error.HTTPError as exc:
        return StreamResult(chunks, tokens, finish, done, f"HTTP {exc.code}: {exc.read(300).decode(errors='replace')}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return StreamResult(chunks, tokens, finish, done, f"{type(exc).__name__}: {exc}")
    return StreamResult(chunks, tokens, finish, done, None if done else "stream ended without [DONE]")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.vllm.load", description="Bounded loopback load for vLLM.")
    ap.add_argument("--url", required=True, help="http://127.0.0.1:PORT")
    ap.add_argument("--model", default="tiny", help="served model name")
    ap.add_argument("-n", type=int, default=10, help="requests")
    ap.add_argument("-c", "--concurrency", type=int, default=1)
    ap.add_argument("-t", "--temperature", type=float, default=0.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds")
    ns = ap.parse_args(argv)
    res = run_load(
        ns.url,
        model=ns.model,
        n=ns.n,
        concurrency=ns.concurrency,
        temperature=ns.temperature,
        max_tokens=ns.max_tokens,
        time_limit_s=ns.time_limit,
    )
    print(res.to_json())
    return 0 if res.errors == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
