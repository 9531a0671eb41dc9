"""One reconcile of a SpeculativeDeployment, as a pure function of what the operator observed.

Steps, in order (Flux-style): parse the spec, check the memory plan, choose the speculation intent (spec, autotune
decision, user overrides), render the vLLM command for the engine version, build the children, diff them against the
live children, then summarise status. The handler applies `ReconcileResult.apply`, patches `status_patch` when it is
not None, and posts `events`; nothing here talks to the API server, so every branch is table-tested.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specpilot.api import v1alpha1
from specpilot.api.timestamps import is_zoned_time, parse_time
from specpilot.planning.candidates import candidate_findings
from specpilot.planning.catalog import UnknownArchitecture
from specpilot.planning.plan import GIB, MemoryPlan, Severity, plan_memory
from specpilot.reconcile import conditions as cond
from specpilot.reconcile import manifests
from specpilot.vllm.dialects import (
    RenderedCommand,
    ThresholdSupport,
    UnsupportedCombination,
    describe_threshold,
    render_command,
)
from specpilot.vllm.intent import ChosenIntent, IntentSource, SpeculationIntent, complete_intent, intent_to_dict
from specpilot.vllm.versions import image_version_problem

ANNOTATION_APPLIED_HASH = f"{v1alpha1.GROUP}/applied-hash"

# Reasons that are worth an Event when a condition moves to them (Normal unless listed as Warning).
EVENT_REASONS = frozenset(
    {
        "RolloutStarted",
        "RolloutCompleted",
        "RolloutFailed",
        "MemoryDoesNotFit",
        "InvalidSpec",
        "SpeculationEnabled",
        "SpeculationDisabled",
        "MetricsUnavailable",
        "MetricsRestored",
        "ActuationThrottled",
        "AutomationPaused",
        "ThresholdUnsupported",
        "ApplyFailed",
        "OwnershipConflict",
    }
)
WARNING_REASONS = frozenset(
    {"RolloutFailed", "MemoryDoesNotFit", "InvalidSpec", "MetricsUnavailable", "ActuationThrottled",
     "ThresholdUnsupported", "ApplyFailed", "OwnershipConflict"}
)  # fmt: skip


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class ObservedDeployment:
    """The parts of the live child Deployment that reconcile reads."""

    generation: int
    observed_generation: int
    replicas: int
    updated_replicas: int
    ready_replicas: int
    available_replicas: int
    template_config_hash: str | None
    applied_hash: str | None
    progress_deadline_exceeded: bool
    spec_replicas: int | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ObservedDeployment:
        meta = obj.get("metadata", {})
        status = obj.get("status", {}) or {}
        template_meta = obj.get("spec", {}).get("template", {}).get("metadata", {})
        deadline = any(
            c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded"
            for c in status.get("conditions", []) or []
        )
        return cls(
            generation=int(meta.get("generation", 0)),
            observed_generation=int(status.get("observedGeneration", 0)),
            replicas=int(status.get("replicas", 0)),
            updated_replicas=int(status.get("updatedReplicas", 0)),
            ready_replicas=int(status.get("readyReplicas", 0)),
            available_replicas=int(status.get("availableReplicas", 0)),
            template_config_hash=(template_meta.get("annotations") or {}).get(manifests.ANNOTATION_CONFIG_HASH),
            applied_hash=(meta.get("annotations") or {}).get(ANNOTATION_APPLIED_HASH),
            progress_deadline_exceeded=deadline,
            spec_replicas=obj.get("spec", {}).get("replicas"),
        )


@dataclass(frozen=True)
class ReconcileInputs:
    name: str
    namespace: str
    uid: str
    generation: int
    annotations: Mapping[str, str]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    now: str
    # Applied hash of each live child, keyed by "Kind/name"; a missing key means the child does not exist.
    live_children: Mapping[str, str | None] = field(default_factory=dict)
    deployment: ObservedDeployment | None = None
    canary_deployment: ObservedDeployment | None = None  # the canary Deployment, when one exists
    # Children written moments ago: the observed copy may predate our write, so it says nothing about drift.
    recently_applied: frozenset[str] = frozenset()
    # What an autotune evaluation in the same tick concluded: merged into status before the intent is chosen.
    autotune_fields: Mapping[str, Any] = field(default_factory=dict)
    autotune_conditions: Sequence[cond.ConditionUpdate] = ()
    # Children whose name is taken by an object another owner controls ("Kind/name" -> who holds it): never written.
    conflicts: Mapping[str, str] = field(default_factory=dict)
    # Writes the API server refused and that must not be retried as they are ("Kind/name" -> the refused digest
    # and the server's message); a changed digest (the spec moved) is tried again.
    apply_failures: Mapping[str, ApplyFailure] = field(default_factory=dict)
    # Live spec of owned Services, PDBs and PodMonitors ("Kind/name" -> spec): a field we own edited behind our
    # back (the applied-hash annotation unchanged) is drift to repair.
    live_specs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ApplyFailure:
    digest: str  # applied-hash of the refused object ("delete" for a refused delete)
    message: str


# Children that may have to be removed when the spec stops asking for them.
CHILD_API_VERSIONS = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "PodDisruptionBudget": "policy/v1",
    "PodMonitor": "monitoring.coreos.com/v1",
}
OPTIONAL_CHILDREN = ("PodDisruptionBudget", "PodMonitor")


@dataclass(frozen=True)
class ReconcileResult:
    apply: list[dict[str, Any]]
    status_patch: dict[str, Any] | None
    events: list[Event]
    rendered: RenderedCommand | None = None
    delete: list[str] = field(default_factory=list)  # "Kind/name" of children no longer wanted


MEMORY_FINDING = "DoesNotFit"


def memory_summary(plan: MemoryPlan) -> str:
    """One line with the numbers an admin needs: weights, KV cache, tokens and sequences per replica."""
    return (
        f"weights {plan.weight_bytes / GIB:.1f} GiB of {plan.total_vram_bytes / GIB:.1f} GiB, "
        f"KV cache {plan.kv_cache_bytes / GIB:.1f} GiB = {plan.kv_tokens} tokens, "
        f"{plan.concurrent_sequences} sequences at maxModelLen {plan.max_model_len}"
    )


def object_hash(obj: Mapping[str, Any]) -> str:
    """Stable short hash of a manifest, stored on the child so unchanged children are never written again."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _with_applied_hash(obj: dict[str, Any]) -> tuple[dict[str, Any], str]:
    digest = object_hash(obj)
    annotated = json.loads(json.dumps(obj))
    annotated["metadata"].setdefault("annotations", {})[ANNOTATION_APPLIED_HASH] = digest
    return annotated, digest


