"""The autotuner's round trip driven through the real seams, with status stored as the API server stores it.

Each step goes the production path: `autotune.conclude` (the decision from stored status and one evaluation's
measurements) -> `reconcile.reconcile` (the intent, the rendered Deployment, the status patch) -> the exact merge
patch the operator sends (`status_merge_patch`) applied with RFC 7386 and pruned to the CRD's status schema, as
kube-apiserver would store it -> the next evaluation reads that stored status. Nothing is idealised: the running
intent comes back from what was stored, not from what was decided.

Used by tests/unit/test_round_trip.py (decisions, status, budget) and tests/vllm/test_round_trip_vllm.py (every
rendered command line through the real vLLM parser).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from specpilot.api import crd, v1alpha1
from specpilot.autotune.evaluation import AutotuneOutcome, choose_intent, conclude, format_time
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass
from specpilot.autotune.signals.promql import Signal
from specpilot.reconcile import core as rec

VALID, NO_DATA = MeasurementClass.VALID, MeasurementClass.NO_DATA
T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

ROUND_TRIP_SPEC: dict[str, Any] = {
    "replicas": 1,
    "engine": {"image": "vllm/vllm-openai:v0.33.0", "version": "0.33.0", "maxModelLen": 4096, "maxNumSeqs": 64},
    "target": {"model": "meta-llama/Llama-3.1-8B-Instruct"},
    "speculation": {
        "method": "draft_model",
        "draft": {"model": "meta-llama/Llama-3.2-1B-Instruct"},
        "numSpeculativeTokens": 4,
        "disableAboveBatchSize": 16,
    },
    "resources": {"gpusPerReplica": 1, "gpuMemoryGiB": 80},
    "autotune": {
        "mode": "Auto",
        "prometheus": {"url": "http://prometheus.monitoring:9090"},
        "interval": "60s",
        "window": "2m",
        "scrapeInterval": "15s",
        "agreeingEvaluations": 2,
        "stabilization": "1m",
        "probeInterval": "10m",
        "batchThreshold": {"tune": False},
        "budget": {"minInterval": "5m", "maxPerHour": 6, "maxPerDay": 20, "reversalBackoff": 2},
    },
}


def reconcile_chosen(inputs: rec.ReconcileInputs) -> rec.ReconcileResult:
    """The reconcile as the operator runs it: the intent chosen by the autotuner from the same inputs, then rendered."""
    return rec.reconcile(inputs, choose_intent(inputs))


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 as the API server applies it (the reference algorithm, section 2)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def prune(value: Any, schema: dict[str, Any]) -> Any:
    """Drop what a structural schema does not declare, as kube-apiserver prunes unknown fields on write."""
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return {k: prune(v, extra) for k, v in value.items()}
            return dict(value) if preserve else {}
        return {
            k: prune(v, properties[k]) if k in properties else v
            for k, v in value.items()
            if k in properties or preserve
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(v, schema["items"]) for v in value]
    return value


STATUS_SCHEMA = crd.status_schema()


def store(before: dict[str, Any], new_status: dict[str, Any]) -> dict[str, Any]:
    """What the API server holds after the operator's status patch (JSON on the wire, merge-patched, pruned)."""
    patch = json.loads(json.dumps(rec.status_merge_patch(before, new_status)))
    stored: dict[str, Any] = prune(apply_merge_patch(before, patch), STATUS_SCHEMA)
    return stored


def m(signal: Signal, value: float | None, klass: MeasurementClass = VALID) -> Measurement:
    detail = f"{value}" if klass is VALID else "empty result: no series matched in the window"
    return Measurement(signal.value, f"q_{signal.value}", klass, value, None, detail)


