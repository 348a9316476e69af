"""Engine schema: agents, agent_runs, agent_tools, and the neighbour tables it reads.

Revision ID: 0001_engine
Revises:
Create Date: 2026-11-29

Written by hand from seed 000; `tests/db/test_schema.py` proves the models agree. The
run vocabulary (states, triggers, reasons) is spelled from the domain's enums
(`achilles.db.checks`); `tests/unit/test_schema_text.py` pins the DDL this revision emits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from achilles.db import checks

revision: str = "0001_engine"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True)


def _created_at() -> sa.Column[datetime]:
    return sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now())


def upgrade() -> None:
    op.create_table(
        "users",
        _id(),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("timezone", sa.Text),
        sa.Column("active", sa.Boolean, nullable=False, server_default=sa.text("true")),
        _created_at(),
        sa.UniqueConstraint("key", name="uq_users_key"),
    )
    op.create_table(
        "agent_models",
        _id(),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("base_url", sa.Text, nullable=False),
        sa.Column("provider_model", sa.Text, nullable=False),
        sa.Column("api_key_secret_name", sa.Text),
        sa.Column("api_key_secret_key", sa.Text),
        sa.Column("is_default", sa.Boolean, nullable=False, server_default=sa.text("false")),
        _created_at(),
        sa.UniqueConstraint("name", name="uq_agent_models_name"),
    )
    op.create_index(
        "uq_agent_models_single_default",
        "agent_models",
        ["is_default"],
        unique=True,
        postgresql_where=sa.text("is_default"),
    )
    op.create_table(
        "tools",
        _id(),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("implementation", sa.Text, nullable=False),
        sa.Column("agents_allowed", sa.Boolean, nullable=False, server_default=sa.text("true")),
        _created_at(),
        sa.UniqueConstraint("name", name="uq_tools_name"),
    )
    op.create_table(
        "platform_settings",
        sa.Column("id", sa.SmallInteger, primary_key=True, server_default=sa.text("1")),
        sa.Column("timezone", sa.Text, nullable=False, server_default=sa.text("'UTC'")),
        sa.Column(
            "agent_weekly_token_budget",
            sa.BigInteger,
            nullable=False,
            server_default=sa.text("200000"),
        ),
        sa.Column("agent_max_iterations", sa.Integer, nullable=False, server_default=sa.text("8")),
        sa.Column("agent_max_concurrency", sa.Integer, nullable=False, server_default=sa.text("4")),
        sa.Column(
            "agent_run_timeout_seconds", sa.Integer, nullable=False, server_default=sa.text("900")
        ),
        sa.Column("agent_platform_prompt", sa.Text, nullable=False, server_default=sa.text("''")),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("id = 1", name=op.f("ck_platform_settings_singleton")),
        sa.CheckConstraint(
            "agent_weekly_token_budget >= 0", name=op.f("ck_platform_settings_budget_non_negative")
        ),
        sa.CheckConstraint(
            "agent_max_iterations >= 1", name=op.f("ck_platform_settings_iterations_positive")
        ),
        sa.CheckConstraint(
            "agent_max_concurrency >= 1", name=op.f("ck_platform_settings_concurrency_positive")
        ),
        sa.CheckConstraint(
            "agent_run_timeout_seconds >= 1", name=op.f("ck_platform_settings_timeout_positive")
        ),
    )
    # The singleton always exists, so readers never special-case a missing row.
    op.execute("INSERT INTO platform_settings (id) VALUES (1)")

    op.create_table(
        "agents",
        _id(),
        sa.Column(
            "user_id",
            sa.BigInteger,
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_agents_user_id_users"),
            nullable=False,
        ),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("description", sa.Text),
        sa.Column("prompt", sa.Text, nullable=False),
        sa.Column("schedule", JSONB),
        sa.Column(
            "model_id",
            sa.BigInteger,
            sa.ForeignKey(
                "agent_models.id", ondelete="SET NULL", name="fk_agents_model_id_agent_models"
            ),
        ),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.text("true")),
        sa.Column("admin_paused", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("next_run_at", _TS),
        sa.Column("meta", JSONB),
        sa.Column("cr_uid", sa.Text),
        sa.Column("cr_namespace", sa.Text),
        sa.Column("cr_name", sa.Text),
        _created_at(),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.UniqueConstraint("cr_uid", name="uq_agents_cr_uid"),
    )
    op.create_index("ix_agents_user_id", "agents", ["user_id"])
    op.create_index("ix_agents_model_id", "agents", ["model_id"])
    op.create_index("ix_agents_next_run_at", "agents", ["next_run_at"])
    op.execute(
        """
        CREATE FUNCTION achilles_touch_updated_at() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            NEW.updated_at := now();
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agents_touch_updated_at BEFORE UPDATE ON agents
        FOR EACH ROW EXECUTE FUNCTION achilles_touch_updated_at()
        """
    )

    op.create_table(
        "agent_runs",
        _id(),
        sa.Column(
            "agent_id",
            sa.BigInteger,
            sa.ForeignKey("agents.id", ondelete="CASCADE", name="fk_agent_runs_agent_id_agents"),
            nullable=False,
        ),
        sa.Column("trigger", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("output", sa.Text),
        sa.Column("tokens_used", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("error", sa.Text),
        sa.Column("started_at", _TS),
        sa.Column("finished_at", _TS),
        sa.Column("heartbeat_at", _TS),
        _created_at(),
        sa.CheckConstraint(checks.RUN_TRIGGER_CHECK, name=op.f("ck_agent_runs_trigger")),
        sa.CheckConstraint(checks.RUN_STATE_CHECK, name=op.f("ck_agent_runs_state")),
        sa.CheckConstraint(
            checks.RUN_REASON_MATCHES_STATE_CHECK_0001,
            name=op.f("ck_agent_runs_reason_matches_state"),
        ),
        sa.CheckConstraint("tokens_used >= 0", name=op.f("ck_agent_runs_tokens_non_negative")),
        sa.CheckConstraint(
            checks.RUN_SKIPPED_SPENDS_NOTHING_CHECK,
            name=op.f("ck_agent_runs_skipped_spends_nothing"),
        ),
        sa.CheckConstraint(
            checks.RUN_FINISHED_IFF_TERMINAL_CHECK, name=op.f("ck_agent_runs_finished_iff_terminal")
        ),
        sa.CheckConstraint(
            checks.RUN_STARTED_WHEN_RAN_CHECK, name=op.f("ck_agent_runs_started_when_ran")
        ),
    )
    op.create_index("ix_agent_runs_agent_id", "agent_runs", ["agent_id"])
    op.create_index("ix_agent_runs_finished_at", "agent_runs", ["finished_at"])
    op.create_index(
        "uq_agent_runs_one_active_per_agent",
        "agent_runs",
        ["agent_id"],
        unique=True,
        postgresql_where=sa.text(checks.ACTIVE_RUN_PREDICATE),
    )
    op.create_index(
        "ix_agent_runs_queued_fifo",
        "agent_runs",
        ["created_at", "id"],
        postgresql_where=sa.text(checks.QUEUED_RUN_PREDICATE),
    )
    # Terminal rows are history: no code path may rewrite them (DESIGN.md §4).
    op.execute(
        f"""
        CREATE FUNCTION achilles_forbid_terminal_run_update() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.state IN ({checks.TERMINAL_RUN_STATES}) THEN
                RAISE EXCEPTION 'agent_runs row % is terminal (%) and cannot change',
                    OLD.id, OLD.state
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_runs_terminal_is_final BEFORE UPDATE ON agent_runs
        FOR EACH ROW EXECUTE FUNCTION achilles_forbid_terminal_run_update()
        """
    )

    op.create_table(
        "agent_tools",
        _id(),
        sa.Column(
            "agent_id",
            sa.BigInteger,
            sa.ForeignKey("agents.id", ondelete="CASCADE", name="fk_agent_tools_agent_id_agents"),
            nullable=False,
        ),
        sa.Column(
            "tool_id",
            sa.BigInteger,
            sa.ForeignKey("tools.id", ondelete="CASCADE", name="fk_agent_tools_tool_id_tools"),
            nullable=False,
        ),
        _created_at(),
        sa.UniqueConstraint("agent_id", "tool_id", name="uq_agent_tools_agent_id_tool_id"),
    )
    op.create_index("ix_agent_tools_agent_id", "agent_tools", ["agent_id"])
    op.create_index("ix_agent_tools_tool_id", "agent_tools", ["tool_id"])


def downgrade() -> None:
    op.drop_table("agent_tools")
    op.execute("DROP TRIGGER agent_runs_terminal_is_final ON agent_runs")
    op.drop_table("agent_runs")
    op.execute("DROP FUNCTION achilles_forbid_terminal_run_update()")
    op.execute("DROP TRIGGER agents_touch_updated_at ON agents")
    op.drop_table("agents")
    op.execute("DROP FUNCTION achilles_touch_updated_at()")
    op.drop_table("platform_settings")
    op.drop_table("tools")
    op.drop_table("agent_models")
    op.drop_table("users")
