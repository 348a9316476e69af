"""What the HTTP API needs: owner-scoped inbox queries, reply history, idempotency, events.

Revision ID: 0010_api
Revises: 0009_seed_rules
Create Date: 2026-12-01

- `agent_inbox_items.user_id`: the item's owner (its agent's), kept by triggers (set on
  insert, followed when an agent changes owner), so "my inbox, blocked first" is one
  index range (`ix_agent_inbox_items_owner_queue`) however many agents an owner has.
- `agent_inbox_items.reply_by`: who gave the current reply (the API's caller; NULL when
  it came through the database, e.g. `achilles inbox reply`).
- `agent_inbox_item_revisions`: one row per revision of an item (asked, replied,
  updated), written by a trigger whichever door bumped the revision, so the history
  cannot miss a write: who answered, when, by which channel, what they said.
- `owner_events`: what changed for an owner (an inbox item or a run: ids only, never
  content), written by triggers, ordered by (txid, id) and announced with
  NOTIFY achilles_events. `GET /v1/events` streams it and resumes from it
  (`achilles.db.events` explains why the writing transaction's id orders them).
- `api_idempotency_keys`: a caller's `Idempotency-Key`, the request's fingerprint and the
  response, committed in the transaction of the write it answered.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from achilles.db import checks

revision: str = "0010_api"
down_revision: str | Sequence[str] | None = "0009_seed_rules"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
EVENTS_CHANNEL = "achilles_events"
# The run columns whose change is news for the owner (not the heartbeat, not dispatch
# bookkeeping).
RUN_NEWS_COLUMNS = (
    "state",
    "reason",
    "output",
    "error",
    "tokens_used",
    "started_at",
    "finished_at",
)
TXID_DEFAULT = sa.text("(pg_current_xact_id()::text::bigint)")


def upgrade() -> None:
    _item_owner()
    _revisions()
    _events()
    _idempotency_keys()


def _item_owner() -> None:
    op.add_column("agent_inbox_items", sa.Column("user_id", sa.BigInteger, nullable=True))
    op.execute(
        "UPDATE agent_inbox_items i SET user_id = a.user_id FROM agents a WHERE a.id = i.agent_id"
    )
    op.alter_column("agent_inbox_items", "user_id", nullable=False)
    op.create_foreign_key(
        "fk_agent_inbox_items_user_id_users",
        "agent_inbox_items",
        "users",
        ["user_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.add_column("agent_inbox_items", sa.Column("reply_by", sa.Text, nullable=True))
    op.create_check_constraint(
        op.f("ck_agent_inbox_items_reply_by_needs_reply"),
        "agent_inbox_items",
        "reply_by IS NULL OR reply IS NOT NULL",
    )
    # "My inbox, blocked first" and "my items in state S", each one index range.
    op.create_index(
        "ix_agent_inbox_items_owner_queue",
        "agent_inbox_items",
        ["user_id", sa.text("(state <> 'blocked')"), "id"],
    )
    op.create_index(
        "ix_agent_inbox_items_user_id_state_id", "agent_inbox_items", ["user_id", "state", "id"]
    )
    op.execute(
        """
        CREATE FUNCTION achilles_inbox_item_owner() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            NEW.user_id := (SELECT user_id FROM agents WHERE id = NEW.agent_id);
            RETURN NEW;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_inbox_items_owner BEFORE INSERT ON agent_inbox_items
        FOR EACH ROW EXECUTE FUNCTION achilles_inbox_item_owner()
        """
    )
    op.execute(
        """
        CREATE FUNCTION achilles_inbox_items_follow_owner() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE agent_inbox_items SET user_id = NEW.user_id
            WHERE agent_id = NEW.id AND user_id <> NEW.user_id;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agents_inbox_owner AFTER UPDATE OF user_id ON agents
        FOR EACH ROW WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id)
        EXECUTE FUNCTION achilles_inbox_items_follow_owner()
        """
    )


def _revisions() -> None:
    op.create_table(
        "agent_inbox_item_revisions",
        sa.Column(
            "item_id",
            sa.BigInteger,
            sa.ForeignKey(
                "agent_inbox_items.id",
                ondelete="CASCADE",
                name="fk_agent_inbox_item_revisions_item_id_agent_inbox_items",
            ),
            nullable=False,
        ),
        sa.Column("revision", sa.BigInteger, nullable=False),
        sa.Column("change", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("question", sa.Text),
        sa.Column("context", sa.Text),
        sa.Column("reply", sa.Text),
        sa.Column("reply_kind", sa.Text),
        sa.Column("reply_channel", sa.Text),
        sa.Column("reply_serial", sa.BigInteger, nullable=False),
        sa.Column("reply_by", sa.Text),
        sa.Column("at", _TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("item_id", "revision", name="pk_agent_inbox_item_revisions"),
        sa.CheckConstraint(
            "change IN ('asked', 'replied', 'updated')",
            name=op.f("ck_agent_inbox_item_revisions_change"),
        ),
        sa.CheckConstraint(
            checks.ITEM_STATE_CHECK, name=op.f("ck_agent_inbox_item_revisions_state")
        ),
        sa.CheckConstraint(
            "(change = 'replied') = (reply IS NOT NULL)"
            " AND (reply IS NULL) = (reply_kind IS NULL)"
            " AND (reply IS NULL) = (reply_channel IS NULL)"
            " AND (change = 'replied') <> (question IS NOT NULL)",
            name=op.f("ck_agent_inbox_item_revisions_shape"),
        ),
    )
    # A reply revision keeps what was said and by whom; the others what was asked.
    op.execute(
        """
        CREATE FUNCTION achilles_inbox_item_revision() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'UPDATE' AND NEW.reply_serial <> OLD.reply_serial THEN
                INSERT INTO agent_inbox_item_revisions
                    (item_id, revision, change, state, reply, reply_kind, reply_channel,
                     reply_serial, reply_by)
                VALUES (NEW.id, NEW.revision, 'replied', NEW.state, NEW.reply, NEW.reply_kind,
                        NEW.reply_channel, NEW.reply_serial, NEW.reply_by);
            ELSE
                INSERT INTO agent_inbox_item_revisions
                    (item_id, revision, change, state, question, context, reply_serial)
                VALUES (NEW.id, NEW.revision,
                        CASE TG_OP WHEN 'INSERT' THEN 'asked' ELSE 'updated' END,
                        NEW.state, NEW.question, NEW.context, NEW.reply_serial);
            END IF;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_inbox_items_revision_insert AFTER INSERT ON agent_inbox_items
        FOR EACH ROW EXECUTE FUNCTION achilles_inbox_item_revision()
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_inbox_items_revision_update AFTER UPDATE OF revision
        ON agent_inbox_items
        FOR EACH ROW WHEN (OLD.revision IS DISTINCT FROM NEW.revision)
        EXECUTE FUNCTION achilles_inbox_item_revision()
        """
    )
    # Items that existed before this revision start their history where they are.
    op.execute(
        """
        INSERT INTO agent_inbox_item_revisions
            (item_id, revision, change, state, question, context, reply_serial, at)
        SELECT id, revision, CASE WHEN revision = 1 THEN 'asked' ELSE 'updated' END,
               state, question, context, reply_serial, updated_at
        FROM agent_inbox_items
        """
    )


def _events() -> None:
    op.create_table(
        "owner_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("txid", sa.BigInteger, nullable=False, server_default=TXID_DEFAULT),
        sa.Column(
            "user_id",
            sa.BigInteger,
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_owner_events_user_id_users"),
            nullable=False,
        ),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("agent_id", sa.BigInteger, nullable=False),
        sa.Column("object_id", sa.BigInteger, nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_owner_events"),
        sa.CheckConstraint("kind IN ('inbox_item', 'run')", name=op.f("ck_owner_events_kind")),
    )
    op.create_index("ix_owner_events_txid_id", "owner_events", ["txid", "id"])
    op.create_index("ix_owner_events_user_id_txid_id", "owner_events", ["user_id", "txid", "id"])
    op.create_index("ix_owner_events_created_at", "owner_events", ["created_at"])
    # One NOTIFY per transaction (same channel and payload are folded at commit); the
    # listener reads the log, so the payload carries nothing.
    op.execute(
        f"""
        CREATE FUNCTION achilles_owner_event() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            owner bigint;
        BEGIN
            IF TG_TABLE_NAME = 'agent_inbox_items' THEN
                INSERT INTO owner_events (user_id, kind, agent_id, object_id)
                VALUES (NEW.user_id, 'inbox_item', NEW.agent_id, NEW.id);
            ELSE
                SELECT user_id INTO owner FROM agents WHERE id = NEW.agent_id;
                INSERT INTO owner_events (user_id, kind, agent_id, object_id)
                VALUES (owner, 'run', NEW.agent_id, NEW.id);
            END IF;
            PERFORM pg_notify('{EVENTS_CHANNEL}', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_inbox_items_event AFTER INSERT OR UPDATE ON agent_inbox_items
        FOR EACH ROW EXECUTE FUNCTION achilles_owner_event()
        """
    )
    news = ", ".join(RUN_NEWS_COLUMNS)
    old = ", ".join(f"OLD.{column}" for column in RUN_NEWS_COLUMNS)
    new = ", ".join(f"NEW.{column}" for column in RUN_NEWS_COLUMNS)
    op.execute(
        """
        CREATE TRIGGER agent_runs_event_insert AFTER INSERT ON agent_runs
        FOR EACH ROW EXECUTE FUNCTION achilles_owner_event()
        """
    )
    op.execute(
        f"""
        CREATE TRIGGER agent_runs_event_update AFTER UPDATE OF {news} ON agent_runs
        FOR EACH ROW WHEN (({old}) IS DISTINCT FROM ({new}))
        EXECUTE FUNCTION achilles_owner_event()
        """
    )


def _idempotency_keys() -> None:
    op.create_table(
        "api_idempotency_keys",
        sa.Column("user_key", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("fingerprint", sa.Text, nullable=False),
        sa.Column("response_status", sa.Integer),
        sa.Column("response_body", JSONB),
        sa.Column("response_headers", JSONB),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("user_key", "key", name="pk_api_idempotency_keys"),
        sa.CheckConstraint(
            "length(key) BETWEEN 1 AND 255", name=op.f("ck_api_idempotency_keys_key_length")
        ),
    )
    op.create_index("ix_api_idempotency_keys_created_at", "api_idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_table("api_idempotency_keys")
    op.execute("DROP TRIGGER agent_runs_event_update ON agent_runs")
    op.execute("DROP TRIGGER agent_runs_event_insert ON agent_runs")
    op.execute("DROP TRIGGER agent_inbox_items_event ON agent_inbox_items")
    op.execute("DROP FUNCTION achilles_owner_event()")
    op.drop_table("owner_events")
    op.execute("DROP TRIGGER agent_inbox_items_revision_update ON agent_inbox_items")
    op.execute("DROP TRIGGER agent_inbox_items_revision_insert ON agent_inbox_items")
    op.execute("DROP FUNCTION achilles_inbox_item_revision()")
    op.drop_table("agent_inbox_item_revisions")
    op.execute("DROP TRIGGER agents_inbox_owner ON agents")
    op.execute("DROP FUNCTION achilles_inbox_items_follow_owner()")
    op.execute("DROP TRIGGER agent_inbox_items_owner ON agent_inbox_items")
    op.execute("DROP FUNCTION achilles_inbox_item_owner()")
    op.drop_index("ix_agent_inbox_items_user_id_state_id", table_name="agent_inbox_items")
    op.drop_index("ix_agent_inbox_items_owner_queue", table_name="agent_inbox_items")
    op.drop_constraint(
        op.f("ck_agent_inbox_items_reply_by_needs_reply"), "agent_inbox_items", type_="check"
    )
    op.drop_column("agent_inbox_items", "reply_by")
    op.drop_constraint(
        "fk_agent_inbox_items_user_id_users", "agent_inbox_items", type_="foreignkey"
    )
    op.drop_column("agent_inbox_items", "user_id")
