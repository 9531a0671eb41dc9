"""When two evaluations propose the same change (pure): the agreement key with a tolerance on fitted boundaries.

Agreement asks K consecutive evaluations to propose the same change. A fitted batch schedule is recomputed from each
window's acceptance and load, and its boundaries move by a batch size or two between windows for no reason but sampling
noise ([[1,23,3],[24,256,0]] then [[1,24,3],[25,256,0]]); compared exactly, consecutive evaluations would never agree
and no fitted schedule would ever be installed. Here two proposals agree when they are the same decision: same action,
same on/off, same K, the same K per range in the same order, and every boundary (and threshold) within
BOUNDARY_TOLERANCE of the streak's first proposal. Comparing against the first, not the previous one, stops a slow drift
from agreeing with itself forever.

Two rules for a change whose gain is priced (the scenarios that show them: docs/design/decisions.md):

- The stabilization span of a change that sheds speculation is no longer than the change takes to repay one restart
  (`stabilization_for`; a change toward more speculation keeps the whole span: fast toward safe): waiting
  forgoes gain x time, acting wrongly costs about one restart, so waiting beyond restart / gain costs more than the
  mistake it guards against (the ski-rental break-even; the backlog gate prices its wait the same way). A change with
  no gain figure of its own, or a small one, keeps the full span (an acceptance-only disable carries the refit's
  figures in its evidence, but they are another change's: decision.prices_its_own_gain); the agreeing evaluations
  are always required. The gain is the one at the load running now, not over the load record: waiting forgoes what
  the change would win at the load of the wait, while the record says whether the change is worth a restart at
  all. It is the per-request speed-up at the load served now (`predictedGainAtLoad`, schedule.gain_at_same_load):
  below capacity the arrivals set the throughput, and a faster step shrinks the batch and speeds each step again;
  priced at the same batch (`predictedGainNow`) near capacity, the gain reads far smaller and the wait far longer.
  The payback is judged by the gain forgone up to the next evaluation (`stabilized`): a hold lasts one interval, so
  holding while the time stable so far is below the payback overshoots it by up to an interval. A shed whose
  rollout costs no serving at the load now (the fit's `restart_free`: the pods left serving carry every arrival
  within the TPOT objective) has nothing to repay, whatever its gain: it waits only for the agreeing evaluations.
- Sheds agree by direction (`sheds`, `shed_alike`): while every proposal sheds speculation from the running config
  (K lower or equal at every batch size, lower at some), they are one decision in the safe direction (fast toward
  safe), and the newest is the one applied. Across actions any two sheds agree: a disable and a refit take turns
  while the acceptance hovers where they tie, two readings of one piece of evidence, and compared by key each turn
  would restart the streak and nothing would ever be applied. Within one action a proposal agrees only when it
  sheds at least as far as the streak's first: a fit falls a step per evaluation while its window fills with a
  drifted acceptance, whereas a fit moving back toward more speculation is a model that has not settled, and starts
  a new streak unless its boundaries are within the tolerance or its effect is. A proposal toward more speculation
  sheds nothing: it continues a streak only by key or by effect.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta

from specpilot.autotune.model.stepcost import k_for_batch
from specpilot.vllm.intent import SpeculationIntent, intent_from_dict

BOUNDARY_TOLERANCE_ABS = 2  # batch sizes: the ±1 jitter of two windows on either side of the anchor
BOUNDARY_TOLERANCE_REL = 0.1  # for large boundaries: 10% of the batch size


def _split(key: str) -> tuple[str, SpeculationIntent] | None:
    action, sep, body = key.partition(":")
    if not sep:
        return None
    try:
        return action, intent_from_dict(json.loads(body))
    except (ValueError, KeyError, TypeError):
        return None


def boundary_close(a: int | None, b: int | None) -> bool:
    if a is None or b is None:
        return a == b
    return abs(a - b) <= max(BOUNDARY_TOLERANCE_ABS, BOUNDARY_TOLERANCE_REL * max(a, b))


def same_shape(a: SpeculationIntent, b: SpeculationIntent) -> bool:
    """Equal on/off and K, both with or both without a schedule, the same K per range in the same order, both with
    or both without a threshold: two fits that can differ only in where their boundaries sit."""
    if a.enabled != b.enabled or a.num_speculative_tokens != b.num_speculative_tokens:
        return False
    if (a.disable_above_batch_size is None) != (b.disable_above_batch_size is None):
        return False
    if (a.batch_schedule is None) != (b.batch_schedule is None):
        return False
    if a.batch_schedule is None or b.batch_schedule is None:
        return True
    return [k for _, _, k in a.batch_schedule] == [k for _, _, k in b.batch_schedule]


def intents_agree(a: SpeculationIntent, b: SpeculationIntent) -> bool:
    """The same decision: the same shape, and every boundary (and threshold) within the tolerance."""
    if not same_shape(a, b):
        return False
    if not boundary_close(a.disable_above_batch_size, b.disable_above_batch_size):
        return False
    if a.batch_schedule is None or b.batch_schedule is None:
        return True
    return all(
        boundary_close(lo_a, lo_b) and boundary_close(hi_a, hi_b)
        for (lo_a, hi_a, _), (lo_b, hi_b, _) in zip(a.batch_schedule, b.batch_schedule, strict=True)
    )


def keys_agree(anchor: str, key: str) -> bool:
    """Does the proposal `key` agree with the streak's first proposal `anchor`? Exact keys always agree."""
    if anchor == key:
        return True
    first, second = _split(anchor), _split(key)
    if first is None or second is None or first[0] != second[0]:
        return False
    return intents_agree(first[1], second[1])


