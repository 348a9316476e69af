"""Seed 000: `agents.updated_at` records edits (prompt, schedule, locks), not bookkeeping.

The scheduler advancing `next_run_at` used to move it too, so every scheduled agent
looked edited a moment ago (0009_seed_rules).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.services import scheduler
from tests.db.factories import make_agent, make_owner

A_DAY_AGO = timedelta(days=1)


def _row(db: Engine, agent_id: int) -> tuple[datetime, datetime | None]:
    with db.begin() as conn:
        row = conn.execute(
            text("SELECT updated_at, next_run_at FROM agents WHERE id = :a"), {"a": agent_id}
        ).one()
    return row.updated_at, row.next_run_at


def _age(db: Engine, agent_id: int) -> datetime:
    """Put the agent's last edit a day back (a write of `updated_at` alone is no edit)."""
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET updated_at = now() - :ago WHERE id = :a"),
            {"ago": A_DAY_AGO, "a": agent_id},
        )
    return _row(db, agent_id)[0]


def test_the_scheduler_advancing_a_slot_is_no_edit(db: Engine, database_url: str) -> None:
    agent_id = make_agent(db, make_owner(db), schedule={"type": "interval", "every_hours": 6})
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET next_run_at = now() - interval '5 minutes',"
                 " schedule_zone = 'UTC' WHERE id = :a"),
            {"a": agent_id},
        )  # fmt: skip
    edited = _age(db, agent_id)
    slot = _row(db, agent_id)[1]
    database = Database(database_url, pool_size=2)
    try:
        tick = scheduler.schedule_due_agents(database)
    finally:
        database.dispose()
    assert [agent for agent, _ in tick.enqueued] == [agent_id]
    updated_at, next_run_at = _row(db, agent_id)
    assert next_run_at is not None
    assert slot is not None
    assert next_run_at > slot
    assert updated_at == edited


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("prompt", "'Summarise my month.'"),
        ("schedule", """'{"type": "interval", "every_hours": 12}'::jsonb"""),
        ("enabled", "false"),
        ("admin_paused", "true"),
    ],
)
def test_an_edit_moves_it(db: Engine, column: str, value: str) -> None:
    agent_id = make_agent(db, make_owner(db), schedule={"type": "interval", "every_hours": 6})
    edited = _age(db, agent_id)
    with db.begin() as conn:
        conn.execute(text(f"UPDATE agents SET {column} = {value} WHERE id = :a"), {"a": agent_id})
    assert _row(db, agent_id)[0] > edited


def test_bookkeeping_and_unchanged_writes_do_not_move_it(db: Engine) -> None:
    agent_id = make_agent(db, make_owner(db))
    edited = _age(db, agent_id)
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET next_run_at = now(), schedule_zone = 'UTC',"
                 " cr_namespace = 'team', prompt = prompt WHERE id = :a"),
            {"a": agent_id},
        )  # fmt: skip
    assert _row(db, agent_id)[0] == edited


@pytest.mark.parametrize(
    "meta",
    [
        # A tool the Agent names arriving later (db/journal/catalogue.py).
        """jsonb_set(coalesce(meta, '{}'), '{unknown_tools}', '{"search": true}')""",
        """coalesce(meta, '{}') - 'unknown_tools'""",
        # A spec write the operator owes the CR, and its delivery (db/journal/owed_spec.py).
        """jsonb_set(coalesce(meta, '{}'), '{owed_spec}',"""
        """ '{"model": {"value": null, "reason": "ModelWithdrawn"}}')""",
        """coalesce(meta, '{}') - 'owed_spec'""",
    ],
)
def test_the_operators_bookkeeping_in_meta_is_no_edit(db: Engine, meta: str) -> None:
    """Issue 36 item 9: only what the seed lists (prompt, schedule, the locks; the
    owner's other settings) moves `updated_at`, and the failure streak counts from it."""
    agent_id = make_agent(db, make_owner(db))
    with db.begin() as conn:
        conn.execute(
            text("""UPDATE agents SET meta = '{"owed_spec": {}, "unknown_tools": {}}'"""
                 " WHERE id = :a"),
            {"a": agent_id},
        )  # fmt: skip
    edited = _age(db, agent_id)
    with db.begin() as conn:
        conn.execute(text(f"UPDATE agents SET meta = {meta} WHERE id = :a"), {"a": agent_id})
    assert _row(db, agent_id)[0] == edited


def test_the_owners_wake_on_reply_in_meta_is_an_edit(db: Engine) -> None:
    agent_id = make_agent(db, make_owner(db))
    edited = _age(db, agent_id)
    with db.begin() as conn:
        conn.execute(
            text("""UPDATE agents SET meta = jsonb_set(coalesce(meta, '{}'), '{inbox}',"""
                 """ '{"wake_on_reply": true}') WHERE id = :a"""),
            {"a": agent_id},
        )  # fmt: skip
    assert _row(db, agent_id)[0] > edited
