"""The documented scrape jobs are exactly what specpilot.scrape builds (the discovery test runs the builder)."""

from __future__ import annotations

from pathlib import Path

import yaml

from specpilot import manifests
from specpilot.scrape import build_operator_scrape_config, build_scrape_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


def test_docs_snippet_equals_the_builders() -> None:
    text = DOC.read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == {"scrape_configs": [build_scrape_config(), build_operator_scrape_config()]}


def test_scrape_job_labels_series_like_the_pod_monitor() -> None:
    """Every podTargetLabel of the rendered PodMonitor becomes the metric label the queries select on."""
    job = build_scrape_config(namespaces=["ml"])
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["ml"]}}]
    targets = {r.get("target_label"): r.get("source_labels") for r in job["relabel_configs"]}
    assert targets[manifests.METRIC_LABEL_DEPLOYMENT] == ["__meta_kubernetes_pod_label_specpilot_dev_deployment"]
    assert targets[manifests.METRIC_LABEL_CONFIG_HASH] == ["__meta_kubernetes_pod_label_specpilot_dev_config_hash"]
    assert targets["namespace"] == ["__meta_kubernetes_namespace"]
    assert targets["pod"] == ["__meta_kubernetes_pod_name"]
