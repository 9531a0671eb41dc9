"""Whether each of spec.speculation.candidates can run: the checks of the declared drafter, run with the candidate.

A candidate runs as the spec with its drafter in place of the declared one (v1alpha1.spec_running), so it gets the
same memory plan (its draft's weights and KV cache), the same draft/target checks (tokenizer family, vocabulary,
hidden size) and the same vLLM dialect (its method on spec.engine.version). Each finding names the candidate:
`spec.speculation.candidates[i].<field>` for the candidate's own fields, and the candidate's drafter field for the
rest ("with this candidate, spec.engine.maxModelLen: ..."), since the candidate is what brings the problem. What the
declared drafter has as well (KV limits concurrency, a dialect note) is the declared spec's to report, not repeated
here.
"""

from __future__ import annotations

from specpilot.api.v1alpha1 import SpeculationCandidate, SpeculationConfig, SpeculativeDeploymentSpec, spec_running
from specpilot.planning.catalog import UnknownArchitecture
from specpilot.planning.plan import Finding, Severity, plan_memory
from specpilot.vllm.dialects import UnsupportedCombination, render_command

DECLARED = "spec.speculation"
# The drafter's own fields, in camelCase as field paths name them.
_CONFIG_FIELDS = tuple(info.alias or name for name, info in SpeculationConfig.model_fields.items())
UNSUPPORTED = "UnsupportedCombination"
ARCHITECTURE_UNKNOWN = "ArchitectureUnknown"


def candidate_findings(spec: SpeculativeDeploymentSpec) -> list[Finding]:
    """Every candidate's findings (errors, warnings, notes), each naming spec.speculation.candidates[i]."""
    if not spec.speculation.candidates:
        return []
    declared = _findings(spec)
    found: list[Finding] = []
    for index, candidate in enumerate(spec.speculation.candidates):
        at = f"{DECLARED}.candidates[{index}]"
        found += [
            _named(f, at, candidate) for f in _findings(spec_running(spec, candidate)) if not _repeats(f, declared)
        ]
    return found


def _repeats(finding: Finding, declared: list[Finding]) -> bool:
    """Whether the declared spec reports `finding` already: the same warning or note, or a finding of the same kind
    on a field that is not the drafter's (its figures may differ). An error on the candidate's own fields is always
    its own: it stays when the declared drafter changes."""
    if finding in declared and finding.severity is not Severity.ERROR:
        return True
    return _own_field(finding.field) is None and any(
        (d.code, d.field) == (finding.code, finding.field) for d in declared
    )


def _findings(spec: SpeculativeDeploymentSpec) -> list[Finding]:
    """The memory plan's findings and the dialect's refusal or notes, as findings on the spec's own paths."""
    found: list[Finding] = []
    try:
        found += plan_memory(spec).findings
    except UnknownArchitecture as err:
        problem = str(err).removeprefix(f"{err.field}: ")
        found.append(
            Finding(Severity.WARNING, ARCHITECTURE_UNKNOWN, err.field, f"{problem}: the memory plan cannot be checked")
        )
    try:
        rendered = render_command(spec)
    except UnsupportedCombination as err:
        found.append(Finding(Severity.ERROR, UNSUPPORTED, err.field, err.problem))
    else:
        found += [Finding(Severity.INFO, "DialectNote", DECLARED, note) for note in rendered.notes]
    return found


def _named(finding: Finding, at: str, candidate: SpeculationCandidate) -> Finding:
    """`finding` on the candidate's path: its own field under `at`, any other field behind the candidate's drafter."""
    own = _own_field(finding.field)
    if own is not None:
        return Finding(finding.severity, finding.code, f"{at}.{own}" if own else at, finding.message)
    drafter_field = f"{at}.draft.model" if candidate.draft is not None else f"{at}.method"
    return Finding(
        finding.severity, finding.code, drafter_field, f"with this candidate, {finding.field}: {finding.message}"
    )


def _own_field(field: str) -> str | None:
    """The part of `field` below spec.speculation when it is one of the drafter's own fields ("" for the drafter
    itself), else None."""
    if field == DECLARED:
        return ""
    rest = field.removeprefix(f"{DECLARED}.")
    if rest == field or rest.split(".")[0] not in _CONFIG_FIELDS:
        return None
    return rest
