"""The operator against the real API server: create, update, no-op, delete, invalid and non-fitting CRs, restart."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from e2e.cluster.fixture import KubeCluster
from e2e.waiting import wait_for
from tests.operator.conftest import StartOperator

pytestmark = pytest.mark.cluster


def speculative_deployment(name: str, **spec_changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": 2,
        "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxModelLen": 8192, "maxNumSeqs": 64},
        "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {
            "method": "draft_model",
            "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
            "numSpeculativeTokens": 4,
        },
        "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
    }
    spec.update(spec_changes)
    return {
        "apiVersion": "specpilot.dev/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }


def apply(cluster: KubeCluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(doc))


def get(cluster: KubeCluster, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    """The object, or None when kubectl fails. A failure other than NotFound is tried twice more first: on a busy
    2-core CI machine one `kubectl get` failed while the object existed, and a test waiting on it read "missing"."""
    for attempt in range(3):
        proc = cluster.kubectl("-n", namespace, "get", kind, name, "-o", "json", check=False)
        if proc.returncode == 0:
            return dict(json.loads(proc.stdout))
        if "NotFound" in (proc.stderr or "") or attempt == 2:
            return None
        time.sleep(1)
    return None


def resource_version(cluster: KubeCluster, namespace: str, kind: str, name: str = "llama") -> str:
    obj = get(cluster, namespace, kind, name)
    assert obj is not None, f"{kind}/{name} is missing"
    return str(obj["metadata"]["resourceVersion"])


def condition(obj: dict[str, Any] | None, ctype: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions", []):
        if c["type"] == ctype:
            return dict(c)
    return {}


def events(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json("-n", namespace, "get", "events", "--field-selector", f"involvedObject.name={name}")
    return list(items["items"])


def ready_and_settled(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj = get(cluster, namespace, "specdeploy", name)
    settled = (
        condition(obj, "Ready").get("status") == "True"
        and condition(obj, "Progressing").get("reason") == "RolloutCompleted"
    )
    return obj if settled else None


def test_create_builds_children_with_owner_refs_and_status(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    operator = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("llama"))
    deployment = wait_for("Deployment", lambda: get(kube_cluster, kube_namespace, "deployment", "llama"))
    service = wait_for(
        "Service (applied after the Deployment)", lambda: get(kube_cluster, kube_namespace, "service", "llama")
    )
    cr = get(kube_cluster, kube_namespace, "specdeploy", "llama")
    assert cr is not None
    for child in (deployment, service):
        ref = child["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("SpeculativeDeployment", cr["metadata"]["uid"], True)
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    spec_config = json.loads(command[command.index("--speculative-config") + 1])
    assert spec_config["method"] == "draft_model"
    assert spec_config["num_speculative_tokens"] == 4
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # kwok runs the pods on fake GPU nodes; the operator follows the rollout to Ready
    cr = wait_for("Ready and RolloutCompleted", lambda: ready_and_settled(kube_cluster, kube_namespace, "llama"), 90)
    status = cr["status"]
    assert status["observedGeneration"] == cr["metadata"]["generation"]
    assert status["effective"]["speculation"] is True
    assert (
        status["effective"]["configHash"]
        == deployment["spec"]["template"]["metadata"]["labels"]["specpilot.dev/config-hash"]
    )
    assert status["memory"]["fits"] is True
    assert {c["type"] for c in status["conditions"]} >= {
        "Ready",
        "Progressing",
        "Degraded",
        "MemoryFit",
        "SpeculationActive",
        "MetricsAvailable",
        "Throttled",
        "Paused",
    }
    # no spec.autotune.prometheus: the idle conditions say why autotune cannot run (the cadence kept per generation)
    assert (condition(cr, "MetricsAvailable")["status"], condition(cr, "MetricsAvailable")["reason"]) == (
        "Unknown",
        "NoPrometheus",
    )
    # ... and so do the seed framework's conditions, judged from the same measurements
    for framework in ("QuantizationPenalty", "AcceptanceMethod", "ShortOutputs", "MixedWorkload"):
        assert (condition(cr, framework)["status"], condition(cr, framework)["reason"]) == ("Unknown", "NoPrometheus")
    # the reconcile posts its events after the status write the wait above saw
    reasons = wait_for(
        "RolloutCompleted event",
        lambda: (
            (r := [e["reason"] for e in events(kube_cluster, kube_namespace, "llama")]).count("RolloutCompleted") and r
        ),
        30,
    )
    assert reasons.count("RolloutStarted") == 1
    assert reasons.count("RolloutCompleted") == 1
    assert operator.writes("Deployment") == 1
    printed = kube_cluster.kubectl("-n", kube_namespace, "get", "specdeploy", "llama").stdout
    assert "Recommend" in printed
    assert "True" in printed


def test_update_rolls_once_and_noop_update_writes_nothing(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    operator = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("llama"))
    wait_for("settled", lambda: ready_and_settled(kube_cluster, kube_namespace, "llama"), 90)
    before = get(kube_cluster, kube_namespace, "deployment", "llama")
    assert before is not None
    writes_before = operator.writes()

    # a change that does not touch the vLLM command line: no Deployment write, no rollout
    apply(kube_cluster, kube_namespace, speculative_deployment("llama", autotune={"interval": "2m"}))
    wait_for(
        "observedGeneration 2",
        lambda: (
            (get(kube_cluster, kube_namespace, "specdeploy", "llama") or {}).get("status", {}).get("observedGeneration")
            == 2
        ),
    )
    time.sleep(5)  # two ticks of the timer
    same = get(kube_cluster, kube_namespace, "deployment", "llama")
    assert same is not None
    assert same["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert operator.writes() == writes_before + 1  # only the status patch that records observedGeneration 2

    # a change of K changes the command line: exactly one Deployment write, one new ReplicaSet
    spec = speculative_deployment("llama")
    spec["spec"]["speculation"]["numSpeculativeTokens"] = 3
    apply(kube_cluster, kube_namespace, spec)
    wait_for(
        "new config rolled out",
        lambda: (
            (d := get(kube_cluster, kube_namespace, "deployment", "llama"))
            and d["metadata"]["generation"] == before["metadata"]["generation"] + 1
        ),
    )
    wait_for("settled again", lambda: ready_and_settled(kube_cluster, kube_namespace, "llama"), 90)
    assert operator.writes("Deployment") == 2
    replicasets = kube_cluster.kubectl_json(
        "-n", kube_namespace, "get", "replicasets", "-l", "specpilot.dev/deployment=llama"
    )
    assert len(replicasets["items"]) == 2

    # idle: nothing is written while nothing changes
    idle_writes = operator.writes()
    versions = {
        k: (get(kube_cluster, kube_namespace, k, "llama") or {})["metadata"]["resourceVersion"]
        for k in ("specdeploy", "deployment", "service", "pdb")
    }
    time.sleep(8)
    assert operator.writes() == idle_writes
    assert versions == {
        k: (get(kube_cluster, kube_namespace, k, "llama") or {})["metadata"]["resourceVersion"] for k in versions
    }


def test_delete_garbage_collects_children_and_leaves_no_finalizer(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    """No finalizer at any time: an object goes at once even while no operator runs (an uninstall, a namespace being
    deleted), and its children go by garbage collection."""
    operator = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("llama"))
    wait_for("Deployment", lambda: get(kube_cluster, kube_namespace, "deployment", "llama"))
    obj = get(kube_cluster, kube_namespace, "specdeploy", "llama")
    assert obj is not None
    assert not obj["metadata"].get("finalizers")
    operator.stop()
    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "llama", "--timeout=30s")
    assert get(kube_cluster, kube_namespace, "specdeploy", "llama") is None
    wait_for(
        "children garbage-collected",
        lambda: all(get(kube_cluster, kube_namespace, k, "llama") is None for k in ("deployment", "service", "pdb")),
        60,
    )


def test_an_object_holding_the_finalizer_of_older_versions_is_released(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    """Earlier specpilot versions held every object with a finalizer (for their periodic timer); after an upgrade the
    first event of each object removes it, once, and the object is reconciled as usual."""
    doc = speculative_deployment("llama")
    doc["metadata"]["finalizers"] = ["specpilot.dev/finalizer"]
    apply(kube_cluster, kube_namespace, doc)
    operator = start_operator()
    wait_for("Deployment", lambda: get(kube_cluster, kube_namespace, "deployment", "llama"))
    wait_for(
        "finalizer removed",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "llama")) is not None
            and not o["metadata"].get("finalizers")
        ),
        60,
    )
    operator.stop()
    kube_cluster.kubectl("-n", kube_namespace, "delete", "specdeploy", "llama", "--timeout=30s")
    assert get(kube_cluster, kube_namespace, "specdeploy", "llama") is None


def test_invalid_and_non_fitting_resources_get_conditions_and_events(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    start_operator()
    too_big = speculative_deployment("too-big", target={"model": "meta-llama/Llama-3.1-70B-Instruct"})
    apply(kube_cluster, kube_namespace, too_big)
    # draft TP 2 with target TP 1 passes the schema (1 or target TP is checked against TP 1 * ... ) but not vLLM's rule
    unknown = speculative_deployment(
        "old-engine",
        speculation={
            "method": "draft_model",
            "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
            "numSpeculativeTokens": 4,
        },
        engine={"image": "vllm/vllm-openai:v0.12.0", "version": "0.12.0"},
    )
    apply(kube_cluster, kube_namespace, unknown)

    big = wait_for(
        "MemoryFit=False",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "too-big"))
            and condition(o, "MemoryFit").get("status") == "False"
            and o
        ),
    )
    assert "GiB" in condition(big, "MemoryFit")["message"]
    assert condition(big, "Ready")["reason"] == "MemoryDoesNotFit"
    assert get(kube_cluster, kube_namespace, "deployment", "too-big") is None
    big_events = events(kube_cluster, kube_namespace, "too-big")
    assert [(e["type"], e["reason"]) for e in big_events] == [("Warning", "MemoryDoesNotFit")]

    old = wait_for(
        "InvalidSpec",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "old-engine"))
            and condition(o, "Ready").get("reason") == "InvalidSpec"
            and o
        ),
    )
    assert (
        "spec.speculation.method" in condition(old, "Ready")["message"]
        or "spec.engine" in condition(old, "Ready")["message"]
    )
    assert get(kube_cluster, kube_namespace, "deployment", "old-engine") is None
    assert ("Warning", "InvalidSpec") in [
        (e["type"], e["reason"]) for e in events(kube_cluster, kube_namespace, "old-engine")
    ]


def test_a_candidate_that_cannot_run_is_refused_and_good_candidates_deploy_showing_the_drafter(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    """The real operator: a candidate draft of another tokenizer family refuses the object (Ready=False, InvalidSpec,
    naming spec.speculation.candidates[1]) and creates nothing; usable candidates deploy the declared drafter, which
    status.effective.drafter and `kubectl get`'s DRAFTER column show."""
    start_operator()
    ngram = {"name": "ngram", "method": "ngram", "numSpeculativeTokens": 3}
    qwen = {"name": "qwen", "method": "draft_model", "numSpeculativeTokens": 4, "draft": {"model": "Qwen/Qwen3-0.6B"}}
    declared = {
        "method": "draft_model",
        "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
        "numSpeculativeTokens": 4,
    }
    apply(
        kube_cluster,
        kube_namespace,
        speculative_deployment("mixed", speculation={**declared, "candidates": [ngram, qwen]}),
    )
    apply(kube_cluster, kube_namespace, speculative_deployment("good", speculation={**declared, "candidates": [ngram]}))

    mixed = wait_for(
        "InvalidSpec",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "mixed"))
            and condition(o, "Ready").get("reason") == "InvalidSpec"
            and o
        ),
    )
    message = condition(mixed, "Ready")["message"]
    assert message.startswith("spec.speculation.candidates[1].draft.model: draft Qwen/Qwen3-0.6B uses the"), message
    assert condition(mixed, "MemoryFit")["status"] == "True", "the declared drafter fits"
    assert ("Warning", "InvalidSpec") in [
        (e["type"], e["reason"]) for e in events(kube_cluster, kube_namespace, "mixed")
    ]

    wait_for("Deployment", lambda: get(kube_cluster, kube_namespace, "deployment", "good"))
    good = wait_for(
        "effective.drafter",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "good"))
            and (o.get("status") or {}).get("effective", {}).get("drafter")
            and o
        ),
    )
    assert good["status"]["effective"]["drafter"] == "meta-llama/Llama-3.2-1B-Instruct"
    table = kube_cluster.kubectl("-n", kube_namespace, "get", "specdeploy", "good").stdout
    assert "meta-llama/Llama-3.2-1B-Instruct" in table.splitlines()[1].split(), table
    assert get(kube_cluster, kube_namespace, "deployment", "mixed") is None, "the refused object got no Deployment"


