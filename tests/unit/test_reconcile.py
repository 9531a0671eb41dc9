"""The pure reconcile: what to apply, what status to write, which events to post — table by table, no mocks."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from specpilot.api import v1alpha1
from specpilot.autotune.policy.state import PolicyState, spec_fingerprints
from specpilot.reconcile import conditions as cond
from specpilot.reconcile import core as rec
from specpilot.vllm.intent import intent_from_spec
from tests.seams import apply_merge_patch, reconcile_chosen

BASE_SPEC: dict[str, Any] = {
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


def spec_with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE_SPEC)
    for dotted, value in changes.items():
        node = spec
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return spec


def inputs(spec: dict[str, Any], **kw: Any) -> rec.ReconcileInputs:
    defaults: dict[str, Any] = {
        "name": "llama",
        "namespace": "inference",
        "uid": "uid-1",
        "generation": 1,
        "annotations": {},
        "spec": spec,
        "status": {},
        "now": "2026-11-26T00:00:00Z",
    }
    defaults.update(kw)
    return rec.ReconcileInputs(**defaults)


def settled_deployment(result: rec.ReconcileResult, replicas: int = 2, **kw: Any) -> rec.ObservedDeployment:
    deployment = next(c for c in result.apply if c["kind"] == "Deployment")
    values: dict[str, Any] = {
        "generation": 1,
        "observed_generation": 1,
        "replicas": replicas,
        "updated_replicas": replicas,
        "ready_replicas": replicas,
        "available_replicas": replicas,
        "template_config_hash": deployment["spec"]["template"]["metadata"]["annotations"]["specpilot.dev/config-hash"],
        "applied_hash": deployment["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH],
        "progress_deadline_exceeded": False,
    }
    values.update(kw)
    return rec.ObservedDeployment(**values)


def live_of(result: rec.ReconcileResult) -> dict[str, str | None]:
    return {rec.child_key(c): c["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH] for c in result.apply}


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    found = cond.find(status["conditions"], ctype)
    assert found is not None, ctype
    return found


def converge(spec: dict[str, Any]) -> tuple[rec.ReconcileResult, rec.ReconcileInputs]:
    """Create, then observe the rollout finished: the steady state of a healthy object."""
    created = reconcile_chosen(inputs(spec))
    assert created.status_patch is not None
    steady_inputs = inputs(
        spec, status=created.status_patch, live_children=live_of(created), deployment=settled_deployment(created)
    )
    return reconcile_chosen(steady_inputs), steady_inputs


def test_reconcile_new_object_applies_deployment_and_service_and_starts_rollout() -> None:
    result = reconcile_chosen(inputs(BASE_SPEC))
    assert [c["kind"] for c in result.apply] == ["Deployment", "Service", "PodDisruptionBudget"]
    assert result.status_patch is not None
    assert result.status_patch["observedGeneration"] == 1
    assert condition(result.status_patch, cond.PROGRESSING)["reason"] == "RolloutStarted"
    assert condition(result.status_patch, cond.READY)["status"] == "False"
    assert condition(result.status_patch, cond.MEMORY_FIT)["status"] == "True"
    assert {c["type"] for c in result.status_patch["conditions"]} >= set(cond.CONDITION_TYPES)
    assert [e.reason for e in result.events] == ["RolloutStarted"]
    effective = result.status_patch["effective"]
    assert effective["speculation"] is True
    assert effective["configHash"] == result.rendered.config_hash if result.rendered else False


def test_reconcile_completes_rollout_then_goes_quiet() -> None:
    steady, steady_inputs = converge(BASE_SPEC)
    assert steady.apply == []
    assert steady.status_patch is not None
    assert condition(steady.status_patch, cond.READY)["reason"] == "Available"
    assert condition(steady.status_patch, cond.PROGRESSING)["reason"] == "RolloutCompleted"
    assert [e.reason for e in steady.events] == ["RolloutCompleted"]
    # the same observation again: nothing to write, nothing to say
    again = reconcile_chosen(
        inputs(
            BASE_SPEC,
            status=steady.status_patch,
            live_children=steady_inputs.live_children,
            deployment=steady_inputs.deployment,
            now="2026-11-26T01:00:00Z",
        )
    )
    assert (again.apply, again.status_patch, again.events) == ([], None, [])


@pytest.mark.parametrize(
    ("change", "rolls"),
    [
        ({"speculation__numSpeculativeTokens": 3}, True),
        ({"engine__maxNumSeqs": 128}, True),
        ({"speculation__enabled": False}, True),
        ({"autotune__interval": "2m"}, False),
        ({"autotune__acceptance": {"disableBelow": 0.4, "enableAbove": 0.6}}, False),
        ({"engine__image": "registry.example.com/vllm/vllm-openai:v0.33.0"}, True),
    ],
)
def test_reconcile_rolls_only_when_the_pod_template_changes(change: dict[str, Any], rolls: bool) -> None:
    steady, steady_inputs = converge(BASE_SPEC)
    assert steady.status_patch is not None
    changed = reconcile_chosen(
        inputs(
            spec_with(**change),
            generation=2,
            status=steady.status_patch,
            live_children=steady_inputs.live_children,
            deployment=steady_inputs.deployment,
        )
    )
    assert ("Deployment" in [c["kind"] for c in changed.apply]) == rolls
    assert changed.status_patch is not None  # observedGeneration moves either way
    assert changed.status_patch["observedGeneration"] == 2
    assert (condition(changed.status_patch, cond.PROGRESSING)["status"] == "True") == rolls


def test_reconcile_invalid_spec_sets_condition_and_applies_nothing() -> None:
    bad = spec_with(speculation={"method": "draft_model", "numSpeculativeTokens": 4})
    result = reconcile_chosen(inputs(bad))
    assert result.apply == []
    assert result.status_patch is not None
    ready = condition(result.status_patch, cond.READY)
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.speculation.draft is required" in ready["message"]
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "InvalidSpec")]


@pytest.mark.parametrize(
    ("image", "version", "applies"),
    [
        ("vllm/vllm-openai:v0.32.0", "0.33.0", False),
        ("vllm/vllm-openai:v0.33.0rc1", "0.33.0", False),
        ("vllm/vllm-openai:v0.33.0", "0.33.0", True),
        ("registry.example.com:5000/vllm/vllm-openai:0.33.0-cu128", "0.33.0", True),
        ("vllm/vllm-openai:latest", "0.32.0", True),
        ("registry.example.com:5000/vllm@sha256:" + "a" * 64, "0.32.0", True),
    ],
)
def test_reconcile_refuses_an_image_tag_naming_another_vllm_version(image: str, version: str, applies: bool) -> None:
    """The command line is rendered for spec.engine.version; an image tag naming another release would run it."""
    result = reconcile_chosen(inputs(spec_with(engine={**BASE_SPEC["engine"], "image": image, "version": version})))
    assert ("Deployment" in [c["kind"] for c in result.apply]) == applies
    assert result.status_patch is not None
    ready = condition(result.status_patch, cond.READY)
    if not applies:
        assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
        assert ready["message"].startswith("spec.engine.image: the tag "), ready["message"]
        assert f"spec.engine.version is {version}" in ready["message"]


def too_big() -> dict[str, Any]:
    return spec_with(
        target={"model": "meta-llama/Llama-3.1-70B-Instruct"},
        speculation={
            "method": "draft_model",
            "draft": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
            "numSpeculativeTokens": 4,
        },
    )


def test_reconcile_memory_that_does_not_fit_blocks_the_deployment() -> None:
    result = reconcile_chosen(inputs(too_big()))
    assert result.apply == []
    assert result.status_patch is not None
    fit = condition(result.status_patch, cond.MEMORY_FIT)
    assert (fit["status"], fit["reason"]) == ("False", "MemoryDoesNotFit")
    assert any(ch.isdigit() for ch in fit["message"])
    assert result.status_patch["memory"]["fits"] is False
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "MemoryDoesNotFit")]


def test_reconcile_memory_overcommit_annotation_deploys_anyway() -> None:
    result = reconcile_chosen(inputs(too_big(), annotations={v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT: "true"}))
    assert "Deployment" in [c["kind"] for c in result.apply]
    assert result.status_patch is not None
    assert condition(result.status_patch, cond.MEMORY_FIT)["status"] == "False"


def test_reconcile_progress_deadline_exceeded_is_degraded() -> None:
    created = reconcile_chosen(inputs(BASE_SPEC))
    assert created.status_patch is not None
    stuck = settled_deployment(created, available_replicas=1, updated_replicas=1, progress_deadline_exceeded=True)
    result = reconcile_chosen(
        inputs(BASE_SPEC, status=created.status_patch, live_children=live_of(created), deployment=stuck)
    )
    assert result.status_patch is not None
    degraded = condition(result.status_patch, cond.DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "RolloutFailed")
    assert ("Warning", "RolloutFailed") in [(e.type, e.reason) for e in result.events]


@pytest.mark.parametrize(
    ("replicas", "minutes_later", "completed_once", "progressing"),
    [
        # One pod at a time; each may stop for its grace period (10 s preStop + 300 s drain + 30 s) and then load
        # for the 30m rolloutDeadline: 35m40s a pod.
        (2, 10, False, "RolloutStarted"),  # inside the budget of two pods: still rolling
        (2, 72, False, "RolloutFailed"),  # past it and never available, although the Deployment never says so
        (2, 72, True, "RolloutStarted"),  # it was available once: a later crash is not a failed rollout
        (1, 36, False, "RolloutFailed"),  # one pod's budget
        (3, 72, False, "RolloutStarted"),  # a third pod extends the budget to 107 minutes
    ],
)
def test_the_operators_own_rollout_deadline(
    replicas: int, minutes_later: int, completed_once: bool, progressing: str
) -> None:
    """A return to an earlier ReplicaSet never gets ProgressDeadlineExceeded from Kubernetes (its Progressing
    condition keeps NewReplicaSetAvailable), so the operator times the rollout from status.effective.rolloutStarted,
    and allows one pod replacement per pod to roll."""
    spec = {**BASE_SPEC, "replicas": replicas}
    created = reconcile_chosen(inputs(spec, now="2026-11-26T00:00:00Z"))
    assert created.status_patch is not None
    status = copy.deepcopy(created.status_patch)
    assert status["effective"]["rolloutStarted"] == "2026-11-26T00:00:00Z"
    assert "rolloutCompleted" not in status["effective"]
    if completed_once:
        status["effective"]["rolloutCompleted"] = "2026-11-26T00:05:00Z"
    crash_looping = settled_deployment(created, available_replicas=0, ready_replicas=0)
    result = reconcile_chosen(
        inputs(
            spec,
            status=status,
            live_children=live_of(created),
            deployment=crash_looping,
            now=f"2026-11-26T{minutes_later // 60:02d}:{minutes_later % 60:02d}:00Z",
        )
    )
    assert result.status_patch is not None
    assert condition(result.status_patch, cond.PROGRESSING)["reason"] == progressing
    failed = progressing == "RolloutFailed"
    assert (condition(result.status_patch, cond.DEGRADED)["status"] == "True") is failed
    assert result.status_patch["effective"]["rolloutStarted"] == "2026-11-26T00:00:00Z", "the clock is kept"


def test_the_rollout_clock_completes_on_settling_and_restarts_with_a_new_config() -> None:
    steady, steady_inputs = converge(BASE_SPEC)
    assert steady.status_patch is not None
    assert steady.status_patch["effective"]["rolloutCompleted"] == "2026-11-26T00:00:00Z"
    changed = reconcile_chosen(
        inputs(
            spec_with(speculation__numSpeculativeTokens=2),
            generation=2,
            status=steady.status_patch,
            live_children=steady_inputs.live_children,
            deployment=steady_inputs.deployment,
            now="2026-11-26T02:00:00Z",
        )
    )
    assert changed.status_patch is not None
    effective = changed.status_patch["effective"]
    assert (effective["rolloutStarted"], effective.get("rolloutCompleted")) == ("2026-11-26T02:00:00Z", None)


def test_reconcile_scaling_to_one_replica_deletes_the_disruption_budget() -> None:
    steady, steady_inputs = converge(BASE_SPEC)
    assert steady.status_patch is not None
    result = reconcile_chosen(
        inputs(
            spec_with(replicas=1),
            generation=2,
            status=steady.status_patch,
            live_children=steady_inputs.live_children,
            deployment=steady_inputs.deployment,
        )
    )
    assert result.delete == ["PodDisruptionBudget/llama"]


def autotune_status(spec: dict[str, Any], enabled: bool) -> dict[str, Any]:
    parsed = v1alpha1.parse_spec(spec)
    _, intent_fingerprint = spec_fingerprints(parsed)
    selected = replace(intent_from_spec(parsed), enabled=enabled)
    return PolicyState(intent_fingerprint=intent_fingerprint, selected=selected).to_dict()


@pytest.mark.parametrize(
    ("mode", "override", "decided_on", "fingerprint_matches", "speculating", "source"),
    [
        ("Auto", "Auto", False, True, False, "autotune"),
        ("Auto", "Auto", False, False, True, "spec"),  # the user changed speculation since the decision
        ("Recommend", "Auto", False, True, False, "autotune"),  # leaving Auto keeps what runs: no surprise restart
        ("Off", "Auto", False, True, True, "spec"),  # mode Off returns to the declared spec
        ("Auto", "ForceOn", False, True, True, "override"),
        ("Recommend", "ForceOff", True, True, False, "override"),
    ],
)
def test_reconcile_intent_precedence(
    mode: str, override: str, decided_on: bool, fingerprint_matches: bool, speculating: bool, source: str
) -> None:
    spec = spec_with(
        autotune={"mode": mode, "prometheus": {"url": "http://prom:9090"}, "overrides": {"speculation": override}}
    )
    decided_for = spec if fingerprint_matches else spec_with(speculation__numSpeculativeTokens=2)
    status = {"autotune": autotune_status(decided_for, enabled=decided_on)}
    result = reconcile_chosen(inputs(spec, status=status))
    assert result.status_patch is not None
    assert result.status_patch["effective"]["speculation"] is speculating
    assert result.status_patch["effective"]["source"] == source
    argv = " ".join(result.rendered.argv) if result.rendered else ""
    assert ("--speculative-config" in argv) is speculating


def test_reconcile_reports_threshold_unsupported_on_versions_that_cannot_express_it() -> None:
    spec = spec_with(
        engine__version="0.20.0", engine__image="vllm/vllm-openai:v0.20.0", speculation__disableAboveBatchSize=32
    )
    result = reconcile_chosen(inputs(spec))
    assert result.status_patch is not None
    threshold = condition(result.status_patch, cond.THRESHOLD_SUPPORTED)
    assert (threshold["status"], threshold["reason"]) == ("False", "ThresholdUnsupported")
    assert ("Warning", "ThresholdUnsupported") in [(e.type, e.reason) for e in result.events]


def test_reconcile_children_carry_owner_and_applied_hash() -> None:
    result = reconcile_chosen(inputs(BASE_SPEC))
    for child in result.apply:
        assert child["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        assert child["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH]


@pytest.mark.parametrize(
    ("drift", "reapplies"),
    [
        ({}, False),
        ({"spec_replicas": 5}, True),  # kubectl scale behind our back
        ({"template_config_hash": "edited"}, True),  # someone edited the pod template
        ({"generation": 7}, False),  # generation alone (it moves on foreign annotations too) is no drift
    ],
)
def test_reconcile_repairs_drift_of_owned_deployment_fields(drift: dict[str, Any], reapplies: bool) -> None:
    steady, steady_inputs = converge(BASE_SPEC)
    assert steady.status_patch is not None
    assert steady_inputs.deployment is not None
    live = replace(steady_inputs.deployment, **{"spec_replicas": 2, **drift})
    result = reconcile_chosen(
        inputs(BASE_SPEC, status=steady.status_patch, live_children=steady_inputs.live_children, deployment=live)
    )
    assert ("Deployment" in [c["kind"] for c in result.apply]) == reapplies


def test_reconcile_status_carries_no_nulls_so_an_unchanged_object_compares_equal() -> None:
    """The API server drops nulls from merge patches; a status with nulls would look changed on every tick."""
    steady, _ = converge(BASE_SPEC)
    assert steady.status_patch is not None

    def nulls(value: Any) -> bool:
        if isinstance(value, dict):
            return any(v is None or nulls(v) for v in value.values())
        if isinstance(value, list):
            return any(nulls(v) for v in value)
        return False

    assert not nulls({k: v for k, v in steady.status_patch.items() if k != "autotuneHalt"})


def test_reconcile_does_not_mistake_a_stale_copy_of_its_own_write_for_drift() -> None:
    """Right after an apply the index may still show the old pod template: that is not drift, so no second write."""
    steady, steady_inputs = converge(BASE_SPEC)
    assert steady.status_patch is not None
    assert steady_inputs.deployment is not None
    stale = replace(steady_inputs.deployment, template_config_hash="previous-config")
    result = reconcile_chosen(
        inputs(
            BASE_SPEC,
            status=steady.status_patch,
            live_children=steady_inputs.live_children,
            deployment=stale,
            recently_applied=frozenset({"Deployment/llama"}),
        )
    )
    assert "Deployment" not in [c["kind"] for c in result.apply]


# ---------------------------------------------------------------- status writes: merge patch and read-your-writes


STORED = {
    "observedGeneration": 3,
    "observed": {"acceptanceRate": 0.1, "p99TpotMs": 40.0, "window": "5m"},
    "autotune": {"streak": {"key": "k", "count": 1}, "selected": {"enabled": False}, "actuations": [{"at": "t1"}]},
    "actuations": [{"action": "DisableSpeculation"}],
    "memory": {"fits": True},
}


@pytest.mark.parametrize(
    ("after", "expected_patch"),
    [
        pytest.param(
            {"observed": {"p99TpotMs": 41.0, "window": "5m"}},
            {"observed": {"acceptanceRate": None, "p99TpotMs": 41.0}},
            id="a signal without a valid value this window is removed, not kept from the last one",
        ),
        pytest.param(
            {"autotune": {"selected": {"enabled": False}, "actuations": [{"at": "t1"}]}},
            {"autotune": {"streak": None}},
            id="a cleared streak is cleared in storage",
        ),
        pytest.param(
            {"actuations": []},
            {"actuations": []},
            id="lists are replaced whole",
        ),
        pytest.param(
            {"observedGeneration": 4, "memory": {"fits": True}},
            {"observedGeneration": 4},
            id="unchanged keys are not sent; keys not named stay",
        ),
        pytest.param(
            {"recommendation": {"action": "Keep"}},
            {"recommendation": {"action": "Keep"}},
            id="a new key is sent whole",
        ),
        pytest.param(dict(STORED), {}, id="nothing changed, nothing sent"),
    ],
)
def test_status_merge_patch_makes_storage_equal_the_new_status(
    after: dict[str, Any], expected_patch: dict[str, Any]
) -> None:
    patch = rec.status_merge_patch(STORED, after)
    assert patch == expected_patch
    stored = apply_merge_patch(STORED, patch)
    assert {k: stored.get(k) for k in after} == after
    assert {k: v for k, v in stored.items() if k not in after} == {k: v for k, v in STORED.items() if k not in after}


WRITTEN = ("120", {"actuations": [{"action": "DisableSpeculation"}]})
BODY_STATUS: dict[str, Any] = {"actuations": []}


@pytest.mark.parametrize(
    ("body_version", "written", "expected_status", "still_ahead"),
    [
        pytest.param("118", WRITTEN, WRITTEN[1], True, id="the watch has not delivered our write yet: ours stands"),
        pytest.param("120", WRITTEN, BODY_STATUS, False, id="the body is our write"),
        pytest.param("125", WRITTEN, BODY_STATUS, False, id="the body is newer than our write"),
        pytest.param("118", None, BODY_STATUS, False, id="nothing written by this process"),
        pytest.param("abc", ("xyz", WRITTEN[1]), BODY_STATUS, False, id="opaque versions: trust the body"),
        pytest.param("99", WRITTEN, WRITTEN[1], True, id="numbers compare as numbers, not strings"),
    ],
)
def test_current_status_prefers_our_write_over_an_older_body(
    body_version: str,
    written: tuple[str, dict[str, Any]] | None,
    expected_status: dict[str, Any],
    still_ahead: bool,
) -> None:
    assert rec.current_status(body_version, BODY_STATUS, written) == (expected_status, still_ahead)


# ---------------------------------------------------------------- canary replica


def canary_spec(mode: str = "Recommend", enabled: bool = True, replicas: int = 3) -> dict[str, Any]:
    return spec_with(
        replicas=replicas,
        autotune={"mode": mode, "prometheus": {"url": "http://prom:9090"}, "canary": {"enabled": enabled}},
    )


def deployments(result: rec.ReconcileResult) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in result.apply if c["kind"] == "Deployment"}


def command_of(deployment: dict[str, Any]) -> str:
    return " ".join(deployment["spec"]["template"]["spec"]["containers"][0]["command"])


@pytest.mark.parametrize(
    ("autotune_chose", "main_speculates"),
    [
        pytest.param(None, True, id="the spec speculates: the canary runs plain"),
        pytest.param(False, False, id="autotune turned speculation off: the canary speculates"),
    ],
)
def test_canary_runs_the_other_mode_on_one_replica(autotune_chose: bool | None, main_speculates: bool) -> None:
    spec = canary_spec()
    status = {} if autotune_chose is None else {"autotune": autotune_status(spec, enabled=autotune_chose)}
    result = reconcile_chosen(inputs(spec, status=status))
    found = deployments(result)
    main, canary = found["llama"], found["llama-canary"]
    assert (main["spec"]["replicas"], canary["spec"]["replicas"]) == (2, 1)
    assert ("--speculative-config" in command_of(main)) is main_speculates
    assert ("--speculative-config" in command_of(canary)) is not main_speculates
    assert result.status_patch is not None
    effective = result.status_patch["effective"]
    canary_hash = canary["spec"]["template"]["metadata"]["labels"]["specpilot.dev/config-hash"]
    assert effective["canary"] == {"speculation": not main_speculates, "configHash": canary_hash, "readyReplicas": 0}
    assert effective["configHash"] != canary_hash
    assert "2 replicas" in condition(result.status_patch, "Progressing")["message"]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(canary_spec(enabled=False), id="canary switched off"),
        pytest.param(canary_spec(mode="Off"), id="autotune Off: nobody reads the comparison"),
    ],
)
def test_a_canary_no_longer_wanted_is_deleted(spec: dict[str, Any]) -> None:
    running = reconcile_chosen(inputs(canary_spec()))
    result = reconcile_chosen(inputs(spec, live_children=live_of(running)))
    assert "llama-canary" not in deployments(result)
    assert "Deployment/llama-canary" in result.delete
    assert "Deployment/llama" not in result.delete
    assert result.status_patch is not None
    assert "canary" not in result.status_patch["effective"]
    main = next(c for c in result.apply if c["metadata"]["name"] == "llama" and c["kind"] == "Deployment")
    assert main["spec"]["replicas"] == 3


def test_a_settled_canary_is_not_written_again_and_reports_its_readiness() -> None:
    first = reconcile_chosen(inputs(canary_spec()))
    found = deployments(first)
    main = settled_deployment(first, replicas=2)
    canary_child = found["llama-canary"]
    canary_live = rec.ObservedDeployment.from_object(
        {**canary_child, "status": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}}
    )
    second = reconcile_chosen(
        inputs(
            canary_spec(),
            status=first.status_patch or {},
            live_children=live_of(first),
            deployment=main,
            canary_deployment=canary_live,
        )
    )
    assert second.apply == []
    assert second.status_patch is not None
    assert second.status_patch["effective"]["canary"]["readyReplicas"] == 1
    assert condition(second.status_patch, "Progressing")["reason"] == "RolloutCompleted"


# ---------------------------------------------------------------- ownership, refused writes, drift of small children


def steady(spec: dict[str, Any], **kw: Any) -> tuple[rec.ReconcileInputs, rec.ReconcileResult]:
    """A created and settled object: (the inputs of a quiet tick, the creating result)."""
    first = reconcile_chosen(inputs(spec))
    settled = dict(live=live_of(first), deployment=settled_deployment(first))
    second = reconcile_chosen(
        inputs(spec, status=first.status_patch or {}, live_children=settled["live"], deployment=settled["deployment"])
    )
    status = second.status_patch or first.status_patch or {}
    quiet = inputs(spec, status=status, live_children=live_of(first), deployment=settled_deployment(first), **kw)
    return quiet, first


def test_a_name_held_by_another_owner_is_never_written_and_says_who() -> None:
    spec = spec_with(autotune__mode="Recommend", autotune__canary={"enabled": True})
    quiet, first = steady(spec)
    canary_key = "Deployment/llama-canary"
    assert canary_key in live_of(first)
    live = {k: v for k, v in quiet.live_children.items() if k != canary_key}
    result = reconcile_chosen(
        replace(quiet, live_children=live, conflicts={canary_key: "SpeculativeDeployment/llama-canary"})
    )
    assert canary_key not in [rec.child_key(c) for c in result.apply]
    assert canary_key not in result.delete
    assert result.status_patch is not None
    degraded = condition(result.status_patch, cond.DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "OwnershipConflict")
    assert "SpeculativeDeployment/llama-canary" in degraded["message"]
    assert condition(result.status_patch, cond.READY)["status"] == "True", "the main Deployment still serves"
    assert [e.reason for e in result.events if e.type == "Warning"] == ["OwnershipConflict"]


def test_a_same_named_object_we_do_not_want_is_left_alone() -> None:
    """`chat` without a canary next to a CR named `chat-canary`: its Deployment is not ours to delete."""
    quiet, _ = steady(BASE_SPEC, conflicts={"Deployment/llama-canary": "SpeculativeDeployment/llama-canary"})
    result = reconcile_chosen(quiet)
    assert result.apply == []
    assert result.delete == []
    assert result.status_patch is None, "nothing to say about an object that is not ours"


def test_main_deployment_held_by_another_owner_is_not_ready() -> None:
    result = reconcile_chosen(inputs(BASE_SPEC, conflicts={"Deployment/llama": "Deployment owner uid-other"}))
    assert "Deployment" not in [c["kind"] for c in result.apply]
    assert result.status_patch is not None
    ready = condition(result.status_patch, cond.READY)
    assert (ready["status"], ready["reason"]) == ("False", "OwnershipConflict")


def test_a_refused_apply_is_not_retried_until_what_we_send_changes() -> None:
    quiet, first = steady(BASE_SPEC)
    service = next(c for c in first.apply if c["kind"] == "Service")
    key = rec.child_key(service)
    digest = service["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH]
    live = {k: v for k, v in quiet.live_children.items() if k != key}
    refused = {key: rec.ApplyFailure(digest, 'Service "llama" is invalid: spec.ports[0].port: ...')}
    assert key in [rec.child_key(c) for c in reconcile_chosen(replace(quiet, live_children=live)).apply]
    result = reconcile_chosen(replace(quiet, live_children=live, apply_failures=refused))
    assert key not in [rec.child_key(c) for c in result.apply], "same object, same refusal: no hot loop"
    assert result.status_patch is not None
    degraded = condition(result.status_patch, cond.DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "ApplyFailed")
    assert "spec.ports[0].port" in degraded["message"]
    # the spec moved: a different object is tried again
    other = spec_with(service={"port": 8080})
    changed = reconcile_chosen(replace(quiet, spec=other, live_children=live, apply_failures=refused))
    assert key in [rec.child_key(c) for c in changed.apply]


def test_a_refused_main_deployment_makes_the_object_not_ready() -> None:
    first = reconcile_chosen(inputs(BASE_SPEC))
    deployment = next(c for c in first.apply if c["kind"] == "Deployment")
    digest = deployment["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH]
    refused = {"Deployment/llama": rec.ApplyFailure(digest, "quantities must match the regular expression")}
    result = reconcile_chosen(inputs(BASE_SPEC, status=first.status_patch or {}, apply_failures=refused))
    assert "Deployment" not in [c["kind"] for c in result.apply]
    assert result.status_patch is not None
    ready = condition(result.status_patch, cond.READY)
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")


@pytest.mark.parametrize(
    ("edit", "drifted"),
    [
        (lambda spec: spec.update(clusterIP="10.0.0.7", sessionAffinity="None"), False),  # server defaults
        (lambda spec: spec["ports"][0].update(nodePort=None), False),  # a key we never set
        (lambda spec: spec.update(selector={"app": "someone-else"}), True),
        (lambda spec: spec["ports"][0].update(port=9999), True),
        (lambda spec: spec["ports"].append({"name": "x", "port": 1}), True),
    ],
)
def test_service_spec_drift_is_repaired_but_server_defaults_are_not_drift(edit: Any, drifted: bool) -> None:
    quiet, first = steady(BASE_SPEC)
    service = next(c for c in first.apply if c["kind"] == "Service")
    live_spec = copy.deepcopy(service["spec"])
    edit(live_spec)
    result = reconcile_chosen(replace(quiet, live_specs={"Service/llama": live_spec}))
    assert ("Service/llama" in [rec.child_key(c) for c in result.apply]) is drifted
