"""Trace scenarios: a recorded trace replayed exactly through every policy of the benchmark."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from specpilot.bench import report
from specpilot.bench.replay import (
    AZURE_CONV,
    AZURE_CONV_CAPACITY_QPS,
    model_len_for,
    replay_scenario,
    standard_trace_scenarios,
    trace_capacity_qps,
)
from specpilot.bench.runner import rows_of, run_scenario
from specpilot.bench.scenarios import Replay, arrivals
from specpilot.bench.trace import Trace, TraceRequest, parse_trace, read_trace
from specpilot.cli.main import main as cli_main

SHIPPED = read_trace(AZURE_CONV)


def test_the_shipped_trace_is_the_published_hour() -> None:
    """The Azure conversation hour, with its license and attribution beside it."""
    assert (SHIPPED.format, len(SHIPPED.requests), SHIPPED.skipped) == ("azure", 19366, 0)
    assert SHIPPED.span_s == pytest.approx(3501.72, abs=0.01)
    assert SHIPPED.peak_minute_qps() == pytest.approx(8.7)  # its busiest 60 s: 522 requests
    folder = AZURE_CONV.parent
    assert "Attribution 4.0 International" in (folder / "LICENSE-CC-BY-4.0").read_text(encoding="utf-8-sig")
    assert "Splitwise: Efficient generative LLM inference using phase splitting" in (folder / "README.md").read_text()
    assert model_len_for(SHIPPED) == 16384  # its longest request: 14,050 + 39 tokens


@pytest.mark.parametrize("preset", sorted(AZURE_CONV_CAPACITY_QPS))
def test_the_trace_capacity_table_is_the_models(preset: str) -> None:
    """A refit of a preset that moves its capacity at the trace's lengths fails here until the table follows."""
    assert trace_capacity_qps(SHIPPED, preset) == pytest.approx(AZURE_CONV_CAPACITY_QPS[preset], rel=0.01)


def _trace(*rows: tuple[float, int, int]) -> Trace:
    return Trace("t.csv", "azure", tuple(TraceRequest(*r) for r in rows))


def test_arrivals_replay_times_and_lengths_exactly() -> None:
    trace = _trace((0.0, 10, 3), (0.5, 2000, 40), (7.25, 30, 1))
    scenario = replay_scenario(trace, "t", "llama8b-h100", "eagle3", 3, time_scale=2.0, hot_share=0.5)
    items = arrivals(scenario, seed=1)
    assert [(a.at, a.prompt_tokens, a.output_tokens, a.max_tokens) for a in items] == [
        (0.0, 10, 3, 3), (1.0, 2000, 40, 40), (14.5, 30, 1, 1)
    ]  # fmt: skip
    assert scenario.duration_s == pytest.approx(14.5 + 60)
    assert items == arrivals(scenario, seed=1)  # the same per seed (paired policies)
    many = replay_scenario(_trace(*((i, 10, 3) for i in range(400))), "t", "llama8b-h100", "eagle3", 3, hot_share=0.5)
    hot = sum(1 for a in arrivals(many, seed=1) if a.temperature == 1.0)
    assert 160 < hot < 240  # the temperature mix is drawn, half at T = 1.0


@pytest.mark.parametrize("load", [0.6, 0.9, 1.2])
def test_load_puts_the_peak_minute_at_that_share_of_capacity(load: float) -> None:
    scenario = replay_scenario(SHIPPED, "t", "llama8b-h100", "eagle3", 3, load=load, capacity=18.5)
    assert scenario.replay is not None
    replayed = Trace("t", "azure", tuple(TraceRequest(*r) for r in scenario.replay.requests))
    assert replayed.peak_minute_qps() == pytest.approx(load * 18.5, abs=1 / 60)  # to a whole request
    assert len(scenario.replay.requests) == 19366


def test_quick_compresses_time_at_the_same_rate() -> None:
    replay = Replay("t", tuple((float(i), 5, 5) for i in range(1000)))
    quick = replay.scaled(0.1)
    assert len(quick.requests) == 100
    assert quick.requests[-1][0] == pytest.approx(99.9)
    assert Replay("t", ((0.0, 1, 1), (4.0, 2, 2))).scaled(2.0).requests == ((0.0, 1, 1), (8.0, 2, 2))


def test_a_method_the_preset_lacks_is_named() -> None:
    with pytest.raises(ValueError, match=r"preset llama8b-h100 has no 'medusa' drafter; it has .*eagle3"):
        replay_scenario(SHIPPED, "t", "llama8b-h100", "medusa", 3)


def test_the_standard_suite_has_the_trace_scenarios() -> None:
    names = [s.name for s in standard_trace_scenarios()]
    assert names == [f"azure-conv-{setup}-{load}" for setup in ("8b-eagle3", "70b-draft")
                     for load in ("own-rate", "60pct", "90pct", "120pct")]  # fmt: skip


def _burstgpt(trace_text: str) -> str:
    """The same requests in BurstGPT's layout (seconds since the first, a model, a log type; one failed row)."""
    azure = parse_trace("a", trace_text.splitlines())
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for r in azure.requests:
        lines.append(f"{r.at:.7f},ChatGPT,{r.prompt_tokens},{r.output_tokens},{r.prompt_tokens + r.output_tokens},"
                     "Conversation log")  # fmt: skip
    lines.insert(2, "0.5,GPT-4,100,0,100,API log")
    return "\n".join(lines) + "\n"


