"""Trace files: the three public layouts, detected from the first line; everything else one clear line."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from specpilot.bench.trace import TraceError, parse_trace, read_trace

AZURE_2023 = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:16:51.2224670,879,55
"""
AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.009930+00:00,2162,5
2024-05-10 00:00:00.014328+00:00,2399,8
"""
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""
MOONCAKE = """{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]}
{"timestamp": 3052, "input_length": 2287, "output_length": 316, "hash_ids": [0, 42]}
"""


@pytest.mark.parametrize(
    ("text", "fmt", "requests", "skipped"),
    [
        pytest.param(AZURE_2023, "azure", [(0.0, 374, 44), (4.314579, 396, 109), (64.541877, 879, 55)], 0, id="azure"),
        pytest.param(AZURE_2024, "azure", [(0.0, 2162, 5), (0.004398, 2399, 8)], 0, id="azure-2024-with-offset"),
        pytest.param(BURSTGPT, "burstgpt", [(0.0, 472, 18), (113.0, 417, 276)], 1, id="burstgpt-failed-row-skipped"),
        pytest.param(MOONCAKE, "mooncake", [(0.0, 6755, 500), (3.052, 2287, 316)], 0, id="mooncake-milliseconds"),
        pytest.param(
            "\ufeff" + AZURE_2023.replace("\n", "\r\n"),
            "azure",
            [(0.0, 374, 44), (4.314579, 396, 109), (64.541877, 879, 55)],
            0,
            id="azure-bom-crlf",
        ),
        pytest.param(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n9,GPT-4,10,3,13,API log\n"
            "2,ChatGPT,20,4,24,API log\n",
            "burstgpt",
            [(0.0, 20, 4), (7.0, 10, 3)],
            0,
            id="unsorted-rows-sorted",
        ),
        pytest.param(
            "ContextTokens,GeneratedTokens,TIMESTAMP\n7,8,2023-11-16 00:00:01\n",
            "azure",
            [(0.0, 7, 8)],
            0,
            id="columns-in-any-order",
        ),
    ],
)
def test_formats(text: str, fmt: str, requests: list[tuple[float, int, int]], skipped: int) -> None:
    trace = parse_trace("t", text.splitlines())
    assert trace.format == fmt
    assert trace.skipped == skipped
    assert [r.prompt_tokens for r in trace.requests] == [p for _, p, _ in requests]
    assert [r.output_tokens for r in trace.requests] == [o for _, _, o in requests]
    assert [r.at for r in trace.requests] == pytest.approx([t for t, _, _ in requests], abs=1e-6)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "t:1:1: the trace is empty", id="empty"),
        pytest.param("time,prompt,output\n1,2,3\n", "t:1:1: unknown trace header 'time,prompt,output'", id="header"),
        pytest.param(
            AZURE_2023 + "2023-11-16 18:17:00,12x,3\n",
            "t:5:21: ContextTokens: '12x' is not a whole number",
            id="azure-bad-count",
        ),
        pytest.param(AZURE_2023 + "yesterday,12,3\n", "t:5:1: TIMESTAMP: 'yesterday' is not a date-time", id="time"),
        pytest.param(
            AZURE_2023 + "2023-11-16 18:17:00,12\n",
            "t:5:23: expected 3 fields as in the header, found 2",
            id="azure-short-row",
        ),
        pytest.param(BURSTGPT + "200,GPT-4,-3,5,2,API log\n", "t:5:11: Request tokens: '-3' is negative", id="neg"),
        pytest.param(BURSTGPT + "soon,GPT-4,3,5,8,API log\n", "t:5:1: Timestamp: 'soon' is not a number", id="ts"),
        pytest.param(MOONCAKE + '{"timestamp": 5, "input_length": 3}\n', "t:3:1: output_length: missing", id="key"),
        pytest.param(
            MOONCAKE + '{"timestamp": 5, "input_length": 3.5, "output_length": 2}\n',
            "t:3:18: input_length: 3.5 is not a whole number",
            id="fraction",
        ),
        pytest.param(
            MOONCAKE + '{"timestamp": "x", "input_length": 3, "output_length": 2}\n',
            "t:3:2: timestamp: 'x' is not a number >= 0",
            id="string-time",
        ),
        pytest.param(MOONCAKE + '{"timestamp": 5, "input_length": 3,\n', "t:3:36: not a JSON object", id="json"),
        pytest.param(MOONCAKE + "[1, 2]\n", "t:3:1: expected a JSON object", id="array"),
        pytest.param(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,GPT-4,3,0,3,API log\n",
            "t:1:1: no request with prompt and output tokens (1 rows skipped)",
            id="only-failed",
        ),
    ],
)
def test_malformed_traces_name_file_line_and_column(text: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        parse_trace("t", text.splitlines())
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_request_limit_is_enforced() -> None:
    with pytest.raises(TraceError, match=r"^t:4:1: more than 2 requests"):
        parse_trace("t", AZURE_2023.splitlines(), max_requests=2)
    assert len(parse_trace("t", AZURE_2023.splitlines(), max_requests=3).requests) == 3


def test_files_plain_and_gzip_and_bounds(tmp_path: Path) -> None:
    plain = tmp_path / "a.csv"
    plain.write_text(AZURE_2023)
    packed = tmp_path / "a.csv.gz"
    packed.write_bytes(gzip.compress(AZURE_2023.encode()))
    assert read_trace(plain).requests == read_trace(packed).requests
    assert read_trace(packed).source == "a.csv.gz"
    with pytest.raises(TraceError, match=r"^a.csv:2:1: the trace is larger than 50 bytes"):
        read_trace(plain, max_bytes=50)
    broken = tmp_path / "b.csv.gz"
    broken.write_bytes(gzip.compress(AZURE_2023.encode())[:30])
    with pytest.raises(TraceError, match=r"^b.csv.gz: not a readable gzip file"):
        read_trace(broken)
    latin = tmp_path / "c.csv"
    latin.write_bytes(AZURE_2023.encode() + b"2023-11-16 18:17:00,\xe9,3\n")
    with pytest.raises(TraceError, match=r"^c.csv:5:21: not UTF-8 text"):
        read_trace(latin)


def test_peak_minute_and_time_scale() -> None:
    trace = parse_trace("t", AZURE_2023.splitlines())
    assert trace.peak_minute_qps() == pytest.approx(2 / 60)  # the first two within 60 s, the third 64.5 s in
    faster = trace.time_scaled(0.5)
    third = faster.requests[2]
    assert third.at == pytest.approx(32.2709385)
    assert (third.prompt_tokens, third.output_tokens) == (879, 55)
    assert faster.peak_minute_qps() == pytest.approx(3 / 60) == trace.peak_minute_qps(0.5)
    assert trace.peak_minute_qps(trace.time_scale_for_peak(3 / 60)) == pytest.approx(3 / 60)
    with pytest.raises(ValueError, match="finite number > 0"):
        trace.time_scaled(0.0)
