"""Wake-on-reply that is never lost (seed 003, DESIGN.md §5): the operator's side.

`achilles inbox reply` (and the API) ask for a run as soon as a reply lands, but that
request can be lost: a run of the agent is active, so it becomes
`skipped/already_running`, or the cluster cannot be reached. The sweeper calls
`wake_for_waiting_replies` on every pass: each agent that still owes a reply its wake
(`db/inbox/wakes.py`: derived from the rows, so an operator restart finds it again)
gets a manual run through the start gates, keyed so that two replicas, a retry and the
reply's own late request make one run between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from achilles.db.database import Database
from achilles.db.inbox.wakes import OwedWake, owed_wakes
from achilles.db.journal.runs import EnqueueResult, enqueue_run
from achilles.domain.runs import RunTrigger
from achilles.errors import StartRefused
from achilles.k8s.annotations import format_run_request


@dataclass(frozen=True)
class ReplyWake:
    owed: OwedWake
    request: str  # the run's request key
    result: EnqueueResult | None  # None: a durable lock closed meanwhile (no row)


def wake_request_key(owed: OwedWake) -> str:
    """The reply's own run-request value (what `achilles inbox reply` annotates, so both
    make one run); after `n` lost wakes (`already_running` skips) that value + `+n`."""
    value = format_run_request(owed.handled_at)
    return value if owed.skipped_since == 0 else f"{value}+{owed.skipped_since}"


def wake_for_waiting_replies(database: Database) -> list[ReplyWake]:
    """A manual run for every agent whose answered question no run has taken yet."""
    with database.transaction() as session:
        owed = owed_wakes(session)
    woken: list[ReplyWake] = []
    for wake in owed:
        key = wake_request_key(wake)
        with database.transaction() as session:
            try:
                result: EnqueueResult | None = enqueue_run(
                    session, wake.agent_id, RunTrigger.MANUAL, request_key=key
                )
            except StartRefused:
                result = None  # locked since the query: owed again once it opens
        if result is None or not result.duplicate_request:
            woken.append(ReplyWake(wake, key, result))
    return woken
