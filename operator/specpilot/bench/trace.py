"""Request traces of real traffic: arrival times and prompt/output lengths, read from the public formats.

Three layouts, told apart by the first line:

- Azure LLM inference (2023 and 2024): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, TIMESTAMP an ISO date-time
  (naive means UTC);
- BurstGPT: CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`, Timestamp in seconds; a failed
  request has 0 response tokens and is skipped;
- Mooncake-style JSONL: one object per line with `timestamp` (milliseconds), `input_length` and `output_length`
  (other keys, such as `hash_ids`, are ignored).

A row without prompt or output tokens is skipped and counted (`Trace.skipped`): there is nothing to replay. Anything
else that does not fit is a `TraceError` whose message names the file, line and column. Reading is bounded in bytes,
line length and rows; a file ending in `.gz` (or starting with gzip's magic bytes) is read compressed.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

MAX_TRACE_BYTES = 512 * 1024 * 1024  # decompressed: the Azure 2024 week-long traces are ~200 MB
MAX_LINE_BYTES = 1024 * 1024  # a Mooncake line carries its hash_ids: ~2 KB at 128k tokens of prompt
MAX_REQUESTS = 5_000_000

AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
MOONCAKE = ("timestamp", "input_length", "output_length")


class TraceError(ValueError):
    """A trace that cannot be read: the message is one line, `FILE:LINE:COLUMN: what is wrong`."""


@dataclass(frozen=True)
class TraceRequest:
    at: float  # seconds after the trace's first request
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Trace:
    source: str  # the file's name, for messages and reports
    format: str  # "azure", "burstgpt" or "mooncake"
    requests: tuple[TraceRequest, ...]  # by arrival time, the first at 0
    skipped: int = 0  # rows without prompt or output tokens (BurstGPT's failed requests)

    @property
    def span_s(self) -> float:
        return self.requests[-1].at if self.requests else 0.0

    def peak_minute_qps(self, time_scale: float = 1.0) -> float:
        """Requests per second of the busiest 60 s (a sliding window), arrival times multiplied by `time_scale`."""
        times = [r.at * time_scale for r in self.requests]
        busiest = start = 0
        for end, t in enumerate(times):
            while times[start] <= t - 60.0:
                start += 1
            busiest = max(busiest, end - start + 1)
        return busiest / 60

    def time_scale_for_peak(self, qps: float) -> float:
        """The time scale that puts the busiest 60 s at `qps` requests per second (as near as whole requests allow).

        The busiest 60 s of the scaled trace is the busiest 60 / scale seconds of the recorded one, which only falls
        as the scale grows, so a bisection finds it.
        """
        if not qps > 0 or math.isinf(qps):
            raise ValueError(f"a peak rate must be a finite number > 0, not {qps!r}")
        guess = self.peak_minute_qps() / qps  # exact where the busiest window keeps its requests
        low, high = guess / 4, guess * 4
        for _ in range(30):
            middle = math.sqrt(low * high)
            low, high = (middle, high) if self.peak_minute_qps(middle) > qps else (low, middle)
        return high

    def time_scaled(self, factor: float) -> Trace:
        """Arrival times multiplied by `factor` (< 1: the same requests, sooner; the rate x 1/factor)."""
        if not factor > 0 or math.isinf(factor):
            raise ValueError(f"a time scale must be a finite number > 0, not {factor!r}")
        moved = tuple(TraceRequest(r.at * factor, r.prompt_tokens, r.output_tokens) for r in self.requests)
        return Trace(self.source, self.format, moved, self.skipped)


def _error(source: str, line: int, column: int, what: str) -> TraceError:
    return TraceError(f"{source}:{line}:{column}: {what}")


def parse_trace(source: str, lines: Iterable[str], max_requests: int = MAX_REQUESTS) -> Trace:
    """The trace in `lines` (the file's lines, without line ends); `source` names it in errors."""
    numbered = enumerate(lines, start=1)
    first = next(((n, text) for n, text in numbered if text.strip()), None)
    if first is None:
        raise _error(source, 1, 1, "the trace is empty (expected a CSV header or a JSONL object)")
    n, text = first
    text = text.removeprefix("\ufeff")
    if text.lstrip().startswith("{"):
        rows = _mooncake_rows(source, [(n, text)], numbered)
        fmt = "mooncake"
    else:
        header = [name.strip() for name in next(csv.reader([text]))]
        if set(AZURE) <= set(header):
            rows, fmt = _azure_rows(source, header, numbered), "azure"
        elif set(BURSTGPT) <= set(header):
            rows, fmt = _burstgpt_rows(source, header, numbered), "burstgpt"
        else:
            raise _error(
                source, n, 1,
                f"unknown trace header {text[:120]!r}; expected Azure ({','.join(AZURE)}), BurstGPT"
                f" ({','.join(BURSTGPT)}) or JSONL objects with {', '.join(MOONCAKE)}",
            )  # fmt: skip
    return _collect(source, fmt, rows, max_requests)


Row = tuple[float, int, int]  # (arrival seconds, prompt tokens, output tokens)


def _collect(source: str, fmt: str, rows: Iterator[tuple[int, Row]], max_requests: int) -> Trace:
    kept: list[tuple[float, int, int]] = []
    skipped = 0
    for n, row in rows:
        if row[1] <= 0 or row[2] <= 0:
            skipped += 1
            continue
        if len(kept) >= max_requests:
            raise _error(source, n, 1, f"more than {max_requests:,} requests; replay a slice of the trace")
        kept.append(row)
    if not kept:
        raise _error(source, 1, 1, f"no request with prompt and output tokens ({skipped} rows skipped)")
    kept.sort(key=lambda r: r[0])
    start = kept[0][0]
    requests = tuple(TraceRequest(at - start, prompt, output) for at, prompt, output in kept)
    return Trace(source, fmt, requests, skipped)


@dataclass(frozen=True)
class _CsvRow:
    source: str
    line: int
    index: dict[str, int]  # column name -> field position, from the header
    cells: list[str]
    starts: list[int]  # 0-based character offset of each field in the line

    def get(self, name: str, parse: Callable[[str], Any]) -> Any:
        """One named field, parsed; a ValueError becomes a TraceError at that field's line and column."""
        i = self.index[name]
        try:
            return parse(self.cells[i].strip())
        except ValueError as err:
            raise _error(self.source, self.line, self.starts[i] + 1, f"{name}: {err}") from None


def _csv_rows(source: str, header: list[str], numbered: Iterable[tuple[int, str]]) -> Iterator[_CsvRow]:
    """Each non-empty line after the header, split into fields with their columns."""
    index = {name: i for i, name in enumerate(header)}
    for n, text in numbered:
        if not text.strip():
            continue
        cells = next(csv.reader([text]))
        if len(cells) != len(header):
            found = f"expected {len(header)} fields as in the header, found {len(cells)}"
            raise _error(source, n, len(text) + 1, found)
        starts = [0]
        for value in cells[:-1]:
            starts.append(starts[-1] + len(value) + 1)
        yield _CsvRow(source, n, index, cells, starts)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number of tokens") from None
    if value < 0:
        raise ValueError(f"{text!r} is negative; token counts are >= 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a finite time >= 0")
    return value


def _timestamp(text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date-time such as 2023-11-16 18:15:46.6805900") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _azure_rows(source: str, header: list[str], numbered: Iterable[tuple[int, str]]) -> Iterator[tuple[int, Row]]:
    for row in _csv_rows(source, header, numbered):
        yield row.line, (row.get("TIMESTAMP", _timestamp), row.get("ContextTokens", _count),
                         row.get("GeneratedTokens", _count))  # fmt: skip


def _burstgpt_rows(source: str, header: list[str], numbered: Iterable[tuple[int, str]]) -> Iterator[tuple[int, Row]]:
    for row in _csv_rows(source, header, numbered):
        yield row.line, (row.get("Timestamp", _seconds), row.get("Request tokens", _count),
                         row.get("Response tokens", _count))  # fmt: skip


def _mooncake_rows(
    source: str, head: list[tuple[int, str]], numbered: Iterable[tuple[int, str]]
) -> Iterator[tuple[int, Row]]:
    for n, text in itertools.chain(head, numbered):
        if not text.strip():
            continue
        try:
            item = json.loads(text)
        except json.JSONDecodeError as err:
            raise _error(source, n, err.colno, f"not a JSON object: {err.msg}") from None
        if not isinstance(item, dict):
            raise _error(source, n, 1, f"expected a JSON object with {', '.join(MOONCAKE)}")
        values: list[float] = []
        for key in MOONCAKE:
            value = item.get(key)
            column = max(1, text.find(f'"{key}"') + 1)
            if value is None:
                raise _error(source, n, 1, f"{key}: missing (expected {', '.join(MOONCAKE)})")
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise _error(source, n, column, f"{key}: {value!r} is not a number >= 0")
            if key != "timestamp" and value != int(value):
                raise _error(source, n, column, f"{key}: {value!r} is not a whole number of tokens")
            values.append(value)
        yield n, (values[0] / 1000, int(values[1]), int(values[2]))


def read_trace(path: Path, max_bytes: int = MAX_TRACE_BYTES, max_requests: int = MAX_REQUESTS) -> Trace:
    """Read and parse a trace file (gzip-compressed or plain), bounded in bytes, line length and requests."""
    with path.open("rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if compressed else raw  # type: ignore[assignment]
        try:
            return parse_trace(path.name, _lines(path.name, stream, max_bytes), max_requests)
        except (OSError, EOFError) as err:
            if compressed:
                raise TraceError(f"{path.name}: not a readable gzip file ({err})") from None
            raise


def _lines(source: str, stream: IO[bytes], max_bytes: int) -> Iterator[str]:
    total = 0
    n = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        n += 1
        total += len(raw)
        if total > max_bytes:
            raise _error(source, n, 1, f"the trace is larger than {max_bytes:,} bytes; replay a slice of it")
        if len(raw) > MAX_LINE_BYTES:
            raise _error(source, n, MAX_LINE_BYTES + 1, f"a line is longer than {MAX_LINE_BYTES:,} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _error(source, n, err.start + 1, "not UTF-8 text") from None
        yield text.rstrip("\r\n")
