"""Classify each Prometheus answer as Valid, NoData or Error (pure; docs/design/decisions.md).

Only Valid measurements may drive a change. NoData (empty result, NaN, ±Inf, too few samples) means "not enough
evidence": hold. Error (timeout, transport or HTTP failure, `status: error`, an unexpected result shape, more than one
series) means "cannot see": hold and count, so repeated errors can flip MetricsAvailable. Nothing is ever replaced by
0: for a ratio, 0 would read as "the draft is useless" and switch speculation off on missing data (what KEDA's
`ignoreNullValues` default does, and the reason it is a known pitfall).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specpilot.autotune.signals.promql import Query, Signal

# Every string copied from an answer into a measurement (and so into status, events and the CLI's output) is cut to
# MAX_TEXT characters, and an answer keeps at most MAX_NOTES warnings and infos together: the server is untrusted, and
# status must stay far below what the API server accepts for an object.
MAX_TEXT = 240
MAX_NOTES = 4
# A grouped measurement (per speculative position) has one series per position; more is not an answer to our query.
MAX_GROUPS = 64


def bounded_text(value: object, limit: int = MAX_TEXT) -> str:
    """`value` as text of at most about `limit` characters, saying how long it was when cut."""
    text = value if isinstance(value, str) else repr(value)[: limit + 1]
    return text if len(text) <= limit else f"{text[:limit]}... [cut, {len(text)} characters]"


def _notes(value: Any) -> tuple[str, ...]:
    """The first MAX_NOTES entries of a warnings or infos list, each bounded (anything else is one entry)."""
    if not value:
        return ()
    entries = value if isinstance(value, list) else [value]
    return tuple(bounded_text(entry) for entry in entries[:MAX_NOTES])


class MeasurementClass(StrEnum):
    VALID = "Valid"
    NO_DATA = "NoData"
    ERROR = "Error"


@dataclass(frozen=True)
class RawResult:
    """What one instant query returned, before any judgement: built by the Prometheus adapter, read here."""

    status: str | None = None  # "success" | "error" from the body; None when no usable body arrived
    result_type: str | None = None
    result: Any = None  # the body's data.result, untouched
    warnings: tuple[str, ...] = ()
    infos: tuple[str, ...] = ()
    error_type: str | None = None
    error: str | None = None
    http_status: int | None = None
    transport_error: str | None = None  # connection refused, TLS failure, ...
    timed_out: bool = False

    @classmethod
    def from_response(cls, http_status: int, body: Any) -> RawResult:
        """Read Prometheus' JSON envelope; any shape other than the documented one becomes an error result."""
        if not isinstance(body, Mapping):
            return cls(http_status=http_status, error_type="bad_response", error="response body is not a JSON object")
        status = body.get("status")
        warnings = _notes(body.get("warnings"))
        data = body.get("data")
        result_type = data.get("resultType") if isinstance(data, Mapping) else None
        result = data.get("result") if isinstance(data, Mapping) else None
        return cls(
            status=_opt_str(status),
            result_type=_opt_str(result_type),
            result=result,
            warnings=warnings,
            infos=_notes(body.get("infos"))[: MAX_NOTES - len(warnings)],
            error_type=_opt_str(body.get("errorType")),
            error=_opt_str(body.get("error")),
            http_status=http_status,
        )

    @classmethod
    def from_transport_error(cls, message: str, *, timed_out: bool = False) -> RawResult:
        return cls(transport_error=message, timed_out=timed_out)


def _opt_str(value: Any) -> str | None:
    return None if value is None else bounded_text(value)


@dataclass(frozen=True)
class Measurement:
    """One classified measurement.

    `value` is None unless a finite number came back; with NoData for too few samples it keeps the number for people
    to read, but only `klass == Valid` may act. `by_label` holds grouped results (per-position acceptance) as
    (label value, number) pairs sorted by label.
    """

    name: str
    query: str | None
    klass: MeasurementClass
    value: float | None
    samples: float | None
    detail: str
    warnings: tuple[str, ...] = ()
    by_label: tuple[tuple[str, float], ...] = field(default_factory=tuple)

    @property
    def valid(self) -> bool:
        return self.klass is MeasurementClass.VALID

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "class": self.klass.value,
            "value": self.value,
            "samples": self.samples,
            "query": self.query,
            "detail": self.detail,
        }
        if self.by_label:
            out["byLabel"] = dict(self.by_label)
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out

    @classmethod
    def from_dict(cls, name: str, raw: Mapping[str, Any]) -> Measurement:
        by_label = raw.get("byLabel") or {}
        return cls(
            name=name,
            query=raw.get("query"),
            klass=MeasurementClass(raw["class"]),
            value=_opt_float(raw.get("value")),
            samples=_opt_float(raw.get("samples")),
            detail=str(raw.get("detail", "")),
            warnings=tuple(raw.get("warnings") or ()),
            by_label=tuple(sorted((str(k), float(v)) for k, v in by_label.items())),
        )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def unavailable(query: Query) -> Measurement:
    """A measurement this vLLM version cannot provide: NoData with the reason, never an error."""
    return Measurement(
        query.signal.value, None, MeasurementClass.NO_DATA, None, None, f"unavailable: {query.unavailable}"
    )


