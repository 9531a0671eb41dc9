"""Leader election rules (adapters.leadership), table-driven, and the `specpilot run` flags that configure them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from specpilot.adapters.leadership import LeaseRecord, LeaseSettings, may_take, must_stop, released, taken
from specpilot.cli.main import main

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HELD_BY_A = LeaseRecord("a", 15, T0, T0, 2)


@pytest.mark.parametrize(
    ("record", "identity", "unchanged_for", "expected"),
    [
        (None, "b", 0.0, True),  # no Lease yet: create it
        (LeaseRecord(None, 1, T0, T0, 3), "b", 0.0, True),  # released by a leader that stopped cleanly
        (LeaseRecord("", 1, T0, T0, 3), "b", 0.0, True),
        (HELD_BY_A, "a", 0.0, True),  # our own (a restarted container of the same pod)
        (HELD_BY_A, "b", 0.0, False),  # someone else's, just renewed
        (HELD_BY_A, "b", 14.9, False),  # not yet a full lease duration unchanged on our clock
        (HELD_BY_A, "b", 15.0, True),  # expired: the holder stopped renewing
        (LeaseRecord("a", None, T0, T0, 0), "b", 0.0, True),  # no duration written: nothing to wait for
    ],
)
def test_who_may_take_the_lease(
    record: LeaseRecord | None, identity: str, unchanged_for: float, expected: bool
) -> None:
    assert may_take(record, identity, unchanged_for) is expected


@pytest.mark.parametrize(
    ("record", "identity", "expected"),
    [
        (None, "a", LeaseRecord("a", 15, T0 + timedelta(1), T0 + timedelta(1), 0)),
        # renewing keeps the acquire time and the transition count
        (HELD_BY_A, "a", LeaseRecord("a", 15, T0, T0 + timedelta(1), 2)),
        # a takeover is a transition, with a new acquire time
        (HELD_BY_A, "b", LeaseRecord("b", 15, T0 + timedelta(1), T0 + timedelta(1), 3)),
        (released(HELD_BY_A, T0), "b", LeaseRecord("b", 15, T0 + timedelta(1), T0 + timedelta(1), 3)),
    ],
)
def test_the_record_written_when_taking_or_renewing(
    record: LeaseRecord | None, identity: str, expected: LeaseRecord
) -> None:
    assert taken(record, identity, T0 + timedelta(1), 15) == expected


def test_a_released_lease_has_no_holder_and_keeps_its_count() -> None:
    assert released(HELD_BY_A, T0 + timedelta(1)) == LeaseRecord(None, 1, T0 + timedelta(1), T0 + timedelta(1), 2)


@pytest.mark.parametrize(
    ("last_sent", "now", "deadline", "expected"),
    [(100.0, 109.9, 10.0, False), (100.0, 110.0, 10.0, True), (100.0, 200.0, 10.0, True)],
)
def test_a_leader_stops_at_the_renew_deadline(last_sent: float, now: float, deadline: float, expected: bool) -> None:
    assert must_stop(last_sent, now, deadline) is expected


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        (LeaseSettings("l", "ns", "me"), None),  # client-go's defaults 15/10/2
        (LeaseSettings("l", "ns", "me", 3, 2.0, 0.5), None),
        (LeaseSettings("", "ns", "me"), "--leader-election-lease"),
        (LeaseSettings("l", "", "me"), "--leader-election-namespace"),
        (LeaseSettings("l", "ns", ""), "--leader-election-identity"),
        (LeaseSettings("l", "ns", "me", 0, 0.5, 0.2), "--lease-duration"),
        (LeaseSettings("l", "ns", "me", 10, 10.0, 2.0), "--renew-deadline < --lease-duration"),
        (LeaseSettings("l", "ns", "me", 15, 2.0, 2.0), "--retry-period < --renew-deadline"),
        (LeaseSettings("l", "ns", "me", 15, 10.0, 0.0), "--retry-period: must be > 0"),
    ],
)
def test_settings_are_checked(settings: LeaseSettings, complaint: str | None) -> None:
    problems = settings.problems()
    if complaint is None:
        assert problems == []
    else:
        assert any(complaint in p for p in problems), problems


def test_run_refuses_leader_election_it_cannot_do_safely(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad timings and a missing identity are named, flag by flag, before anything connects anywhere."""
    for name in ("POD_NAME", "HOSTNAME", "POD_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    code = main(["run", "--leader-elect", "--leader-election-namespace", "ops", "--lease-duration", "5",
                 "--renew-deadline", "6"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "--leader-election-identity: must not be empty" in err
    assert "(got 2.0 < 6.0 < 5)" in err


def test_leader_election_settings_come_from_the_environment_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECPILOT_LEADER_ELECT", "true")
    monkeypatch.setenv("SPECPILOT_RENEW_DEADLINE", "20")
    monkeypatch.setenv("POD_NAME", "specpilot-0")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert main(["run"]) == 1
    assert "(got 2.0 < 20.0 < 15)" in capsys.readouterr().err
    monkeypatch.setenv("SPECPILOT_LEADER_ELECT", "maybe")
    with pytest.raises(SystemExit, match="SPECPILOT_LEADER_ELECT='maybe': expected true or false"):
        main(["run"])