def test_api_server_rejects_cel_violations_with_the_field_message(
    kube_cluster: KubeCluster, kube_namespace: str, crd_installed: None
) -> None:
    doc = speculative_deployment("bad", speculation={"method": "draft_model", "numSpeculativeTokens": 4})
    proc = kube_cluster.kubectl("-n", kube_namespace, "apply", "-f", "-", stdin=json.dumps(doc), check=False)
    assert proc.returncode != 0
    assert "spec.speculation.draft is required when spec.speculation.method is draft_model" in proc.stderr
    doc = speculative_deployment("bad", autotune={"acceptance": {"disableBelow": 0.7, "enableAbove": 0.6}})
    proc = kube_cluster.kubectl("-n", kube_namespace, "apply", "-f", "-", stdin=json.dumps(doc), check=False)
    assert "enableAbove must be greater than" in proc.stderr
    doc = speculative_deployment("bad", replicas=1, autotune={"canary": {"enabled": True}})
    proc = kube_cluster.kubectl("-n", kube_namespace, "apply", "-f", "-", stdin=json.dumps(doc), check=False)
    assert "spec.autotune.canary.enabled needs spec.replicas >= 2" in proc.stderr


def pods_by_owner(cluster: KubeCluster, namespace: str, selector: str) -> dict[str, dict[str, Any]]:
    """Running pods matching a label selector, by pod name."""
    listing = cluster.kubectl_json("-n", namespace, "get", "pods", "-l", selector)
    return {p["metadata"]["name"]: p for p in listing["items"] if p["status"].get("phase") == "Running"}


