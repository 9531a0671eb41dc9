"""The shipped recording rules and alerts: checked and unit-tested by the real promtool.

charts/specpilot/rules/tests/specpilot_test.yaml holds one case per rule (synthetic series, exact expected samples
and the complete set of firing alerts at each evaluation); this test runs it, so `make test` fails when a rule or
its expectation drifts.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "charts" / "specpilot" / "rules"
RULES = RULES_DIR / "specpilot.rules.yaml"

pytestmark = pytest.mark.prometheus


def _promtool(promtool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120, check=False
    )


def test_rules_file_passes_promtool_check(promtool_binary: Path) -> None:
    done = _promtool(promtool_binary, "check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 30 rules found" in done.stdout


def test_every_rule_has_a_promtool_case() -> None:
    """A rule added without a case in the test file fails here, before promtool would silently not test it."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    cases = yaml.safe_load((RULES_DIR / "tests" / "specpilot_test.yaml").read_text())["tests"]
    tested_records = {t["expr"].split("{")[0] for c in cases for t in c.get("promql_expr_test", [])}
    tested_alerts = {t["alertname"] for c in cases for t in c.get("alert_rule_test", []) if t.get("exp_alerts")}
    missing = [
        r.get("record") or r.get("alert")
        for r in rules
        if (r.get("record") or r.get("alert")) not in (tested_records | tested_alerts)
    ]
    assert not missing, f"rules without a firing/sample case in specpilot_test.yaml: {missing}"


def test_rules_unit_tests_pass(promtool_binary: Path) -> None:
    done = _promtool(promtool_binary, "test", "rules", "tests/specpilot_test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
