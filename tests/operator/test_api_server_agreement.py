"""`specpilot validate` agrees with the real API server, and the chart's security pieces work there.

- every example and 200 random valid specs (tests/k8s_specs.py): the CR and every rendered child (Service, Deployment,
  canary Deployment, PDB, PodMonitor) pass a server-side dry run;
- the refusals of tests/unit/test_input_hygiene.py: the CRD (schema and CEL) refuses each one too, and accepts the
  accepted ones;
- candidates: each drafter rule's CEL refuses a candidate naming it as validate does; a stored object's
  status.candidates is typed (an unknown verdict is refused) and `kubectl get` shows the DRAFTER column;
- metadata (labels, annotations, namespace, finalizers), which the API server checks outside any CRD: it refuses what
  validate refuses (for that field) and accepts what validate accepts;
- quantities: the API server's ParseQuantity (a Pod's cpu limit, and CEL's isQuantity in the CRD) against
  specpilot.api.quantity;
- the chart: RBAC grants no Secret access, the connections file it writes is the one the operator loads, and the
  image ValidatingAdmissionPolicy refuses an image outside the allow-list (bound to this test's namespace only).
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from kubernetes import config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from e2e.cluster.fixture import NAMESPACE_LABEL, KubeCluster
from specpilot.adapters.connections import Registry
from specpilot.adapters.k8s import KubeAdapter, StaleStatus
from specpilot.api import v1alpha1
from specpilot.api.quantity import InvalidQuantity, is_positive_quantity, parse_quantity
from specpilot.cli.main import validate_document
from tests.k8s_specs import children_of, valid_resources
from tests.unit import test_input_hygiene as hygiene

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
RANDOM_SPECS = 200
COUNTS: dict[str, int] = {}


CRD_FILE = ROOT / "crds" / "specpilot.dev_speculativedeployments.yaml"
MY_SCHEMA = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]


class SharedCrd:
    """The CRD is cluster-wide and concurrent sessions (other branches) apply their own versions of it: before each
    CR dry run, make sure the live CRD is this tree's, re-applying it when another session replaced it."""

    def __init__(self, cluster: KubeCluster, dynamic: DynamicClient) -> None:
        self.cluster = cluster
        self.dynamic = dynamic
        self.reapplied = 0

    def live_is_mine(self) -> bool:
        crds = self.dynamic.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        live = self.dynamic.get(crds, name=f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}").to_dict()  # type: ignore[no-untyped-call]
        return bool(live["spec"]["versions"][0]["schema"] == MY_SCHEMA)

    def ensure(self) -> None:
        for _ in range(10):
            if self.live_is_mine():
                return
            self.reapplied += 1
            self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
            self.cluster.wait_established(f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}")
            time.sleep(1)  # the API server reloads the schema asynchronously after Established
        raise AssertionError("another session keeps replacing the CRD")


_CRD: list[SharedCrd] = []


@pytest.fixture(scope="module")
def dynamic(kube_cluster: KubeCluster, crd_installed: None, monitoring_crds: None) -> DynamicClient:
    """prometheus-operator's CRDs are installed first, so the PodMonitor children are dry-run like the rest."""
    api = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))  # type: ignore[no-untyped-call]
    client = DynamicClient(api)  # type: ignore[no-untyped-call]
    _CRD[:] = [SharedCrd(kube_cluster, client)]
    return client


@pytest.fixture(scope="module")
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """One namespace for the whole module: dry runs persist nothing, and a namespace per case costs seconds."""
    name = f"t-api-agreement-{secrets.token_hex(3)}"
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {NAMESPACE_LABEL: "true"}},
    }
    kube_cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    deadline = time.monotonic() + 30
    while kube_cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode:
        assert time.monotonic() < deadline, f"namespace {name}: no default ServiceAccount after 30 s"
        time.sleep(0.2)
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false")


def dry_run(dynamic: DynamicClient, obj: dict[str, Any], namespace: str) -> str | None:
    """Create `obj` with dryRun=All and strict field validation; None if accepted, else the server's message."""
    if obj["kind"] != v1alpha1.KIND:
        return _dry_run(dynamic, obj, namespace)
    for _ in range(3):
        _CRD[0].ensure()
        message = _dry_run(dynamic, obj, namespace)
        if _CRD[0].live_is_mine():  # the answer came from this tree's CRD
            return message
    raise AssertionError("the CRD changed under every attempt")


