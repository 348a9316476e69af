"""A reaped run holds its agent until its pod is gone, as a cancelled one does.

Revision ID: 0021_stale_holds_the_run
Revises: 0020_catalogue_uids
Create Date: 2026-12-05

Seed 002: one active run per agent means one runner alive per agent. The reaper used to
end a silent run `failed/stale` at once and delete its Job in the background, so the
agent's next run could start while the silent runner's pod was still there (a frozen
runner is not a dead one: the fault suite's invariant monitor saw two runner pods of one
agent). Now the reaper asks a silent run to stop, as a cancel does (0019): the row stays
active, holding the agent and its slot, while its Job is deleted with its pods, and it
ends `failed/stale` when the pod is gone. A run with no Job ends at once; one whose pod is
never seen gone (a lost node) ends at the operator's stop deadline, so a zombie does not
lock its agent for ever (seed 002).

The cancel's columns become the stop's: `stop_requested_at`, `stop_error` (who or what
asked) and `stop_reason` (`cancelled` or `stale`: the end's reason), and the trigger that
makes any end of such a run the stop's, `achilles_end_as_asked`, takes the reason from
the row instead of writing `cancelled`. Its name keeps it before `agent_runs_runner_rules`
(triggers of one event fire in name order), as 0019's did.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from achilles.db.function_paths import pinned_search_path

revision: str = "0021_stale_holds_the_run"
down_revision: str | Sequence[str] | None = "0020_catalogue_uids"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_CHECK = "ck_agent_runs_cancel_request_complete"
CHECK = "ck_agent_runs_stop_request_complete"
STOP_REQUEST_COMPLETE = (
    "(stop_requested_at IS NULL) = (stop_error IS NULL)"
    " AND (stop_requested_at IS NULL) = (stop_reason IS NULL)"
    " AND stop_reason IN ('cancelled', 'stale')"
)


def _end_as_asked(schema: str, name: str, reason: str, error_column: str) -> str:
    """The trigger function that makes any end of a run asked to stop the stop's."""
    return f"""
        CREATE FUNCTION {name}() RETURNS trigger
        LANGUAGE plpgsql {pinned_search_path(schema)} AS $$
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
            NEW.reason := {reason};
            NEW.error := OLD.{error_column};
            NEW.output := NULL;
            RETURN NEW;
        END
        $$
        """


def upgrade() -> None:
    schema = str(op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one())
    op.execute("DROP TRIGGER agent_runs_cancel_wins ON agent_runs")
    op.execute("DROP FUNCTION achilles_cancel_wins()")
    op.drop_constraint(OLD_CHECK, "agent_runs")
    op.alter_column("agent_runs", "cancel_requested_at", new_column_name="stop_requested_at")
    op.alter_column("agent_runs", "cancel_error", new_column_name="stop_error")
    op.add_column("agent_runs", sa.Column("stop_reason", sa.Text, nullable=True))
    op.execute(
        "UPDATE agent_runs SET stop_reason = 'cancelled' WHERE stop_requested_at IS NOT NULL"
    )
    op.create_check_constraint(op.f(CHECK), "agent_runs", STOP_REQUEST_COMPLETE)
    op.execute(_end_as_asked(schema, "achilles_end_as_asked", "OLD.stop_reason", "stop_error"))
    op.execute(
        """
        CREATE TRIGGER agent_runs_end_as_asked BEFORE UPDATE OF state ON agent_runs
        FOR EACH ROW WHEN (OLD.stop_requested_at IS NOT NULL
                           AND OLD.state IN ('queued', 'running')
                           AND NEW.state IN ('succeeded', 'failed'))
        EXECUTE FUNCTION achilles_end_as_asked()
        """
    )


def downgrade() -> None:
    schema = str(op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one())
    op.execute("DROP TRIGGER agent_runs_end_as_asked ON agent_runs")
    op.execute("DROP FUNCTION achilles_end_as_asked()")
    op.drop_constraint(op.f(CHECK), "agent_runs")
    # A stale stop under way becomes what the reaper did before: nothing asked.
    op.execute(
        "UPDATE agent_runs SET stop_requested_at = NULL, stop_error = NULL, stop_reason = NULL"
        " WHERE stop_reason = 'stale'"
    )
    op.drop_column("agent_runs", "stop_reason")
    op.alter_column("agent_runs", "stop_error", new_column_name="cancel_error")
    op.alter_column("agent_runs", "stop_requested_at", new_column_name="cancel_requested_at")
    op.create_check_constraint(
        op.f(OLD_CHECK), "agent_runs", "(cancel_requested_at IS NULL) = (cancel_error IS NULL)"
    )
    op.execute(_end_as_asked(schema, "achilles_cancel_wins", "'cancelled'", "cancel_error"))
    op.execute(
        """
        CREATE TRIGGER agent_runs_cancel_wins BEFORE UPDATE OF state ON agent_runs
        FOR EACH ROW WHEN (OLD.cancel_requested_at IS NOT NULL
                           AND OLD.state IN ('queued', 'running')
                           AND NEW.state IN ('succeeded', 'failed'))
        EXECUTE FUNCTION achilles_cancel_wins()
        """
    )
