"""The Argo CD example: the operator's chart syncs before the CRs, with values the chart's schema accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
APPS = {
    d["metadata"]["name"]: d
    for d in yaml.safe_load_all((ROOT / "examples" / "argocd" / "application.yaml").read_text())
}


def _wave(app: dict[str, Any]) -> int:
    return int(app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])


def test_operator_and_crd_sync_in_an_earlier_wave_than_the_resources() -> None:
    assert _wave(APPS["specpilot"]) < _wave(APPS["inference"])
    crd = yaml.safe_load((ROOT / "crds" / "specpilot.dev_speculativedeployments.yaml").read_text())
    annotations = crd["metadata"]["annotations"]
    assert int(annotations["argocd.argoproj.io/sync-wave"]) < 0
    assert {"Prune=false", "Delete=false"} <= set(annotations["argocd.argoproj.io/sync-options"].split(","))


def test_resources_app_skips_the_dry_run_while_the_crd_lives_elsewhere() -> None:
    assert "SkipDryRunOnMissingResource=true" in APPS["inference"]["spec"]["syncPolicy"]["syncOptions"]


def test_no_ignore_differences_the_operator_never_writes_git_fields() -> None:
    assert all("ignoreDifferences" not in app["spec"] for app in APPS.values())


def test_chart_app_points_at_the_chart_with_valid_values() -> None:
    source = APPS["specpilot"]["spec"]["source"]
    assert (ROOT / source["path"] / "Chart.yaml").exists()
    schema = json.loads((ROOT / source["path"] / "values.schema.json").read_text())
    jsonschema.validate(source["helm"]["valuesObject"], schema)
