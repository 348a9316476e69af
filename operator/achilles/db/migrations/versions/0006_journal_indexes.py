"""What the benchmarks found in the journal (docs/performance.md, `achilles bench journal`).

Revision ID: 0006_journal_indexes
Revises: 0005_operator
Create Date: 2026-12-01

- `ix_agent_runs_agent_id_finished_at (agent_id, finished_at) INCLUDE (tokens_used)`:
  the weekly budget (`usage.weekly_tokens_used`) sums an owner's runs finished in one
  week. With only `finished_at` indexed it read every run of every owner in the week
  (190 k rows at 10 M rows over a year) to keep the owner's ~20; now it reads the
  owner's agents' runs in the window from the index alone. It runs on every start,
  in every scheduler enqueue and in every status write.
- `ix_agent_runs_running_heartbeat_at (heartbeat_at) WHERE state = 'running'`: the
  reaper (`runs.reap_stale_runs`) finds the stale running rows by range instead of
  visiting every active row's heap page.

- `ix_agent_runs_agent_id_id (agent_id, id DESC)`: the status writer's last run of
  each agent (`status.agent_status_rows`) without reading and sorting every run of
  those agents.
- The `next_run_at` NOTIFY fires per changed row instead of per statement. As a
  statement trigger (0005) it fired for every UPDATE that named the column, even one
  that changed no row, and the scheduler's own pass runs such an UPDATE
  (`schedule.clear_closed_schedules`): each pass woke the scheduler for the next one,
  so an idle operator never stopped scheduling. Now it fires only when a slot really
  changes (or an agent with a slot is inserted); the payload stays empty, and
  PostgreSQL folds a transaction's identical notifications into one.

Plain CREATE INDEX (the migration runs in one transaction): on a large journal it
holds off writes to `agent_runs` for the build, some seconds per 10 M rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_journal_indexes"
down_revision: str | Sequence[str] | None = "0005_operator"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_agent_runs_agent_id_finished_at",
        "agent_runs",
        ["agent_id", "finished_at"],
        postgresql_include=["tokens_used"],
    )
    op.create_index(
        "ix_agent_runs_running_heartbeat_at",
        "agent_runs",
        ["heartbeat_at"],
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_index("ix_agent_runs_agent_id_id", "agent_runs", ["agent_id", sa.text("id DESC")])
    op.execute("DROP TRIGGER agents_notify_schedule ON agents")
    op.execute(
        """
        CREATE TRIGGER agents_notify_schedule AFTER UPDATE OF next_run_at ON agents
        FOR EACH ROW WHEN (OLD.next_run_at IS DISTINCT FROM NEW.next_run_at)
        EXECUTE FUNCTION achilles_notify_schedule_change()
        """
    )
    op.execute(
        """
        CREATE TRIGGER agents_notify_schedule_insert AFTER INSERT ON agents
        FOR EACH ROW WHEN (NEW.next_run_at IS NOT NULL)
        EXECUTE FUNCTION achilles_notify_schedule_change()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER agents_notify_schedule_insert ON agents")
    op.execute("DROP TRIGGER agents_notify_schedule ON agents")
    op.execute(
        """
        CREATE TRIGGER agents_notify_schedule AFTER INSERT OR UPDATE OF next_run_at ON agents
        FOR EACH STATEMENT EXECUTE FUNCTION achilles_notify_schedule_change()
        """
    )
    op.drop_index("ix_agent_runs_agent_id_id", table_name="agent_runs")
    op.drop_index("ix_agent_runs_running_heartbeat_at", table_name="agent_runs")
    op.drop_index("ix_agent_runs_agent_id_finished_at", table_name="agent_runs")
