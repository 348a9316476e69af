"""Budget warnings (issue 22) on the real database: an owner whose weekly tokens cross
80 % and 95 % of the limit is warned once per threshold per week, with the notification
written in the same transaction as the threshold's row, whichever replica's pass (two at
once here, on their own connections) gets there first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.models import Agent
from achilles.db.outbox.models import BudgetWarning, NotificationOutbox
from achilles.db.roles import Component
from achilles.domain.vocabulary import ConditionReason, ConditionType, EventReason, EventType
from achilles.handlers.controllers.budget_warnings import BudgetWarningsPass
from achilles.k8s.objects import ObjectRef, Resources
from achilles.services.budget_condition import budget_condition
from achilles.services.budget_warnings import WarningPass, warn_crossed_thresholds
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.logins import login_url
from tests.db.test_budget_deleted_agents import _spend


@pytest.fixture
def operator_db(db: Engine, database_url: str) -> Iterator[Database]:
    set_settings(
        db,
        agent_weekly_token_budget=1000,
        agent_webhook_url="http://127.0.0.1:9/hooks",
        agent_webhook_secret_name="hook",
    )
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=4)
    yield database
    database.dispose()


def _crossed(done: WarningPass) -> list[tuple[str, int, int]]:
    return [(c.owner, c.threshold, c.used) for c in done.crossed]


def _budget_notifications(engine: Engine) -> list[dict[str, object]]:
    with Session(engine) as session:
        rows = session.execute(
            select(NotificationOutbox.payload)
            .where(NotificationOutbox.kind == "budget.threshold_crossed")
            .order_by(NotificationOutbox.id)
        ).scalars()
        return list(rows)


def test_each_threshold_is_warned_once_per_week(db: Engine, operator_db: Database) -> None:
    owner = make_owner(db, "paula")
    agent_id = make_agent(db, owner)
    _spend(db, agent_id, 700)
    first = warn_crossed_thresholds(operator_db, None)
    assert first.crossed == []

    _spend(db, agent_id, 150)  # 850: past 80 %
    done = warn_crossed_thresholds(operator_db, first.next_since)
    assert _crossed(done) == [("paula", 80, 850)]
    assert [a.agent_id for a in done.agents[done.crossed[0].user_id]] == [agent_id]
    # Again, from the start of the week (a restarted operator): nothing new.
    assert warn_crossed_thresholds(operator_db, None).crossed == []

    _spend(db, agent_id, 100)  # 950: past 95 %
    assert _crossed(warn_crossed_thresholds(operator_db, done.next_since)) == [("paula", 95, 950)]
    _spend(db, agent_id, 500)  # over the limit: no third warning
    assert warn_crossed_thresholds(operator_db, None).crossed == []

    [at_80, at_95] = _budget_notifications(db)
    assert at_80["owner"] == "paula"
    assert at_80["agent"] is None
    assert at_80["budget"] == {
        "thresholdPercent": 80,
        "used": 850,
        "limit": 1000,
        "windowStart": at_80["budget"]["windowStart"],  # type: ignore[index]
        "windowEnd": at_80["budget"]["windowEnd"],  # type: ignore[index]
    }
    assert at_95["budget"]["thresholdPercent"] == 95  # type: ignore[index]
    with Session(db) as session:
        assert session.execute(select(BudgetWarning.threshold)).scalars().all() == [80, 95]


def test_a_new_week_warns_again_and_forgets_the_last(db: Engine, operator_db: Database) -> None:
    agent_id = make_agent(db, make_owner(db, "rosa"))
    _spend(db, agent_id, 850)
    assert _crossed(warn_crossed_thresholds(operator_db, None)) == [("rosa", 80, 850)]
    # As if that warning had been last week's (the runs stay this week's): this week
    # has none yet, so the owner is warned again, and last week's row is let go.
    with Session(db) as session, session.begin():
        session.execute(
            update(BudgetWarning).values(window_start=BudgetWarning.window_start - timedelta(7))
        )
        last_week = session.execute(select(BudgetWarning.window_start)).scalar_one()
    assert _crossed(warn_crossed_thresholds(operator_db, None)) == [("rosa", 80, 850)]
    with Session(db) as session:
        [this_week] = session.execute(select(BudgetWarning.window_start)).scalars().all()
    assert this_week == last_week + timedelta(7)
    assert len(_budget_notifications(db)) == 2  # one a week
    assert warn_crossed_thresholds(operator_db, None).crossed == []


class _Resources:
    """The API server as the pass uses it: Agents' statuses, and the Events posted."""

    def __init__(self, statuses: dict[str, dict[str, Any]]) -> None:
        self.statuses = statuses
        self.events: list[tuple[str, str, str, str]] = []  # (agent, type, reason, message)
        self.patches: list[str] = []

    def post_event(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> None:
        self.events.append((ref.name, event_type, reason, message))

    def read_object(self, ref: ObjectRef) -> dict[str, Any] | None:
        status = self.statuses.get(ref.name)
        return None if status is None else {"status": status}

    def patch_status(self, ref: ObjectRef, status: dict[str, Any]) -> bool:
        self.patches.append(ref.name)
        self.statuses[ref.name] = {**self.statuses[ref.name], **status}
        return True


def _mirror(db: Engine, agent_id: int, name: str) -> None:
    """The row mirrors an Agent `name` in namespace `team`."""
    with Session(db) as session, session.begin():
        session.execute(
            update(Agent)
            .where(Agent.id == agent_id)
            .values(cr_name=name, cr_namespace="team", cr_uid=f"uid-{name}")
        )


def test_the_pass_warns_on_each_of_the_owners_agents_once(
    db: Engine, operator_db: Database
) -> None:
    owner = make_owner(db, "sami")
    agents = {name: make_agent(db, owner) for name in ("digest", "triage", "no-resource")}
    for name in ("digest", "triage"):
        _mirror(db, agents[name], name)
    _mirror(db, make_agent(db, make_owner(db)), "someone-elses")
    ready = {"type": "Ready", "status": "True", "reason": "Startable", "message": ""}
    resources = _Resources(
        {name: {"conditions": [ready]} for name in ("digest", "triage", "someone-elses")}
    )
    _spend(db, agents["digest"], 990)  # past both thresholds in one run

    warnings = BudgetWarningsPass(operator_db, cast(Resources, resources))
    warnings()
    warned = sorted((name, kind, reason) for name, kind, reason, _ in resources.events)
    assert warned == [
        (name, EventType.WARNING, EventReason.BUDGET_THRESHOLD_CROSSED)
        for name in ("digest", "digest", "triage", "triage")
    ]
    assert sorted("80 %" in m for *_, m in resources.events) == [False, False, True, True]
    assert sorted(resources.patches) == ["digest", "triage"]  # one condition patch each
    for name in ("digest", "triage"):
        conditions = resources.statuses[name]["conditions"]
        assert [c["type"] for c in conditions] == ["Ready", ConditionType.BUDGET_WARNING]
        assert conditions[1]["reason"] == ConditionReason.BUDGET_AT_95
        assert "95 %" in conditions[1]["message"]
    assert resources.statuses["someone-elses"] == {"conditions": [ready]}

    # Once a week: the next pass, and a restarted operator's first, warn nobody again.
    warnings()
    BudgetWarningsPass(operator_db, cast(Resources, resources))()
    assert len(resources.events) == 4
    assert len(resources.patches) == 2


def test_an_owner_past_both_thresholds_at_once_gets_both(db: Engine, operator_db: Database) -> None:
    agent_id = make_agent(db, make_owner(db, "quinn"))
    _spend(db, agent_id, 990)
    assert _crossed(warn_crossed_thresholds(operator_db, None)) == [
        ("quinn", 80, 990),
        ("quinn", 95, 990),
    ]


def test_no_warning_for_a_zero_budget(db: Engine, operator_db: Database) -> None:
    agent_id = make_agent(db)
    _spend(db, agent_id, 10)
    set_settings(db, agent_weekly_token_budget=0)  # every run refused from now on
    assert warn_crossed_thresholds(operator_db, None).crossed == []


def test_two_replicas_passing_at_once_warn_once(
    db: Engine, operator_db: Database, database_url: str
) -> None:
    owners = [make_owner(db) for _ in range(20)]
    for owner in owners:
        _spend(db, make_agent(db, owner), 900)
    replicas = 2
    start = threading.Barrier(replicas)
    found: list[list[tuple[str, int, int]]] = [[] for _ in range(replicas)]
    errors: list[BaseException] = []

    def replica(index: int) -> None:
        database = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
        try:
            start.wait()
            found[index] = _crossed(warn_crossed_thresholds(database, None))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            database.dispose()

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    every = found[0] + found[1]
    assert sorted(every) == sorted((owner, 80, 900) for owner in owners)
    assert len(_budget_notifications(db)) == len(owners)  # one notification each


def test_the_condition_names_the_highest_threshold() -> None:
    now = datetime(2026, 12, 2, tzinfo=UTC)
    assert budget_condition(799, 1000, None, now) is None
    at_80 = budget_condition(800, 1000, None, now)
    assert at_80 is not None
    assert (at_80["type"], at_80["status"], at_80["reason"]) == (
        ConditionType.BUDGET_WARNING,
        "True",
        ConditionReason.BUDGET_AT_80,
    )
    at_95 = budget_condition(1200, 1000, [at_80], now)
    assert at_95 is not None
    assert at_95["reason"] == ConditionReason.BUDGET_AT_95
    assert at_95["lastTransitionTime"] == at_80["lastTransitionTime"]  # still True since
