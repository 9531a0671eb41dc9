"""The chart renders valid objects for every values combination the schema allows.

`helm lint --strict` and a server-side dry run (`kubectl apply --dry-run=server`) of `helm template` against the real
API server, with prometheus-operator's real CRDs installed so the ServiceMonitor and PrometheusRule are checked
against their schemas too. Every on/off combination of the chart's switches (TOGGLES: all or listed namespaces,
ServiceMonitor, PrometheusRule, dashboard, image admission policy; 32 in all) is linted and rendered, and all of them
go to the API server in one dry run (distinct release names, so nothing collides). COMBINATIONS adds the other values
one line each; "$NS" stands for a fresh test namespace.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.fixture import KubeCluster
from e2e.operator_process import ALLOCATOR_VARIABLES, chart_allocator

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specpilot"

LISTED: dict[str, Any] = {"watchNamespaces": ["$NS"]}
COMBINATIONS: dict[str, dict[str, Any]] = {
    # (the switches' combinations, defaults included, are test_every_toggle_combination_...'s)
    "rule-labels": {"prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
    "own-rbac-and-service-account": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "ops"}},
    "two-replicas-own-lease": {
        "replicas": 2,
        "leaderElection": {"leaseName": "ops-leader", "leaseDuration": 30, "renewDeadline": 20, "retryPeriod": 4},
    },
    "no-leader-election": {"leaderElection": {"enabled": False}},
    "debug-fast-ticks": {"logLevel": "debug", "tickSeconds": 2, "image": {"tag": "0.1.0-rc1", "pullPolicy": "Always"}},
    "image-policy-listed-warn": {
        **LISTED,
        "imagePolicy": {
            "enabled": True,
            "allowedPrefixes": ["registry.example.com/vllm/", "vllm/vllm-openai@"],
            "validationActions": ["Warn", "Audit"],
        },
    },
    "connections-only": {
        **LISTED,
        "prometheusAllowSpecURLs": False,
        "prometheusConnections": {
            "monitoring": {
                "url": "https://prometheus.monitoring.svc:9090",
                "secretName": "prometheus-reader",
                "namespaces": ["$NS"],
                "headers": {"X-Scope-OrgID": "team-a"},
            },
            "plain": {"url": "http://prometheus.local:9090", "insecureSkipVerify": True},
        },
    },
    "pull-secrets-placement": {
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "metrics": {"port": 9100},
        "health": {"port": 8081},
    },
}
# The chart's on/off switches; every combination of them is rendered (TOGGLES' product, 2**5 = 32).
TOGGLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "namespaces": ({}, LISTED),
    "serviceMonitor": ({}, {"metrics": {"serviceMonitor": {"enabled": True}}}),
    "prometheusRule": ({}, {"prometheusRule": {"enabled": True}}),
    "dashboard": ({"dashboard": {"enabled": False}}, {}),
    "imagePolicy": ({}, {"imagePolicy": {"enabled": True}}),
}


def _substitute(values: Any, namespace: str) -> Any:
    if isinstance(values, dict):
        return {k: _substitute(v, namespace) for k, v in values.items()}
    if isinstance(values, list):
        return [_substitute(v, namespace) for v in values]
    return namespace if values == "$NS" else values


def _helm(cluster: KubeCluster, *args: str, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.bin_dir / "helm"), *args, "-f", "-"],
        input=json.dumps(values),
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(cluster.env),
        check=False,
    )


@pytest.mark.parametrize("name", COMBINATIONS)
def test_chart_lints_strictly_and_passes_a_server_side_dry_run(
    name: str, kube_cluster: KubeCluster, kube_namespace: str, monitoring_crds: None
) -> None:
    values = _substitute(COMBINATIONS[name], kube_namespace)
    lint = _helm(kube_cluster, "lint", "--strict", str(CHART), values=values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout
    rendered = _helm(kube_cluster, "template", "specpilot", str(CHART), "-n", kube_namespace, values=values)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    kinds = {d["kind"] for d in docs}
    for kind in ("PrometheusRule", "ServiceMonitor", "ValidatingAdmissionPolicy"):
        assert (kind in kinds) == _rendered_kinds(values)[kind], kind
    for rule in (d for d in docs if d["kind"] == "PrometheusRule"):  # the promtool-tested file, unchanged
        assert (
            rule["spec"]["groups"] == yaml.safe_load((CHART / "rules" / "specpilot.rules.yaml").read_text())["groups"]
        )
    dry = kube_cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "--field-manager=helm", "-f", "-", stdin=rendered.stdout
    )
    assert dry.stdout.count("(server dry run)") == len(docs), dry.stdout


def _kind_of(doc: dict[str, Any]) -> str:
    """The kind, told apart where one kind serves two toggles (the dashboard ConfigMap, the leader-election Role)."""
    kind, name = doc["kind"], doc["metadata"]["name"]
    if kind == "ConfigMap" and name.endswith("-dashboard"):
        return "ConfigMap-dashboard"
    if kind in ("Role", "RoleBinding") and name.endswith("-leader-election"):
        return f"{kind}-leader-election"
    return str(kind)


def _rendered_kinds(values: dict[str, Any]) -> dict[str, bool]:
    """Which optional objects `values` asks for (what each toggle switches)."""
    leader_election = bool(values.get("leaderElection", {}).get("enabled", True))
    return {
        "ClusterRole": not values.get("watchNamespaces"),
        "Role": bool(values.get("watchNamespaces")),
        "Role-leader-election": leader_election,
        "RoleBinding-leader-election": leader_election,
        "ServiceMonitor": bool(values.get("metrics", {}).get("serviceMonitor", {}).get("enabled")),
        "PrometheusRule": bool(values.get("prometheusRule", {}).get("enabled")),
        "ConfigMap-dashboard": values.get("dashboard", {}).get("enabled", True),
        "ValidatingAdmissionPolicy": bool(values.get("imagePolicy", {}).get("enabled")),
        "ValidatingAdmissionPolicyBinding": bool(values.get("imagePolicy", {}).get("enabled")),
    }


def test_every_toggle_combination_lints_and_passes_one_server_side_dry_run(
    kube_cluster: KubeCluster, kube_namespace: str, monitoring_crds: None
) -> None:
    every: list[dict[str, Any]] = []
    combinations = list(itertools.product((False, True), repeat=len(TOGGLES)))
    assert len(combinations) == 32
    for index, switches in enumerate(combinations):
        values: dict[str, Any] = {}
        for (off, on), switch in zip(TOGGLES.values(), switches, strict=True):
            values.update(_substitute(on if switch else off, kube_namespace))
        label = ", ".join(f"{n}={'on' if s else 'off'}" for n, s in zip(TOGGLES, switches, strict=True))
        lint = _helm(kube_cluster, "lint", "--strict", str(CHART), values=values)
        assert lint.returncode == 0, f"{label}: {lint.stdout}{lint.stderr}"
        release = f"combo-{index:02d}"  # distinct names: all combinations go to the API server together
        rendered = _helm(kube_cluster, "template", release, str(CHART), "-n", kube_namespace, values=values)
        assert rendered.returncode == 0, f"{label}: {rendered.stderr}"
        docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
        present = {_kind_of(d) for d in docs} | {d["kind"] for d in docs if d["kind"] not in ("Role", "RoleBinding")}
        wanted = _rendered_kinds(values)
        assert {k for k, on in wanted.items() if on} <= present, label
        assert not {k for k, on in wanted.items() if not on} & present, label
        every += docs
    dry = kube_cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "--field-manager=helm", "-f", "-",
        stdin="\n---\n".join(yaml.safe_dump(d) for d in every),
    )  # fmt: skip
    assert dry.stdout.count("(server dry run)") == len(every), dry.stdout


def test_schema_rejects_what_the_chart_cannot_render(kube_cluster: KubeCluster) -> None:
    bad = _helm(kube_cluster, "template", "specpilot", str(CHART), values={"prometheusRule": {"enabled": "yes"}})
    assert bad.returncode != 0
    assert "prometheusRule.enabled" in bad.stderr or "prometheusRule" in bad.stderr, bad.stderr


@pytest.mark.parametrize(
    ("values", "why"),
    [
        ({"replicas": 2, "leaderElection": {"enabled": False}}, "leaderElection/enabled"),
        ({"leaderElection": {"renewDeadline": 15}}, "retryPeriod < renewDeadline < leaseDuration"),
        ({"leaderElection": {"retryPeriod": 10}}, "retryPeriod < renewDeadline < leaseDuration"),
    ],
)
def test_chart_refuses_two_acting_operators(kube_cluster: KubeCluster, values: dict[str, Any], why: str) -> None:
    """Several replicas without a Lease, or timings where a leader could still act after another took over."""
    bad = _helm(kube_cluster, "template", "specpilot", str(CHART), values=values)
    assert bad.returncode != 0
    assert why in bad.stderr, bad.stderr


def test_leader_election_rbac_is_one_lease_in_the_release_namespace(kube_cluster: KubeCluster) -> None:
    rendered = _helm(kube_cluster, "template", "sp", str(CHART), "-n", "ops", values={"watchNamespaces": ["ml"]})
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    lease_rules = [
        (d["metadata"]["namespace"], r)
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        for r in d["rules"]
        if "coordination.k8s.io" in r["apiGroups"]
    ]
    assert lease_rules == [
        ("ops", {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}),
        (
            "ops",
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["sp-specpilot-leader"],
                "verbs": ["get", "update"],
            },
        ),
    ]
    operator = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"--leader-elect", "--leader-election-lease=sp-specpilot-leader", "--leader-election-namespace=ops"} <= set(
        operator["args"]
    )
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in operator["env"]


def test_the_operator_processes_tests_start_get_the_charts_allocator_settings(kube_cluster: KubeCluster) -> None:
    """Memory figures from e2e's operator (benchmarks, tests) are production's only with the chart's allocator
    settings: e2e.operator_process reads them from the template; here they equal what `helm template` renders."""
    rendered = _helm(kube_cluster, "template", "sp", str(CHART), "-n", "ops", values={})
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    operator = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {v["name"]: v["value"] for v in operator["env"] if "value" in v}
    assert (
        {name: env[name] for name in ALLOCATOR_VARIABLES}
        == chart_allocator()
        == {
            "PYTHONMALLOC": "malloc",
            "LD_PRELOAD": "/usr/local/lib/libjemalloc.so.2",
            "MALLOC_CONF": "background_thread:true,narenas:2,dirty_decay_ms:0,muzzy_decay_ms:0",
            "MALLOC_ARENA_MAX": "2",
        }
    )
