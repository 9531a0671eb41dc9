"""Fault injection: a hostile Prometheus costs one connection its measurements, bounded in bytes, depth and time.

Every kind of hostile answer (tests/prometheus/hostile.py) is run twice: through the adapter, in a round that then
measures a well-behaved connection (the real Prometheus scraping the fake pods), and through `specpilot evaluate` as
a child process whose peak RSS, output and exit status are measured. Each test prints what it tried and what came
of it, past pytest's output capture.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from e2e.prometheus.fixture import PrometheusServer
from specpilot.adapters.prom import PrometheusClient, PrometheusConnection
from specpilot.autotune.evaluate import Subject, measure_many
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass
from specpilot.autotune.signals.promql import Scope, Signal
from tests.prometheus.conftest import DEPLOYMENT, NAMESPACE, make_spec
from tests.prometheus.hostile import KINDS, Hostile, hostile_server

pytestmark = pytest.mark.prometheus

MiB = 1024 * 1024
# The query timeout: short where the answer never completes (the drip), generous elsewhere, so that a loaded
# machine cannot turn a refusal into a timeout; either way the refusal comes long before it.
DRIP_TIMEOUT_S, TIMEOUT_S = 1.0, 5.0


def timeout_for(prefix: str) -> float:
    return DRIP_TIMEOUT_S if prefix == "/drip" else TIMEOUT_S


GATES = (Signal.DRAFT_TOKENS_IN_WINDOW, Signal.REQUESTS_IN_WINDOW)
# What each hostile answer must be refused as (the detail of its evidence gates).
REFUSED_AS = {
    "/huge": "answer too large",
    "/huge-declared": "answer too large",
    "/many-values": "JSON values, over the limit",
    "/nested": "nested too deeply",
    "/drip": "timeout:",
    "/warning": "answer too large",
    "/gzip": "content encoding 'gzip'",
    "/html": "content type 'text/html'",
    "/redirect": "HTTP 302",
}
EVALUATE_RSS_LIMIT = 200 * MiB
EVALUATE_OUTPUT_LIMIT = 64 * 1024


Tell = Callable[[str], None]


@pytest.fixture
def tell(capsys: pytest.CaptureFixture[str]) -> Tell:
    """Print past pytest's capture, so that `make test` shows what each injection tried and what came of it."""

    def say(line: str) -> None:
        with capsys.disabled():
            print(f"\n[hostile prometheus] {line}", end="")

    return say


@pytest.fixture(scope="module")
def hostile_url() -> Iterator[str]:
    with hostile_server() as url:
        yield url


@pytest.fixture(scope="module")
def well_behaved(prometheus: PrometheusServer) -> PrometheusServer:
    """The real Prometheus once its window holds enough scrapes for the evidence gates to be Valid."""
    deadline = time.monotonic() + 60
    while not all(m.valid for m in _round(prometheus.url, 5.0)[0].values() if m.name in GATES):
        assert time.monotonic() < deadline, "the real Prometheus never filled its window"
        time.sleep(0.5)
    return prometheus


def _round(url: str, timeout_s: float) -> tuple[dict[str, Measurement], float]:
    """One connection group of a fleet round (autotune.evaluate.measure_many, as the operator runs it)."""
    subject = Subject("chat", make_spec(), Scope(NAMESPACE, DEPLOYMENT, "cfg-spec"))
    started = time.monotonic()
    with PrometheusClient(PrometheusConnection(url, timeout_s=timeout_s)) as client:
        result = measure_many([subject], client, datetime.now(UTC))
    return dict(result.measurements["chat"]), time.monotonic() - started


@pytest.mark.parametrize("kind", KINDS, ids=[k.prefix for k in KINDS])
def test_a_hostile_connection_costs_only_its_own_measurements(
    kind: Hostile, hostile_url: str, well_behaved: PrometheusServer, tell: Tell
) -> None:
    tracemalloc.start()
    try:
        hostile, elapsed = _round(hostile_url + kind.prefix, timeout_for(kind.prefix))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    good, _ = _round(well_behaved.url, 5.0)
    gate = hostile[Signal.REQUESTS_IN_WINDOW]
    tell(f"{kind.prefix}: {kind.what} -> {gate.klass.value} in {elapsed:.1f} s, peak {peak / MiB:.1f} MiB: "
          f"{gate.detail[:160]}; the well-behaved connection: "
          + ", ".join(f"{g} {good[g].klass.value}" for g in GATES))  # fmt: skip
    assert all(hostile[g].klass is MeasurementClass.ERROR for g in GATES)
    assert REFUSED_AS[kind.prefix] in gate.detail
    assert all(good[g].valid for g in GATES), "the next connection of the round is measured as usual"
    assert elapsed < 2 * TIMEOUT_S, "a round's connection is bounded in time"
    assert peak < 32 * MiB, "a round's connection is bounded in memory"
    assert all(len(m.detail) < 1024 and sum(map(len, m.warnings)) < 2048 for m in hostile.values())


@dataclass(frozen=True)
class Child:
    returncode: int
    stdout: str
    stderr: str
    max_rss: int  # bytes
    seconds: float