def _dry_run(dynamic: DynamicClient, obj: dict[str, Any], namespace: str) -> str | None:
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        dynamic.create(  # type: ignore[no-untyped-call]
            resource, body=obj, namespace=namespace, query_params=[("dryRun", "All"), ("fieldValidation", "Strict")]
        )
    except ApiException as err:
        body = json.loads(err.body) if err.body else {}
        return str(body.get("message", err.reason))
    COUNTS[obj["kind"]] = COUNTS.get(obj["kind"], 0) + 1
    return None


def check_document(dynamic: DynamicClient, doc: dict[str, Any], namespace: str) -> None:
    problems, _ = validate_document(doc)
    assert problems == [], problems
    assert dry_run(dynamic, {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}, namespace) is None
    for child in children_of(doc, namespace):
        message = dry_run(dynamic, child, namespace)
        assert message is None, f"{child['kind']} refused: {message}\n{yaml.safe_dump(child)}"


def test_every_example_and_its_children_pass_a_server_side_dry_run(dynamic: DynamicClient, namespace: str) -> None:
    documents = [
        d
        for path in sorted((ROOT / "examples").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if isinstance(d, dict) and d.get("kind") == v1alpha1.KIND
    ]
    for doc in documents:
        annotated = {
            **doc,
            "metadata": {**doc["metadata"], "annotations": {v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT: "true"}},
        }
        problems, _ = validate_document(annotated)
        assert problems == [], (doc["metadata"]["name"], problems)
        check_document(dynamic, annotated, namespace)
    print(f"\nexamples: {len(documents)} CRs; objects accepted by dry run so far: {COUNTS}")


def test_random_valid_specs_and_their_children_pass_a_server_side_dry_run(
    dynamic: DynamicClient, namespace: str
) -> None:
    seen: list[int] = []

    @settings(
        max_examples=RANDOM_SPECS, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(valid_resources())
    def one(doc: dict[str, Any]) -> None:
        seen.append(1)
        check_document(dynamic, doc, namespace)

    one()
    print(f"\nrandom specs: {len(seen)}; objects accepted by dry run so far: {COUNTS}")


def cr(spec: dict[str, Any], name: str = "agree") -> dict[str, Any]:
    return {"apiVersion": v1alpha1.API_VERSION, "kind": v1alpha1.KIND, "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [*hygiene.SCHEMA_REFUSALS, *hygiene.CEL_REFUSALS],
    ids=[f"{p}={v!r}" for p, v, _ in [*hygiene.SCHEMA_REFUSALS, *hygiene.CEL_REFUSALS]],
)
def test_the_api_server_refuses_what_validate_refuses(
    dynamic: DynamicClient, namespace: str, path: str, value: Any, problem: str
) -> None:
    spec = hygiene.with_(path, value)
    assert hygiene.problems(spec), "validate refuses it"
    message = dry_run(dynamic, cr(spec), namespace)
    assert message is not None, "the API server refuses it too"


@pytest.mark.parametrize(("path", "value"), hygiene.ACCEPTED, ids=[f"{p}={v!r}" for p, v in hygiene.ACCEPTED])
def test_the_api_server_accepts_what_validate_accepts(
    dynamic: DynamicClient, namespace: str, path: str, value: Any
) -> None:
    spec = hygiene.with_(path, value)
    assert hygiene.problems(spec) == []
    assert dry_run(dynamic, cr(spec), namespace) is None


CANDIDATE_REFUSALS = [case for case in hygiene.CEL_REFUSALS if case[2].startswith("spec.speculation.candidates[")]


@pytest.mark.parametrize(
    ("path", "value", "problem"), CANDIDATE_REFUSALS, ids=[f"{p}={v!r}" for p, v, _ in CANDIDATE_REFUSALS]
)
def test_the_api_server_refuses_a_candidate_for_the_rule_validate_names(
    dynamic: DynamicClient, namespace: str, path: str, value: Any, problem: str
) -> None:
    """The server's refusal carries the same rule (its message says candidates[i]) and, where the rule sits on the
    list's elements, the element's path; two candidates of one name are a duplicate key of the list."""
    element = problem.split("]", 1)[0] + "]"
    message = dry_run(dynamic, cr(hygiene.with_(path, value)), namespace)
    assert message is not None, "the API server refuses it too"
    if ".name:" in problem:
        assert f"{element}: Duplicate value" in message, message
        return
    rule = next(r for r in v1alpha1.CANDIDATE_CROSS_FIELD_RULES if r.message.startswith(_generic(problem)))
    assert rule.message in message, message
    if rule.at:
        assert f"{element}: Invalid value" in message, message


def _generic(problem: str) -> str:
    """A validate line about candidates[k] in the words of the CEL rule, which names no element: candidates[i]."""
    return re.sub(r"candidates\[\d+\]", "candidates[i]", problem)


def _status_with_a_candidate(verdict: str) -> dict[str, Any]:
    figures = {"outputTokensPerSecond": 812.5, "meanBatchSize": 11.2, "acceptanceRate": 0.41, "p99TpotMs": 31.0}
    return {
        "effective": {"speculation": True, "configHash": "0123456789ab", "drafter": "meta-llama/Llama-3.2-1B-Instruct"},
        "candidates": [
            {
                "name": "ngram",
                "method": "ngram",
                "drafter": "ngram",
                "numSpeculativeTokens": 3,
                "verdict": verdict,
                "candidate": {**figures, "requests": 240},
                "incumbent": {**figures, "outputTokensPerSecond": 1010.0, "requests": 480},
                "speedup": 0.8,
                "evidenceTime": "2026-11-29T08:00:00Z",
            }
        ],
    }


def _patch_status(cluster: KubeCluster, namespace: str, name: str, status: dict[str, Any]) -> str | None:
    """Merge `status` through the status subresource; None if the API server took it, else its message."""
    patch = json.dumps({"status": status})
    args = ("-n", namespace, "patch", "specdeploy", name, "--subresource=status", "--type=merge", "-p", patch)
    done = cluster.kubectl(*args, check=False)
    return None if done.returncode == 0 else done.stderr


def test_status_candidates_are_typed_and_kubectl_get_shows_the_drafter(
    kube_cluster: KubeCluster, dynamic: DynamicClient, namespace: str
) -> None:
    """A stored object, not a dry run: the status subresource keeps typed candidates, refuses an unknown verdict, and
    `kubectl get` prints the DRAFTER column from status.effective.drafter."""
    name = f"drafter-{secrets.token_hex(3)}"
    spec = hygiene.with_("speculation.candidates", [hygiene.NGRAM_CANDIDATE])
    for _ in range(3):
        _CRD[0].ensure()
        kube_cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(cr(spec, name=name)))
        assert _patch_status(kube_cluster, namespace, name, _status_with_a_candidate("Lost")) is None
        table = kube_cluster.kubectl("-n", namespace, "get", "specdeploy", name).stdout
        stored = kube_cluster.kubectl_json("-n", namespace, "get", "specdeploy", name)
        refusal = _patch_status(kube_cluster, namespace, name, _status_with_a_candidate("Maybe"))
        if _CRD[0].live_is_mine():  # every answer came from this tree's CRD
            break
    header, row = table.splitlines()[:2]
    assert "DRAFTER" in header.split(), table
    assert "meta-llama/Llama-3.2-1B-Instruct" in row.split(), table
    [candidate] = stored["status"]["candidates"]
    assert (candidate["verdict"], candidate["speedup"], candidate["incumbent"]["requests"]) == ("Lost", 0.8, 480)
    assert refusal is not None, "an unknown verdict is refused"
    assert "status.candidates[0].verdict" in refusal, refusal
    kube_cluster.kubectl("-n", namespace, "delete", "specdeploy", name, "--wait=false")


def test_a_status_patch_for_a_deleted_object_never_lands_on_its_same_name_successor(
    kube_cluster: KubeCluster, dynamic: DynamicClient, namespace: str
) -> None:
    """A decision made from one object is not written to another created since under the same name: the status
    patch carries the resourceVersion it was decided from, which no successor can have (the UID in a status patch is
    not a precondition: the status strategy keeps the stored metadata, shown here first)."""
    name = f"uid-{secrets.token_hex(3)}"
    kube = KubeAdapter(dynamic.client)
    api_version = f"{v1alpha1.GROUP}/{v1alpha1.VERSION}"

    def create() -> tuple[str, str]:
        _CRD[0].ensure()
        kube_cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(cr(hygiene.BASE, name=name)))
        meta = kube_cluster.kubectl_json("-n", namespace, "get", "specdeploy", name)["metadata"]
        return str(meta["uid"]), str(meta["resourceVersion"])

    def replace_object() -> None:
        kube_cluster.kubectl("-n", namespace, "delete", "specdeploy", name, "--wait=true")
        assert create()[0] != first_uid

    def observed_generation() -> Any:
        return (
            kube_cluster.kubectl_json("-n", namespace, "get", "specdeploy", name)
            .get("status", {})
            .get("observedGeneration")
        )

    first_uid, first_version = create()
    written = kube.patch_status(
        api_version, v1alpha1.KIND, namespace, name, {"observedGeneration": 1}, resource_version=first_version
    )
    assert written is not None, "the patch over the live version is written"
    assert written[1]["observedGeneration"] == 1
    replace_object()
    uid_only = {"metadata": {"uid": first_uid}, "status": {"observedGeneration": 5}}
    kube_cluster.kubectl(
        "-n", namespace, "patch", "specdeploy", name, "--subresource=status", "--type=merge", "-p", json.dumps(uid_only)
    )
    assert observed_generation() == 5, "a UID in a status patch is ignored: it cannot guard the write"
    replace_object()
    with pytest.raises(StaleStatus):
        kube.patch_status(
            api_version, v1alpha1.KIND, namespace, name, {"observedGeneration": 7}, resource_version=written[0]
        )
    assert observed_generation() != 7
    kube_cluster.kubectl("-n", namespace, "delete", "specdeploy", name, "--wait=false")