def test_canary_replica_runs_the_other_mode_behind_the_same_service(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    start_operator()
    autotune = {"mode": "Recommend", "prometheus": {"url": "http://127.0.0.1:9"}, "canary": {"enabled": True}}
    apply(kube_cluster, kube_namespace, speculative_deployment("llama", replicas=3, autotune=autotune))
    canary = wait_for("canary Deployment", lambda: get(kube_cluster, kube_namespace, "deployment", "llama-canary"))
    main = get(kube_cluster, kube_namespace, "deployment", "llama")
    assert main is not None
    assert (main["spec"]["replicas"], canary["spec"]["replicas"]) == (2, 1)
    main_command = main["spec"]["template"]["spec"]["containers"][0]["command"]
    canary_command = canary["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--speculative-config" in main_command
    assert "--speculative-config" not in canary_command
    cr = get(kube_cluster, kube_namespace, "specdeploy", "llama")
    assert cr is not None
    assert canary["metadata"]["ownerReferences"][0]["uid"] == cr["metadata"]["uid"]

    # the Service's selector takes all three pods; each Deployment's ReplicaSet owns only its own
    service = wait_for(
        "Service (applied after the Deployments)", lambda: get(kube_cluster, kube_namespace, "service", "llama")
    )
    selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
    serving = wait_for(
        "three running pods behind the Service",
        lambda: (pods := pods_by_owner(kube_cluster, kube_namespace, selector)) and len(pods) == 3 and pods,
        90,
    )
    canary_hash = canary["spec"]["template"]["metadata"]["labels"]["specpilot.dev/config-hash"]
    by_hash: dict[str, list[str]] = {}
    for pod in serving.values():
        by_hash.setdefault(pod["metadata"]["labels"]["specpilot.dev/config-hash"], []).append(pod["metadata"]["name"])
        owners = [o for o in pod["metadata"]["ownerReferences"] if o.get("controller")]
        assert [o["kind"] for o in owners] == ["ReplicaSet"]
    assert sorted(len(names) for names in by_hash.values()) == [1, 2]
    assert len(by_hash[canary_hash]) == 1

    settled = wait_for(
        "status reports the canary ready",
        lambda: (
            (o := get(kube_cluster, kube_namespace, "specdeploy", "llama"))
            and ((o.get("status") or {}).get("effective") or {}).get("canary", {}).get("readyReplicas") == 1
            and condition(o, "Progressing").get("reason") == "RolloutCompleted"
            and o
        ),
        90,
    )
    assert settled["status"]["effective"]["canary"]["configHash"] == canary_hash
    assert settled["status"]["effective"]["canary"]["speculation"] is False

    # switching the canary off removes it and gives its replica back to the main Deployment
    autotune["canary"] = {"enabled": False}
    apply(kube_cluster, kube_namespace, speculative_deployment("llama", replicas=3, autotune=autotune))
    wait_for("canary deleted", lambda: get(kube_cluster, kube_namespace, "deployment", "llama-canary") is None, 60)
    wait_for(
        "main Deployment back to 3 replicas",
        lambda: (d := get(kube_cluster, kube_namespace, "deployment", "llama")) and d["spec"]["replicas"] == 3,
        30,
    )


def test_operator_restart_recreates_and_rolls_nothing(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    first = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("llama"))
    wait_for("settled", lambda: ready_and_settled(kube_cluster, kube_namespace, "llama"), 90)
    before = {k: get(kube_cluster, kube_namespace, k, "llama") for k in ("deployment", "service", "pdb")}
    first.stop()
    second = start_operator()
    time.sleep(8)  # resume handlers and several timer ticks
    after = {k: get(kube_cluster, kube_namespace, k, "llama") for k in before}
    for kind, obj in before.items():
        now = after[kind]
        assert obj is not None
        assert now is not None
        assert now["metadata"]["uid"] == obj["metadata"]["uid"], f"{kind} was recreated"
        assert now["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"], f"{kind} was written"
    assert second.writes() == 0


def test_foreign_metadata_is_tolerated_and_owned_drift_is_repaired(
    kube_cluster: KubeCluster, kube_namespace: str, start_operator: StartOperator
) -> None:
    operator = start_operator()
    apply(kube_cluster, kube_namespace, speculative_deployment("llama"))
    wait_for("settled", lambda: ready_and_settled(kube_cluster, kube_namespace, "llama"), 90)
    # another tool labels and annotates our children: never removed, never fought over
    for kind in ("deployment", "service"):
        kube_cluster.kubectl("-n", kube_namespace, "label", kind, "llama", "team.example.com/owner=search")
        kube_cluster.kubectl("-n", kube_namespace, "annotate", kind, "llama", "example.com/audit=ok")
    writes = {k: v for k, v in operator.metrics().items() if k.startswith("specpilot_api_writes_total")}
    time.sleep(6)
    assert {k: v for k, v in operator.metrics().items() if k.startswith("specpilot_api_writes_total")} == writes
    for kind in ("deployment", "service"):
        obj = get(kube_cluster, kube_namespace, kind, "llama")
        assert obj is not None
        assert obj["metadata"]["labels"]["team.example.com/owner"] == "search"
        assert obj["metadata"]["annotations"]["example.com/audit"] == "ok"
    # a field we own is changed behind our back: the next tick puts it back, keeping the foreign label
    kube_cluster.kubectl("-n", kube_namespace, "scale", "deployment", "llama", "--replicas=5")
    wait_for(
        "replicas restored to 2",
        lambda: (d := get(kube_cluster, kube_namespace, "deployment", "llama")) and d["spec"]["replicas"] == 2,
        30,
    )
    restored = get(kube_cluster, kube_namespace, "deployment", "llama")
    assert restored is not None
    assert restored["metadata"]["labels"]["team.example.com/owner"] == "search"
