"""When two evaluations propose the same change (pure): the agreement key with a tolerance on fitted boundaries.

Agreement (control-loop rules 11, 12) asks K consecutive evaluations to propose the same change. A fitted batch
schedule is recomputed from each window's acceptance and load, and its boundaries move by a batch size or two between
windows for no reason but sampling noise ([[1,23,3],[24,256,0]] then [[1,24,3],[25,256,0]]). Comparing the exact
schedule made consecutive evaluations never agree, so no fitted schedule was ever installed (found by the simulator
benchmark). Here two proposals agree when they are the same decision: same action, same on/off, same K, the same K
per range in the same order, and every boundary (and threshold) within BOUNDARY_TOLERANCE of the streak's first
proposal. Comparing against the first, not the previous one, stops a slow drift from agreeing with itself forever.
"""

from __future__ import annotations

import json

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


def intents_agree(a: SpeculationIntent, b: SpeculationIntent) -> bool:
    """The same decision: equal on/off and K, schedules with the same K sequence and close boundaries."""
    if a.enabled != b.enabled or a.num_speculative_tokens != b.num_speculative_tokens:
        return False
    if not boundary_close(a.disable_above_batch_size, b.disable_above_batch_size):
        return False
    if (a.batch_schedule is None) != (b.batch_schedule is None):
        return False
    if a.batch_schedule is None or b.batch_schedule is None:
        return True
    if [k for _, _, k in a.batch_schedule] != [k for _, _, k in b.batch_schedule]:
        return False
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
