"""A plain Prometheus scrape job for every SpeculativeDeployment's pods, for clusters without the Prometheus operator.

It reproduces what prometheus-operator generates for the PodMonitor the operator renders
(manifests.build_pod_monitor): Kubernetes pod discovery, keep pods that carry the `specpilot.dev/deployment` label and
the container port named `http`, drop finished pods, and label every series with `namespace`, `pod`, `container`,
`endpoint` and the pod labels `specpilot_dev_deployment` / `specpilot_dev_config_hash` (podTargetLabels), so the
autotuner's queries (promql.Scope's default label names) and the recording rules work unchanged. One job covers all
SpeculativeDeployments instead of one PodMonitor each. Pure: docs/monitoring.md ships the rendered YAML (a test keeps
them equal) and tests/cluster/test_discovery.py runs it in a real Prometheus against the local API server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specpilot.reconcile import manifests

POD_LABEL_META = "__meta_kubernetes_pod_label_"


def _meta_label(pod_label: str) -> str:
    """Prometheus' meta label for a pod label: every character outside [a-zA-Z0-9_] becomes `_`."""
    return POD_LABEL_META + "".join(c if c.isalnum() or c == "_" else "_" for c in pod_label)


def build_scrape_config(
    *, namespaces: Sequence[str] = (), job_name: str = "specpilot-vllm", scrape_interval: str = "15s"
) -> dict[str, Any]:
    """The scrape job (one item of `scrape_configs`); `namespaces` empty means every namespace."""
    sd: dict[str, Any] = {"role": "pod"}
    if namespaces:
        sd["namespaces"] = {"names": list(namespaces)}
    relabel: list[dict[str, Any]] = [
        # PodMonitor selector: pods of a SpeculativeDeployment (the label is present and not empty).
        {"action": "keep", "source_labels": [_meta_label(manifests.LABEL_DEPLOYMENT)], "regex": ".+"},
        # podMetricsEndpoints[].port: the vLLM container's port named "http".
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": manifests.HTTP_PORT_NAME,
        },
        # prometheus-operator drops finished pods.
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "endpoint", "replacement": manifests.HTTP_PORT_NAME},
    ]
    for pod_label, metric_label in (
        (manifests.LABEL_DEPLOYMENT, manifests.METRIC_LABEL_DEPLOYMENT),
        (manifests.LABEL_CONFIG_HASH, manifests.METRIC_LABEL_CONFIG_HASH),
    ):  # podTargetLabels
        relabel.append(
            {
                "source_labels": [_meta_label(pod_label)],
                "target_label": metric_label,
                "regex": "(.+)",
                "replacement": "${1}",
            }
        )
    return {
        "job_name": job_name,
        "scrape_interval": scrape_interval,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [sd],
        "relabel_configs": relabel,
    }


def build_operator_scrape_config(
    *, namespace: str = "specpilot-system", scrape_interval: str = "30s"
) -> dict[str, Any]:
    """The operator's own /metrics, as the chart's ServiceMonitor has it: job "specpilot" (the alerts select it) and
    honor_labels, so the SpeculativeDeployment's `namespace` label is not replaced by the operator pod's."""
    return {
        "job_name": "specpilot",
        "scrape_interval": scrape_interval,
        "honor_labels": True,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            {"action": "keep", "source_labels": [_meta_label("app.kubernetes.io/name")], "regex": "specpilot"},
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }
