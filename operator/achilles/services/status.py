"""Agent statuses, the operator's side: the rows the status writer and Events read. The
status document itself is built in domain/agent_status.py, and whether an event is the
operator's own status write coming back is told in domain/agent_event.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from achilles.db.database import Database
from achilles.db.journal.status import (
    RunOwner,
    agent_status_rows,
    agents_of_owners,
    run_owners,
)
from achilles.domain.agent_status import AgentStatusRow


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
