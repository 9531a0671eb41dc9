"""A change priced on a fit whose ridge the windows do not identify stands only where every rival fit agrees."""

from __future__ import annotations

import math

import pytest

from specpilot.autotune.model.schedule import ThresholdPlan, ThresholdSupport
from specpilot.autotune.model.stepfit import StepFit
from specpilot.autotune.policy.proposals import agreed_by_rivals
from specpilot.vllm.intent import SpeculationIntent

SCHEDULE = SpeculationIntent(True, 3, batch_schedule=((1, 26, 3), (27, 256, 1)))


def plan(kind: str) -> ThresholdPlan:
    """A plan that refits ("refit"), switches speculation off ("off") or changes nothing ("keep")."""
    proposed = SCHEDULE if kind == "refit" else None
    reason = {"refit": "K3 to 26, K1 above", "off": "off wins", "keep": "nothing pays"}[kind]
    return ThresholdPlan(
        ThresholdSupport.SCHEDULE, proposed, 0.1 if proposed else 0.0, 60.0 if proposed else math.inf,
        proposed is not None, reason, {}, disable=kind == "off",
    )  # fmt: skip


def rival(scale: float) -> StepFit:
    return StepFit(None, 1.0, 1.0, 0.5, 0.02, 7, 3, f"ridge x{scale:g}", scale)


@pytest.mark.parametrize(
    ("main", "rivals", "stands", "held_by"),
    [
        ("refit", ["refit", "refit"], True, None),
        ("refit", ["off", "refit"], True, None),  # off is a change too: the windows support leaving the running K
        ("refit", ["refit", "keep"], False, 0.6),
        ("refit", ["refit", None], False, 0.6),  # a rival that prices nothing does not agree
        ("off", ["off", "off"], True, None),
        ("off", ["refit", "off"], False, 0.5),  # off needs every rival to price off
        ("off", ["keep"], False, 0.5),
        ("keep", ["off"], True, None),  # no change proposed: nothing to agree with, the plan is returned as it is
    ],
)  # fmt: skip
def test_a_change_stands_only_where_every_rival_agrees(
    main: str, rivals: list[str | None], stands: bool, held_by: float | None
) -> None:
    priced = [(rival(scale), None if r is None else plan(r)) for scale, r in zip((0.5, 0.6), rivals, strict=False)]
    out = agreed_by_rivals(plan(main), priced)
    if stands:
        assert out == plan(main)
        return
    assert out.proposed is None
    assert not out.disable
    assert not out.worth_installing
    assert out.reason.startswith(plan(main).reason + "; held: ")
    assert f"ridge x{held_by:g} of the profile's" in out.reason, out.reason
