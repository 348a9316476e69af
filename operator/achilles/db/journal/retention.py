"""Deleting what the retention setting no longer keeps, one small batch per statement.

Each batch locks only its own rows (FOR UPDATE SKIP LOCKED: a row another transaction
holds is left for a later batch) and commits on its own, so the table is never locked
and a pass can stop between any two batches. A run's steps go with it (their foreign key
cascades); inbox items belong to the agent, not to a run, and stay.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session

_DELETE_RUNS = text(
    """
    DELETE FROM agent_runs r
    USING (
        SELECT id FROM agent_runs
        WHERE finished_at < :cutoff
        ORDER BY finished_at
        LIMIT :batch
        FOR UPDATE SKIP LOCKED
    ) old
    WHERE r.id = old.id
    RETURNING r.id
    """
)
_DELETE_SENT_NOTIFICATIONS = text(
    """
    DELETE FROM notification_outbox n
    USING (
        SELECT id FROM notification_outbox
        WHERE state <> 'pending' AND created_at < :cutoff
        LIMIT :batch
        FOR UPDATE SKIP LOCKED
    ) old
    WHERE n.id = old.id
    RETURNING n.id
    """
)


def retention_cutoff(now: datetime, days: int, budget_week_start: datetime) -> datetime:
    """Runs finished before this instant may go: older than `days`, and never one the
    current budget week sums (its tokens count until the week ends)."""
    return min(now - timedelta(days=days), budget_week_start)


def delete_finished_runs(session: Session, cutoff: datetime, batch: int) -> int:
    """One batch of runs finished before `cutoff`, oldest first; how many went."""
    return len(session.execute(_DELETE_RUNS, {"cutoff": cutoff, "batch": batch}).all())


def delete_sent_notifications(session: Session, cutoff: datetime, batch: int) -> int:
    """Delivered and dead notifications created before `cutoff`."""
    params = {"cutoff": cutoff, "batch": batch}
    return len(session.execute(_DELETE_SENT_NOTIFICATIONS, params).all())