def classify(
    query: Query, raw: RawResult, *, gate: Measurement | None = None, min_samples: float | None = None
) -> Measurement:
    """Judge one answer. `gate` is the evidence-count measurement of the same window, `min_samples` its minimum."""
    name = query.signal.value
    notes = raw.warnings + tuple(f"info: {info}" for info in raw.infos)

    def make(klass: MeasurementClass, value: float | None, detail: str, **extra: Any) -> Measurement:
        return Measurement(name, query.promql, klass, value, extra.pop("samples", None), detail, notes, **extra)

    failure = transport_failure(raw)
    if failure:
        return make(MeasurementClass.ERROR, None, failure)
    parsed = _parse_numbers(raw, query.group_by)
    if isinstance(parsed, _Problem):
        return make(parsed.klass, None, parsed.detail)

    samples: float | None = None
    if gate is not None:
        if not gate.valid:
            return make(MeasurementClass.NO_DATA, _first(parsed), f"evidence gate {gate.name} is {gate.klass.value}")
        samples = gate.value
    if query.group_by is not None:
        grouped = tuple(sorted(parsed.items(), key=lambda kv: _label_key(kv[0])))
        value: float | None = None
        shown = ", ".join(f"{query.group_by} {k}: {v:.3g}" for k, v in grouped)
    else:
        grouped = ()
        value = parsed[""]
        shown = f"{value:.6g}"
    if min_samples is not None and (samples is None or samples < min_samples):
        have = "unknown" if samples is None else f"{samples:.0f}"
        gate_name = gate.name if gate else "samples"
        return make(
            MeasurementClass.NO_DATA,
            value,
            f"too few samples: {gate_name} {have} < minimum {min_samples:.0f} ({shown})",
            samples=samples,
            by_label=grouped,
        )
    return make(MeasurementClass.VALID, value, shown, samples=samples, by_label=grouped)


def transport_failure(raw: RawResult) -> str:
    """Describe why an answer is unusable as a whole (empty string if it is usable)."""
    if raw.timed_out:
        return f"timeout: {raw.transport_error or 'no answer in time'}"
    if raw.transport_error:
        return f"transport: {raw.transport_error}"
    if raw.status == "error" or (raw.http_status is not None and not 200 <= raw.http_status < 300):
        code = f"HTTP {raw.http_status}" if raw.http_status is not None else "status error"
        kind = f" {raw.error_type}" if raw.error_type else ""
        return f"{code}{kind}: {raw.error or 'no error message'}"
    if raw.status != "success":
        if raw.error:
            return f"{raw.error_type or 'bad response'}: {raw.error}"
        return f"unexpected response status {raw.status!r}"
    return ""


@dataclass(frozen=True)
class _Problem:
    klass: MeasurementClass
    detail: str


def _parse_numbers(raw: RawResult, group_by: str | None) -> dict[str, float] | _Problem:
    """Map group label value ("" when ungrouped) to a finite number, or say what is wrong."""
    if raw.result_type == "scalar":
        samples: Sequence[Any] = [{"metric": {}, "value": raw.result}]
    elif raw.result_type == "vector" and isinstance(raw.result, list):
        samples = raw.result
    else:
        return _Problem(MeasurementClass.ERROR, f"unexpected result type {raw.result_type!r} (want vector or scalar)")
    if not samples:
        return _Problem(MeasurementClass.NO_DATA, "empty result: no series matched in the window")
    if group_by is None and len(samples) > 1:
        labels = "; ".join(_labels(s) for s in samples[:3])
        return _Problem(MeasurementClass.ERROR, f"{len(samples)} series returned, expected exactly one ({labels})")
    if len(samples) > MAX_GROUPS:
        return _Problem(MeasurementClass.ERROR, f"{len(samples)} series returned, expected at most {MAX_GROUPS}")
    numbers: dict[str, float] = {}
    for sample in samples:
        key = ""
        if group_by is not None:
            metric = sample.get("metric") if isinstance(sample, Mapping) else None
            key = bounded_text(metric.get(group_by, "")) if isinstance(metric, Mapping) else ""
            if not key:
                return _Problem(MeasurementClass.ERROR, f"a series lacks the {group_by!r} label ({_labels(sample)})")
            if key in numbers:
                return _Problem(MeasurementClass.ERROR, f"several series for {group_by}={key}, expected one each")
        number = _sample_value(sample)
        if isinstance(number, _Problem):
            return number
        numbers[key] = number
    return numbers


