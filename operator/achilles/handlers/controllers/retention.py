"""The retention pass (one of the sweeper's): runs older than the platform's
`runRetentionDays` deleted in small batches (services/retention.py).

The sweeper offers it every RETENTION_BUSY_EVERY; it does its work every RETENTION_EVERY,
or at once again while the previous pass left more to delete (a first pass over years
of runs goes on in bounded steps, never holding the sweeper for long).
"""

from __future__ import annotations

import logging
import time

from achilles.db.database import Database
from achilles.services import retention

log = logging.getLogger("achilles.operator")

RETENTION_EVERY = 600.0
RETENTION_BUSY_EVERY = 30.0


class RetentionPass:
    def __init__(self, database: Database) -> None:
        self.database = database
        self.next_at = 0.0  # the first offer works

    def __call__(self) -> retention.RetentionPass | None:
        if time.monotonic() < self.next_at:
            return None
        done = retention.apply_retention(self.database)
        if done.runs_deleted or done.notifications_deleted:
            log.info(
                "retention: %d run(s) finished before %s and %d sent notification(s) deleted",
                done.runs_deleted,
                done.cutoff,
                done.notifications_deleted,
            )
        self.next_at = time.monotonic() + (0.0 if done.more_left else RETENTION_EVERY)
        return done
