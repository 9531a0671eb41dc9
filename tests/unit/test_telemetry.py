"""The per-object gauges the alerts and the dashboard read mirror the written status, and vanish with the object."""

from __future__ import annotations

from prometheus_client import REGISTRY

from specpilot.shell import telemetry


def _value(metric: str, /, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_observe_status_mirrors_conditions_speculation_and_threshold() -> None:
    status = {
        "conditions": [{"type": "Throttled", "status": "True"}, {"type": "Ready", "status": "Unknown"}],
        "effective": {"speculation": False, "disableAboveBatchSize": 16},
    }
    telemetry.observe_status("ml", "gauges", status)
    assert _value("specpilot_condition", namespace="ml", name="gauges", type="Throttled", status="True") == 1
    assert _value("specpilot_condition", namespace="ml", name="gauges", type="Throttled", status="False") == 0
    assert _value("specpilot_condition", namespace="ml", name="gauges", type="Ready", status="Unknown") == 1
    assert _value("specpilot_speculation_enabled", namespace="ml", name="gauges") == 0
    assert _value("specpilot_batch_threshold", namespace="ml", name="gauges") == 16

    status["effective"] = {"speculation": True}  # threshold unset: its series goes, not a stale 16
    telemetry.observe_status("ml", "gauges", status)
    assert _value("specpilot_speculation_enabled", namespace="ml", name="gauges") == 1
    assert _value("specpilot_batch_threshold", namespace="ml", name="gauges") is None

    telemetry.forget_object("ml", "gauges")
    assert _value("specpilot_speculation_enabled", namespace="ml", name="gauges") is None
    assert _value("specpilot_condition", namespace="ml", name="gauges", type="Throttled", status="True") is None


def test_watch_events_mirror_status_and_deletion_drops_the_series() -> None:
    from specpilot.shell.status_metrics import mirror

    obj = {"metadata": {"namespace": "ml", "name": "watched"}, "status": {"effective": {"speculation": True}}}
    mirror("MODIFIED", obj)
    assert _value("specpilot_speculation_enabled", namespace="ml", name="watched") == 1
    mirror("DELETED", obj)
    assert _value("specpilot_speculation_enabled", namespace="ml", name="watched") is None
