"""A person's view of the journal (the HTTP API's reads): their agents as `kubectl get
agents` shows them, pages of their runs, one run.

Every question is asked for a scope: an owner's key, or `None` for every owner (an admin
reading across owners; the caller decides who may). Something outside the scope reads
exactly like something missing (`NotFound`), so nobody learns what others own. The
agents' columns are the Agent status's (`services.status`: phase, schedule summary, next
slot, last run, the owner's weekly tokens), computed from the same rows the operator's
status writer reads (`db.journal.status.agent_status_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from achilles.db.database import Database
from achilles.db.journal import owner_reads as reads
from achilles.db.journal.owner_reads import OwnedAgent, OwnedRun, RunFilter
from achilles.db.journal.status import AgentStatusRow, LastRunRow, agent_status_rows
from achilles.domain.gates import LockReason, closed_locks
from achilles.errors import NotFound
from achilles.services.status import phase_of, schedule_summary

__all__ = ["AgentView", "OwnedAgent", "OwnedRun", "RunFilter"]


@dataclass(frozen=True)
class AgentView:
    agent: OwnedAgent
    phase: str
    closed_locks: tuple[LockReason, ...]
    schedule: str
    next_run_at: datetime | None
    last_run: LastRunRow | None
    weekly_tokens_used: int
    weekly_token_limit: int
    week_start: datetime


def _view(agent: OwnedAgent, row: AgentStatusRow) -> AgentView:
    closed = closed_locks(row.locks)
    return AgentView(
        agent=agent,
        phase=phase_of(closed, suspended=row.suspended_at is not None),
        closed_locks=closed,
        schedule=schedule_summary(row.schedule, row.zone),
        next_run_at=row.next_run_at,
        last_run=row.last_run,
        weekly_tokens_used=row.tokens_used,
        weekly_token_limit=row.token_limit,
        week_start=row.window_start,
    )


def agents_page(
    database: Database, owner_key: str | None, *, after_id: int | None, limit: int
) -> list[AgentView]:
    """The scope's agents by id, `limit` after `after_id`."""
    with database.transaction() as session:
        owner_id = None
        if owner_key is not None:
            owner_id = reads.user_id_of(session, owner_key)
            if owner_id is None:
                return []
        agents = reads.agents_page(session, owner_id=owner_id, after_id=after_id, limit=limit)
        rows = {row.agent_id: row for row in agent_status_rows(session, [a.id for a in agents])}
        return [_view(agent, rows[agent.id]) for agent in agents if agent.id in rows]


def find_agent(database: Database, namespace: str, name: str, owner_key: str | None) -> AgentView:
    """Agent `namespace/name` with its status columns, if it is in the scope."""
    with database.transaction() as session:
        agent = reads.agent_by_resource(session, namespace, name)
        if agent is None or (owner_key is not None and agent.owner_key != owner_key):
            raise NotFound(f"agent {namespace}/{name} not found")
        rows = agent_status_rows(session, [agent.id])
        return _view(agent, rows[0])


def _agent_in_scope(database: Database, ref: str, owner_key: str | None) -> OwnedAgent:
    """An agent by id or `namespace/name`, if it is in the scope."""
    with database.transaction() as session:
        if ref.isdigit():
            agent = reads.agent_by_id(session, int(ref))
        else:
            namespace, _, name = ref.partition("/")
            agent = reads.agent_by_resource(session, namespace, name) if name else None
    if agent is None or (owner_key is not None and agent.owner_key != owner_key):
        raise NotFound(f"agent {ref} not found")
    return agent


def runs_page(
    database: Database,
    owner_key: str | None,
    where: RunFilter,
    *,
    agent_ref: str | None,
    limit: int,
    output_chars: int,
) -> list[OwnedRun]:
    """The scope's runs matching `where` (and of agent `agent_ref`), newest first, each
    output cut to its first `output_chars` characters. One statement without a
    transaction (`achilles bench api`)."""
    if agent_ref is not None:
        where = replace(where, agent_id=_agent_in_scope(database, agent_ref, owner_key).id)
    elif owner_key is not None:
        where = replace(where, owner_key=owner_key)
    with database.reads() as connection:
        return reads.runs_page(connection, where, limit=limit, output_chars=output_chars)


def find_run(database: Database, run_id: int, owner_key: str | None) -> OwnedRun:
    with database.reads() as connection:
        found = reads.find_run(connection, run_id)
    if found is None or (owner_key is not None and found.agent.owner_key != owner_key):
        raise NotFound(f"run {run_id} not found")
    return found
