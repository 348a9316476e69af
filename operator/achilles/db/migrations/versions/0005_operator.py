"""What the operator needs in the journal: idempotent run requests, dispatch, wake-ups.

Revision ID: 0005_operator
Revises: 0004_single_head
Create Date: 2026-12-01

- `agent_runs.request_key`: the `achilles.io/run-requested-at` value a manual run
  answered. Unique per agent, so two operator replicas that both see one request
  write one row between them (not even a spurious `skipped/already_running`).
- `agent_runs.dispatched_at`: when the dispatcher took the run to make its Job. The
  concurrency cap counts dispatched-but-unfinished runs, decided in the database.
- `agent_runs.scheduled_for`: the slot a scheduled run was due at (slot -> Job latency).
- `agents.schedule_zone`: the zone `next_run_at` was computed in, so a changed owner
  or organisation zone is noticed without an Agent event.
- NOTIFY on run inserts/state changes and on `next_run_at` changes, so the
  dispatcher, the status writer and the scheduler wake at once instead of polling.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_operator"
down_revision: str | Sequence[str] | None = "0004_single_head"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RUNS_CHANNEL = "achilles_runs"
SCHEDULE_CHANNEL = "achilles_schedule"


def upgrade() -> None:
    op.add_column("agent_runs", sa.Column("request_key", sa.Text, nullable=True))
    op.add_column(
        "agent_runs", sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "agent_runs", sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_index(
        "uq_agent_runs_request_key",
        "agent_runs",
        ["agent_id", "request_key"],
        unique=True,
        postgresql_where=sa.text("request_key IS NOT NULL"),
    )
    op.add_column("agents", sa.Column("schedule_zone", sa.Text, nullable=True))
    op.execute(
        f"""
        CREATE FUNCTION achilles_notify_run_change() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{RUNS_CHANNEL}', NEW.agent_id::text);
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_runs_notify AFTER INSERT OR UPDATE OF state ON agent_runs
        FOR EACH ROW EXECUTE FUNCTION achilles_notify_run_change()
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION achilles_notify_schedule_change() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{SCHEDULE_CHANNEL}', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agents_notify_schedule AFTER INSERT OR UPDATE OF next_run_at ON agents
        FOR EACH STATEMENT EXECUTE FUNCTION achilles_notify_schedule_change()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER agents_notify_schedule ON agents")
    op.execute("DROP FUNCTION achilles_notify_schedule_change()")
    op.execute("DROP TRIGGER agent_runs_notify ON agent_runs")
    op.execute("DROP FUNCTION achilles_notify_run_change()")
    op.drop_column("agents", "schedule_zone")
    op.drop_index("uq_agent_runs_request_key", table_name="agent_runs")
    op.drop_column("agent_runs", "scheduled_for")
    op.drop_column("agent_runs", "dispatched_at")
    op.drop_column("agent_runs", "request_key")