# `python -m specpilot ARGS` that writes its own peak RSS (VmHWM) to PEAK_FILE at exit. getrusage's ru_maxrss of a
# child is no use here: Linux starts it at the peak of the process that forked it, the test process itself.
_MEASURED = """
import atexit, os, runpy, sys
def _peak():
    with open(os.environ["PEAK_FILE"], "w") as out:
        out.write(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")))
atexit.register(_peak)
sys.argv = ["specpilot", *sys.argv[1:]]
runpy.run_module("specpilot", run_name="__main__", alter_sys=True)
"""


def _run_specpilot(args: list[str], work: Path, limit_s: float = 60) -> Child:
    peak = work / "peak"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, *args],
        capture_output=True,
        timeout=limit_s,
        check=False,
        env={**os.environ, "PEAK_FILE": str(peak)},
    )
    kib = int(peak.read_text().split()[1])
    return Child(
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
        kib * 1024,
        time.monotonic() - started,
    )


def _manifest(url: str, work: Path, timeout_s: float = TIMEOUT_S) -> Path:
    spec = make_spec().model_dump(by_alias=True, mode="json", exclude_none=True)
    spec["autotune"]["prometheus"] = {"url": url, "timeout": f"{timeout_s:g}s"}
    resource = {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": spec,
    }
    path = work / "cr.yaml"
    path.write_text(yaml.safe_dump(resource))
    return path


def _evaluate(url: str, work: Path, output: str = "text", timeout_s: float = TIMEOUT_S) -> Child:
    return _run_specpilot(["evaluate", str(_manifest(url, work, timeout_s)), "-o", output], work)


@pytest.mark.parametrize("kind", KINDS, ids=[k.prefix for k in KINDS])
def test_evaluate_against_a_hostile_answer_ends_in_one_line(
    kind: Hostile, hostile_url: str, tmp_path: Path, tell: Tell
) -> None:
    child = _evaluate(hostile_url + kind.prefix, tmp_path, timeout_s=timeout_for(kind.prefix))
    size = len(child.stdout.encode()) + len(child.stderr.encode())
    last = child.stderr.strip().splitlines()[-1:] or ["(nothing on stderr)"]
    tell(f"{kind.prefix}: {kind.what} -> exit {child.returncode} in {child.seconds:.1f} s, peak RSS "
          f"{child.max_rss / MiB:.0f} MiB, {size} bytes of output; {last[0][:200]}")  # fmt: skip
    assert child.returncode == 3, child.stderr[-2000:]
    assert child.stderr.count("\n") == 1, child.stderr[-2000:]
    assert child.stderr.startswith("error: ")
    assert REFUSED_AS[kind.prefix] in child.stderr
    assert child.max_rss < EVALUATE_RSS_LIMIT
    assert size < EVALUATE_OUTPUT_LIMIT
    assert child.seconds < 30


@pytest.mark.parametrize("output", ["text", "json"])
def test_evaluate_truncates_every_string_it_copies_from_an_answer(
    output: str, hostile_url: str, tmp_path: Path, tell: Tell
) -> None:
    """A valid answer under the byte cap whose warning, info and label are 1 MB each: measured, strings cut."""
    child = _evaluate(hostile_url + "/long-strings", tmp_path, output)
    size = len(child.stdout.encode()) + len(child.stderr.encode())
    longest = max(len(word) for word in (child.stdout + child.stderr).split())
    tell(f"/long-strings -o {output}: exit {child.returncode}, {size} bytes of output, longest word {longest}, "
          f"peak RSS {child.max_rss / MiB:.0f} MiB")  # fmt: skip
    assert child.returncode == 0, child.stderr[-2000:]
    assert "prometheus warning: www" in child.stdout or '"wwww' in child.stdout
    assert size < EVALUATE_OUTPUT_LIMIT
    assert longest < 1024
    assert child.max_rss < EVALUATE_RSS_LIMIT


@pytest.mark.parametrize("kind", KINDS, ids=[k.prefix for k in KINDS])
def test_report_against_a_hostile_answer_ends_in_one_line(
    kind: Hostile, hostile_url: str, tmp_path: Path, tell: Tell
) -> None:
    """`specpilot report` runs range queries through the same bounded client: one error line, exit 1."""
    out = tmp_path / "report"
    manifest = _manifest(hostile_url + kind.prefix, tmp_path)
    args = ["report", str(manifest), "--since", "1h", "--timeout", f"{timeout_for(kind.prefix):g}s"]
    child = _run_specpilot([*args, "-o", str(out)], tmp_path)
    size = len(child.stdout.encode()) + len(child.stderr.encode())
    tell(f"{kind.prefix}: report -> exit {child.returncode} in {child.seconds:.1f} s, peak RSS "
          f"{child.max_rss / MiB:.0f} MiB, {size} bytes of output; ...{child.stderr.strip()[-160:]}")  # fmt: skip
    assert child.returncode == 1, child.stderr[-2000:]
    assert child.stderr.count("\n") == 1, child.stderr[-2000:]
    assert child.stderr.startswith(f"error: Prometheus {hostile_url}{kind.prefix}: ")
    assert REFUSED_AS[kind.prefix] in child.stderr
    assert child.max_rss < EVALUATE_RSS_LIMIT
    assert size < EVALUATE_OUTPUT_LIMIT
    assert not out.exists(), "no report from answers that were refused"
