"""The status writer: the journal fields of Agents' statuses (nextRunAt, lastRun,
weeklyTokens) follow the journal. Woken by `mark_dirty` (NOTIFY, the loops, the
handlers); patches only what changed since it last wrote (handlers/statuses.py).

Jobs come first: while the dispatcher makes Jobs (`dispatch_idle` clear) a pass
waits, `DEFER_FOR_JOBS` at most, before it reads and before each patch. At a slot where
1,000 Agents are due, the statuses' patches were 300 API writes (and as many echoes for
kopf) taken from the Jobs' creates; deferred, they also fold into fewer patches, each
with the runs' later state. A status is late by `DEFER_FOR_JOBS` at most.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from achilles.db.database import Database
from achilles.domain.agent_status import journal_fields
from achilles.handlers import metrics
from achilles.handlers.agent_queue import agent_ref
from achilles.handlers.statuses import StatusQueue, WrittenStatuses
from achilles.k8s.objects import Resources
from achilles.runtime.manager import LoopHandle
from achilles.services.status import statuses_to_write

TICK = 10.0
DEFER_FOR_JOBS = 5.0
NAME = "status"


@dataclass(frozen=True)
class StatusWriter:
    """The status writer's reconciler, with exactly what it uses (handlers/manager.py
    builds it): the journal's database, the API server it patches, the status queue it
    drains, the statuses last written, and the dispatcher's `dispatch_idle` it waits on."""

    database: Database
    resources: Resources
    statuses: StatusQueue
    written: WrittenStatuses
    # Set while the dispatcher is not making Jobs (RuntimeContext.dispatch_idle).
    dispatch_idle: threading.Event

    def write_dirty_statuses(self) -> bool:
        defer_until = time.monotonic() + DEFER_FOR_JOBS
        self._after_jobs(defer_until)
        now, siblings = self.statuses.take()
        if not now and not siblings:
            return True
        try:
            return self._write(now, siblings, defer_until)
        except Exception:
            self.statuses.put_back(now, siblings)  # try again on the next pass
            raise

    def _after_jobs(self, defer_until: float) -> None:
        """Wait while the dispatcher makes Jobs, until `defer_until` at most."""
        remaining = defer_until - time.monotonic()
        if remaining > 0:
            self.dispatch_idle.wait(remaining)

    def _write(self, agent_ids: set[int], siblings: set[int], defer_until: float) -> bool:
        to_write = statuses_to_write(self.database, agent_ids, siblings)
        # The owners' other agents share the weekly budget: their turn comes later.
        self.statuses.mark_siblings(to_write.siblings)
        written = self.written
        for row in to_write.rows:
            if row.namespace is None or row.cr_name is None:
                continue
            fields = journal_fields(row)
            if not written.changed(row.agent_id, fields):
                metrics.STATUS_PATCHES.labels("journal", "unchanged").inc()
                continue
            self._after_jobs(defer_until)
            patched = self.resources.patch_status(
                agent_ref(row.cr_name, row.namespace, row.uid), fields
            )
            if metrics.count_status_patch("journal", patched):
                written.record(row.agent_id, fields)
            else:
                written.forget(row.agent_id)  # the Agent is gone
        return True


def run(writer: StatusWriter, loop: LoopHandle) -> None:
    """A pass, then the next at a mark (`status-moved`) or TICK; a failed pass (its
    Agents put back on the queue) is retried with the runtime's backoff."""

    def write() -> float:
        writer.write_dirty_statuses()
        return TICK

    loop.drive(write)
