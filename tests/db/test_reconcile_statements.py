"""The statements one full reconcile of an Agent costs (issue 20), on the real database.

At an operator restart every changed Agent is reconciled in full on a few handler
threads that share the GIL with kopf's event loop: each statement's Python cost and
round trip slows the restart (`achilles bench intake`). The counts here fail when a
statement creeps back. Counted on the engine as the driver executes them; BEGIN and
COMMIT are the driver's own and not counted. Before the reads were folded
(db/journal/agent_row.py): a new Agent 12, a changed one 11, an Agent without owner 4."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from psycopg.errors import LockNotAvailable
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox.settings import load_inbox_settings
from achilles.db.journal.agent_row import begin_reconcile, mirror_wake_on_reply
from achilles.k8s.resources.agent import AgentSpec
from achilles.services import agent_events
from tests.db.factories import make_agent, make_model, make_owner
from tests.db.statements import Statements


def _agent(
    uid: str, owner: str, model: str | None, generation: int, **spec: Any
) -> agent_events.AgentObject:
    return agent_events.AgentObject(
        uid=uid,
        namespace="team",
        name="digest",
        generation=generation,
        spec=AgentSpec.model_validate(
            {
                "owner": owner,
                "prompt": "Summarise my week.",
                "model": model,
                "schedule": {"type": "interval", "everyHours": 6},
                **spec,
            }
        ),
        status={},
    )


def test_a_full_reconcile_costs_four_statements(db: Engine, database: Database) -> None:
    owner, model, uid = make_owner(db), make_model(db), str(uuid.uuid4())
    statements = Statements(database)
    # New: clock+settings+owner+row, INSERT, the row with its last run and its owner's
    # tokens of the week, its first slot.
    new = agent_events.reconcile_agent(database, _agent(uid, owner, model, 1), is_new=True)
    assert len(statements.take()) == 4
    assert new.agent_id is not None
    assert new.status["nextRunAt"] is not None
    # Changed: clock+settings+owner+row, UPDATE, tool links, the row with its last run
    # and tokens (the slot is kept: no write).
    changed = agent_events.reconcile_agent(database, _agent(uid, owner, model, 2, prompt="Other."))
    assert len(statements.take()) == 4
    assert changed.agent_id == new.agent_id
    assert changed.status["nextRunAt"] == new.status["nextRunAt"]  # the slot is kept
    with db.connect() as conn:
        assert (
            conn.execute(
                text("SELECT prompt FROM agents WHERE id = :a"), {"a": new.agent_id}
            ).scalar_one()
            == "Other."
        )
    # wakeOnReply mirrored: one conditional UPDATE, written only when it differs.
    agent_events.reconcile_agent(
        database, _agent(uid, owner, model, 3, prompt="Other.", wakeOnReply=True)
    )
    assert len(statements.take()) == 5
    # Its last runs: the newest one, read with the row (and tokens of the week).
    with db.begin() as conn:
        for reason in ("stale", "error"):
            conn.execute(
                text(
                    "INSERT INTO agent_runs (agent_id, trigger, state, reason, finished_at,"
                    " tokens_used) VALUES (:a, 'manual', 'failed', :r, now(), 7)"
                ),
                {"a": new.agent_id, "r": reason},
            )
    ran = agent_events.reconcile_agent(database, _agent(uid, owner, model, 4, prompt="Other."))
    assert len(statements.take()) == 4
    assert ran.status["lastRun"]["reason"] == "error"
    assert ran.status["weeklyTokens"]["used"] == 14
    assert type(ran.status["weeklyTokens"]["used"]) is int  # not the sum's Decimal
    # No owner: the first read and the DELETE of a row that may be left.
    gone = agent_events.reconcile_agent(database, _agent(uid, "nobody", model, 5), is_new=False)
    assert len(statements.take()) == 2
    assert gone.agent_id is None


def test_the_first_read_locks_the_row_and_sees_a_missing_owner_and_row(
    db: Engine, database_url: str
) -> None:
    owner = make_owner(db)
    agent_id = make_agent(db, owner)
    uid = str(uuid.uuid4())
    with db.begin() as conn:
        conn.execute(text("UPDATE agents SET cr_uid = :u WHERE id = :a"), {"u": uid, "a": agent_id})
    with Session(db) as session, session.begin():
        start = begin_reconcile(session, uid, owner)
        assert start.owner is not None
        assert start.owner.active
        assert start.settings.weekly_token_budget >= 0
        assert start.row is not None
        assert start.row.agent_id == agent_id
        with db.connect() as other, pytest.raises(OperationalError) as refused:
            other.execute(
                text("SELECT 1 FROM agents WHERE id = :a FOR UPDATE NOWAIT"), {"a": agent_id}
            )
        assert isinstance(refused.value.orig, LockNotAvailable)
        nobody = begin_reconcile(session, str(uuid.uuid4()), "nobody")
        assert (nobody.owner, nobody.row) == (None, None)
        assert nobody.now == start.now  # the transaction's clock


@pytest.mark.parametrize(
    ("meta", "enabled", "written", "after"),
    [
        (None, False, False, False),
        (None, True, True, True),
        ({"inbox": {"wake_on_reply": True}}, True, False, True),
        ({"inbox": {"wake_on_reply": True}}, False, True, False),
        ({"inbox": {"wake_on_reply": "yes"}}, False, False, False),  # not exactly true: off
        ({"inbox": {"wake_on_reply": "yes"}}, True, True, True),
        ({"inbox": "hand-edited"}, False, False, False),
        ({"inbox": ["hand-edited"]}, True, True, True),
    ],
)
def test_wake_on_reply_is_mirrored_only_when_it_differs(
    db: Engine, meta: Any, enabled: bool, written: bool, after: bool
) -> None:
    agent_id = make_agent(db)
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET meta = CAST(:m AS jsonb) WHERE id = :a"),
            {"m": None if meta is None else json.dumps(meta), "a": agent_id},
        )
    with Session(db) as session, session.begin():
        assert mirror_wake_on_reply(session, agent_id, enabled) is written
        assert load_inbox_settings(session, agent_id).settings.wake_on_reply is after
