"""The actuation budget: minimum interval, per hour and per day, and a longer dwell after a reversal (pure).

Kept in `status.autotune` (`PolicyState.actuations`), so an operator restart does not forget it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from specpilot.api.durations import format_duration, parse_duration
from specpilot.api.timestamps import format_time
from specpilot.api.v1alpha1 import (
    AutotuneMode,
    BudgetSpec,
)
from specpilot.autotune.policy.state import Action, ActuationRecord, Decision, OffRecord, PolicyState
from specpilot.vllm.intent import (
    SpeculationIntent,
    intent_from_dict,
    intent_to_dict,
)

ACTUATION_HISTORY = 50
MAX_DWELL = timedelta(days=1)


def _same_intent(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal as intents: status keeps no null members (a merge patch deletes them), so JSON text differs."""
    return intent_from_dict(a) == intent_from_dict(b)


def quick_reversal_window(budget: BudgetSpec) -> timedelta:
    """How soon an actuation that undoes the previous one counts as a reversal (and lengthens the next dwell)."""
    return max(timedelta(hours=1), 4 * timedelta(seconds=parse_duration(budget.min_interval)))


def is_reversal(
    history: tuple[ActuationRecord, ...],
    current: SpeculationIntent,
    target: SpeculationIntent,
    now: datetime,
    budget: BudgetSpec,
) -> bool:
    """Does applying `target` now undo the previous actuation quickly (within max(1h, 4 x minInterval))?"""
    if not history:
        return False
    last = history[-1]
    return (
        _same_intent(last.to_intent, intent_to_dict(current))
        and _same_intent(last.from_intent, intent_to_dict(target))
        and now - last.at <= quick_reversal_window(budget)
    )


def required_dwell(history: tuple[ActuationRecord, ...], budget: BudgetSpec, *, reversing: bool) -> timedelta:
    """minInterval x reversalBackoff^n, n = trailing reversals (+1 if this one reverses too), capped at one day."""
    chain = 0
    for record_ in reversed(history):
        if not record_.reversal:
            break
        chain += 1
    return dwell_after(budget, chain + (1 if reversing else 0))


def dwell_after(budget: BudgetSpec, reversals: int) -> timedelta:
    """The dwell after an actuation that ends a chain of `reversals` reversals: minInterval x reversalBackoff^n,
    capped at MAX_DWELL."""
    dwell = parse_duration(budget.min_interval) * budget.reversal_backoff**reversals
    return min(timedelta(seconds=dwell), MAX_DWELL)


def budget_check(
    state: PolicyState, budget: BudgetSpec, current: SpeculationIntent, target: SpeculationIntent, now: datetime
) -> tuple[bool, str]:
    """(allowed, why not): dwell since the last actuation, then per rolling hour and day."""
    history = state.actuations
    reversing = is_reversal(history, current, target, now, budget)
    if history:
        dwell = required_dwell(history, budget, reversing=reversing)
        ready = history[-1].at + dwell
        if now < ready:
            why = (
                f" (x{budget.reversal_backoff:g} per reversal)"
                if dwell > timedelta(seconds=parse_duration(budget.min_interval))
                else ""
            )
            return False, (
                f"last actuation at {format_time(history[-1].at)}; dwell {format_duration(dwell.total_seconds())}"
                f"{why}, next allowed at {format_time(ready)}"
            )
    for span, limit, name in (
        (timedelta(hours=1), budget.max_per_hour, "maxPerHour"),
        (timedelta(days=1), budget.max_per_day, "maxPerDay"),
    ):
        recent = [a for a in history if now - a.at < span]
        if len(recent) >= limit:
            next_at = f", next allowed at {format_time(recent[0].at + span)}" if recent else ""
            return (
                False,
                f"{len(recent)} actuations in the last {format_duration(span.total_seconds())} "
                f"({name} {limit}){next_at}",
            )
    return True, ""


def record_actuation(
    state: PolicyState, decision: Decision, current: SpeculationIntent, now: datetime, budget: BudgetSpec
) -> PolicyState:
    """The state after the shell applied `decision.target` (call only after the apply succeeded)."""
    reversal = is_reversal(state.actuations, current, decision.target, now, budget)
    entry = ActuationRecord(
        at=now,
        action=decision.action,
        from_intent=intent_to_dict(current),
        to_intent=intent_to_dict(decision.target),
        reason=decision.reason,
        probe=decision.probe,
        reversal=reversal,
    )
    keep_after = now - timedelta(days=1)
    history = [a for a in state.actuations if a.at > keep_after] or list(state.actuations[-2:])
    history = [*history, entry][-ACTUATION_HISTORY:]
    off = state.off
    probe_started = state.probe_started
    last_probe = state.last_probe
    if decision.action is Action.DISABLE and decision.off_kind is not None:
        off = OffRecord(
            decision.off_kind,
            now,
            decision.batch,
            decision.reason.split(" over ")[0],
            decision.acceptance,
            decision.request_rate,
        )
        probe_started = None
    elif decision.action is Action.ENABLE:
        if decision.probe:
            probe_started = last_probe = now
        else:
            off = None
    return replace(
        state,
        actuations=tuple(history),
        selected=decision.target,
        off=off,
        probe_started=probe_started,
        last_probe=last_probe,
        streak=None,
        throttled=False,
        backlog_since=None,
        backlog_dropped=None,
    )


def record_candidate_trial(
    state: PolicyState, current: SpeculationIntent, target: SpeculationIntent, now: datetime, reason: str
) -> PolicyState:
    """The state after a one-pod trial of a candidate drafter was recorded: charged to the actuation budget like any
    actuation (a pod restarts for it), while the config autotune selected for every pod stays as it is. The record
    keeps the running drafter beside the running intent, so a failed promotion returns to both."""
    entry = ActuationRecord(
        at=now,
        action=Action.TRY_CANDIDATE,
        from_intent={**intent_to_dict(current), "drafter": state.drafter},
        to_intent=intent_to_dict(target),
        reason=reason,
    )
    keep_after = now - timedelta(days=1)
    history = [a for a in state.actuations if a.at > keep_after] or list(state.actuations[-2:])
    return replace(state, actuations=tuple([*history, entry][-ACTUATION_HISTORY:]))


def actuation_entry(
    decision: Decision, current: SpeculationIntent, now: datetime, mode: AutotuneMode
) -> dict[str, Any]:
    """One item for status.actuations (keep the last 10): when, from -> to, reason, the queries and their values."""
    return {
        "at": format_time(now),
        "action": decision.action.value,
        "mode": mode.value,
        "from": intent_to_dict(current),
        "to": intent_to_dict(decision.target),
        "reason": decision.reason,
        "probe": decision.probe,
        "evidence": decision.evidence,
    }
