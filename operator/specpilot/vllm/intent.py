"""The speculation configuration to run, independent of how a vLLM version spells it.

The spec gives the user's intent; the autotuner may decide another (speculation off, another threshold or batch-size
schedule). Both meet here, and the dialect renderer turns one SpeculationIntent into the argv of a given version.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specpilot.api.v1alpha1 import SpeculativeDeploymentSpec

# Inclusive (first batch size, last batch size, tokens to propose); K = 0 means no speculation at that size.
BatchSchedule = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class SpeculationIntent:
    enabled: bool
    num_speculative_tokens: int | None
    disable_above_batch_size: int | None = None
    batch_schedule: BatchSchedule | None = None  # takes precedence over disable_above_batch_size where supported

    def without_speculation(self) -> SpeculationIntent:
        return replace(self, enabled=False)


def intent_from_spec(spec: SpeculativeDeploymentSpec) -> SpeculationIntent:
    """The user's declared intent, before any autotune decision."""
    return SpeculationIntent(
        enabled=spec.speculation.enabled,
        num_speculative_tokens=spec.speculation.num_speculative_tokens,
        disable_above_batch_size=spec.speculation.disable_above_batch_size,
    )