def window_measurements(*, speculating: bool, acceptance: float | None, batch: float = 2.0) -> dict[str, Measurement]:
    """One evaluation as vLLM exposes it: without a speculative config the spec-decode families do not exist."""
    out = {
        Signal.REQUESTS_IN_WINDOW: m(Signal.REQUESTS_IN_WINDOW, 400.0),
        Signal.BATCH_SIZE: m(Signal.BATCH_SIZE, batch),
        Signal.TPOT_P50: m(Signal.TPOT_P50, 0.010),
        Signal.TPOT_P99: m(Signal.TPOT_P99, 0.020),
        Signal.TPOT_MEAN: m(Signal.TPOT_MEAN, 0.011),
    }
    if speculating and acceptance is not None:
        out[Signal.DRAFT_TOKENS_IN_WINDOW] = m(Signal.DRAFT_TOKENS_IN_WINDOW, 20_000.0)
        out[Signal.ACCEPTANCE_RATE] = m(Signal.ACCEPTANCE_RATE, acceptance)
    else:
        out[Signal.DRAFT_TOKENS_IN_WINDOW] = m(Signal.DRAFT_TOKENS_IN_WINDOW, None, NO_DATA)
        out[Signal.ACCEPTANCE_RATE] = m(Signal.ACCEPTANCE_RATE, None, NO_DATA)
    return {str(k): v for k, v in out.items()}


def template_hash(deployment: dict[str, Any]) -> str:
    return str(deployment["spec"]["template"]["metadata"]["annotations"]["specpilot.dev/config-hash"])


def observed_deployment(
    deployment: dict[str, Any], generation: int, *, ready: bool, deadline: bool = False
) -> rec.ObservedDeployment:
    """The applied Deployment as its controller reports it once every pod of its template runs (or none is ready)."""
    replicas = int(deployment["spec"]["replicas"])
    return rec.ObservedDeployment(
        generation=generation,
        observed_generation=generation,
        replicas=replicas,
        updated_replicas=replicas,
        ready_replicas=replicas if ready else 0,
        available_replicas=replicas if ready else 0,
        template_config_hash=template_hash(deployment),
        applied_hash=deployment["metadata"]["annotations"][rec.ANNOTATION_APPLIED_HASH],
        progress_deadline_exceeded=deadline,
        spec_replicas=replicas,
    )


@dataclass
class Cluster:
    """One SpeculativeDeployment and its Deployment, advanced by reconciles and evaluations (no I/O)."""

    spec: dict[str, Any]
    now: datetime = T0
    status: dict[str, Any] = field(default_factory=dict)
    deployment: dict[str, Any] | None = None  # the last applied Deployment manifest
    canary: dict[str, Any] | None = None  # the last applied canary (or trial) Deployment, while it exists
    canary_ready: bool = True  # the canary Deployment's pod is ready (a trial pod still loading: False)
    rollouts: int = 0
    events: list[rec.Event] = field(default_factory=list)
    outcomes: list[tuple[datetime, AutotuneOutcome]] = field(default_factory=list)
    deadline_exceeded: bool = False  # the current rollout's pods never became available in time
    # Pods never available, and Kubernetes silent about it: a return to an earlier ReplicaSet keeps the Deployment's
    # NewReplicaSetAvailable reason, so ProgressDeadlineExceeded is never set (the operator's own clock must see it).
    unavailable_silently: bool = False

    def _observed(self) -> rec.ObservedDeployment | None:
        if self.deployment is None:
            return None
        down = self.deadline_exceeded or self.unavailable_silently
        return observed_deployment(self.deployment, self.rollouts, ready=not down, deadline=self.deadline_exceeded)

    def _observed_canary(self) -> rec.ObservedDeployment | None:
        return None if self.canary is None else observed_deployment(self.canary, 1, ready=self.canary_ready)

    def reconcile(self, autotune: AutotuneOutcome | None = None) -> rec.ReconcileResult:
        observed = self._observed()
        live = {} if observed is None else {f"Deployment/{self.deployment_name}": observed.applied_hash}
        canary = self._observed_canary()
        if canary is not None:
            live[f"Deployment/{self.deployment_name}-canary"] = canary.applied_hash
        result = reconcile_chosen(
            rec.ReconcileInputs(
                name="chat",
                namespace="inference",
                uid="uid-chat",
                generation=1,
                annotations={},
                spec=self.spec,
                status=copy.deepcopy(self.status),
                now=format_time(self.now),
                live_children=live,
                deployment=observed,
                canary_deployment=canary,
                autotune_fields=autotune.fields if autotune else {},
                autotune_conditions=tuple(autotune.conditions) if autotune else (),
            )
        )
        if result.status_patch is not None:  # persisted first, as the operator does
            self.status = store(self.status, result.status_patch)
        for child in result.apply:
            if child["kind"] == "Deployment" and child["metadata"]["name"].endswith("-canary"):
                self.canary = child
            elif child["kind"] == "Deployment":
                rolled = self.deployment is None or template_hash(child) != template_hash(self.deployment)
                self.deployment = child
                self.rollouts += 1 if rolled else 0
        if f"Deployment/{self.deployment_name}-canary" in result.delete:
            self.canary = None
        self.events += [*(autotune.events if autotune else []), *result.events]
        return result

    @property
    def deployment_name(self) -> str:
        return "chat"

    def settle(self) -> None:
        """The pods of the current config are all ready: the next reconcile marks the rollout complete."""
        self.reconcile()

    def evaluate(
        self, measurements: dict[str, Measurement], canary: dict[str, Measurement] | None = None
    ) -> AutotuneOutcome:
        """One evaluation; `canary`: what the one-pod slot's config hash measured (a canary or a trial pod)."""
        outcome = conclude(
            v1alpha1.parse_spec(self.spec),
            annotations={},
            status=copy.deepcopy(self.status),
            deployment=self._observed(),
            measurements=measurements,
            canary=canary,
            now=self.now,
        )
        self.outcomes.append((self.now, outcome))
        self.reconcile(outcome)
        return outcome

    def argv(self) -> list[str]:
        assert self.deployment is not None
        return list(self.deployment["spec"]["template"]["spec"]["containers"][0]["command"])

    def advance(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)