def _with_metadata(metadata: dict[str, Any], namespace: str) -> tuple[dict[str, Any], str]:
    """The object that carries `metadata` to the API server, and the word its refusal must name.

    A namespace is tried as the name of a Namespace (the request's namespace must match an object's own)."""
    if "namespace" in metadata:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": metadata["namespace"]}}, "name"
    body = cr(hygiene.BASE, name="meta")
    body["metadata"].update(metadata)
    return body, next(iter(metadata))


@pytest.mark.parametrize(
    ("metadata", "_problem"), hygiene.METADATA_REFUSALS, ids=[p.split(":")[0] for _, p in hygiene.METADATA_REFUSALS]
)
def test_the_api_server_refuses_the_metadata_validate_refuses(
    dynamic: DynamicClient, namespace: str, metadata: dict[str, Any], _problem: str
) -> None:
    assert hygiene.metadata_refusals(metadata), "validate refuses it"
    body, field = _with_metadata(metadata, namespace)
    message = dry_run(dynamic, body, namespace)
    assert message is not None, "the API server refuses it too"
    assert field.lower() in message.lower(), f"refused for another reason: {message}"


@pytest.mark.parametrize("metadata", hygiene.METADATA_ACCEPTED, ids=[",".join(m) for m in hygiene.METADATA_ACCEPTED])
def test_the_api_server_accepts_the_metadata_validate_accepts(
    dynamic: DynamicClient, namespace: str, metadata: dict[str, Any]
) -> None:
    assert hygiene.metadata_refusals(metadata) == []
    body, _ = _with_metadata(metadata, namespace)
    assert dry_run(dynamic, body, namespace) is None


