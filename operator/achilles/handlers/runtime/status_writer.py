"""The status writer: the journal fields of Agents' statuses (nextRunAt, lastRun,
weeklyTokens) follow the journal. Woken by `mark_dirty` (NOTIFY, the loops, the
handlers); patches only what changed since it last wrote (runtime/statuses.py).
"""

from __future__ import annotations

from achilles.db.journal.status import agent_status_rows, agents_of_owners
from achilles.handlers import metrics
from achilles.handlers.runtime.context import RuntimeContext
from achilles.handlers.runtime.events import agent_ref
from achilles.services.status import journal_fields

TICK = 10.0
AFTER_ERROR = 1.0


def run(context: RuntimeContext) -> None:
    while not context.stop.is_set():
        context.status_wake.wait(TICK)
        if context.run_pass("status", lambda: write_dirty_statuses(context)) is None:
            context.stop.wait(AFTER_ERROR)


def write_dirty_statuses(context: RuntimeContext) -> bool:
    now, siblings = context.statuses.take()
    if not now and not siblings:
        return True
    try:
        return _write(context, now, siblings)
    except Exception:
        context.statuses.put_back(now, siblings)  # try again on the next pass
        raise


def _write(context: RuntimeContext, agent_ids: set[int], siblings: set[int]) -> bool:
    with context.database.transaction() as session:
        # The owners' other agents share the weekly budget: their turn comes later.
        context.statuses.mark_siblings(set(agents_of_owners(session, agent_ids)) - agent_ids)
        rows = agent_status_rows(session, agent_ids | siblings)
    written = context.written_statuses
    for row in rows:
        if row.namespace is None or row.cr_name is None:
            continue
        fields = journal_fields(row)
        if not written.changed(row.agent_id, fields):
            metrics.STATUS_PATCHES.labels("journal", "unchanged").inc()
            continue
        patched = context.resources.patch_status(
            agent_ref(row.cr_name, row.namespace, row.uid), fields
        )
        if metrics.count_status_patch("journal", patched):
            written.record(row.agent_id, fields)
        else:
            written.forget(row.agent_id)  # the Agent is gone
    return True
