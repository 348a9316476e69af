"""Seed rules the schema bent: the budget survives a deleted agent, `updated_at` means edited.

Revision ID: 0009_seed_rules
Revises: 0008_ks_search_language
Create Date: 2026-12-01

- `deleted_agent_tokens`: the tokens an owner's deleted agents spent, one row per
  (owner, finish time) of the runs that went with the agent. Runs cascade with their
  agent (seed 000), and the weekly budget is the SUM over the owner's runs finished in
  the week, so deleting and re-creating an agent gave its tokens back. A trigger on
  `agents` records them before the cascade removes the runs; the budget query adds
  these rows (still derived from what was spent, no counter that can drift). The rows
  are append-only (an update is refused) and go with the owner (`ON DELETE CASCADE`).
  Deleting the owner itself records nothing (the rows would go with it at once).
- `agents_touch_updated_at` fires only when an edit changed something (seed 000:
  "правка промта, расписания, стопов"): the owner's and admin's fields, not the
  scheduler's `next_run_at`, nor the mirror's bookkeeping (`schedule_zone`, `cr_*`).
  A write that changes nothing does not move it either.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_seed_rules"
down_revision: str | Sequence[str] | None = "0008_ks_search_language"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)

# What the owner (or the admin) edits; everything else on `agents` is bookkeeping.
EDITED_COLUMNS = (
    "user_id",
    "name",
    "description",
    "prompt",
    "schedule",
    "model_id",
    "enabled",
    "admin_paused",
    "meta",
)


def upgrade() -> None:
    op.create_table(
        "deleted_agent_tokens",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "user_id",
            sa.BigInteger,
            sa.ForeignKey(
                "users.id", ondelete="CASCADE", name="fk_deleted_agent_tokens_user_id_users"
            ),
            nullable=False,
        ),
        sa.Column("finished_at", _TS, nullable=False),
        sa.Column("tokens_used", sa.BigInteger, nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("tokens_used > 0", name=op.f("ck_deleted_agent_tokens_tokens_positive")),
    )
    op.create_index(
        "ix_deleted_agent_tokens_user_id_finished_at",
        "deleted_agent_tokens",
        ["user_id", "finished_at"],
        postgresql_include=["tokens_used"],
    )
    op.execute(
        """
        CREATE FUNCTION achilles_forbid_update() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION '% is append-only', TG_TABLE_NAME
                USING ERRCODE = 'integrity_constraint_violation';
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER deleted_agent_tokens_append_only BEFORE UPDATE ON deleted_agent_tokens
        FOR EACH ROW EXECUTE FUNCTION achilles_forbid_update()
        """
    )
    # BEFORE DELETE: the runs are still there (the cascade removes them after the row).
    # When the owner is being deleted its row is already gone and nothing is recorded:
    # the rows would reference no one (and go with the owner anyway).
    op.execute(
        """
        CREATE FUNCTION achilles_keep_deleted_agent_tokens() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id) THEN
                INSERT INTO deleted_agent_tokens (user_id, finished_at, tokens_used)
                SELECT OLD.user_id, finished_at, sum(tokens_used)
                FROM agent_runs
                WHERE agent_id = OLD.id AND finished_at IS NOT NULL AND tokens_used > 0
                GROUP BY finished_at;
            END IF;
            RETURN OLD;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agents_keep_deleted_tokens BEFORE DELETE ON agents
        FOR EACH ROW EXECUTE FUNCTION achilles_keep_deleted_agent_tokens()
        """
    )
    _touch_when(EDITED_COLUMNS)


def downgrade() -> None:
    _touch_when(None)
    op.execute("DROP TRIGGER agents_keep_deleted_tokens ON agents")
    op.execute("DROP FUNCTION achilles_keep_deleted_agent_tokens()")
    op.drop_table("deleted_agent_tokens")
    op.execute("DROP FUNCTION achilles_forbid_update()")


def _touch_when(columns: Sequence[str] | None) -> None:
    """`agents_touch_updated_at` when one of `columns` changed (None: on every update)."""
    op.execute("DROP TRIGGER agents_touch_updated_at ON agents")
    when = ""
    if columns:
        old = ", ".join(f"OLD.{column}" for column in columns)
        new = ", ".join(f"NEW.{column}" for column in columns)
        when = f" WHEN (({old}) IS DISTINCT FROM ({new}))"
    op.execute(
        f"CREATE TRIGGER agents_touch_updated_at BEFORE UPDATE ON agents FOR EACH ROW{when}"
        " EXECUTE FUNCTION achilles_touch_updated_at()"
    )
