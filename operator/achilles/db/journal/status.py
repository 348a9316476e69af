"""What an Agent's status shows, read from the journal in one transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, any_, bindparam, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentRun, User
from achilles.db.journal.settings import Settings, database_now, load_settings
from achilles.db.journal.usage import weekly_tokens_by_owner
from achilles.domain.agent_status import AgentStatusRow, LastRunRow
from achilles.domain.budget import week_window
from achilles.domain.gates import DurableLocks

# The columns a status row is built from (`status_rows_of`); a query may select more.
STATUS_COLUMNS = (
    Agent.id,
    Agent.user_id,
    Agent.cr_uid,
    Agent.cr_namespace,
    Agent.cr_name,
    Agent.schedule,
    Agent.next_run_at,
    Agent.enabled,
    Agent.admin_paused,
    Agent.model_id,
    User.active,
    User.timezone,
    Agent.suspended_at,
)


def agent_status_rows(
    session: Session, agent_ids: Iterable[int], now: datetime | None = None
) -> list[AgentStatusRow]:
    """`now`: the transaction's database clock when the caller read it already."""
    ids = sorted(set(agent_ids))
    if not ids:
        return []
    agents = session.execute(
        select(*STATUS_COLUMNS).join(User, User.id == Agent.user_id).where(Agent.id.in_(ids))
    ).all()
    return status_rows_of(session, agents, now=now)


def status_rows_of(
    session: Session,
    agents: Sequence[Any],
    used_by_owner: Mapping[int, int] | None = None,
    *,
    now: datetime | None = None,
    settings: Settings | None = None,
    last_runs: Mapping[int, LastRunRow] | None = None,
) -> list[AgentStatusRow]:
    """The status rows of `agents`, rows of a query that selected STATUS_COLUMNS: their
    last runs and their owners' weekly tokens in one statement each (`used_by_owner`,
    `settings`, `last_runs` when the caller read them already). Plain columns, not ORM
    entities, and arrays, not lists of parameters: the start-up intake reads every agent
    this way."""
    if not agents:
        return []
    settings = settings or load_settings(session)
    window = week_window(now or database_now(session), settings.zone)
    if last_runs is None:
        last_runs = _last_runs(session, [agent.id for agent in agents])
    if used_by_owner is None:  # one statement for every owner, not one per owner
        used_by_owner = weekly_tokens_by_owner(session, {agent.user_id for agent in agents}, window)
    return [
        AgentStatusRow(
            agent_id=agent.id,
            uid=agent.cr_uid,
            namespace=agent.cr_namespace,
            cr_name=agent.cr_name,
            schedule=agent.schedule,
            next_run_at=agent.next_run_at,
            zone=agent.timezone or settings.timezone,
            locks=DurableLocks(
                enabled=agent.enabled,
                admin_paused=agent.admin_paused,
                has_model=agent.model_id is not None,
                owner_present=True,
                owner_active=bool(agent.active),
            ),
            last_run=last_runs.get(agent.id),
            tokens_used=used_by_owner.get(agent.user_id, 0),
            token_limit=settings.weekly_token_budget,
            window_start=window.start,
            suspended_at=agent.suspended_at,
        )
        for agent in agents
    ]


# A run's columns as a status shows its last one (`last_run_of`).
LAST_RUN_COLUMNS = (
    AgentRun.id.label("run_id"),
    AgentRun.trigger.label("run_trigger"),
    AgentRun.state.label("run_state"),
    AgentRun.reason.label("run_reason"),
    AgentRun.started_at.label("run_started_at"),
    AgentRun.finished_at.label("run_finished_at"),
    AgentRun.tokens_used.label("run_tokens_used"),
)


def last_run_of(row: Any) -> LastRunRow | None:
    """A row that selected LAST_RUN_COLUMNS (None in `run_id`: no run)."""
    if row.run_id is None:
        return None
    return LastRunRow(
        run_id=row.run_id,
        trigger=row.run_trigger,
        state=row.run_state,
        reason=row.run_reason,
        started_at=row.run_started_at,
        finished_at=row.run_finished_at,
        tokens_used=row.run_tokens_used,
    )


def _last_runs(session: Session, agent_ids: list[int]) -> dict[int, LastRunRow]:
    """Each agent's last run, in one statement (`ix_agent_runs_agent_id_id`)."""
    ids = bindparam("ids", agent_ids, type_=ARRAY(BigInteger))
    last_ids = (
        select(AgentRun.id)
        .where(AgentRun.agent_id == any_(ids))
        .distinct(AgentRun.agent_id)
        .order_by(AgentRun.agent_id, AgentRun.id.desc())
    )
    rows = (
        session.connection()
        .execute(select(AgentRun.agent_id, *LAST_RUN_COLUMNS).where(AgentRun.id.in_(last_ids)))
        .all()
    )
    return {row.agent_id: run for row in rows if (run := last_run_of(row)) is not None}


def agents_of_owners(session: Session, agent_ids: Iterable[int]) -> list[int]:
    """Every agent sharing an owner with one of `agent_ids` (they share a budget)."""
    owners = select(Agent.user_id).where(Agent.id.in_(list(agent_ids)))
    return list(session.execute(select(Agent.id).where(Agent.user_id.in_(owners))).scalars())


@dataclass(frozen=True)
class RunOwner:
    run_id: int
    agent_id: int
    uid: str | None
    namespace: str | None
    cr_name: str | None


def run_owners(session: Session, run_ids: Iterable[int]) -> dict[int, RunOwner]:
    ids = list(run_ids)
    if not ids:
        return {}
    rows = session.execute(
        select(
            AgentRun.id, Agent.id.label("agent_id"), Agent.cr_uid, Agent.cr_namespace, Agent.cr_name
        )
        .join(Agent, Agent.id == AgentRun.agent_id)
        .where(AgentRun.id.in_(ids))
    ).all()
    return {
        row.id: RunOwner(row.id, row.agent_id, row.cr_uid, row.cr_namespace, row.cr_name)
        for row in rows
    }
