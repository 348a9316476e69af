"""The run journal as people read it: runs of an agent, one run, an owner's weekly budget.

Read-only, one transaction per question. Writing the journal is the runner's
(`services.run_journal`), the operator's and `services.run_requests`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.agents import find_agent_id
from achilles.db.journal.models import AgentRun
from achilles.db.journal.settings import database_now
from achilles.db.journal.usage import BudgetStatus, owner_budget
from achilles.domain.runs import RunState
from achilles.errors import NotFound


@dataclass(frozen=True)
class RunRecord:
    """One `agent_runs` row with its agent's name (fields in the order people see them)."""

    id: int
    agent_id: int
    agent: str
    trigger: str
    state: str
    reason: str | None
    tokens_used: int
    error: str | None
    output: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None

    @classmethod
    def of(cls, run: AgentRun, agent_name: str) -> RunRecord:
        return cls(
            id=run.id,
            agent_id=run.agent_id,
            agent=agent_name,
            trigger=run.trigger,
            state=run.state,
            reason=run.reason,
            tokens_used=run.tokens_used,
            error=run.error,
            output=run.output,
            created_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            heartbeat_at=run.heartbeat_at,
        )


def list_runs(
    database: Database,
    *,
    agent_ref: str | None = None,
    states: tuple[RunState, ...] = (),
    limit: int = 50,
) -> list[RunRecord]:
    """Newest first, optionally of one agent (id or name) and in the given states."""
    with database.transaction() as session:
        agent_id = find_agent_id(session, agent_ref) if agent_ref else None
        rows = journal.list_runs(session, agent_id=agent_id, states=states, limit=limit)
        return [RunRecord.of(run, name) for run, name in rows]


def get_run(database: Database, run_id: int) -> RunRecord:
    with database.transaction() as session:
        found = journal.list_run(session, run_id)
        if found is None:
            raise NotFound(f"run {run_id} does not exist")
        return RunRecord.of(*found)


def weekly_budget(database: Database, owner_key: str) -> BudgetStatus:
    """The owner's token use this week (all their agents) against the weekly limit,
    measured at the database's clock."""
    with database.transaction() as session:
        return owner_budget(session, owner_key, database_now(session))
