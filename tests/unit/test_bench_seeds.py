"""The benchmark over several seeds: the seed list, the paired ratios per seed, and bench.json as strict JSON."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from specpilot.bench import report
from specpilot.bench.main import add_arguments, client_timeout, seed_list, with_client_timeout
from specpilot.bench.runner import rows_of, run_scenario
from specpilot.bench.scenarios import scenario_named
from tests.unit.test_bench import tiny_scenario


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("3", [3]),
        ("0", [0]),
        ("1-5", [1, 2, 3, 4, 5]),
        ("1,3,5", [1, 3, 5]),
        ("1-3,2,7", [1, 2, 3, 7]),
        (" 4 , 2", [4, 2]),
        ("6-6", [6]),
    ],
)
def test_a_seed_list_is_a_seed_a_range_or_a_comma_list(text: str, seeds: list[int]) -> None:
    assert seed_list(text) == seeds


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "expected a seed"),
        ("a", "expected a seed"),
        ("1.5", "expected a seed"),
        ("1-", "expected a seed"),
        ("-1", "expected a seed"),
        ("5-1", "'5-1' is not an ascending range"),
        ("1,,2", "expected a seed"),
    ],
)
def test_a_bad_seed_list_says_what_is_allowed(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        seed_list(text)


def test_the_command_line_rejects_a_bad_seed_without_a_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "specpilot", "bench", "--seed", "5-1", "--quick"], capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert "argument --seed: '5-1': '5-1' is not an ascending range of seeds >= 0" in proc.stderr
    assert "Traceback" not in proc.stderr


def _row(
    scenario: str, seed: int, policy: str, goodput: float, actuations: int = 0, failed: int = 0, **more: int
) -> dict[str, Any]:
    return {"scenario": scenario, "seed": seed, "policy": policy, "config": "K3", "goodput": goodput,
            "actuations": actuations, "failed": failed, **more}  # fmt: skip


def _meta(scenario: str, seed: int, mine: Sequence[float | None], off: Sequence[float | None]) -> dict[str, Any]:
    windows = {"specpilot": mine, "specpilot-lenient": mine, "off": off}
    return {"scenario": scenario, "seed": seed, "dynamic": scenario == "spike", "window_s": 300.0,
            "windows_p99_tpot_ms": windows}  # fmt: skip


def test_each_ratio_is_paired_within_its_seed() -> None:
    """Seed 2's oracle is twice seed 1's: a pooled ratio would read 150 / 300 = 50%; paired it is 60% and 40%."""
    rows = [
        _row("spike", 1, "oracle", 100.0), _row("spike", 1, "best-static", 80.0),
        _row("spike", 1, "best-static-reachable", 75.0), _row("spike", 1, "specpilot", 60.0, 1),
        _row("spike", 2, "oracle-within-budget", 160.0),
        _row("spike", 1, "oracle-from-declared", 80.0), _row("spike", 2, "oracle-from-declared", 80.0),
        _row("spike", 1, "specpilot-lenient", 60.0, 1),
        _row("spike", 2, "oracle", 200.0), _row("spike", 2, "best-static", 100.0),
        # seed 2's row counts its changes and trials (a trial, then its promotion), seed 1's predates them
        _row("spike", 2, "specpilot", 80.0, 2, failed=7, changes=1, trials=1),
        _row("spike", 2, "specpilot-lenient", 90.0, 2),
        # seed 3 has no oracle row (a run cut short): it is left out, not counted as 0
        _row("spike", 3, "specpilot", 10.0),
        # the restart controls: seed 1 has both, seed 2 only the oracle's
        _row("spike", 1, "best-static-restarted-as-oracle", 96.0),
        _row("spike", 1, "best-static-restarted-as-specpilot", 64.0),
        _row("spike", 2, "best-static-restarted-as-oracle", 150.0),
    ]  # fmt: skip
    seven = [9.0] * 7
    metas = [_meta("spike", 2, [*seven[:6], 20.0], [*seven[:6], 10.0]), _meta("spike", 1, seven, seven),
             _meta("spike", 3, seven, seven)]  # fmt: skip
    summary = report.across_seeds(rows, metas)
    assert [(e["scenario"], e["policy"]) for e in summary] == [("spike", "specpilot"), ("spike", "specpilot-lenient")]
    mine = summary[0]
    assert mine["seeds"] == [1, 2]
    assert mine["vs_oracle"] == pytest.approx([0.6, 0.4])
    assert mine["vs_oracle_from_declared"] == pytest.approx([0.75, 1.0])
    assert mine["vs_best_static"] == pytest.approx([-0.25, -0.2])
    assert mine["vs_reachable"][0] == pytest.approx(0.8)
    assert math.isnan(mine["vs_reachable"][1])  # seed 2 has no reachable row
    assert math.isnan(mine["vs_oracle_within_budget"][0])  # seed 1 has no budgeted oracle row
    assert mine["vs_oracle_within_budget"][1] == pytest.approx(0.5)
    assert mine["p99_windows_worse"] == [[0, 1], [1, 1]]  # 30 min in at 5-min windows: only the 7th counts
    assert mine["actuations"] == [1, 2]
    assert (mine["changes"], mine["trials"]) == ([None, 1], [None, 1])
    assert mine["failed"] == [0, 7], "the requests its restarts aborted or lost, per seed"
    assert mine["oracle_failed"] == [0, 0]
    assert mine["oracle_vs_best_static"] == pytest.approx([0.25, 1.0])
    assert mine["oracle_restarts_alone"] == pytest.approx([0.2, 0.5])
    assert mine["vs_restart_control"][0] == pytest.approx(60.0 / 64.0)
    assert math.isnan(mine["vs_restart_control"][1])  # seed 2 has no control for specpilot's restarts
    assert summary[1]["vs_oracle"] == pytest.approx([0.6, 0.45])
    lenient = summary[1]
    assert lenient["oracle_restarts_alone"] == pytest.approx([0.2, 0.5])
    assert all(math.isnan(g) for g in lenient["vs_restart_control"]), "specpilot's restarts are not the lenient's"
    table = report.seeds_table(summary).splitlines()  # no off row and no latencies: those columns are "-"
    assert table[0].count(">=95%") == 2
    assert "vs oracle from declared min/mean/max  >=95%" in table[0]
    assert table[1].split() == ["spike", "specpilot", "1,2", "40.0%", "/", "50.0%", "/", "60.0%", "0/2",
                                "75.0%", "/", "87.5%", "/", "100.0%", "1/2", "-25.0%",
                                "/", "-22.5%", "/", "-20.0%", "0/2", "80.0%", "/", "80.0%", "/", "80.0%",
                                "50.0%", "/", "50.0%", "/", "50.0%", "+25.0%", "/", "+62.5%", "/", "+100.0%",
                                "+20.0%", "/", "+35.0%", "/", "+50.0%", "93.8%", "/", "93.8%", "/", "93.8%",
                                "0/1,", "1/1", "1,", "2", "(1,", "1)", "0", "(0),", "7", "(0)",
                                "-", "0/2", "-,", "-", "-,", "-"]  # fmt: skip


@pytest.mark.parametrize(
    ("mine", "off", "counted"),
    [
        ([1.0] * 6, [1.0] * 6, (0, 0)),  # 30 min of 5-min windows: none after stabilization
        ([1.0] * 6 + [1.06, 1.05, 2.0], [1.0] * 9, (2, 3)),  # 1.05x exactly is not worse
        ([1.0] * 6 + [None, math.nan, 2.0], [1.0] * 9, (1, 3)),  # a window without a finished request is not worse
        ([1.0] * 6 + [2.0, 2.0], [1.0] * 6 + [None, 1.0], (1, 2)),  # nor one where off finished nothing
        ([], [1.0] * 9, None),
    ],
)
def test_p99_windows_worse_than_off_after_stabilization(
    mine: list[float | None], off: list[float | None], counted: tuple[int, int] | None
) -> None:
    meta = {"window_s": 300.0, "windows_p99_tpot_ms": {"specpilot": mine, "off": off}}
    assert report.p99_windows_worse(meta, "specpilot") == counted


def test_the_seed_summary_reads_back_from_bench_json_as_each_seed_printed_it(tmp_path: Path) -> None:
    """Two real tiny runs, stored as `specpilot bench` stores them: strict JSON, and the summary's ratio per seed is
    the one that seed's verdict printed."""
    tiny = tiny_scenario()
    rows: list[dict[str, Any]] = []
    metas: list[dict[str, Any]] = []
    for seed in (1, 2):
        runs, meta = run_scenario(tiny, seed)
        seed_rows = rows_of(runs, tiny, seed)
        meta["verdicts"] = report.verdicts(seed_rows, meta)
        rows += seed_rows
        metas.append(meta)
    path = tmp_path / "bench.json"
    report.write_json(rows, metas, path, report.across_seeds(rows, metas))

    def refuse(constant: str) -> None:
        raise AssertionError(f"bench.json holds {constant}, which strict JSON readers refuse")

    stored = json.loads(path.read_text(), parse_constant=refuse)
    summary = report.across_seeds(stored["rows"], stored["scenarios"])
    # NaN (a ratio without its reference: the lenient variant has no restart control) is stored as null
    assert stored["seeds"] == json.loads(json.dumps(report.as_strict_json(summary), allow_nan=False))
    assert all(g is None for g in stored["seeds"][1]["vs_restart_control"])
    mine = summary[0]
    assert mine["policy"] == "specpilot"
    assert mine["seeds"] == [1, 2]
    for ratio, meta in zip(mine["vs_oracle"], stored["scenarios"], strict=True):
        assert f"specpilot: goodput vs oracle {ratio:.1%}" in " ".join(meta["verdicts"])


