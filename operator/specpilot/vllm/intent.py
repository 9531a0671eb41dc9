"""The speculation configuration to run, independent of how a vLLM version spells it.

The spec gives the user's intent; the autotuner may decide another (speculation off, another threshold or batch-size
schedule). Both meet here, and the dialect renderer turns one SpeculationIntent into the argv of a given version.

An intent is also what the operator records as running (`status.effective.intent`) and what the autotuner compares
and reverts to, so its JSON form is lossless: switching speculation off keeps K, the threshold and the schedule, and
switching it back on restores exactly them (a bare `--speculative-config` without K is refused by vLLM).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from specpilot.api.v1alpha1 import SpeculationCandidate, SpeculativeDeploymentSpec

# Inclusive (first batch size, last batch size, tokens to propose); K = 0 means no speculation at that size.
BatchSchedule = tuple[tuple[int, int, int], ...]


class IntentSource(StrEnum):
    """Where the configuration to render came from."""

    SPEC = "spec"
    AUTOTUNE = "autotune"
    OVERRIDE = "override"


@dataclass(frozen=True)
class SpeculationIntent:
    enabled: bool
    num_speculative_tokens: int | None
    disable_above_batch_size: int | None = None
    batch_schedule: BatchSchedule | None = None  # takes precedence over disable_above_batch_size where supported

    def without_speculation(self) -> SpeculationIntent:
        """Off, remembering what to turn back on."""
        return replace(self, enabled=False)

    def with_speculation(self) -> SpeculationIntent:
        """On again, with the K, threshold and schedule this intent remembered."""
        return replace(self, enabled=True)


def intent_from_spec(spec: SpeculativeDeploymentSpec) -> SpeculationIntent:
    """The user's declared intent, before any autotune decision."""
    return SpeculationIntent(
        enabled=spec.speculation.enabled,
        num_speculative_tokens=spec.speculation.num_speculative_tokens,
        disable_above_batch_size=spec.speculation.disable_above_batch_size,
    )


def intent_to_dict(intent: SpeculationIntent) -> dict[str, Any]:
    """The lossless JSON form (status.effective.intent, status.autotune, actuation records)."""
    return {
        "enabled": intent.enabled,
        "numSpeculativeTokens": intent.num_speculative_tokens,
        "disableAboveBatchSize": intent.disable_above_batch_size,
        "batchSchedule": [list(r) for r in intent.batch_schedule] if intent.batch_schedule else None,
    }


def intent_from_dict(raw: Mapping[str, Any]) -> SpeculationIntent:
    """Inverse of intent_to_dict; absent members (a merge patch drops nulls) read as None."""
    return SpeculationIntent(
        enabled=bool(raw["enabled"]),
        num_speculative_tokens=_opt_int(raw.get("numSpeculativeTokens")),
        disable_above_batch_size=_opt_int(raw.get("disableAboveBatchSize")),
        batch_schedule=schedule_from_list(raw.get("batchSchedule")),
    )


def schedule_from_list(raw: Any) -> tuple[tuple[int, int, int], ...] | None:
    """A stored batchSchedule ([[first, last, K], ...]) as ranges; ValueError naming the entry that is not a triple
    of integers."""
    if not raw:
        return None
    ranges = []
    for entry in raw:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or not all(isinstance(v, int) for v in entry):
            raise ValueError(f"batchSchedule entry {str(entry)[:60]} is not a [first, last, K] triple of integers")
        ranges.append((entry[0], entry[1], entry[2]))
    return tuple(ranges)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def complete_intent(intent: SpeculationIntent, spec: SpeculativeDeploymentSpec) -> SpeculationIntent:
    """Fill what an intent lacks from the spec (K, threshold), so turning speculation on never renders without K.

    Only an intent read from an older status (before the lossless record) can lack them; a schedule is never
    invented: without one, the spec's threshold is compiled by the renderer.
    """
    declared = intent_from_spec(spec)
    k = intent.num_speculative_tokens if intent.num_speculative_tokens is not None else declared.num_speculative_tokens
    threshold = intent.disable_above_batch_size
    if threshold is None and intent.batch_schedule is None:
        threshold = declared.disable_above_batch_size
    return replace(intent, num_speculative_tokens=k, disable_above_batch_size=threshold)


@dataclass(frozen=True)
class ChosenIntent:
    """The configuration to render and where it came from: decided by the autotuner, handed to the reconcile as data."""

    intent: SpeculationIntent
    source: IntentSource
    reason: str | None = None  # the last actuation's reason, when the autotuner chose it
    # A config on trial on one pod (progressive actuation): the other pods keep `intent` until it is promoted.
    trial: SpeculationIntent | None = None
    # The candidate drafter the trial pod runs in place of the declared one (spec.speculation.candidates[]), if any.
    trial_candidate: SpeculationCandidate | None = None
    # The candidate drafter promoted to every pod in place of the declared one (spec.speculation.candidates[]), if any.
    drafter: SpeculationCandidate | None = None
