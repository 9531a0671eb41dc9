"""A benchmark run against a stored one (`specpilot bench --against RUN.json`): every row of this run beside the
stored row of the same scenario, seed and policy, with the ratios the targets are judged by.

The stored run is what `specpilot bench -o json` printed (a list of rows) or the `bench.json` it wrote (rows under
"rows"). It must come from the same settings (`--quick`, `--true-profile`, the trace's scaling), which rows do not
record; the replicas they do record, and a row is compared only with a stored row of as many replicas.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specpilot.bench.report import PLAIN, actuations_text, better_plain, goodput_ratio

Key = tuple[str, int, str]  # (scenario, seed, policy)
NUMBERS = ("goodput", "failed", "replicas")


class StoredRunError(ValueError):
    """A stored run that cannot be read as rows: says which file, which row and which field."""


def parse_stored_rows(text: str, source: str) -> dict[Key, dict[str, Any]]:
    """The stored run's rows by (scenario, seed, policy); StoredRunError naming the file, row and field otherwise."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise StoredRunError(f"{source}: not JSON ({err.msg} at line {err.lineno})") from err
    rows = document.get("rows") if isinstance(document, dict) else document
    if not isinstance(rows, list):
        raise StoredRunError(f"{source}: expected the rows of `specpilot bench -o json` (a list) or a bench.json")
    out: dict[Key, dict[str, Any]] = {}
    for index, row in enumerate(rows):
        key = _key(row, f"{source}: row {index}")
        if key in out:
            raise StoredRunError(f"{source}: row {index}: a second row for {key[0]}, seed {key[1]}, {key[2]}")
        out[key] = row
    return out


def _key(row: Any, where: str) -> Key:
    if not isinstance(row, dict):
        raise StoredRunError(f"{where}: not an object")
    for field, kind, name in (("scenario", str, "a string"), ("policy", str, "a string"), ("seed", int, "an integer")):
        if not isinstance(row.get(field), kind) or isinstance(row.get(field), bool):
            raise StoredRunError(f"{where}: field {field!r} must be {name}, got {row.get(field)!r}")
    for field in NUMBERS:
        value = row.get(field)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise StoredRunError(f"{where}: field {field!r} must be a number >= 0, got {value!r}")
    return row["scenario"], row["seed"], row["policy"]


@dataclass(frozen=True)
class Compared:
    """One row of this run beside its stored row; the ratios to the oracle and to max(off, always-on) from this run's
    reference rows where it has them, else the stored run's (they do not depend on the policy)."""

    key: Key
    goodput: float
    stored_goodput: float | None  # None: no stored row of as many replicas
    vs_oracle: float | None
    vs_plain: float | None
    failed: int
    stored_failed: int | None
    actuations: str
    stored_actuations: str
    note: str = ""

    @property
    def moved(self) -> bool:
        """Served differently: goodput, requests lost or actuations (a trial can leave goodput as it was)."""
        return (self.goodput, self.failed, self.actuations) != (
            self.stored_goodput,
            self.stored_failed,
            self.stored_actuations,
        )


def compare(rows: Sequence[Mapping[str, Any]], stored: Mapping[Key, Mapping[str, Any]]) -> list[Compared]:
    """Every row of this run against the stored run (parse_stored_rows)."""
    mine = {(r["scenario"], r["seed"], r["policy"]): r for r in rows}
    return [_compared(key, row, stored.get(key), _references(key, mine, stored)) for key, row in mine.items()]


def _references(
    key: Key, mine: Mapping[Key, Mapping[str, Any]], stored: Mapping[Key, Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    scenario, seed, _ = key
    found: dict[str, Mapping[str, Any]] = {}
    for policy in ("oracle", *PLAIN):
        reference = mine.get((scenario, seed, policy)) or stored.get((scenario, seed, policy))
        if reference is not None:
            found[policy] = reference
    return found


def _compared(
    key: Key, row: Mapping[str, Any], old: Mapping[str, Any] | None, references: Mapping[str, Mapping[str, Any]]
) -> Compared:
    note = ""
    if old is not None and old["replicas"] != row["replicas"]:
        note = f"not compared: the stored row ran {old['replicas']} replicas, this one {row['replicas']}"
        old = None
    alike = {p: r for p, r in references.items() if r["replicas"] == row["replicas"]}
    return Compared(
        key,
        float(row["goodput"]),
        None if old is None else float(old["goodput"]),
        goodput_ratio(row, alike.get("oracle")),
        goodput_ratio(row, better_plain(alike.get(p) for p in PLAIN)),
        int(row["failed"]),
        None if old is None else int(old["failed"]),
        _actuations(row),
        "" if old is None else _actuations(old),
        note,
    )


def _actuations(row: Mapping[str, Any]) -> str:
    return actuations_text(row.get("actuations", 0), row.get("changes"), row.get("trials"))


HEADER = ("scenario", "seed", "policy", "goodput stored -> now", "now / stored", "vs oracle", "vs max(off, always-on)",
          "failed stored -> now", "actuations (changes, trials) stored -> now")  # fmt: skip


def table(compared: Sequence[Compared]) -> str:
    """The comparison as aligned columns, with a count of the rows that moved and the targets met now."""
    lines = [HEADER, *(_line(c) for c in compared)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    text += [f"   {c.key[0]} (seed {c.key[1]}, {c.key[2]}): {c.note}" for c in compared if c.note]
    return "\n".join([*text, _summary(compared)])


def _line(c: Compared) -> tuple[str, ...]:
    stored = "-" if c.stored_goodput is None else f"{c.stored_goodput:,.2f}"
    change = "-" if not c.stored_goodput else f"{c.goodput / c.stored_goodput:.1%}"
    failed = f"{'-' if c.stored_failed is None else c.stored_failed} -> {c.failed}"
    return (c.key[0], str(c.key[1]), c.key[2], f"{stored} -> {c.goodput:,.2f}", change, _percent(c.vs_oracle),
            _percent(c.vs_plain), failed, f"{c.stored_actuations or '-'} -> {c.actuations}")  # fmt: skip


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.1%}"


def _summary(compared: Sequence[Compared]) -> str:
    """How many rows moved, and specpilot's targets over the rows that have the reference (neither run may)."""
    mine = [c for c in compared if c.key[2] == "specpilot"]
    moved = sum(1 for c in compared if c.moved)
    judged = [c.vs_oracle for c in mine if c.vs_oracle is not None]
    plain = [c.vs_plain for c in mine if c.vs_plain is not None]
    return (f"{moved} of {len(compared)} rows moved; specpilot >= 0.95 x the oracle on"
            f" {sum(1 for r in judged if r >= 0.95)} of {len(judged)} with an oracle row, >= 0.99 x max(off,"
            f" always-on) on {sum(1 for r in plain if r >= 0.99)} of {len(plain)} with a plain row")  # fmt: skip