def test_azure_and_burstgpt_layouts_of_a_slice_give_the_same_full_rows(tmp_path: Path) -> None:
    """`bench --trace` on the Azure CSV and on the same requests in BurstGPT's layout: every policy, same figures."""
    head = gzip.decompress(AZURE_CONV.read_bytes()).decode().splitlines()[:161]
    azure_file, burst_file = tmp_path / "slice.csv", tmp_path / "slice-burstgpt.csv"
    azure_file.write_text("\n".join(head) + "\n")
    burst_file.write_text(_burstgpt(azure_file.read_text()))
    rows = []
    for path in (azure_file, burst_file):
        scenario = replay_scenario(read_trace(path), "slice", "llama8b-h100", "eagle3", 3, time_scale=0.25)
        runs, _ = run_scenario(scenario, seed=1)
        rows.append([{k: v for k, v in r.items() if k != "wall_s"} for r in rows_of(runs, scenario, 1)])
    assert rows[0] == rows[1]
    assert [r["policy"] for r in rows[0]] == [
        "off", "always-on", "static-threshold", "best-static", "oracle", "oracle-within-budget",
        "best-static-reachable", "oracle-from-declared", "best-static-restarted-as-oracle",
        "best-static-restarted-as-specpilot",
        "specpilot", "specpilot-lenient",
    ]  # fmt: skip
    assert all(r["requests"] == 160 for r in rows[0])  # the replay ends a quiet minute after the last arrival
    assert rows[0][0]["goodput"] > 0


def test_the_cli_names_a_malformed_trace_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,x,3\n")
    assert cli_main(["bench", "--trace", str(bad), "--no-plots", "--report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "error: --trace: bad.csv:3:21: ContextTokens: 'x' is not a whole number of tokens\n"


def test_latency_is_reported_beside_goodput() -> None:
    """Rows carry P50/P99 TPOT and TTFT and P99 E2E; the verdicts print specpilot's ratios to the oracle and off."""

    def row(policy: str, goodput: float, tpot: float, ttft: float) -> dict[str, object]:
        return {"policy": policy, "config": "K3", "goodput": goodput, "p50_tpot_ms": tpot, "p99_tpot_ms": 2 * tpot,
                "p50_ttft_ms": ttft, "p99_ttft_ms": 3 * ttft, "p99_e2e_ms": 100.0}  # fmt: skip

    by = {"off": row("off", 100.0, 10.0, 50.0), "always-on": row("always-on", 120.0, 5.0, 60.0),
          "oracle": row("oracle", 125.0, 4.0, 40.0)}  # fmt: skip
    assert report.latency_verdicts("specpilot", row("specpilot", 118.8, 5.0, 60.0), by) == [
        "specpilot: goodput vs max(off, always-on) (always-on) 99.0% (target >= 99%: met)",
        "specpilot: latency vs oracle: P50 TPOT x1.25, P99 TPOT x1.25, P50 TTFT x1.50, P99 TTFT x1.50, P99 E2E x1.00",
        "specpilot: latency vs off: P50 TPOT x0.50, P99 TPOT x0.50, P50 TTFT x1.20, P99 TTFT x1.20, P99 E2E x1.00",
    ]
    assert report.latency_verdicts("specpilot", row("specpilot", 118.0, 5.0, 60.0), by)[0].endswith("MISSED)")
    scenario = replay_scenario(_trace((0.0, 100, 20), (0.2, 50, 30)), "t", "llama8b-h100", "eagle3", 3)
    runs, _ = run_scenario(scenario, seed=1)
    first = rows_of(runs, scenario, 1)[0]
    assert 0 < first["p50_ttft_ms"] <= first["p99_ttft_ms"] < first["p99_e2e_ms"]
    assert set(report.COLUMNS) >= {"p50_tpot_ms", "p99_tpot_ms", "p50_ttft_ms", "p99_ttft_ms", "p99_e2e_ms"}


def test_latency_ratios_across_seeds_are_paired() -> None:
    def row(seed: int, policy: str, goodput: float, tpot: float, ttft: float) -> dict[str, object]:
        return {"scenario": "s", "seed": seed, "policy": policy, "config": "K3", "goodput": goodput,
                "p50_tpot_ms": tpot, "p99_ttft_ms": ttft, "actuations": 0, "failed": 0}  # fmt: skip

    rows = [row(1, "off", 100.0, 10.0, 50.0), row(1, "always-on", 90.0, 5.0, 50.0), row(1, "oracle", 110.0, 4.0, 40.0),
            row(1, "best-static", 110.0, 4.0, 40.0), row(1, "specpilot", 99.0, 5.0, 60.0),
            row(2, "off", 50.0, 20.0, 100.0), row(2, "always-on", 60.0, 5.0, 50.0), row(2, "oracle", 60.0, 5.0, 50.0),
            row(2, "best-static", 60.0, 5.0, 50.0), row(2, "specpilot", 60.0, 5.0, 50.0)]  # fmt: skip
    metas = [{"scenario": "s", "seed": seed, "dynamic": False, "window_s": 300.0} for seed in (1, 2)]
    mine = report.across_seeds(rows, metas)[0]
    assert mine["vs_plain"] == pytest.approx([0.99, 1.0])  # against off on seed 1, always-on on seed 2
    assert mine["latency_vs_oracle"] == [pytest.approx([1.25, 1.5]), pytest.approx([1.0, 1.0])]
    assert mine["latency_vs_off"] == [pytest.approx([0.5, 1.2]), pytest.approx([0.25, 0.5])]
    assert report.seeds_table([mine]).splitlines()[1].split()[-10:] == [
        "99.0%", "/", "99.5%", "/", "100.0%", "2/2", "x1.12,", "x1.25", "x0.38,", "x0.85"
    ]  # fmt: skip
