"""The run journal as people read it, for the CLI and the HTTP API alike: agents with the
columns of `kubectl get agents`, pages of runs, one run and its trace (what it used, its
steps), an owner's weekly budget.

Every question names its scope explicitly (keyword `owner_key`): an owner's key, or
`None` for every owner (the CLI, run by an operator of the platform; an admin through
the API; the caller decides who may). Something outside the scope reads exactly like
something missing (`NotFound`), so nobody learns what others own. The agents' columns are
the Agent status's (`domain.agent_status`: phase, schedule summary, next slot, last run, the
owner's weekly tokens), computed from the same rows the operator's status writer reads
(`db.journal.status.agent_status_rows`).

Read-only, one transaction (or one autocommit connection) per question. Writing the
journal is the runner's (`services.run_journal`), the operator's and
`services.run_requests`'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from achilles.db.database import Database
from achilles.db.journal import owner_reads as reads
from achilles.db.journal import run_trace as trace_reads
from achilles.db.journal.owner_reads import OwnedAgent, OwnedRun, RunFilter, RunRow
from achilles.db.journal.run_trace import StepRow
from achilles.db.journal.settings import database_now
from achilles.db.journal.status import agent_status_rows
from achilles.db.journal.usage import BudgetStatus, owner_budget
from achilles.domain.agent_status import AgentStatusRow, LastRunRow, phase_of, schedule_summary
from achilles.domain.gates import LockReason, closed_locks
from achilles.domain.run_trace import RunUsed
from achilles.errors import NotFound

__all__ = [
    "AgentView",
    "BudgetStatus",
    "OwnedAgent",
    "OwnedRun",
    "RunFilter",
    "RunRow",
    "RunTrace",
    "StepRow",
    "agents_page",
    "find_agent",
    "find_run",
    "run_and_trace",
    "run_trace",
    "runs_page",
    "step_record",
    "weekly_budget",
]


# --- agents ---


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
    database: Database, *, owner_key: str | None, after_id: int | None, limit: int
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


def find_agent(
    database: Database, namespace: str, name: str, *, owner_key: str | None
) -> AgentView:
    """Agent `namespace/name` with its status columns, if it is in the scope."""
    with database.transaction() as session:
        agent = reads.agent_by_resource(session, namespace, name)
        if agent is None or (owner_key is not None and agent.owner_key != owner_key):
            raise NotFound(f"agent {namespace}/{name} not found")
        rows = agent_status_rows(session, [agent.id])
        return _view(agent, rows[0])


def _agent_in_scope(database: Database, ref: str, owner_key: str | None) -> OwnedAgent:
    """An agent by id, by its Agent's `namespace/name`, or by its journal name when that
    is unique (the CLI's `--agent`; the API's pattern admits only the first two), if it
    is in the scope."""
    with database.transaction() as session:
        agent = reads.agent_by_ref(session, ref)
    if agent is None or (owner_key is not None and agent.owner_key != owner_key):
        raise NotFound(f"agent {ref} not found")
    return agent


# --- runs ---


def runs_page(
    database: Database,
    where: RunFilter,
    *,
    owner_key: str | None,
    agent_ref: str | None,
    limit: int,
    output_chars: int | None,
) -> list[OwnedRun]:
    """The scope's runs matching `where` (and of agent `agent_ref`), newest first, each
    output cut to its first `output_chars` characters (None: whole). One statement
    without a transaction when no agent is named (`achilles bench api`)."""
    if agent_ref is not None:
        where = replace(where, agent_id=_agent_in_scope(database, agent_ref, owner_key).id)
    elif owner_key is not None:
        where = replace(where, owner_key=owner_key)
    with database.reads() as connection:
        return reads.runs_page(connection, where, limit=limit, output_chars=output_chars)


def find_run(database: Database, run_id: int, *, owner_key: str | None) -> OwnedRun:
    """Run `run_id` with its agent and whole output, if it is in the scope."""
    with database.reads() as connection:
        found = reads.find_run(connection, run_id)
    if found is None or (owner_key is not None and found.agent.owner_key != owner_key):
        raise NotFound(f"run {run_id} not found")
    return found


# --- a run's trace (issue 21): what it used, its steps ---


@dataclass(frozen=True)
class RunTrace:
    run_id: int
    used: RunUsed | None  # None until the run's runner recorded it
    steps: list[StepRow]  # empty unless asked for


def run_trace(database: Database, run_id: int, *, owner_key: str | None, steps: bool) -> RunTrace:
    """What run `run_id` used, and its steps if asked, if the run is in the scope."""
    find_run(database, run_id, owner_key=owner_key)  # NotFound outside the scope
    return _trace(database, run_id, steps=steps)


def run_and_trace(
    database: Database, run_id: int, *, owner_key: str | None, steps: bool
) -> tuple[OwnedRun, RunTrace]:
    """`find_run` and `run_trace` together (`runs show`, `GET /v1/runs/{id}`)."""
    found = find_run(database, run_id, owner_key=owner_key)
    return found, _trace(database, run_id, steps=steps)


def _trace(database: Database, run_id: int, *, steps: bool) -> RunTrace:
    with database.reads() as connection:
        return RunTrace(
            run_id=run_id,
            used=trace_reads.used_by_run(connection, run_id),
            steps=trace_reads.run_steps(connection, run_id) if steps else [],
        )


def step_record(step: StepRow) -> dict[str, object]:
    """A step as the CLI's JSON and the API show it: the arguments' digest as hex."""
    record: dict[str, object] = step._asdict()
    digest = step.argument_sha256
    record["argument_sha256"] = None if digest is None else bytes(digest).hex()
    return record


# --- budgets ---


def weekly_budget(database: Database, owner_key: str) -> BudgetStatus:
    """The owner's token use this week (all their agents) against the weekly limit,
    measured at the database's clock."""
    with database.transaction() as session:
        return owner_budget(session, owner_key, database_now(session))
