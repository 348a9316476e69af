"""The inbox migration (`0003_inbox`) and its models agree, and the CHECKs refuse bad rows."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError

from achilles.db.inbox import models as inbox_models
from achilles.db.journal.models import Base
from tests.db.factories import make_agent

INBOX_TABLES = {"agent_inbox_boards", "agent_inbox_items"}


def test_migration_creates_the_inbox_tables_with_the_models_shape(
    db_engine: Engine, schema_diff: list[Any]
) -> None:
    assert set(inspect(db_engine).get_table_names()) >= INBOX_TABLES
    assert inbox_models.InboxItemRow.__tablename__ in Base.metadata.tables
    ours = [d for d in schema_diff if any(table in repr(d) for table in INBOX_TABLES)]
    assert ours == []


def test_one_question_one_row_is_a_unique_constraint(db_engine: Engine) -> None:
    uniques = inspect(db_engine).get_unique_constraints("agent_inbox_items")
    assert {"name": "uq_agent_inbox_items_agent_id_key", "column_names": ["agent_id", "key"]} in [
        {"name": u["name"], "column_names": u["column_names"]} for u in uniques
    ]


def test_unprocessed_index_is_partial(db_engine: Engine) -> None:
    with db_engine.connect() as conn:
        definition = conn.execute(
            text(
                "SELECT indexdef FROM pg_indexes"
                " WHERE indexname = 'ix_agent_inbox_items_unprocessed'"
            )
        ).scalar_one()
    assert "WHERE ((handled_at IS NOT NULL) AND (outcome IS NULL))" in definition


def test_items_and_board_cascade_with_the_agent(db: Engine) -> None:
    agent_id = make_agent(db)
    with db.begin() as conn:
        conn.execute(text("INSERT INTO agent_inbox_boards (agent_id) VALUES (:a)"), {"a": agent_id})
        conn.execute(
            text(
                "INSERT INTO agent_inbox_items (agent_id, key, state, question)"
                " VALUES (:a, 'k', 'blocked', 'q?')"
            ),
            {"a": agent_id},
        )
        conn.execute(text("DELETE FROM agents WHERE id = :a"), {"a": agent_id})
        left = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM agent_inbox_boards)"
                " + (SELECT count(*) FROM agent_inbox_items)"
            )
        ).scalar_one()
    assert left == 0


def test_updated_at_moves_on_update(db: Engine) -> None:
    agent_id = make_agent(db)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_inbox_boards (agent_id, updated_at)"
                " VALUES (:a, now() - interval '1 day')"
            ),
            {"a": agent_id},
        )
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agent_inbox_boards SET board_version = 1 WHERE agent_id = :a"),
            {"a": agent_id},
        )
        moved = conn.execute(
            text("SELECT updated_at > now() - interval '1 hour' FROM agent_inbox_boards")
        ).scalar_one()
    assert moved


_VALID_ITEM: dict[str, object] = {
    "key": "k",
    "state": "blocked",
    "question": "Which database?",
    "revision": 1,
    "reply": None,
    "reply_kind": None,
    "reply_channel": None,
    "reply_serial": 0,
    "handled_at": None,
    "reply_seen_at": None,
    "outcome": None,
}
_REPLIED = {
    "reply": "Postgres",
    "reply_kind": "answer",
    "reply_channel": "inbox",
    "reply_serial": 1,
    "handled_at": "2026-11-30T10:00:00Z",
}


@pytest.mark.parametrize(
    ("overrides", "constraint"),
    [
        ({"state": "waiting"}, "ck_agent_inbox_items_state"),
        ({"key": ""}, "ck_agent_inbox_items_key_not_empty"),
        ({"question": "  "}, "ck_agent_inbox_items_question_not_blank"),
        ({"revision": 0}, "ck_agent_inbox_items_revision_positive"),
        ({**_REPLIED, "reply_kind": "maybe"}, "ck_agent_inbox_items_reply_kind"),
        ({**_REPLIED, "reply_channel": "email"}, "ck_agent_inbox_items_reply_channel"),
        ({**_REPLIED, "reply_kind": None}, "ck_agent_inbox_items_reply_complete"),
        ({**_REPLIED, "reply_channel": None}, "ck_agent_inbox_items_reply_complete"),
        ({**_REPLIED, "handled_at": None}, "ck_agent_inbox_items_reply_complete"),
        ({**_REPLIED, "reply_serial": 0}, "ck_agent_inbox_items_reply_complete"),
        ({"reply_serial": 1}, "ck_agent_inbox_items_reply_complete"),
        ({"reply_seen_at": "2026-11-30T10:00:00Z"}, "ck_agent_inbox_items_seen_needs_reply"),
        ({**_REPLIED, "outcome": "used it"}, "ck_agent_inbox_items_outcome_needs_take"),
    ],
)
def test_check_constraints_refuse_impossible_rows(
    db: Engine, overrides: dict[str, object], constraint: str
) -> None:
    agent_id = make_agent(db)
    with db.begin() as conn:
        conn.execute(text("INSERT INTO agent_inbox_boards (agent_id) VALUES (:a)"), {"a": agent_id})
    values = {**_VALID_ITEM, **overrides, "agent_id": agent_id}
    columns = ", ".join(values)
    params = ", ".join(f":{c}" for c in values)
    with pytest.raises(IntegrityError) as refused, db.begin() as conn:
        conn.execute(text(f"INSERT INTO agent_inbox_items ({columns}) VALUES ({params})"), values)
    assert isinstance(refused.value.orig, psycopg.Error)
    assert refused.value.orig.diag.constraint_name == constraint


def test_a_valid_replied_row_is_accepted(db: Engine) -> None:
    agent_id = make_agent(db)
    values = {**_VALID_ITEM, **_REPLIED, "agent_id": agent_id}
    with db.begin() as conn:
        conn.execute(text("INSERT INTO agent_inbox_boards (agent_id) VALUES (:a)"), {"a": agent_id})
        columns = ", ".join(values)
        params = ", ".join(f":{c}" for c in values)
        conn.execute(text(f"INSERT INTO agent_inbox_items ({columns}) VALUES ({params})"), values)


def test_board_version_cannot_go_negative(db: Engine) -> None:
    agent_id = make_agent(db)
    with pytest.raises(IntegrityError), db.begin() as conn:
        conn.execute(
            text("INSERT INTO agent_inbox_boards (agent_id, board_version) VALUES (:a, -1)"),
            {"a": agent_id},
        )
