"""Journal retention (issue 22): what the platform's `runRetentionDays` no longer keeps.

Finished runs older than the setting go, never one the current budget week sums
(`retention_cutoff`), in batches of RETENTION_BATCH rows per statement and transaction;
a pass deletes at most MAX_BATCHES and says whether more is left, so a first pass over
years of runs never holds the sweeper for long. The notifications sent or dead for a
week go too (whatever the setting: they are the notifier's record, not the journal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from achilles.db.database import Database
from achilles.db.journal.retention import (
    delete_finished_runs,
    delete_sent_notifications,
    retention_cutoff,
)
from achilles.db.journal.settings import database_now, load_settings
from achilles.db.outbox.settings import load_retention_days
from achilles.domain.budget import week_window

RETENTION_BATCH = 500
MAX_BATCHES = 20
SENT_NOTIFICATIONS_KEPT = timedelta(days=7)


@dataclass
class RetentionPass:
    cutoff: datetime | None = None  # None: the setting keeps every run
    runs_deleted: int = 0
    notifications_deleted: int = 0
    more_left: bool = False


def apply_retention(
    database: Database, *, batch: int = RETENTION_BATCH, max_batches: int = MAX_BATCHES
) -> RetentionPass:
    with database.transaction() as session:
        now = database_now(session)
        days = load_retention_days(session)
        week_start = week_window(now, load_settings(session).zone).start
    done = RetentionPass()
    if days is not None:
        done.cutoff = retention_cutoff(now, days, week_start)
        done.runs_deleted, done.more_left = _in_batches(
            database, delete_finished_runs, done.cutoff, batch, max_batches
        )
    done.notifications_deleted, sent_full = _in_batches(
        database, delete_sent_notifications, now - SENT_NOTIFICATIONS_KEPT, batch, max_batches
    )
    done.more_left = done.more_left or sent_full
    return done


# (session, cutoff, batch) -> rows deleted: one of db/journal/retention.py's deletes.
BatchDelete = Callable[[Any, datetime, int], int]


def _in_batches(
    database: Database, delete: BatchDelete, cutoff: datetime, batch: int, max_batches: int
) -> tuple[int, bool]:
    """Batches of `delete` until one comes back short; (rows deleted, all were full)."""
    total = 0
    for _ in range(max_batches):
        with database.transaction() as session:
            deleted = delete(session, cutoff, batch)
        total += deleted
        if deleted < batch:
            return total, False
    return total, True
