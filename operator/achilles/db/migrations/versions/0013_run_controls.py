"""Controls owners and admins expect, the run's side (issue 22): cancel, per-run token cap,
auto-suspend.

Revision ID: 0013_run_controls
Revises: 0012_run_steps
Create Date: 2026-12-02

- `agent_runs.reason`: two failure reasons more, in seed 000's vocabulary of machine
  codes: `cancelled` (an owner or admin stopped the run, queued or running) and
  `token_cap` (the run's tokens reached its cap; the call that crossed it counted).
  The CHECK is replaced by the domain's whole list (`checks.RUN_REASON_MATCHES_STATE_CHECK`).
- `platform_settings.agent_max_run_tokens` (NULL: no cap) and
  `agent_suspend_after_failures` (NULL: never): the organisation's defaults.
- `agents.max_run_tokens`, `agents.suspend_after_failures` (the Agent's own values; NULL:
  the platform's; a `suspend_after_failures` of 0: never for this agent) and
  `agents.suspended_at`: when the scheduler stopped scheduling the agent because its
  last N runs failed (NULL: not suspended). The two settings are edits (they move
  `updated_at`, 0009); the suspension is the scheduler's bookkeeping and does not.

No grant changes: the operator writes the new columns through its table grants, the API
and the runner read them through theirs (the runner only its agent's row, 0011).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from achilles.db import checks

revision: str = "0013_run_controls"
down_revision: str | Sequence[str] | None = "0012_run_steps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
REASON_CHECK = "ck_agent_runs_reason_matches_state"

# What the owner (or the admin) edits, 0009's list and this revision's two settings.
EDITED_COLUMNS_0009 = (
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
EDITED_COLUMNS = (*EDITED_COLUMNS_0009, "max_run_tokens", "suspend_after_failures")

# (table, column, type, CHECK name, CHECK)
_COLUMNS = (
    (
        "platform_settings",
        "agent_max_run_tokens",
        sa.BigInteger,
        "max_run_tokens_positive",
        "agent_max_run_tokens IS NULL OR agent_max_run_tokens >= 1",
    ),
    (
        "platform_settings",
        "agent_suspend_after_failures",
        sa.Integer,
        "suspend_after_failures_positive",
        "agent_suspend_after_failures IS NULL OR agent_suspend_after_failures >= 1",
    ),
    (
        "agents",
        "max_run_tokens",
        sa.BigInteger,
        "max_run_tokens_positive",
        "max_run_tokens IS NULL OR max_run_tokens >= 1",
    ),
    (
        "agents",
        "suspend_after_failures",
        sa.Integer,
        "suspend_after_failures_non_negative",
        "suspend_after_failures IS NULL OR suspend_after_failures >= 0",
    ),
)


def upgrade() -> None:
    op.drop_constraint(op.f(REASON_CHECK), "agent_runs")
    op.create_check_constraint(
        op.f(REASON_CHECK), "agent_runs", checks.RUN_REASON_MATCHES_STATE_CHECK
    )
    for table, column, type_, name, check in _COLUMNS:
        op.add_column(table, sa.Column(column, type_, nullable=True))
        op.create_check_constraint(op.f(f"ck_{table}_{name}"), table, check)
    op.add_column("agents", sa.Column("suspended_at", _TS, nullable=True))
    _touch_when(EDITED_COLUMNS)


def downgrade() -> None:
    _touch_when(EDITED_COLUMNS_0009)
    op.drop_column("agents", "suspended_at")
    for table, column, _type, name, _check in reversed(_COLUMNS):
        op.drop_constraint(op.f(f"ck_{table}_{name}"), table)
        op.drop_column(table, column)
    op.drop_constraint(op.f(REASON_CHECK), "agent_runs")
    # Terminal rows are final (a trigger refuses their update), so runs that ended
    # `cancelled` or `token_cap` keep their reason: the old list holds for new rows only.
    op.execute(
        f"ALTER TABLE agent_runs ADD CONSTRAINT {REASON_CHECK}"
        f" CHECK ({checks.RUN_REASON_MATCHES_STATE_CHECK_0001}) NOT VALID"
    )


def _touch_when(columns: Sequence[str]) -> None:
    """`agents_touch_updated_at` when one of `columns` changed (as 0009 writes it)."""
    op.execute("DROP TRIGGER agents_touch_updated_at ON agents")
    old = ", ".join(f"OLD.{column}" for column in columns)
    new = ", ".join(f"NEW.{column}" for column in columns)
    op.execute(
        "CREATE TRIGGER agents_touch_updated_at BEFORE UPDATE ON agents FOR EACH ROW"
        f" WHEN (({old}) IS DISTINCT FROM ({new})) EXECUTE FUNCTION achilles_touch_updated_at()"
    )
