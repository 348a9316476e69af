"""Indexes the benchmarks asked for (docs/performance.md, `achilles bench journal`).

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


def downgrade() -> None:
    op.drop_index("ix_agent_runs_running_heartbeat_at", table_name="agent_runs")
    op.drop_index("ix_agent_runs_agent_id_finished_at", table_name="agent_runs")