def _sample_value(sample: Any) -> float | _Problem:
    value = sample.get("value") if isinstance(sample, Mapping) else None
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        if isinstance(sample, Mapping) and "histogram" in sample:
            return _Problem(MeasurementClass.ERROR, "native histogram sample where a float was expected")
        return _Problem(MeasurementClass.ERROR, f"malformed sample {sample!r:.120}")
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return _Problem(MeasurementClass.ERROR, f"sample value {value[1]!r:.40} is not a number")
    if math.isnan(number):
        return _Problem(MeasurementClass.NO_DATA, "NaN: no observations in the window (0/0)")
    if math.isinf(number):
        return _Problem(MeasurementClass.NO_DATA, f"{'+' if number > 0 else '-'}Inf: division by zero in the window")
    if number < 0:
        # Every signal is a count, rate, ratio, gauge or latency of vLLM's: none can be negative. A negative
        # increase means a counter went backwards in a way rate() did not absorb (or a wrong series); never evidence.
        return _Problem(
            MeasurementClass.ERROR, f"negative value {number:.6g}: a counter went backwards or the series is wrong"
        )
    return number


def _labels(sample: Any) -> str:
    metric = sample.get("metric") if isinstance(sample, Mapping) else None
    if not isinstance(metric, Mapping) or not metric:
        return "{}"
    pairs = sorted(metric.items(), key=str)[:8]
    return bounded_text("{" + ",".join(f"{bounded_text(k, 60)}={bounded_text(v, 60)}" for k, v in pairs) + "}")


def _label_key(label: str) -> tuple[int, str]:
    return (int(label), "") if label.isdigit() else (1 << 30, label)


def _first(parsed: dict[str, float]) -> float | None:
    return parsed.get("")


def positions(measurement: Measurement) -> dict[int, float]:
    """Per-position acceptance as {0-based position: r}, numeric positions only."""
    return {int(k): v for k, v in measurement.by_label if k.isdigit()}


def valid_value(measurements: Mapping[str, Measurement], name: str) -> float | None:
    """The measured value when Valid, else None: NoData, Error and Unavailable are not numbers to decide on."""
    m = measurements.get(name)
    return m.value if m is not None and m.valid else None


def why_not_valid(measurements: Mapping[str, Measurement], name: str) -> str:
    """Why `name` gave no number to decide on, for a reason or a condition message."""
    m = measurements.get(name)
    return f"{name} not measured" if m is None else f"{name} is {m.klass.value} ({m.detail})"


def short_gates(measurements: Mapping[str, Measurement], minimums: Mapping[Signal, float]) -> dict[Signal, float]:
    """The evidence gates that counted samples in the window, but fewer than their minimum, with their counts: what a
    wider window can fix. A gate without a Valid count is not short: no series in the window (nothing drafted while
    speculation is off) or a failed query gains nothing from a wider one."""
    short: dict[Signal, float] = {}
    for gate, minimum in minimums.items():
        m = measurements.get(gate)
        if m is not None and m.valid and m.value is not None and m.value < minimum:
            short[gate] = m.value
    return short


def count_errors(measurements: Mapping[str, Measurement]) -> list[Measurement]:
    return [m for m in measurements.values() if m.klass is MeasurementClass.ERROR]


def collect_warnings(measurements: Mapping[str, Measurement]) -> list[str]:
    """Distinct Prometheus warnings across an evaluation, for status (the first 2 x MAX_NOTES of them)."""
    seen: dict[str, None] = {}
    for m in measurements.values():
        for w in m.warnings:
            seen.setdefault(w, None)
    return list(seen)[: 2 * MAX_NOTES]


def split_answer(
    raw: RawResult, labels: Sequence[str], keys: Sequence[tuple[str, ...]]
) -> dict[tuple[str, ...], RawResult]:
    """Cut one grouped answer (a ScopeSet query) into the answers each scope's own query would have given.

    Series are assigned by the values of `labels` (the scope labels the grouped query aggregated `by`); a key with no
    series gets an empty vector (NoData, as its own query would), a key with several gets all of them (Error, as its
    own query would), series of combinations nobody asked for are dropped. A failed answer (transport, HTTP, status
    error, unexpected shape) is every scope's answer, with the same warnings.
    """
    wanted: dict[tuple[str, ...], list[Any]] = {key: [] for key in keys}
    if transport_failure(raw):
        return {key: raw for key in wanted}
    if raw.result_type != "vector" or not isinstance(raw.result, list):
        # A scalar cannot be told apart per scope (and no grouped query yields one): an Error for every scope.
        shape = RawResult(
            status="error",
            error_type="bad_data",
            error=f"grouped query returned result type {raw.result_type!r}, want vector",
            warnings=raw.warnings,
            infos=raw.infos,
            http_status=raw.http_status,
        )
        return {key: shape for key in wanted}
    for sample in raw.result:
        metric = sample.get("metric") if isinstance(sample, Mapping) else None
        if not isinstance(metric, Mapping):
            continue
        key = tuple(str(metric.get(label, "")) for label in labels)
        if key in wanted:
            wanted[key].append(sample)
    return {
        key: RawResult(
            status=raw.status,
            result_type=raw.result_type,
            result=series,
            warnings=raw.warnings,
            infos=raw.infos,
            http_status=raw.http_status,
        )
        for key, series in wanted.items()
    }
