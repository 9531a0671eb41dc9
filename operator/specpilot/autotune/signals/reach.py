"""Per-position acceptance measured under a batch-size schedule, corrected for drafts that never reached it (pure).

vLLM's per-position counter (`spec_decode_num_accepted_tokens_per_pos`) is read as r_j = accepted at position j /
drafts, every draft in the denominator. With one K that is the unconditional survival the schedule fit needs. Under
`num_speculative_tokens_per_batch_size` the K of a step follows the batch, so in a window that ran partly at K = 1
position 2 is counted against drafts that never proposed it, and r_2 reads low by the share of those drafts.

Read uncorrected, a schedule biases the measurement that judges it: under [[1,62,2],[63,256,1]] at batch ~200
almost every draft runs at K = 1, r_2 reads near 0 where the drafter's true r_2 is 0.5, and the fit, seeing
position 2 as worthless, proposes K = 1 everywhere for a "gain" that is the counter's denominator.

What is known in a window: the mean K per draft, draft tokens / drafts = Σ_j r_j / acceptance rate (the
per-position counters sum to the accepted counter). With two positive levels K_lo < K_hi (one boundary, what a fit at
K <= 2 or a K-then-0 table with a middle step gives) the share of drafts at K_hi is exact:
f = (mean - K_lo) / (K_hi - K_lo), and positions K_lo+1..K_hi were reached by that share. With more levels the
drafts are taken to run at the two adjacent levels around the mean K: a window's batch moves around its mean and
crosses the boundary near it, not every boundary of the table (exact when the window crossed at most one). A position
reached by fewer than MIN_REACH of the drafts is not measured in this window at all (the load sat above its range):
the fit must not act on it.

Taking the drafts above K_lo to run at the table's largest K instead overstates the later positions and proposes a
spurious refit, a second restart (docs/design/decisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

MIN_REACH = 0.1  # below this share of the drafts, a position's rate is a few samples scaled up: not a measurement


def drafts_reaching(levels: Sequence[int], mean_k: float) -> tuple[float, ...]:
    """Share of the window's drafts that proposed each 0-based position, from the schedule's Ks and the mean K.

    `levels`: the K of every range of the running schedule (already clamped to num_speculative_tokens); K = 0 steps
    draft nothing and do not count. One positive level (a static K, or K then 0): every draft reached every position.
    Several: the drafts ran at the two adjacent levels around `mean_k` (module docstring).
    """
    ks = sorted({k for k in levels if k > 0})
    if not ks:
        return ()
    top = ks[-1]
    if len(ks) == 1:
        return (1.0,) * top
    mean = min(max(mean_k, ks[0]), top)  # noise past the table's levels is clamped
    lo, hi = next((a, b) for a, b in pairwise(ks) if a <= mean <= b)
    share = (mean - lo) / (hi - lo)
    return tuple(1.0 if j < lo else share if j < hi else 0.0 for j in range(top))


@dataclass(frozen=True)
class Corrected:
    """Per-position survival divided by its reach; `unmeasured` names positions too rarely drafted to use."""

    by_position: dict[int, float]
    reach: tuple[float, ...]
    unmeasured: tuple[int, ...]
    note: str


def correct_positions(
    by_position: Mapping[int, float], *, levels: Sequence[int], acceptance_rate: float | None
) -> Corrected:
    """r_j / reach_j for the positions a schedule drafts only at low batch (see the module docstring).

    Nothing to correct with one positive level, or when nothing was accepted (every r_j is 0 whatever the reach).
    """
    measured = dict(by_position)
    accepted_per_draft = sum(v for v in measured.values() if v > 0)
    if acceptance_rate is None or acceptance_rate <= 0 or accepted_per_draft <= 0:
        return Corrected(measured, (), (), "")
    mean_k = accepted_per_draft / acceptance_rate
    reach = drafts_reaching(levels, mean_k)
    if not reach or min(reach) >= 1.0:
        return Corrected(measured, reach, (), "")
    unmeasured = tuple(j for j, share in enumerate(reach) if share < MIN_REACH)
    corrected = {j: (v / reach[j] if j < len(reach) and reach[j] >= MIN_REACH else v) for j, v in measured.items()}
    shares = ", ".join(f"{share:.0%}" for share in reach)
    note = (
        f"{mean_k:.2f} draft tokens per draft under the running schedule: positions reached by [{shares}] of the "
        "drafts, per-position acceptance divided by that share"
    )
    if unmeasured:
        note += (
            f"; position{'s' if len(unmeasured) > 1 else ''} {', '.join(str(j + 1) for j in unmeasured)} drafted by "
            f"< {MIN_REACH:.0%} of the drafts (the load sat above its range): not measured in this window"
        )
    return Corrected(corrected, reach, unmeasured, note)
