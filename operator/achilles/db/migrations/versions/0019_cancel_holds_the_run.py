"""A cancelled run holds its agent until its pod is gone (issue 36 item 3).

Revision ID: 0019_cancel_holds_the_run
Revises: 0018_mcp_tools
Create Date: 2026-12-05

Seed 002: one active run per agent means one runner alive per agent. A cancel used to
end the row at once while the run's pod went on (its Job deleted at the sweeper's next
pass), so a new run of the agent could start beside it, and the tokens its runner
reported before it stopped were refused. Now a cancel of a run that has, or may have, a
pod only asks (`cancel_requested_at`, `cancel_error`: who asked): the row stays active,
so the one-active-run index still holds the agent and the cap still counts the slot,
while the operator deletes the Job with its pods (foreground propagation). The run ends
`failed/cancelled` when the operator sees the pod gone (the Job's deletion, or no Job at
the sweep), or when the reaper finds it silent: the trigger below makes any end the
cancel's (`achilles_cancel_wins`), keeping the tokens reported; the runner's own end (its
SIGTERM) keeps the run active with its tokens, since its pod is still there. A queued
run with no Job yet still ends at once.

No grant changes: the operator writes the two columns through its table grant; a runner
may not (its column grant, 0011), so it cannot withdraw a cancel.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from achilles.db.function_paths import pinned_search_path

revision: str = "0019_cancel_holds_the_run"
down_revision: str | Sequence[str] | None = "0018_mcp_tools"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
CHECK = "ck_agent_runs_cancel_request_complete"


def upgrade() -> None:
    op.add_column("agent_runs", sa.Column("cancel_requested_at", _TS, nullable=True))
    op.add_column("agent_runs", sa.Column("cancel_error", sa.Text, nullable=True))
    op.create_check_constraint(
        op.f(CHECK), "agent_runs", "(cancel_requested_at IS NULL) = (cancel_error IS NULL)"
    )
    schema = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    # Fires before `agent_runs_runner_rules` (triggers of one event run in name order),
    # so a runner's end is checked as the `failed` it becomes.
    op.execute(
        f"""
        CREATE FUNCTION achilles_cancel_wins() RETURNS trigger
        LANGUAGE plpgsql {pinned_search_path(str(schema))} AS $$
        BEGIN
            IF achilles_session_is_runner() THEN
                -- The pod is still there: its runner's end keeps the run active (and
                -- the tokens it reports); the operator ends it once the pod is gone.
                NEW.state := OLD.state;
                NEW.reason := OLD.reason;
                NEW.error := OLD.error;
                NEW.output := OLD.output;
                NEW.finished_at := OLD.finished_at;
                RETURN NEW;
            END IF;
            NEW.state := 'failed';
            NEW.reason := 'cancelled';
            NEW.error := OLD.cancel_error;
            NEW.output := NULL;
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_runs_cancel_wins BEFORE UPDATE OF state ON agent_runs
        FOR EACH ROW WHEN (OLD.cancel_requested_at IS NOT NULL
                           AND OLD.state IN ('queued', 'running')
                           AND NEW.state IN ('succeeded', 'failed'))
        EXECUTE FUNCTION achilles_cancel_wins()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER agent_runs_cancel_wins ON agent_runs")
    op.execute("DROP FUNCTION achilles_cancel_wins()")
    op.drop_constraint(op.f(CHECK), "agent_runs")
    op.drop_column("agent_runs", "cancel_error")
    op.drop_column("agent_runs", "cancel_requested_at")
