"""`specpilot bench --against RUN.json`: a run beside a stored one, row by row, and a stored file that cannot be read
said plainly (which file, which row, which field) before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specpilot.bench.compare import StoredRunError, compare, parse_stored_rows, table


def row(policy: str, goodput: float, *, scenario: str = "spike", seed: int = 1, **fields: Any) -> dict[str, Any]:
    """A row as `specpilot bench -o json` prints it (runner.summarize plus the seed)."""
    return {
        "scenario": scenario, "policy": policy, "config": "K3", "goodput": goodput, "slo_attainment": 1.0,
        "mean_tpot_ms": 10.0, "p50_tpot_ms": 9.0, "p99_tpot_ms": 20.0, "p50_ttft_ms": 30.0, "p99_ttft_ms": 90.0,
        "p99_e2e_ms": 9000.0, "actuations": 0, "changes": 0, "trials": 0, "requests": 1000, "failed": 0,
        "timed_out": 0, "replicas": 2, "wall_s": 1.0, "seed": seed, **fields,
    }  # fmt: skip


STORED = [row("off", 800.0), row("always-on", 900.0), row("oracle", 1000.0), row("specpilot", 950.0)]


@pytest.mark.parametrize(
    ("case", "mine", "goodput", "vs_oracle", "vs_plain", "moved"),
    [
        ("specpilot alone, judged by the stored references", [row("specpilot", 950.0)], 950.0, 0.95, 950 / 900, False),
        ("specpilot up", [row("specpilot", 990.0)], 950.0, 0.99, 1.1, True),
        ("this run's own references win", [row("specpilot", 950.0), row("oracle", 1900.0)], 950.0, 0.5, 950 / 900,
         False),
        ("same goodput, one more trial", [row("specpilot", 950.0, actuations=1, trials=1)], 950.0, 0.95, 950 / 900,
         True),
        ("same goodput, requests lost", [row("specpilot", 950.0, failed=3)], 950.0, 0.95, 950 / 900, True),
    ],
)  # fmt: skip
def test_a_row_is_judged_beside_its_stored_row(
    case: str, mine: list[dict[str, Any]], goodput: float, vs_oracle: float, vs_plain: float, moved: bool
) -> None:
    stored = parse_stored_rows(json.dumps(STORED), "stored.json")
    (specpilot,) = [c for c in compare(mine, stored) if c.key == ("spike", 1, "specpilot")]
    assert specpilot.stored_goodput == goodput, case
    assert specpilot.vs_oracle == pytest.approx(vs_oracle), case
    assert specpilot.vs_plain == pytest.approx(vs_plain), case
    assert specpilot.moved is moved, case


def test_rows_of_other_replicas_are_not_compared() -> None:
    stored = parse_stored_rows(json.dumps(STORED), "stored.json")
    (c,) = compare([row("specpilot", 950.0, replicas=1)], stored)
    assert c.stored_goodput is None
    assert (c.vs_oracle, c.vs_plain) == (None, None), "references of another layout say nothing about this row"
    assert "not compared: the stored row ran 2 replicas, this one 1" in table([c])


def test_the_table_counts_what_moved_and_the_targets_met() -> None:
    stored = parse_stored_rows(json.dumps({"rows": STORED, "scenarios": []}), "bench.json")  # bench.json's shape
    mine = [row("specpilot", 990.0), row("specpilot", 500.0, scenario="diurnal"), row("off", 800.0)]
    text = table(compare(mine, stored))
    lines = text.splitlines()
    assert lines[0].startswith("scenario")
    assert lines[1].split()[3:8] == ["950.00", "->", "990.00", "104.2%", "99.0%"]
    assert "- -> 500.00" in lines[2], "a scenario the stored run lacks"
    assert lines[-1] == (
        "2 of 3 rows moved; specpilot >= 0.95 x the oracle on 1 of 1 with an oracle row, >= 0.99 x max(off,"
        " always-on) on 1 of 1 with a plain row"
    ), "diurnal has no oracle or plain row in either run"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "stored.json: not JSON (Expecting property name enclosed in double quotes at line 1)"),
        ('{"scenarios": []}', "stored.json: expected the rows of `specpilot bench -o json` (a list) or a bench.json"),
        ("[3]", "stored.json: row 0: not an object"),
        (json.dumps([{**row("off", 1.0), "seed": "1"}]),
         "stored.json: row 0: field 'seed' must be an integer, got '1'"),
        (json.dumps([row("off", 1.0), {**row("off", 1.0), "goodput": -2}]),
         "stored.json: row 1: field 'goodput' must be a number >= 0, got -2"),
        (json.dumps([{k: v for k, v in row("off", 1.0).items() if k != "replicas"}]),
         "stored.json: row 0: field 'replicas' must be a number >= 0, got None"),
        (json.dumps([row("off", 1.0), row("off", 2.0)]), "stored.json: row 1: a second row for spike, seed 1, off"),
    ],
)  # fmt: skip
def test_a_stored_run_that_cannot_be_read_says_where(text: str, says: str) -> None:
    with pytest.raises(StoredRunError) as caught:
        parse_stored_rows(text, "stored.json")
    assert str(caught.value) == says


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "specpilot", "bench", "--quick", "--scenario", "steady-low", "--jobs", "1", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_specpilot_alone_against_its_own_stored_run_moves_nothing(tmp_path: Path) -> None:
    """The command line end to end: specpilot's row alone, stored as -o json prints it, then run again against it."""
    first = bench("--specpilot-only", "-o", "json")
    assert first.returncode == 0, first.stderr
    (stored,) = json.loads(first.stdout)
    assert (stored["scenario"], stored["policy"], stored["requests"] > 0) == ("steady-low", "specpilot", True)
    path = tmp_path / "run.json"
    path.write_text(first.stdout)
    again = bench("--specpilot-only", "--against", str(path))
    assert again.returncode == 0, again.stderr
    assert f"== against {path}" in again.stdout
    assert again.stdout.rstrip().endswith(
        "0 of 1 rows moved; specpilot >= 0.95 x the oracle on 0 of 0 with an oracle row, >= 0.99 x max(off,"
        " always-on) on 0 of 0 with a plain row"
    ), "the same seed gives the same run; the stored run has no oracle or plain rows to judge by"


