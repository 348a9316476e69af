"""Seed 000: a calendar schedule's weekday "matters only for weekly" (issue 18, item 9).

A daily schedule that names a weekday (say, a weekly one switched to daily) used to be
refused; now the day is accepted and dropped: the row keeps the daily schedule without
it, and the agent runs every day.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.schedule import refresh_next_run
from achilles.db.journal.settings import database_now
from achilles.k8s.resources.agent import AgentSpec
from achilles.services import agent_events
from tests.db.factories import make_agent, make_model, make_owner

DAILY_ON_A_WEDNESDAY = {"type": "calendar", "cadence": "daily", "weekday": 2, "time": "09:00"}


def _row(db: Engine, where: str, value: object) -> Any:
    with db.begin() as conn:
        return conn.execute(
            text(f"SELECT schedule, next_run_at, now() AS now FROM agents WHERE {where} = :v"),
            {"v": value},
        ).one()


def test_an_agent_whose_daily_schedule_names_a_weekday_runs_every_day(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    model = make_model(db)
    spec = AgentSpec.model_validate(
        {
            "owner": owner,
            "prompt": "Summarise my day.",
            "model": model,
            "schedule": {"type": "calendar", "cadence": "daily", "weekday": 2, "time": "09:00"},
        }
    )
    obj = agent_events.AgentObject(
        uid="uid-daily", namespace="team", name="daily", generation=1, spec=spec, status={}
    )
    agent_events.reconcile_agent(database, obj, is_new=True)
    row = _row(db, "cr_uid", "uid-daily")
    assert row.schedule == {"type": "calendar", "cadence": "daily", "time": "09:00"}
    assert row.next_run_at is not None
    assert row.next_run_at - row.now <= timedelta(days=1)


def test_a_stored_daily_schedule_with_a_weekday_is_scheduled_daily(db: Engine) -> None:
    """A row written with the day (by SQL, or before this rule) still gets daily slots."""
    agent_id = make_agent(db, make_owner(db), schedule=DAILY_ON_A_WEDNESDAY)
    with Session(db) as session, session.begin():
        assert refresh_next_run(session, agent_id, database_now(session), reset=True)
    row = _row(db, "id", agent_id)
    assert row.next_run_at is not None
    assert row.next_run_at - row.now <= timedelta(days=1)
