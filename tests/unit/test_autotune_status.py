"""What autotune writes into status must survive the API server's structural pruning (the generated CRD)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from specpilot.api.crd import build_crd
from specpilot.autotune.evaluation import ACTION_EVENT_REASONS, OBSERVED_FIELDS, idle_conditions, observed_fields
from specpilot.autotune.model.schedule import ThresholdSupport
from specpilot.autotune.policy.state import Action, refit_action
from specpilot.autotune.signals.measurements import Measurement, MeasurementClass
from specpilot.reconcile import conditions as cond

NOW = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)


def observed_schema_keys() -> set[str]:
    version = build_crd()["spec"]["versions"][0]
    observed = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["observed"]
    return set(observed["properties"])


def valid(name: str, value: float) -> Measurement:
    return Measurement(name=name, query="q", klass=MeasurementClass.VALID, value=value, samples=100.0, detail="")


def test_every_observed_key_is_in_the_crd_schema() -> None:
    measurements = {str(signal): valid(str(signal), 0.25) for signal, _ in OBSERVED_FIELDS.values()}
    written = observed_fields(measurements, "20s", NOW)
    assert set(written) == observed_schema_keys()
    assert all(value is not None for value in written.values()), written


@pytest.mark.parametrize(
    ("key", "klass", "value", "expected"),
    [
        ("p99E2eMs", MeasurementClass.VALID, 0.2975, 297.5),
        ("p99TtftMs", MeasurementClass.VALID, 0.05, 50.0),
        ("acceptanceRate", MeasurementClass.VALID, 0.123456, 0.1235),
        ("acceptanceRate", MeasurementClass.NO_DATA, 0.9, None),
        ("p99TpotMs", MeasurementClass.NO_DATA, None, None),
    ],
)
def test_observed_values_are_scaled_and_only_valid_ones_kept(
    key: str, klass: MeasurementClass, value: float | None, expected: float | None
) -> None:
    by_key = {
        "p99E2eMs": "p99_e2e_ms",
        "p99TtftMs": "p99_ttft_ms",
        "acceptanceRate": "acceptance_rate",
        "p99TpotMs": "p99_tpot_ms",
    }
    signal, _ = OBSERVED_FIELDS[by_key[key]]
    measurement = Measurement(name=str(signal), query="q", klass=klass, value=value, samples=3.0, detail="")
    written = observed_fields({str(signal): measurement}, "20s", NOW)
    assert written[key] == expected
    assert written["window"] == "20s"
    assert written["evaluatedAt"] == "2026-11-26T12:00:00Z"


@pytest.mark.parametrize(
    ("why", "cause"),
    [
        ("AutotuneOff", "spec.autotune.mode is Off"),
        ("NoPrometheus", "spec.autotune.prometheus is not set"),
    ],
)
def test_an_object_autotune_never_evaluates_says_why_its_framework_conditions_stay_unknown(
    why: str, cause: str
) -> None:
    """Without autotune nothing measures, so the framework's conditions must not read 'NotYetObserved' forever."""
    merged = cond.merge_conditions([], idle_conditions(why), generation=3, now="2026-11-27T05:00:00Z")
    by_type = {c["type"]: c for c in merged}
    for ctype in cond.FRAMEWORK_CONDITIONS:
        assert (by_type[ctype]["status"], by_type[ctype]["reason"]) == ("Unknown", why)
        assert cause in by_type[ctype]["message"]
    assert by_type[cond.METRICS_AVAILABLE]["reason"] == why
    assert not [c for c in merged if c["reason"] == "NotYetObserved" and c["type"] in cond.FRAMEWORK_CONDITIONS]


@pytest.mark.parametrize(
    ("support", "action", "event"),
    [
        (ThresholdSupport.SCHEDULE, Action.CHANGE_THRESHOLD, "BatchThresholdChanged"),
        (ThresholdSupport.THRESHOLD, Action.CHANGE_THRESHOLD, "BatchThresholdChanged"),
        (ThresholdSupport.NONE, Action.CHANGE_K, "SpeculativeTokensChanged"),
    ],
)
def test_a_refit_is_named_by_what_it_changes(support: ThresholdSupport, action: Action, event: str) -> None:
    """A version without a batch-size schedule refits one K for every batch size: its action and event say so."""
    assert refit_action(support) is action
    assert ACTION_EVENT_REASONS[action] == event


def test_every_action_that_changes_the_config_posts_an_event() -> None:
    changes = set(Action) - {Action.KEEP, Action.TRY_CANDIDATE}
    assert changes <= set(ACTION_EVENT_REASONS), changes - set(ACTION_EVENT_REASONS)
