"""An owner whose zone is no zone (`users` is the platform's table, the database cannot check
it) costs that owner's agents their slots and nothing else: the scheduler's pass still runs
every other due agent, and the agent's reconcile still writes its row. Found by
`achilles chaos bad-input`, where one such row stopped every agent's schedule."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.schedule import refresh_next_run
from achilles.db.journal.settings import database_now
from achilles.services import scheduler
from tests.db.factories import make_agent, make_owner


def _slot(db: Engine, agent_id: int) -> object:
    with db.begin() as conn:
        return conn.execute(
            text("SELECT next_run_at FROM agents WHERE id = :a"), {"a": agent_id}
        ).scalar_one()


def test_an_unknown_owner_zone_leaves_the_other_due_agents_scheduled(
    db: Engine, database_url: str
) -> None:
    interval = {"type": "interval", "every_hours": 6}
    healthy = make_agent(db, make_owner(db, timezone="Europe/Berlin"), schedule=interval)
    martian = make_agent(db, make_owner(db, "martian", timezone="Europe/Berlin"), schedule=interval)
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET next_run_at = now() - :late, schedule_zone = 'Europe/Berlin'"
                 " WHERE id = ANY(:ids)"),
            {"late": timedelta(minutes=5), "ids": [healthy, martian]},
        )  # fmt: skip
        conn.execute(text("UPDATE users SET timezone = 'Mars/Olympus' WHERE key = 'martian'"))
    database = Database(database_url, pool_size=2)
    try:
        tick = scheduler.schedule_due_agents(database)
        again = scheduler.schedule_due_agents(database)  # the slotless agent stays slotless
    finally:
        database.dispose()
    assert [agent for agent, _ in tick.enqueued] == [healthy]
    assert martian in tick.unschedulable
    assert again.enqueued == []
    assert _slot(db, martian) is None
    assert _slot(db, healthy) is not None


def test_refresh_gives_no_slot_in_an_unknown_zone(db: Engine) -> None:
    owner = make_owner(db, "venusian", timezone="Europe/Berlin")
    agent_id = make_agent(db, owner, schedule={"type": "interval", "every_hours": 6})
    with db.begin() as conn:
        conn.execute(text("UPDATE users SET timezone = 'Venus/Maxwell' WHERE key = 'venusian'"))
    with Session(db) as session, session.begin():
        assert refresh_next_run(session, agent_id, database_now(session), reset=True) is False
    assert _slot(db, agent_id) is None


def test_an_agent_without_a_schedule_leaves_the_slot_repair_running(
    db: Engine, database_url: str
) -> None:
    """`create_agent` with no schedule (a manual-only agent, as docs/runner.md's standalone
    example makes one) writes SQL NULL, not JSON null, which the repair would take for a
    schedule and fail to parse on every pass (found by tests/db/test_operator_tracing.py)."""
    manual = make_agent(db)
    scheduled = make_agent(db, schedule={"type": "interval", "every_hours": 6})
    with db.begin() as conn:
        no_schedule = conn.execute(
            text("SELECT schedule IS NULL FROM agents WHERE id = :a"), {"a": manual}
        ).scalar_one()
    assert no_schedule is True
    database = Database(database_url, pool_size=1)
    try:
        tick = scheduler.schedule_due_agents(database, repair=True)
    finally:
        database.dispose()
    assert tick.rescheduled == [scheduled]
    assert tick.unschedulable == []
    assert _slot(db, manual) is None
