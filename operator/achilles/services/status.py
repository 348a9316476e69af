"""Agent statuses, the operator's side: whether an event is its own status write coming
back, and the rows the status writer and Events read. The status document itself is
built in domain/agent_status.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from achilles.db.database import Database
from achilles.db.journal.status import (
    RunOwner,
    agent_status_rows,
    agents_of_owners,
    run_owners,
)
from achilles.domain.agent_event import parse_cancel_request, parse_run_request
from achilles.domain.agent_status import AgentStatusRow
from achilles.k8s.annotations import CANCEL_RUN, RUN_REQUESTED_AT


def is_own_status_echo(
    event_type: str | None, meta: Mapping[str, Any], status: Mapping[str, Any]
) -> bool:
    """An update of a Ready Agent whose spec the operator already reconciled (its
    generation is the status's observedGeneration) and whose run request it already
    handled: the operator's own status write coming back as a watch event, what
    controller-runtime's GenerationChanged and AnnotationChanged predicates filter out.
    Reconciling it again would change nothing but cost a transaction per event.

    Everything else is reconciled: the listing at start (type None), a new or deleted
    object, a spec change, a new run request, and an Agent that is not Ready, whose lock
    may open without an event of its own (its model created later).
    """
    if event_type != "MODIFIED" or meta.get("deletionTimestamp"):
        return False
    if status.get("databaseId") is None or status.get("phase") != "Ready":
        return False
    if status.get("observedGeneration") != meta.get("generation"):
        return False
    annotations = meta.get("annotations") or {}
    request = parse_run_request(annotations.get(RUN_REQUESTED_AT))
    if request is not None and request != status.get("lastHandledRunRequest"):
        return False
    cancel = parse_cancel_request(annotations.get(CANCEL_RUN))
    return cancel is None or cancel == status.get("lastHandledCancelRequest")


# --- the reads of the operator's status writer and Events ---


def agent_rows(database: Database, agent_ids: Iterable[int]) -> list[AgentStatusRow]:
    """These agents' status rows (their CR's name, the journal's fields)."""
    with database.transaction() as session:
        return agent_status_rows(session, agent_ids)


def run_owner(database: Database, run_id: int) -> RunOwner | None:
    """The agent of a run (its CR's name), None when the run is gone."""
    with database.transaction() as session:
        return run_owners(session, [run_id]).get(run_id)


@dataclass(frozen=True)
class StatusesToWrite:
    rows: list[AgentStatusRow]
    # The owners' other agents: they share the weekly budget that moved.
    siblings: set[int]


def statuses_to_write(
    database: Database, agent_ids: set[int], siblings: set[int]
) -> StatusesToWrite:
    """The rows of the agents whose journal fields moved and of the siblings whose turn
    came, and the moved agents' siblings (to be written in a coming turn): one
    transaction."""
    with database.transaction() as session:
        others = set(agents_of_owners(session, agent_ids)) - agent_ids
        rows = agent_status_rows(session, agent_ids | siblings)
    return StatusesToWrite(rows, others)