def test_a_bad_stored_run_fails_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text('[{"scenario": "steady-low"}]')
    done = bench("--specpilot-only", "--against", str(path))
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: --against {path}: row 0: field 'policy' must be a string, got None"
    assert done.stdout == "", "nothing ran"
    missing = bench("--against", str(tmp_path / "absent.json"))
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"error: --against {tmp_path / 'absent.json'}: cannot read it (")


def test_the_decision_trace_holds_every_evaluation_and_the_events_of_each_actuation(tmp_path: Path) -> None:
    """`--decisions FILE`: specpilot's closed loop evaluation by evaluation, each line a JSON object; the evaluation
    that acted is followed by the trial it started, and the evaluations that did not say which gate held them."""
    path = tmp_path / "decisions.jsonl"
    done = bench("--specpilot-only", "--replicas", "2", "-o", "json", "--decisions", str(path))
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert {(e["scenario"], e["seed"], e["replicas"], e["policy"]) for e in entries} == {
        ("steady-low", 1, 2, "specpilot")
    }
    decisions = [e for e in entries if e["kind"] == "decision"]
    events = [e for e in entries if e["kind"] == "event"]
    assert [e["t"] for e in entries] == sorted(e["t"] for e in entries)
    acted = [d for d in decisions if d["actuate"]]
    assert len(acted) == row["trials"] >= 1, "every actuation at two replicas starts a one-pod trial"
    started = [e for e in events if e["reason"] == "TrialStarted"]
    assert [e["t"] for e in started] == [d["t"] for d in acted]
    assert entries.index(started[0]) == entries.index(acted[0]) + 1, "the event follows the evaluation that posted it"
    held = [d for d in decisions if not d["actuate"]]
    assert held, "the evaluations that acted on nothing are in the trace too"
    assert all(isinstance(d["reason"], str) and d["reason"] for d in held)
    assert any(d["gate"] == "rollout in progress" for d in held), "a gate named while the trial pod restarts"


def test_a_decision_trace_that_cannot_be_written_fails_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "decisions.jsonl"
    done = bench("--specpilot-only", "--decisions", str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: --decisions {path}: cannot write it (")
    assert done.stdout == "", "nothing ran"