@pytest.mark.parametrize(("text", "_value"), hygiene.QUANTITIES, ids=[repr(t) for t, _ in hygiene.QUANTITIES])
def test_quantities_parse_like_the_api_server(
    dynamic: DynamicClient, namespace: str, text: str, _value: object
) -> None:
    """ParseQuantity (a Pod's cpu limit: parses and >= 0) and CEL's isQuantity (the CRD's cpu: parses and > 0)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "quantity"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": text}}}]},
    }
    pod_refusal = dry_run(dynamic, pod, namespace)
    # Quantity.UnmarshalJSON trims spaces before ParseQuantity: " 1" is a valid cpu in a Pod (not in CEL, below)
    try:
        trimmed: Any = parse_quantity(text.strip())
    except InvalidQuantity:
        trimmed = None
    assert (pod_refusal is None) == (trimmed is not None and trimmed >= 0), pod_refusal
    crd_refusal = dry_run(dynamic, cr(hygiene.with_("resources.cpu", text)), namespace)
    assert (crd_refusal is None) == is_positive_quantity(text), crd_refusal


# ------------------------------------------------------------------------------------------------------- chart


def helm_template(kube_cluster: KubeCluster, release: str, namespace: str, *sets: str) -> list[dict[str, Any]]:
    args = [
        str(kube_cluster.bin_dir / "helm"),
        "template",
        release,
        str(ROOT / "charts" / "specpilot"),
        "--namespace",
        namespace,
    ]
    for item in sets:
        args += ["--set-json", item]
    out = subprocess.run(args, capture_output=True, text=True, check=True, env=dict(kube_cluster.env)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_chart_rbac_reads_no_secrets_and_writes_the_connections_the_operator_loads(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    connections = {
        "monitoring": {
            "url": "https://prometheus.monitoring.svc:9090",
            "secretName": "prom-reader",
            "namespaces": ["ml"],
            "headers": {"X-Scope-OrgID": "ml"},
        },
        "public": {"url": "http://prometheus.public:9090"},
    }
    for watch in ("[]", '["ml", "chat"]'):
        objects = helm_template(
            kube_cluster,
            "sp",
            "specpilot-system",
            f"watchNamespaces={watch}",
            f"prometheusConnections={json.dumps(connections)}",
        )
        rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
        assert rules
        assert not [r for r in rules if "secrets" in r["resources"]], "no Secret access at all"
    configmap = next(
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "sp-specpilot-prometheus"
    )
    path = tmp_path / "connections.json"
    path.write_text(configmap["data"]["connections.json"])
    registry = Registry.load(path)
    assert set(registry.connections) == {"monitoring", "public"}
    assert registry.connections["monitoring"].namespaces == ["ml"]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["prometheus-monitoring"] == registry.connections["monitoring"].credentials_dir
    assert registry.connections["public"].credentials_dir is None
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"prom-reader"}
    assert "--prometheus-connections=/etc/specpilot/config/connections.json" in pod["containers"][0]["args"]


def test_chart_refuses_credentials_over_plain_http_at_start_up(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    objects = helm_template(
        kube_cluster,
        "sp",
        "specpilot-system",
        'prometheusConnections={"m": {"url": "http://p:9090", "secretName": "s"}}',
    )
    configmap = next(o for o in objects if o["metadata"]["name"] == "sp-specpilot-prometheus")
    path = tmp_path / "connections.json"
    path.write_text(configmap["data"]["connections.json"])
    from specpilot.cli.main import main

    assert main(["run", "--prometheus-connections", str(path)]) == 1


@pytest.fixture
def image_policy(kube_cluster: KubeCluster, namespace: str) -> Iterator[str]:
    release = f"vap-{namespace[-6:]}"
    objects = helm_template(
        kube_cluster,
        release,
        "specpilot-system",
        "imagePolicy.enabled=true",
        f"watchNamespaces={json.dumps([namespace])}",
        'imagePolicy.allowedPrefixes=["registry.example.com/vllm/"]',
    )
    policy = [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [o["kind"] for o in policy] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": policy})
    kube_cluster.kubectl("apply", "-f", "-", stdin=manifest)
    try:
        yield release
    finally:
        kube_cluster.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=manifest)


def test_image_policy_admits_only_allowed_prefixes(
    kube_cluster: KubeCluster, namespace: str, image_policy: str
) -> None:
    spec = hygiene.with_("engine.image", "docker.io/attacker/miner:latest")
    denied = None
    deadline = time.monotonic() + 30
    while denied is None and time.monotonic() < deadline:  # policies take a moment to be loaded
        proc = kube_cluster.kubectl(
            "-n", namespace, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(cr(spec)), check=False
        )
        denied = proc.stderr if proc.returncode else None
        if denied is None:
            time.sleep(0.5)
    assert denied is not None, "the policy never refused the image"
    assert "spec.engine.image docker.io/attacker/miner:latest is not allowed" in denied
    assert "registry.example.com/vllm/" in denied
    lookalike = hygiene.with_("engine.image", "registry.example.com/vllm-evil/x:1")
    proc = kube_cluster.kubectl(
        "-n", namespace, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(cr(lookalike)), check=False
    )
    assert proc.returncode != 0
    allowed = hygiene.with_("engine.image", "registry.example.com/vllm/vllm-openai:v0.33.0")
    kube_cluster.kubectl("-n", namespace, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(cr(allowed)))
    # the binding selects this namespace only: other tests sharing the cluster are not affected
    binding = kube_cluster.kubectl_json("get", "validatingadmissionpolicybinding", f"{image_policy}-specpilot-images")
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == [namespace]


def test_rendered_chart_passes_a_server_side_dry_run(kube_cluster: KubeCluster, namespace: str) -> None:
    objects = helm_template(
        kube_cluster,
        "dry",
        namespace,
        "imagePolicy.enabled=true",
        f"watchNamespaces={json.dumps([namespace])}",
        'prometheusConnections={"m": {"url": "https://p:9090", "secretName": "s"}}',
    )
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    kube_cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=manifest)


def test_vendored_openapi_schemas_are_the_pinned_kubernetes_ones(kube_cluster: KubeCluster) -> None:
    """tests/unit/test_children_openapi.py checks children offline against this copy: it must be current."""
    from e2e.toolchain import k8s_openapi

    assert k8s_openapi.VENDORED.read_text() == k8s_openapi.render(k8s_openapi.spec_dir()), (
        "run `uv run python -m e2e.toolchain.k8s_openapi`"
    )
