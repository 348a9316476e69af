"""Agent Inbox: a versioned board per agent and its items (seed 003, DESIGN.md §5).

Revision ID: 0003_inbox
Revises: 0001_engine
Create Date: 2026-11-30

Written by hand; `tests/db/test_inbox_schema.py` proves `db/inbox/models.py` agrees. The
value lists are the domain's enums (`achilles.db.checks`); `tests/unit/test_schema_text.py`
pins the DDL this revision emits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

from achilles.db import checks

revision: str = "0003_inbox"
down_revision: str | Sequence[str] | None = "0001_engine"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
# Constraint names are spelled out in full and wrapped in `op.f()`, so the
# models' naming convention (which env.py hands to alembic) is not applied twice.


def _timestamp(name: str) -> sa.Column[datetime]:
    return sa.Column(name, _TS, nullable=False, server_default=sa.func.now())


def upgrade() -> None:
    op.create_table(
        "agent_inbox_boards",
        sa.Column(
            "agent_id",
            sa.BigInteger,
            sa.ForeignKey(
                "agents.id", ondelete="CASCADE", name="fk_agent_inbox_boards_agent_id_agents"
            ),
            nullable=False,
        ),
        sa.Column("board_version", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("agent_id", name="pk_agent_inbox_boards"),
        sa.CheckConstraint(
            "board_version >= 0", name=op.f("ck_agent_inbox_boards_version_non_negative")
        ),
    )
    op.create_table(
        "agent_inbox_items",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column(
            "agent_id",
            sa.BigInteger,
            sa.ForeignKey(
                "agent_inbox_boards.agent_id",
                ondelete="CASCADE",
                name="fk_agent_inbox_items_agent_id_agent_inbox_boards",
            ),
            nullable=False,
        ),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("context", sa.Text),
        sa.Column("revision", sa.BigInteger, nullable=False, server_default=sa.text("1")),
        sa.Column("reply", sa.Text),
        sa.Column("reply_kind", sa.Text),
        sa.Column("reply_channel", sa.Text),
        sa.Column("reply_serial", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("handled_at", _TS),
        sa.Column("reply_seen_at", _TS),
        sa.Column("outcome", sa.Text),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_agent_inbox_items"),
        # One question, one row (seed 003).
        sa.UniqueConstraint("agent_id", "key", name="uq_agent_inbox_items_agent_id_key"),
        sa.CheckConstraint(checks.ITEM_STATE_CHECK, name=op.f("ck_agent_inbox_items_state")),
        sa.CheckConstraint(checks.REPLY_KIND_CHECK, name=op.f("ck_agent_inbox_items_reply_kind")),
        sa.CheckConstraint(
            checks.REPLY_CHANNEL_CHECK, name=op.f("ck_agent_inbox_items_reply_channel")
        ),
        sa.CheckConstraint("key <> ''", name=op.f("ck_agent_inbox_items_key_not_empty")),
        sa.CheckConstraint(
            "btrim(question) <> ''", name=op.f("ck_agent_inbox_items_question_not_blank")
        ),
        sa.CheckConstraint("revision >= 1", name=op.f("ck_agent_inbox_items_revision_positive")),
        sa.CheckConstraint(
            "reply_serial >= 0", name=op.f("ck_agent_inbox_items_reply_serial_non_negative")
        ),
        sa.CheckConstraint(
            "(reply IS NULL) = (reply_kind IS NULL)"
            " AND (reply IS NULL) = (reply_channel IS NULL)"
            " AND (reply IS NULL) = (handled_at IS NULL)"
            " AND (reply IS NULL) = (reply_serial = 0)",
            name=op.f("ck_agent_inbox_items_reply_complete"),
        ),
        sa.CheckConstraint(
            "reply_seen_at IS NULL OR reply IS NOT NULL",
            name=op.f("ck_agent_inbox_items_seen_needs_reply"),
        ),
        sa.CheckConstraint(
            "outcome IS NULL OR reply_seen_at IS NOT NULL",
            name=op.f("ck_agent_inbox_items_outcome_needs_take"),
        ),
    )
    # The unprocessed replies ("answered but not processed") are one indexed query.
    op.create_index(
        "ix_agent_inbox_items_unprocessed",
        "agent_inbox_items",
        ["agent_id", "handled_at"],
        postgresql_where=sa.text(checks.UNPROCESSED_REPLY_PREDICATE),
    )
    op.create_index("ix_agent_inbox_items_state", "agent_inbox_items", ["state"])
    # `achilles_touch_updated_at()` comes with 0001_engine.
    for table in ("agent_inbox_boards", "agent_inbox_items"):
        op.execute(
            f"CREATE TRIGGER {table}_touch_updated_at BEFORE UPDATE ON {table}"
            " FOR EACH ROW EXECUTE FUNCTION achilles_touch_updated_at()"
        )


def downgrade() -> None:
    # Dropping a table drops its triggers and indexes with it.
    op.drop_table("agent_inbox_items")
    op.drop_table("agent_inbox_boards")