@dataclass
class RoundTrip:
    cluster: Cluster
    argv_on: list[str]
    argv_off: list[str]
    argv_reenabled: list[str]
    disabled_at: datetime
    enabled_at: datetime
    second_disable_at: datetime | None
    held_gates: list[str]


def evaluate_until_actuated(cluster: Cluster, measurements: dict[str, Measurement], limit: int = 90) -> datetime:
    """Evaluate once a minute until an actuation; returns its time."""
    for _ in range(limit):
        cluster.advance(1)
        if cluster.evaluate(measurements).actuated:
            return cluster.now
    raise AssertionError(f"no actuation in {limit} evaluations; last: {cluster.outcomes[-1][1].decision}")


def round_trip(spec: dict[str, Any] | None = None) -> RoundTrip:
    """Healthy -> acceptance collapses (disable) -> a probe turns it back on -> collapses again within the quick
    window (a reversal: the dwell doubles). Settles after every rollout, as a real Deployment would."""
    cluster = Cluster(copy.deepcopy(spec or ROUND_TRIP_SPEC))
    cluster.reconcile()
    cluster.settle()
    argv_on = cluster.argv()
    cluster.advance(4)  # past the settling time of the first config
    collapsed = window_measurements(speculating=True, acceptance=0.2)
    disabled_at = evaluate_until_actuated(cluster, collapsed)
    cluster.settle()
    argv_off = cluster.argv()
    plain = window_measurements(speculating=False, acceptance=None)
    enabled_at = evaluate_until_actuated(cluster, plain)
    cluster.settle()
    argv_reenabled = cluster.argv()
    cluster.advance(4)
    held: list[str] = []
    second: datetime | None = None
    for _ in range(60):
        cluster.advance(1)
        outcome = cluster.evaluate(collapsed)
        if outcome.actuated:
            second = cluster.now
            break
        held.append(str(outcome.decision.get("gate", "")))
    cluster.settle()
    return RoundTrip(cluster, argv_on, argv_off, argv_reenabled, disabled_at, enabled_at, second, held)
