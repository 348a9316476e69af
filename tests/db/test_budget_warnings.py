"""Budget warnings (issue 22) on the real database: an owner whose weekly tokens cross
80 % and 95 % of the limit is warned once per threshold per week, with the notification
written in the same transaction as the threshold's row, whichever replica's pass (two at
once here, on their own connections) gets there first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.outbox.models import BudgetWarning, NotificationOutbox
from achilles.db.roles import Component
from achilles.domain.vocabulary import ConditionReason, ConditionType
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
