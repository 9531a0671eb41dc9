"""The documented scrape jobs are exactly what reconcile.scrape builds (the discovery test runs the builder)."""

from __future__ import annotations

from pathlib import Path

import yaml

from specpilot.api import v1alpha1
from specpilot.reconcile import manifests
from specpilot.reconcile.scrape import build_operator_scrape_config, build_scrape_config

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


def test_scrape_job_is_derived_from_the_rendered_pod_monitor() -> None:
    """What prometheus-operator generates from manifests.build_pod_monitor, rule by rule: keep the pods its selector
    matches (any SpeculativeDeployment: the selector's label keys, present), keep its endpoint port, scrape its path,
    and turn each podTargetLabel into the sanitised label name prometheus-operator uses."""
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "llama-8b-single-gpu.yaml").read_text())
    spec = v1alpha1.parse_resource(doc).spec
    monitor = manifests.build_pod_monitor(spec, manifests.Owner(name="chat", namespace="ml", uid="u"))["spec"]
    job = build_scrape_config(namespaces=monitor["namespaceSelector"]["matchNames"])
    keeps = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    for label in monitor["selector"]["matchLabels"]:
        meta = "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in label)
        assert keeps[(meta,)] == ".+", label
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert keeps[("__meta_kubernetes_pod_container_port_name",)] == endpoint["port"]
    assert job["metrics_path"] == endpoint["path"]
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["ml"]
    copies = {
        r["target_label"]: r["source_labels"]
        for r in job["relabel_configs"]
        if "source_labels" in r and "target_label" in r
    }
    for label in monitor["podTargetLabels"]:
        sanitised = "".join(c if c.isalnum() else "_" for c in label)
        assert copies[sanitised] == [f"__meta_kubernetes_pod_label_{sanitised}"], label
