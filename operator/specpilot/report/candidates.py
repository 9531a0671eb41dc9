"""The report's comparison of candidate drafters, from status.candidates as the operator stores it (pure).

Each candidate's last trial put one pod running it beside the incumbent pods, on the same traffic and window; its
record keeps both sides' figures and the verdict. The table shows them side by side, candidate / incumbent, so a
reader sees why a drafter won or lost without querying Prometheus again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specpilot.api.v1alpha1 import CandidateStatus, CandidateVerdict, TrialFigures
from specpilot.autotune.policy.drafters import read_records

HEADER = (
    "| candidate | drafter | K | verdict | trials | speedup | tokens/s per pod | acceptance | P50 TPOT ms | "
    "P99 TPOT ms | batch | requests | measured at |"
)
RULE = "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
MAX_REASON = 160  # characters of a verdict's reason in the notes below the table


def _cell(text: str) -> str:
    """One Markdown table cell: pipes and line breaks from stored text would break the table."""
    return text.replace("|", "\\|").replace("\n", " ")


def _pair(record: CandidateStatus, field: str, fmt: str) -> str:
    """`candidate / incumbent` for one figure; `-` where a side has none."""

    def one(figures: TrialFigures | None) -> str:
        value = None if figures is None else getattr(figures, field)
        return "-" if value is None else format(value, fmt)

    if record.candidate is None and record.incumbent is None:
        return "-"
    return f"{one(record.candidate)} / {one(record.incumbent)}"


def _row(record: CandidateStatus) -> str:
    cells = [
        record.name,
        f"{record.method}: {record.drafter}" if record.drafter != record.method else record.method,
        "-" if record.num_speculative_tokens is None else str(record.num_speculative_tokens),
        record.verdict.value,
        str(record.trials or 0),
        "-" if record.speedup is None else f"{record.speedup:.2f}x",
        _pair(record, "output_tokens_per_second", ".1f"),
        _pair(record, "acceptance_rate", ".1%"),
        _pair(record, "p50_tpot_ms", ".2f"),
        _pair(record, "p99_tpot_ms", ".2f"),
        _pair(record, "mean_batch_size", ".1f"),
        _pair(record, "requests", "d"),
        record.evidence_time or "-",
    ]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _note(record: CandidateStatus) -> str:
    reason = record.reason or ""
    if len(reason) > MAX_REASON:
        reason = reason[:MAX_REASON] + "..."
    retry = f" Not tried again before {record.retry_after}, unless the traffic shifts." if record.retry_after else ""
    if record.verdict is CandidateVerdict.LOST:
        retry = " Not tried again until the traffic shifts from what it was measured on."
    return _cell(f"- `{record.name}` {record.verdict.value}: {reason}{retry}".rstrip())


def candidate_records(status: Any) -> list[CandidateStatus]:
    """status.candidates of a stored object (a mapping, or anything else for none)."""
    return read_records(status.get("candidates") if isinstance(status, dict) else None)


def render_candidates(records: Sequence[CandidateStatus]) -> list[str]:
    """The Markdown section comparing the candidates (figures: candidate pod / incumbent pods); empty for none."""
    if not records:
        return []
    return [
        "## Candidate drafters",
        "",
        "Each candidate's last trial on one pod beside the incumbent pods, same traffic and window "
        "(figures: candidate / incumbent; speedup above 1: the candidate was faster).",
        "",
        HEADER,
        RULE,
        *[_row(r) for r in records],
        "",
        *[_note(r) for r in records],
        "",
    ]