def _deployment_drifted(child: Mapping[str, Any], live: ObservedDeployment | None) -> bool:
    """Fields we own changed behind our back (kubectl scale, a template edit) although our applied-hash stayed.

    Compared field by field, not by metadata.generation: a Deployment's generation also moves when anyone edits its
    annotations, and foreign metadata must never cause a write.
    """
    if child["kind"] != "Deployment" or live is None or live.applied_hash is None:
        return False
    spec = child["spec"]
    wanted_hash = spec["template"]["metadata"]["annotations"].get(manifests.ANNOTATION_CONFIG_HASH)
    replicas_moved = live.spec_replicas is not None and live.spec_replicas != spec["replicas"]
    return bool(replicas_moved or live.template_config_hash != wanted_hash)


DELETE_DIGEST = "delete"


def _write_problems(name: str, conflicts: Mapping[str, str], refused: Mapping[str, str]) -> list[cond.ConditionUpdate]:
    """Degraded (and Ready=False when the main Deployment is affected) for children we could not write.

    Listed after the rollout's own conditions, so they win the merge: a child the API server refuses or another
    owner holds must not look like a rollout that is merely in progress.
    """
    if not conflicts and not refused:
        return []
    reason = "OwnershipConflict" if conflicts else "ApplyFailed"
    lines = [f"{k} is controlled by {who}; not touching it" for k, who in sorted(conflicts.items())]
    lines += [f"{k} refused by the API server: {msg}" for k, msg in sorted(refused.items())]
    message = "; ".join(lines)
    updates = [cond.ConditionUpdate(cond.DEGRADED, "True", reason, message)]
    if f"Deployment/{name}" in {*conflicts, *refused} or f"Service/{name}" in {*conflicts, *refused}:
        updates.append(cond.ConditionUpdate(cond.READY, "False", reason, message))
    return updates


