"""The status writer: the journal fields of Agents' statuses (nextRunAt, lastRun,
weeklyTokens) follow the journal. Woken by `mark_dirty` (NOTIFY, the loops, the
handlers); patches only what changed since it last wrote (handlers/statuses.py).

Jobs come first: while the dispatcher makes Jobs (`context.dispatch_idle` clear) a pass
waits, `DEFER_FOR_JOBS` at most, before it reads and before each patch. At a slot where
1,000 Agents are due, the statuses' patches were 300 API writes (and as many echoes for
kopf) taken from the Jobs' creates; deferred, they also fold into fewer patches, each
with the runs' later state. A status is late by `DEFER_FOR_JOBS` at most.
"""

from __future__ import annotations

import time

from achilles.handlers import metrics
from achilles.handlers.agent_queue import agent_ref
from achilles.handlers.context import RuntimeContext
from achilles.services.status import journal_fields, statuses_to_write

TICK = 10.0
AFTER_ERROR = 1.0
DEFER_FOR_JOBS = 5.0
NAME = "status"


def run(context: RuntimeContext) -> None:
    woken = context.wakes.target(NAME)
    while not context.stop.is_set():
        woken.wait(TICK)
        if context.run_pass("status", lambda: write_dirty_statuses(context)) is None:
            context.stop.wait(AFTER_ERROR)


def write_dirty_statuses(context: RuntimeContext) -> bool:
    defer_until = time.monotonic() + DEFER_FOR_JOBS
    _after_jobs(context, defer_until)
    now, siblings = context.statuses.take()
    if not now and not siblings:
        return True
    try:
        return _write(context, now, siblings, defer_until)
    except Exception:
        context.statuses.put_back(now, siblings)  # try again on the next pass
        raise


def _after_jobs(context: RuntimeContext, defer_until: float) -> None:
    """Wait while the dispatcher makes Jobs, until `defer_until` at most."""
    remaining = defer_until - time.monotonic()
    if remaining > 0:
        context.dispatch_idle.wait(remaining)


def _write(
    context: RuntimeContext, agent_ids: set[int], siblings: set[int], defer_until: float
) -> bool:
    to_write = statuses_to_write(context.database, agent_ids, siblings)
    # The owners' other agents share the weekly budget: their turn comes later.
    context.statuses.mark_siblings(to_write.siblings)
    written = context.written_statuses
    for row in to_write.rows:
        if row.namespace is None or row.cr_name is None:
            continue
        fields = journal_fields(row)
        if not written.changed(row.agent_id, fields):
            metrics.STATUS_PATCHES.labels("journal", "unchanged").inc()
            continue
        _after_jobs(context, defer_until)
        patched = context.resources.patch_status(
            agent_ref(row.cr_name, row.namespace, row.uid), fields
        )
        if metrics.count_status_patch("journal", patched):
            written.record(row.agent_id, fields)
        else:
            written.forget(row.agent_id)  # the Agent is gone
    return True
