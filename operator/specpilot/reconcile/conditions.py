"""Status conditions, following metav1.Condition conventions.

Every condition type is present from the first reconcile (Unknown is fine), `lastTransitionTime` moves only when the
status flips, and reasons are CamelCase and equal to the Event reasons posted for the same transition, so
`kubectl describe` and `kubectl get events` tell one story.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
SPECULATION_ACTIVE = "SpeculationActive"
METRICS_AVAILABLE = "MetricsAvailable"
MEMORY_FIT = "MemoryFit"
THROTTLED = "Throttled"
PAUSED = "Paused"
THRESHOLD_SUPPORTED = "ThresholdSupported"
# A one-pod trial of an autotune change (progressive actuation): present once the first trial started, so it is not
# among CONDITION_TYPES (True while the trial pod runs; False with TrialPromoted, TrialRolledBack or TrialAbandoned).
TRIAL = "Trial"
# The seed framework's advice (framework_rules.py): set by every autotune evaluation, Unknown until the first one
# (reason AutotuneOff or NoPrometheus while autotune cannot run: nothing measures then).
QUANTIZATION_PENALTY = "QuantizationPenalty"
ACCEPTANCE_METHOD = "AcceptanceMethod"
SHORT_OUTPUTS = "ShortOutputs"
MIXED_WORKLOAD = "MixedWorkload"
FRAMEWORK_CONDITIONS: tuple[str, ...] = (QUANTIZATION_PENALTY, ACCEPTANCE_METHOD, SHORT_OUTPUTS, MIXED_WORKLOAD)

CONDITION_TYPES: tuple[str, ...] = (
    READY,
    PROGRESSING,
    DEGRADED,
    SPECULATION_ACTIVE,
    METRICS_AVAILABLE,
    MEMORY_FIT,
    THROTTLED,
    PAUSED,
    THRESHOLD_SUPPORTED,
    *FRAMEWORK_CONDITIONS,
)


@dataclass(frozen=True)
class ConditionUpdate:
    """What the reconcile concluded about one condition type; merged into the stored list by `merge_conditions`."""

    type: str
    status: Status
    reason: str
    message: str = ""


def merge_conditions(
    existing: Sequence[dict[str, Any]],
    updates: Iterable[ConditionUpdate],
    *,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """Return the full condition list: updates applied, untouched types kept, missing standard types Unknown."""
    by_type = {c["type"]: dict(c) for c in existing if "type" in c}
    stored = dict(by_type)
    for update in updates:
        # Compared with the stored condition, not with an earlier update of the same type in this list (a later
        # update overrides an earlier one): otherwise the transition time would move on every reconcile.
        previous = stored.get(update.type)
        since = now
        if previous is not None and previous.get("status") == update.status:
            since = previous.get("lastTransitionTime", now)
        by_type[update.type] = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message,
            "observedGeneration": generation,
            "lastTransitionTime": since,
        }
    for ctype in CONDITION_TYPES:
        by_type.setdefault(
            ctype,
            {
                "type": ctype,
                "status": "Unknown",
                "reason": "NotYetObserved",
                "message": "",
                "observedGeneration": generation,
                "lastTransitionTime": now,
            },
        )
    ordered = [by_type.pop(t) for t in CONDITION_TYPES]
    return ordered + sorted(by_type.values(), key=lambda c: str(c["type"]))


def find(conditions: Sequence[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == ctype), None)


def transitions(
    before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]
) -> list[tuple[dict[str, Any] | None, dict[str, Any]]]:
    """Pairs (old, new) for every condition whose status or reason changed: these, and only these, post Events."""
    changed = []
    for new in after:
        old = find(before, new["type"])
        if old is None or old.get("status") != new.get("status") or old.get("reason") != new.get("reason"):
            changed.append((old, new))
    return changed


def without_timestamps(conditions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions minus fields that change without meaning, for "did anything change?" comparisons."""
    return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions]