def _contains(live: Any, wanted: Any) -> bool:
    """Whether every field we set is in the live object with our value (the server adds defaults around them)."""
    if isinstance(wanted, Mapping):
        return isinstance(live, Mapping) and all(k in live and _contains(live[k], v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(live, list) and len(live) == len(wanted) and all(map(_contains, live, wanted))
    return bool(live == wanted)


def _spec_drifted(child: Mapping[str, Any], live_specs: Mapping[str, Mapping[str, Any]]) -> bool:
    """A Service, PDB or PodMonitor whose spec fields we own were edited while the applied-hash stayed."""
    live = live_specs.get(child_key(child))
    return live is not None and not _contains(live, child.get("spec", {}))


def child_key(obj: Mapping[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@dataclass(frozen=True)
class RolloutClock:
    """When the operator first applied the desired config hash, and when all its replicas were first available.

    The operator keeps its own rollout deadline beside the Deployment's progressDeadlineSeconds because Kubernetes'
    does not always fire: a rollout back to a config that ran before reuses the old ReplicaSet, the Deployment's
    Progressing condition keeps its earlier NewReplicaSetAvailable reason, and once replicas == updatedReplicas the
    deployment controller treats the rollout as complete and never sets ProgressDeadlineExceeded, however long the
    reused pods crash-loop (seen with an autotune re-enable that returns to the previous command line).
    """

    started: str
    completed: str | None

    @classmethod
    def of(cls, previous_effective: Mapping[str, Any], desired_hash: str, now: str) -> RolloutClock:
        """The recorded clock of the desired config, or one started now: for another config, or when a recorded time
        is not an RFC 3339 time with a zone (a hand edit; the status written next replaces it)."""
        started, completed = previous_effective.get("rolloutStarted"), previous_effective.get("rolloutCompleted")
        if previous_effective.get("configHash") != desired_hash or not started:
            return cls(now, None)
        if not all(is_zoned_time(str(recorded)) for recorded in (started, completed) if recorded is not None):
            return cls(now, None)
        return cls(str(started), None if completed is None else str(completed))

    def overdue(self, now: str, deadline_seconds: int) -> bool:
        """Never completed, and older than the deadline."""
        elapsed = (parse_time(now) - parse_time(self.started)).total_seconds()
        return self.completed is None and elapsed > deadline_seconds


def _rollout_conditions(
    want: int, desired_hash: str, live: ObservedDeployment | None, applying: bool, overdue: bool = False
) -> tuple[list[cond.ConditionUpdate], str]:
    """Ready, Progressing and Degraded from the main Deployment's own status (`want` replicas; the canary's one
    replica is reported in status.effective.canary); returns the updates and a short summary. `overdue`: the
    operator's own clock says this config has not become available within its rollout deadline."""
    if live is None:
        progress = cond.ConditionUpdate(
            cond.PROGRESSING, "True", "RolloutStarted", f"creating {want} replicas of config {desired_hash}"
        )
        ready = cond.ConditionUpdate(cond.READY, "False", "RolloutInProgress", f"0/{want} replicas available")
        return [progress, ready, cond.ConditionUpdate(cond.DEGRADED, "False", "AsExpected")], "creating"
    available = f"{live.available_replicas}/{want} replicas available"
    on_new_config = live.template_config_hash == desired_hash and not applying
    settled = (
        on_new_config
        and live.observed_generation >= live.generation
        and live.updated_replicas >= want
        and live.available_replicas >= want
        and live.replicas <= want
    )
    if on_new_config and (live.progress_deadline_exceeded or (overdue and not settled)):
        msg = f"config {desired_hash} did not become available before the progress deadline; {available}"
        return [
            cond.ConditionUpdate(cond.PROGRESSING, "False", "RolloutFailed", msg),
            cond.ConditionUpdate(cond.DEGRADED, "True", "RolloutFailed", msg),
            cond.ConditionUpdate(cond.READY, "True" if live.available_replicas > 0 else "False", "RolloutFailed", msg),
        ], "failed"
    if settled:
        ready_reason = "ScaledToZero" if want == 0 else "Available"
        return [
            cond.ConditionUpdate(cond.PROGRESSING, "False", "RolloutCompleted", f"config {desired_hash}: {available}"),
            cond.ConditionUpdate(cond.READY, "True", ready_reason, available),
            cond.ConditionUpdate(cond.DEGRADED, "False", "AsExpected"),
        ], "settled"
    updated = f"{live.updated_replicas if on_new_config else 0}/{want} pods on config {desired_hash}"
    return [
        cond.ConditionUpdate(cond.PROGRESSING, "True", "RolloutStarted", updated),
        cond.ConditionUpdate(
            cond.READY, "True" if live.available_replicas > 0 else "False", "RolloutInProgress", available
        ),
        cond.ConditionUpdate(cond.DEGRADED, "False", "AsExpected"),
    ], "rolling"


def _events(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> list[Event]:
    """One event per new reason: two conditions moving for the same cause (Ready and MemoryFit) say it once."""
    events: list[Event] = []
    for old, new in cond.transitions(before, after):
        reason = str(new.get("reason", ""))
        # A condition's first value is news only if it is a problem or the first rollout starting.
        first_worth_telling = reason in WARNING_REASONS or reason == "RolloutStarted"
        if reason in EVENT_REASONS and (old is not None or first_worth_telling):
            kind = "Warning" if reason in WARNING_REASONS else "Normal"
            if all(e.reason != reason for e in events):
                events.append(Event(kind, reason, str(new.get("message", "")) or reason))
    return events


def _without_nulls(value: Any) -> Any:
    """Drop null members of nested objects: a merge patch deletes them, so the stored status never has them and a
    comparison with nulls would see a change on every tick (and write every tick)."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def status_merge_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns the stored status into `after` for the keys `after` names.

    Top-level keys `after` leaves out are not ours this time (autotune fields on a tick without an evaluation) and
    stay as they are; inside a key the stored object becomes exactly the new one, so members that went away (a
    cleared streak, a signal with no valid value this window) are sent as null. Without that, a merge patch keeps
    the old member and the stored status says something the operator no longer believes.
    """
    patch: dict[str, Any] = _member_patch({k: before[k] for k in after if k in before}, after)
    return patch


def _member_patch(old: Any, new: Any) -> Any:
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return new  # scalars and lists are replaced whole by a merge patch
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    for k, v in new.items():
        if k not in old:
            patch[k] = v
        elif old[k] != v:
            patch[k] = _member_patch(old[k], v)
    return patch


def resource_version_is_older(version: str, than: str) -> bool:
    """Whether `version` comes before `than`, as far as one can tell.

    kube-apiserver over etcd hands out resourceVersions from one increasing revision, so integers compare. Any other
    form is opaque: we cannot tell, and say no (the body is trusted, as kopf would).
    """
    if version.isdigit() and than.isdigit():
        return int(version) < int(than)
    return False


def current_status(
    body_version: str, body_status: Mapping[str, Any], written: tuple[str, Mapping[str, Any]] | None
) -> tuple[dict[str, Any], bool]:
    """The status to decide from, and whether our remembered write is still ahead of what the watch delivered.

    kopf hands a timer the body from its watch stream, which can predate the status patch we sent a moment ago.
    Deciding from that older status would undo our own last decision: render the previous config again (a second
    rollout) and overwrite status.actuations with the list from before it. So while the body is older than our last
    write, the status we wrote (as the API server returned it) stands in for the body's.
    """
    if written is not None and resource_version_is_older(body_version, written[0]):
        return dict(written[1]), True
    return dict(body_status), False


def _finish(
    inputs: ReconcileInputs,
    updates: list[cond.ConditionUpdate],
    fields: dict[str, Any],
    apply: list[dict[str, Any]],
    rendered: RenderedCommand | None = None,
    delete: list[str] | None = None,
) -> ReconcileResult:
    before = list(inputs.status.get("conditions", []) or [])
    all_updates = [*inputs.autotune_conditions, *updates]
    merged = cond.merge_conditions(before, all_updates, generation=inputs.generation, now=inputs.now)
    new_status = {
        "observedGeneration": inputs.generation,
        "conditions": merged,
        **{k: _without_nulls(v) for k, v in {**inputs.autotune_fields, **fields}.items()},
    }
    unchanged = all(inputs.status.get(k) == v for k, v in new_status.items())
    return ReconcileResult(
        apply=apply,
        status_patch=None if unchanged else new_status,
        events=_events(before, merged),
        rendered=rendered,
        delete=delete or [],
    )


def reconcile(inputs: ReconcileInputs, chosen: ChosenIntent | None) -> ReconcileResult:
    """Decide children to apply, the status to write and the events to post, rendering the intent `chosen`.

    `chosen` is decided above the reconcile (autotune.evaluation.choose_intent) from the same spec and status; it is
    None exactly when the spec does not parse, which the reconcile reports before it would need an intent.
    """
    try:
        spec = v1alpha1.parse_spec(dict(inputs.spec))
    except v1alpha1.InvalidSpec as err:
        return _finish(inputs, [_invalid_spec("; ".join(err.problems))], {}, [])

    fields: dict[str, Any] = {}
    fit_update, refusal = _memory_verdict(inputs, spec, fields)
    if refusal is not None:
        return _finish(inputs, [fit_update, refusal], fields, [])
    try:
        plan = _render(inputs, spec, chosen)
    except _Refused as refused:
        return _finish(inputs, [fit_update, refused.update], fields, [])

    children = manifests.build_children(
        spec,
        manifests.Owner(name=inputs.name, namespace=inputs.namespace, uid=inputs.uid),
        command=plan.rendered.argv,
        config_hash=plan.rendered.config_hash,
        speculation=plan.chosen.intent.enabled,
        canary=plan.canary,
    )
    diff = _diff_children(inputs, children)
    rollout, clock = _rollout(inputs, spec, plan, diff)
    updates = [
        fit_update,
        *rollout,
        _threshold_condition(plan.rendered),
        _speculation_condition(inputs, spec, plan.chosen),
        *_write_problems(inputs.name, diff.conflicts(inputs.conflicts), diff.refused),
    ]
    fields["effective"] = _effective(inputs, plan.running, plan.chosen, plan.rendered, clock, plan.canary)
    live = inputs.deployment
    fields["replicas"] = live.replicas if live else 0
    fields["readyReplicas"] = live.ready_replicas if live else 0
    fields["updatedReplicas"] = live.updated_replicas if live else 0
    return _finish(inputs, updates, fields, diff.apply, plan.rendered, diff.delete)


def _invalid_spec(message: str) -> cond.ConditionUpdate:
    return cond.ConditionUpdate(cond.READY, "False", "InvalidSpec", message)


class _Refused(Exception):
    """The spec cannot be deployed as written: `update` is the Ready=False InvalidSpec that says why."""

    def __init__(self, update: cond.ConditionUpdate) -> None:
        super().__init__(update.message)
        self.update = update


@dataclass(frozen=True)
class _Rendered:
    """What the pods run: `running` (the spec with a promoted candidate's drafter), its command for the chosen intent,
    and the canary or trial pod's command beside it."""

    chosen: ChosenIntent
    running: v1alpha1.SpeculativeDeploymentSpec
    rendered: RenderedCommand
    canary: manifests.CanaryCommand | None


def _render(
    inputs: ReconcileInputs, spec: v1alpha1.SpeculativeDeploymentSpec, chosen: ChosenIntent | None
) -> _Rendered:
    """Render the chosen intent for the engine in use, and the canary or trial pod's command; raises _Refused where
    the image, the command, a candidate or the canary's command cannot run."""
    image_problem = image_version_problem(spec.engine.image, spec.engine.version)
    if image_problem is not None:
        raise _Refused(_invalid_spec(f"spec.engine.image: {image_problem}"))
    if chosen is None:
        raise ValueError("reconcile: a spec that parses needs a chosen intent (autotune.evaluation.choose_intent)")
    running = spec if chosen.drafter is None else v1alpha1.spec_running(spec, chosen.drafter)  # a promoted candidate
    try:
        rendered = render_command(running, chosen.intent)
    except UnsupportedCombination as err:
        raise _Refused(_invalid_spec(f"{err.field}: {err}")) from err
    unusable = _candidate_refusal(inputs, spec)
    if unusable is not None:
        raise _Refused(unusable)
    try:
        if chosen.trial is not None:
            canary: manifests.CanaryCommand | None = trial_command(spec, chosen.trial, chosen.trial_candidate)
        else:
            canary = canary_command(running, chosen.intent)
    except UnsupportedCombination as err:
        needed_by = "the trial pod" if chosen.trial is not None else "the canary replica, spec.autotune.canary"
        raise _Refused(_invalid_spec(f"{err.field}: {err} (needed by {needed_by})")) from err
    return _Rendered(chosen, running, rendered, canary)


@dataclass(frozen=True)
class _ChildrenDiff:
    """The children to write and to delete, the keys wanted, and those the API server refused before (key: its
    message), which are not retried."""

    apply: list[dict[str, Any]]
    delete: list[str]
    wanted: set[str]
    refused: dict[str, str]

    def conflicts(self, owners: Mapping[str, str]) -> dict[str, str]:
        """Of the children owned by someone else (key: the owner), those this reconcile wants."""
        return {key: who for key, who in owners.items() if key in self.wanted}


def _diff_children(inputs: ReconcileInputs, children: Sequence[dict[str, Any]]) -> _ChildrenDiff:
    canary_key = f"Deployment/{manifests.canary_name(inputs.name)}"
    refused: dict[str, str] = {}
    apply = _children_to_apply(inputs, children, canary_key, refused)
    wanted = {child_key(c) for c in children}
    delete = _children_to_delete(inputs, wanted, canary_key, refused)
    return _ChildrenDiff(apply, delete, wanted, refused)


def _rollout(
    inputs: ReconcileInputs, spec: v1alpha1.SpeculativeDeploymentSpec, plan: _Rendered, diff: _ChildrenDiff
) -> tuple[list[cond.ConditionUpdate], RolloutClock]:
    """The rollout conditions of the main Deployment toward the rendered config, and its clock (started, completed),
    overdue once the rollout outlasts the budget for the pods it rolls."""
    config_hash = plan.rendered.config_hash
    applying_main = any(child_key(c) == f"Deployment/{inputs.name}" for c in diff.apply)
    canary = plan.canary
    want = manifests.main_replicas(spec, with_canary=canary is not None, trial=canary is not None and canary.trial)
    clock = RolloutClock.of(inputs.status.get("effective") or {}, config_hash, inputs.now)
    overdue = clock.overdue(inputs.now, manifests.rollout_budget_seconds(spec, want))
    rollout, summary = _rollout_conditions(want, config_hash, inputs.deployment, applying_main, overdue)
    if summary == "settled" and clock.completed is None:
        clock = replace(clock, completed=inputs.now)
    return rollout, clock


def _speculation_condition(
    inputs: ReconcileInputs, spec: v1alpha1.SpeculativeDeploymentSpec, chosen: ChosenIntent
) -> cond.ConditionUpdate:
    """SpeculationActive: whether the chosen intent speculates, and who chose it."""
    speculating = chosen.intent.enabled
    halt = inputs.autotune_fields.get("autotuneHalt", inputs.status.get("autotuneHalt")) or {}
    return cond.ConditionUpdate(
        cond.SPECULATION_ACTIVE,
        "True" if speculating else "False",
        "SpeculationEnabled" if speculating else "SpeculationDisabled",
        _speculation_message(spec, chosen, halt.get("reason")),
    )


def _memory_verdict(
    inputs: ReconcileInputs, spec: v1alpha1.SpeculativeDeploymentSpec, fields: dict[str, Any]
) -> tuple[cond.ConditionUpdate, cond.ConditionUpdate | None]:
    """The MemoryFit condition, and the Ready=False that stops the reconcile when the plan forbids deploying.

    Records the plan in `fields["memory"]` when the models are known. A plan that does not fit stops the reconcile
    unless the allow-memory-overcommit annotation is set; any other error in the plan always stops it.
    """
    try:
        memory = plan_memory(spec)
    except UnknownArchitecture as err:
        return cond.ConditionUpdate(cond.MEMORY_FIT, "Unknown", "ArchitectureUnknown", str(err)), None
    fields["memory"] = memory.to_status()
    allow_overcommit = inputs.annotations.get(v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT, "").lower() == "true"
    memory_errors = [f.line() for f in memory.errors if f.code == MEMORY_FINDING]
    other_errors = [f.line() for f in memory.errors if f.code != MEMORY_FINDING]
    if memory.fits and not memory_errors:
        fit_update = cond.ConditionUpdate(cond.MEMORY_FIT, "True", "Fits", memory_summary(memory))
    else:
        overcommit = " (deploying anyway: specpilot.dev/allow-memory-overcommit)" if allow_overcommit else ""
        message = "; ".join(memory_errors) or memory_summary(memory)
        fit_update = cond.ConditionUpdate(cond.MEMORY_FIT, "False", "MemoryDoesNotFit", message + overcommit)
        if not allow_overcommit:
            return fit_update, cond.ConditionUpdate(cond.READY, "False", "MemoryDoesNotFit", fit_update.message)
    if other_errors:
        return fit_update, cond.ConditionUpdate(cond.READY, "False", "InvalidSpec", "; ".join(other_errors))
    return fit_update, None


def _candidate_refusal(
    inputs: ReconcileInputs, spec: v1alpha1.SpeculativeDeploymentSpec
) -> cond.ConditionUpdate | None:
    """Ready=False naming each candidate that cannot run (as `specpilot validate` refuses it), None when all can.

    A candidate that only does not fit memory passes under the allow-memory-overcommit annotation, like the declared
    drafter.
    """
    allow_overcommit = inputs.annotations.get(v1alpha1.ANNOTATION_ALLOW_OVERCOMMIT, "").lower() == "true"
    errors = [
        f.line()
        for f in candidate_findings(spec)
        if f.severity is Severity.ERROR and not (allow_overcommit and f.code == MEMORY_FINDING)
    ]
    if not errors:
        return None
    return cond.ConditionUpdate(cond.READY, "False", "InvalidSpec", "; ".join(errors))


def _children_to_apply(
    inputs: ReconcileInputs, children: Sequence[dict[str, Any]], canary_key: str, refused: dict[str, str]
) -> list[dict[str, Any]]:
    """The children that differ from (or drifted away from) what was last applied, with their applied hash.

    Objects someone else owns are never written. A child the API server refused, unchanged since, is not retried:
    it goes into `refused` with the server's message.
    """
    apply = []
    for child in children:
        key = child_key(child)
        annotated, digest = _with_applied_hash(child)
        if key in inputs.conflicts:
            continue  # someone else's object: never written, reported by the caller
        failure = inputs.apply_failures.get(key)
        if failure is not None and failure.digest == digest:
            refused[key] = failure.message  # the same object would be refused the same way: no retry loop
            continue
        live_copy = inputs.canary_deployment if key == canary_key else inputs.deployment
        fresh = key in inputs.recently_applied
        drifted = not fresh and (_deployment_drifted(child, live_copy) or _spec_drifted(child, inputs.live_specs))
        if inputs.live_children.get(key) != digest or drifted:
            apply.append(annotated)
    return apply


def _children_to_delete(
    inputs: ReconcileInputs, wanted: set[str], canary_key: str, refused: dict[str, str]
) -> list[str]:
    """Optional children (and the canary) that live but are no longer wanted, in key order.

    A deletion the API server refused before is not retried: it goes into `refused` with the server's message.
    """
    removable = [k for k in inputs.live_children if k.split("/")[0] in OPTIONAL_CHILDREN or k == canary_key]
    delete = []
    for key in sorted(k for k in removable if k not in wanted):
        failure = inputs.apply_failures.get(key)
        if failure is not None and failure.digest == DELETE_DIGEST:
            refused[key] = failure.message
        else:
            delete.append(key)
    return delete


def _threshold_condition(rendered: RenderedCommand) -> cond.ConditionUpdate:
    """ThresholdSupported: whether this vLLM honours the batch-size threshold the intent asks for."""
    if rendered.threshold_support == ThresholdSupport.UNSUPPORTED:
        return cond.ConditionUpdate(
            cond.THRESHOLD_SUPPORTED, "False", "ThresholdUnsupported", describe_threshold(rendered)
        )
    return cond.ConditionUpdate(
        cond.THRESHOLD_SUPPORTED, "True", rendered.threshold_support.value, describe_threshold(rendered)
    )


def _effective(
    inputs: ReconcileInputs,
    spec: v1alpha1.SpeculativeDeploymentSpec,
    chosen: ChosenIntent,
    rendered: RenderedCommand,
    clock: RolloutClock,
    canary: manifests.CanaryCommand | None,
) -> dict[str, Any]:
    """status.effective: what runs (`spec` as it runs: with a promoted candidate's drafter), its rollout clock and
    the canary's mode."""
    intent = chosen.intent
    speculating = intent.enabled
    return {
        "speculation": speculating,
        # The lossless record of what runs: the autotuner decides from it and reverts to it, so it keeps every
        # field of the intent. The display fields below show what the rendered command does.
        "intent": intent_to_dict(intent),
        "method": spec.speculation.method.value if speculating else None,
        "drafter": spec.speculation.drafter() if speculating else None,
        "numSpeculativeTokens": intent.num_speculative_tokens if speculating else None,
        "disableAboveBatchSize": rendered.disable_above_batch_size if speculating else None,
        "batchSchedule": [list(r) for r in rendered.batch_schedule] if rendered.batch_schedule else None,
        "thresholdSupport": rendered.threshold_support.value,
        "configHash": rendered.config_hash,
        "rolloutStarted": clock.started,
        "rolloutCompleted": clock.completed,
        "source": chosen.source.value,
        "canary": None
        if canary is None
        else {
            "speculation": canary.speculation,
            "configHash": canary.config_hash,
            "readyReplicas": _ready_on(inputs.canary_deployment, canary.config_hash),
        },
    }


def _ready_on(live: ObservedDeployment | None, config_hash: str) -> int:
    """Ready pods of `live` that run `config_hash`: none while its template is another config, or not yet observed
    (the old canary's pod must not count as the new trial's)."""
    if live is None or live.template_config_hash != config_hash or live.observed_generation < live.generation:
        return 0
    return min(live.ready_replicas, live.updated_replicas)


def canary_command(
    spec: v1alpha1.SpeculativeDeploymentSpec, intent: SpeculationIntent
) -> manifests.CanaryCommand | None:
    """The canary replica's command: the other mode than `intent`, when spec.autotune.canary asks for one.

    Plain when the others speculate; speculating with the remembered K, threshold and schedule when they do not.
    None while autotune is Off (nobody reads the comparison) or with fewer than two replicas (the API server refuses
    that combination).
    """
    at = spec.autotune
    if not at.canary.enabled or at.mode == v1alpha1.AutotuneMode.OFF or spec.replicas < 2:
        return None
    other = intent.without_speculation() if intent.enabled else complete_intent(intent.with_speculation(), spec)
    rendered = render_command(spec, other)
    return manifests.CanaryCommand(rendered.argv, rendered.config_hash, other.enabled)


def trial_command(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    trial: SpeculationIntent,
    candidate: v1alpha1.SpeculationCandidate | None = None,
) -> manifests.CanaryCommand:
    """The trial pod's command: the config on trial, in the canary's slot (its own Deployment, the same Service);
    with `candidate`, that candidate's drafter runs in place of the declared one (v1alpha1.spec_running).

    While a trial runs, the other mode of spec.autotune.canary is not run: the slot holds one pod, and the trial is
    the comparison the operator acts on.
    """
    rendered = render_command(spec if candidate is None else v1alpha1.spec_running(spec, candidate), trial)
    return manifests.CanaryCommand(rendered.argv, rendered.config_hash, trial.enabled, trial=True)


def _speculation_message(
    spec: v1alpha1.SpeculativeDeploymentSpec,
    chosen: ChosenIntent,
    halted: str | None = None,
) -> str:
    intent, source = chosen.intent, chosen.source
    if source is IntentSource.AUTOTUNE and halted:
        return f"autotune: {halted}"  # the running config is the one reverted to, not the last actuation's
    if source is IntentSource.AUTOTUNE:
        return f"autotune: {chosen.reason}" if chosen.reason else "chosen by autotune"
    if source is IntentSource.OVERRIDE:
        return f"pinned by spec.autotune.overrides.speculation={spec.autotune.overrides.speculation.value}"
    if not intent.enabled:
        return "spec.speculation.enabled is false"
    k = intent.num_speculative_tokens
    return f"{spec.speculation.method.value}" + (f" with {k} speculative tokens" if k else "")