@pytest.mark.parametrize(
    ("text", "seconds"), [("60s", 60.0), ("2m", 120.0), ("1m30s", 90.0), ("500ms", 0.5)]
)  # fmt: skip
def test_a_client_timeout_is_a_duration(text: str, seconds: float) -> None:
    assert client_timeout(text) == seconds


@pytest.mark.parametrize(
    ("text", "says"),
    [("60", "'60' is not a duration; use a number with a unit ms, s, m or h"), ("0s", "must be greater than 0s")],
)
def test_a_bad_client_timeout_says_what_is_allowed(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        client_timeout(text)


@pytest.mark.parametrize(
    ("argv", "seconds"), [([], 60.0), (["--client-timeout", "2m"], 120.0), (["--no-client-timeout"], None)]
)  # fmt: skip
def test_clients_hang_up_after_60_s_unless_told_otherwise(argv: list[str], seconds: float | None) -> None:
    """The headline runs have the gateway's 60 s; --no-client-timeout gives patient clients, also to what a changed
    CR ran before."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    chosen = parser.parse_args(argv).client_timeout
    assert chosen == seconds
    changed = with_client_timeout(scenario_named("target-change"), chosen)
    assert changed.previous is not None
    assert (changed.client_timeout_s, changed.previous.client_timeout_s) == (seconds, seconds)


def test_a_client_timeout_and_patient_clients_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--client-timeout", "30s", "--no-client-timeout"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_verdicts_print_specpilot_against_the_oracle_and_each_reference() -> None:
    rows = [
        {**_row("diurnal", 1, "oracle", 200.0), "config": "A/B"},
        {**_row("diurnal", 1, "best-static", 150.0), "config": "A"},
        {**_row("diurnal", 1, "oracle-within-budget", 180.0), "config": "A/C"},
        {**_row("diurnal", 1, "best-static-reachable", 120.0), "config": "K4 until 180s, then A"},
        {**_row("diurnal", 1, "oracle-from-declared", 150.0), "config": "K4/A"},
        _row("diurnal", 1, "specpilot", 90.0, 1),
        {**_row("diurnal", 1, "best-static-restarted-as-oracle", 195.0), "config": "A restarted at 600s"},
        {**_row("diurnal", 1, "best-static-restarted-as-specpilot", 105.0), "config": "A restarted at 240s"},
    ]
    lines = report.verdicts(rows, {"dynamic": True})
    assert lines == [
        "specpilot: goodput vs oracle 45.0% (target >= 95%: MISSED)",
        "specpilot: goodput vs best static (A) -40.0% (target >= +10%: MISSED)",
        "specpilot: goodput vs the oracle held to the deployment's actuation budget (A/C) 50.0%; that oracle reaches"
        " 90.0% of the oracle (no target: a reference)",
        "specpilot: goodput vs the best static config from the earliest refit the agreement rule allows"
        " (K4 until 180s, then A) 75.0%; that refit reaches 60.0% of the oracle (no target: a reference)",
        "specpilot: goodput vs the oracle from the declared config (K4/A) 60.0%; that oracle reaches 75.0% of the"
        " oracle (no target: a reference)",
        "oracle: goodput vs best static +33.3%; the best static config restarted where the oracle restarts"
        " (A restarted at 600s) +30.0%, and oracle reaches 102.6% of it: the same restarts, its own choice of"
        " configuration (a control, no target)",
        "specpilot: goodput vs best static -40.0%; the best static config restarted where specpilot restarts"
        " (A restarted at 240s) -30.0%, and specpilot reaches 85.7% of it: the same restarts, its own choice of"
        " configuration (a control, no target)",
    ]
