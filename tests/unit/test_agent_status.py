"""An Agent's status from its journal row: phase, conditions, schedule in words."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from achilles.domain.agent_status import (
    AgentStatusRow,
    agent_status,
    condition,
    journal_fields,
    journal_view,
    schedule_summary,
)
from achilles.domain.gates import DurableLocks
from achilles.handlers.statuses import WrittenStatuses

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _row(**locks: bool) -> AgentStatusRow:
    values = {"enabled": True, "admin_paused": False, "has_model": True}
    values.update(locks)
    return AgentStatusRow(
        agent_id=3,
        uid="u",
        namespace="ns",
        cr_name="a",
        schedule=None,
        next_run_at=None,
        zone="UTC",
        locks=DurableLocks(
            owner_present=True, owner_active=values.pop("owner_active", True), **values
        ),
        last_run=None,
        tokens_used=10,
        token_limit=100,
        window_start=NOW,
    )


@pytest.mark.parametrize(
    ("locks", "phase"),
    [
        ({}, "Ready"),
        ({"enabled": False}, "Disabled"),
        ({"admin_paused": True}, "AdminPaused"),
        ({"has_model": False}, "NoModel"),
        ({"enabled": False, "owner_active": False}, "OwnerInactive"),
        ({"admin_paused": True, "has_model": False}, "AdminPaused"),
    ],
)
def test_phase_names_the_lock_that_explains_it(locks: dict[str, bool], phase: str) -> None:
    status = agent_status(
        _row(**locks), owner_missing=False, unknown_tools=(), schedule=None, previous=None,
        generation=2, now=NOW,
    )  # fmt: skip
    assert status["phase"] == phase
    ready = status["conditions"][0]
    assert ready["type"] == "Ready"
    assert (ready["status"] == "True") == (phase == "Ready")


def test_a_missing_owner_has_no_database_id() -> None:
    status = agent_status(
        None, owner_missing=True, unknown_tools=(), schedule=None, previous=None,
        generation=1, now=NOW,
    )  # fmt: skip
    assert status["phase"] == "OwnerMissing"
    assert status["databaseId"] is None


def test_unknown_tools_are_a_warning_condition() -> None:
    status = agent_status(
        _row(), owner_missing=False, unknown_tools=("crm",), schedule=None, previous=None,
        generation=1, now=NOW,
    )  # fmt: skip
    tools = {c["type"]: c for c in status["conditions"]}["ToolsResolved"]
    assert (tools["status"], tools["reason"]) == ("False", "UnknownTools")
    assert status["phase"] == "Ready"


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    earlier = condition("Ready", True, "Startable", "", None, datetime(2026, 1, 1, tzinfo=UTC))
    again = condition("Ready", True, "Startable", "", [earlier], NOW)
    assert again["lastTransitionTime"] == earlier["lastTransitionTime"]
    flipped = condition("Ready", False, "Disabled", "", [earlier], NOW)
    assert flipped["lastTransitionTime"] == "2026-12-01T09:00:00Z"


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        (None, "manual"),
        ({"type": "interval", "every_hours": 6}, "every 6h"),
        ({"type": "calendar", "cadence": "daily", "time": "02:30"}, "daily 02:30 Europe/Berlin"),
        (
            {"type": "calendar", "cadence": "weekly", "weekday": 0, "time": "09:00"},
            "weekly Mon 09:00 Europe/Berlin",
        ),
    ],
)
def test_schedule_in_words(schedule: dict[str, object] | None, words: str) -> None:
    assert schedule_summary(schedule, "Europe/Berlin") == words


def test_an_owner_zone_that_is_no_zone_is_named_in_a_scheduled_condition() -> None:
    """The scheduler leaves such an agent without a slot; the status must say why
    (found by `achilles chaos bad-input`: phase Ready and no nextRunAt, nothing else)."""
    row = _row()
    daily = {"type": "calendar", "cadence": "daily", "time": "09:00"}
    for zone, expected in (("Europe/Berlin", ("True", "OnSchedule")), ("Mars/Olympus", None)):
        status = agent_status(
            replace(row, zone=zone), owner_missing=False,
            unknown_tools=(), schedule=daily, previous=None, generation=1, now=NOW,
        )  # fmt: skip
        scheduled = {c["type"]: c for c in status["conditions"]}["Scheduled"]
        if expected is not None:
            assert (scheduled["status"], scheduled["reason"]) == expected
        else:
            assert (scheduled["status"], scheduled["reason"]) == ("False", "UnknownTimeZone")
            assert "'Mars/Olympus' is not a known IANA time zone" in scheduled["message"]
    unscheduled = agent_status(
        row, owner_missing=False, unknown_tools=(), schedule=None, previous=None,
        generation=1, now=NOW,
    )  # fmt: skip
    assert "Scheduled" not in {c["type"] for c in unscheduled["conditions"]}


def test_the_status_writer_patches_only_what_changed() -> None:
    """The writer compares with what was last patched (by it or by the reconcile
    handler, whose whole status carries the same journal fields in the same shape)."""
    row = _row()
    whole = agent_status(
        row, owner_missing=False, unknown_tools=(), schedule=None, previous=None,
        generation=1, now=NOW,
    )  # fmt: skip
    assert journal_view(whole) == journal_fields(row)
    written = WrittenStatuses()
    assert written.changed(row.agent_id, journal_fields(row))
    written.record(row.agent_id, journal_view(whole))
    assert not written.changed(row.agent_id, journal_fields(row))
    spent = replace(row, tokens_used=row.tokens_used + 5)  # a run of the owner's finished
    assert written.changed(row.agent_id, journal_fields(spent))
    written.forget(row.agent_id)
    assert written.changed(row.agent_id, journal_fields(row))


@pytest.mark.parametrize(
    ("used", "reason"),
    [(79, None), (80, "BudgetAt80Percent"), (94, "BudgetAt80Percent"), (95, "BudgetAt95Percent"),
     (140, "BudgetAt95Percent")],
)  # fmt: skip
def test_every_reconcile_derives_the_budget_warning_from_the_weekly_tokens(
    used: int, reason: str | None
) -> None:
    """The budget-warnings pass sets the condition when a threshold is crossed; each
    reconcile (any of the owner's Agents) keeps it from the same figures, and a new week
    (tokens back under 80 %) drops it."""
    status = agent_status(
        replace(_row(), tokens_used=used, token_limit=100), owner_missing=False,
        unknown_tools=(), schedule=None, previous=None, generation=1, now=NOW,
    )  # fmt: skip
    warnings = [c for c in status["conditions"] if c["type"] == "BudgetWarning"]
    assert [c["reason"] for c in warnings] == ([] if reason is None else [reason])
    assert all(c["status"] == "True" for c in warnings)


def test_a_suspended_agent_says_why_and_how_to_resume() -> None:
    """Auto-suspend switched the owner's lock off (issue 36 item 7): the phase says why,
    and both conditions say that the owner's switch is what resumes it."""
    daily = {"type": "calendar", "cadence": "daily", "time": "09:00"}
    status = agent_status(
        replace(_row(enabled=False), suspended_at=NOW), owner_missing=False, unknown_tools=(),
        schedule=daily, previous=None, generation=1, now=NOW,
    )  # fmt: skip
    assert (status["phase"], status["suspendedAt"]) == ("Suspended", "2026-12-01T09:00:00Z")
    conditions = {c["type"]: c for c in status["conditions"]}
    scheduled, ready = conditions["Scheduled"], conditions["Ready"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "SuspendedAfterFailures")
    assert "set spec.enabled: true to resume" in scheduled["message"]
    assert "manual runs" not in scheduled["message"]
    assert (ready["status"], ready["reason"]) == ("False", "Disabled")
    assert "auto-suspend switched the agent off" in ready["message"]
    # Another closed lock explains more than the suspension: the phase names the lock.
    paused = agent_status(
        replace(_row(enabled=False, admin_paused=True), suspended_at=NOW), owner_missing=False,
        unknown_tools=(), schedule=daily, previous=None, generation=1, now=NOW,
    )  # fmt: skip
    assert paused["phase"] == "Disabled"