def anchor_intent(anchor: str, action: str) -> SpeculationIntent | None:
    """The config a streak's first proposal `anchor` proposes, when that proposal is `action`."""
    split = _split(anchor)
    return split[1] if split is not None and split[0] == action else None


def agree_by_effect(anchor: str, key: str, largest_gain: float | None, min_gain: float) -> bool:
    """Boundaries past the tolerance, or a band more or fewer, yet the same decision: the same action, and the cost
    model cannot tell the two apart: `largest_gain` (the proposal over the anchor where they differ most, at any batch
    size up to maxNumSeqs: schedule.plan_threshold's `vsAnchor`; None when not priced) within the fit's minimum gain,
    the model's error.

    A boundary sits where two K tie, so it is the least determined number of a fit: on a ramp it drifts past the
    tolerance while the two schedules differ by less than the model's error at every batch size, and at the edge of
    the schedule a band appears or vanishes the same way (K = 4 at batch 1 only, where K = 4 and K = 3 tie), a
    shape that differs while the effect does not (docs/design/decisions.md). The comparison is against the streak's
    first proposal, never the previous one, so a drift that adds up to a real difference still breaks it.
    """
    if largest_gain is None:
        return False
    first, second = _split(anchor), _split(key)
    if first is None or second is None or first[0] != second[0]:
        return False
    return abs(largest_gain) < min_gain


def _k_by_batch(intent: SpeculationIntent, max_k: int, max_num_seqs: int) -> list[int]:
    return [k_for_batch(intent, b, max_k) for b in range(1, max_num_seqs + 1)]


def sheds(current: SpeculationIntent, target: SpeculationIntent, max_num_seqs: int) -> bool:
    """Does `target` speculate less than `current`: K lower or equal at every batch size up to maxNumSeqs (off is
    K = 0 everywhere), lower at some?"""
    max_k = max(current.num_speculative_tokens or 0, target.num_speculative_tokens or 0)
    now = _k_by_batch(current, max_k, max_num_seqs)
    new = _k_by_batch(target, max_k, max_num_seqs)
    return all(b <= a for a, b in zip(now, new, strict=True)) and new != now


def shed_alike(anchor: str, key: str, current: SpeculationIntent, max_num_seqs: int) -> bool:
    """Do the streak's first proposal `anchor` and the proposal `key` both shed speculation from the running
    `current`, as another action or, as the same action, `key` at least as far? (Agreement by direction.)"""
    first, second = _split(anchor), _split(key)
    if first is None or second is None:
        return False
    if not (sheds(current, first[1], max_num_seqs) and sheds(current, second[1], max_num_seqs)):
        return False
    if first[0] != second[0]:
        return True
    return first[1] == second[1] or sheds(first[1], second[1], max_num_seqs)


def stabilized(stable: timedelta, span: timedelta, *, priced: bool, interval: timedelta) -> bool:
    """Has the streak been stable long enough to act? `span` is the stabilization, or the change's payback when
    `stabilization_for` shortened it (`priced`). A payback span is judged by the gain forgone up to the next
    evaluation: a hold lasts one `interval`, so holding while only the time stable so far is below the payback forgoes
    up to an interval more than a wrong restart costs (the backlog gate counts its deferral the same way,
    backlog.py). A declared stabilization is kept as written: every recommendation within it agreed."""
    if priced:
        return stable + interval >= span
    return stable >= span


def experiment_wait(span: timedelta, trial: timedelta) -> tuple[timedelta, bool]:
    """The stabilization span of an experiment: min(span, `trial`), the time its one-pod trial takes from the
    restart to the analysis; True when shortened. The trial is the check the span would be, and it can only measure
    the doubt that started it while that doubt lasts: a saturation that has lasted one trial's length is as likely
    to last another as to pass (a state's age predicts its remaining life), and one that passes sooner is the
    transient the wait guards against."""
    if trial < span:
        return trial, True
    return span, False


def stabilization_for(span: timedelta, gain: float, restart_cost_s: float) -> tuple[timedelta, bool]:
    """The stabilization span for a change of this relative gain: min(span, restart / gain); True when shortened.
    A restart that costs nothing has nothing to repay, whatever the gain: no span beyond the agreeing evaluations."""
    if restart_cost_s <= 0:
        return timedelta(0), True
    payback = restart_cost_s / gain if gain > 0 else math.inf
    if payback < span.total_seconds():
        return timedelta(seconds=payback), True
    return span, False
