"""What a person reads of the journal through the API: their agents, pages of their
runs, one run, each with its owner, so the caller can scope by owner.

Pages are keyset pages on the run id (ids come from one sequence, so newest first is id
descending): a page is "the `limit` newest runs below id X", which new runs cannot
shift. Every shape of the question is one index range:

- one agent's runs: `ix_agent_runs_agent_id_id (agent_id, id DESC)` from X down;
- one owner's runs: the same index, the `limit` newest below X of each of the owner's
  agents (a LATERAL per agent), merged; the work grows with the owner's agents and the
  page size, not with their runs;
- every owner's runs (an admin): the primary key backwards from X.

Filters (state, created_at window, request key) are applied inside those ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Select, any_, cast, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, AgentRun, User


@dataclass(frozen=True)
class OwnedAgent:
    id: int
    owner_key: str
    name: str
    namespace: str | None
    cr_name: str | None
    description: str | None
    model: str | None
    enabled: bool
    admin_paused: bool


@dataclass(frozen=True)
class RunFilter:
    """Which runs a page holds; `None` means no restriction on that field."""

    owner_id: int | None = None
    agent_id: int | None = None
    states: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    request_key: str | None = None
    before_id: int | None = None


@dataclass(frozen=True)
class OwnedRun:
    run: AgentRun
    agent: OwnedAgent


def user_id_of(session: Session, key: str) -> int | None:
    return session.execute(select(User.id).where(User.key == key)).scalar_one_or_none()


def _agents() -> Select[Any]:  # (Agent, owner key, model name or None: an outer join)
    return (
        select(Agent, User.key, AgentModel.name)
        .join(User, User.id == Agent.user_id)
        .outerjoin(AgentModel, AgentModel.id == Agent.model_id)
    )


def _owned(agent: Agent, owner_key: str, model: str | None) -> OwnedAgent:
    return OwnedAgent(
        id=agent.id,
        owner_key=owner_key,
        name=agent.name,
        namespace=agent.cr_namespace,
        cr_name=agent.cr_name,
        description=agent.description,
        model=model,
        enabled=agent.enabled,
        admin_paused=agent.admin_paused,
    )


def agents_page(
    session: Session, *, owner_id: int | None, after_id: int | None, limit: int
) -> list[OwnedAgent]:
    """Agents by id ascending after `after_id`, of one owner (or of every owner)."""
    query = _agents()
    if owner_id is not None:
        query = query.where(Agent.user_id == owner_id)
    if after_id is not None:
        query = query.where(Agent.id > after_id)
    rows = session.execute(query.order_by(Agent.id).limit(limit)).all()
    return [_owned(*row) for row in rows]


def agent_by_resource(session: Session, namespace: str, name: str) -> OwnedAgent | None:
    """The agent reconciled from Agent `namespace/name`."""
    row = session.execute(
        _agents().where(Agent.cr_namespace == namespace, Agent.cr_name == name)
    ).first()
    return None if row is None else _owned(*row)


def agent_by_id(session: Session, agent_id: int) -> OwnedAgent | None:
    row = session.execute(_agents().where(Agent.id == agent_id)).first()
    return None if row is None else _owned(*row)


def _run_conditions(where: RunFilter) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if where.before_id is not None:
        conditions.append(AgentRun.id < where.before_id)
    if where.states:
        conditions.append(AgentRun.state.in_(where.states))
    if where.since is not None:
        conditions.append(AgentRun.created_at >= where.since)
    if where.until is not None:
        conditions.append(AgentRun.created_at < where.until)
    if where.request_key is not None:
        conditions.append(AgentRun.request_key == where.request_key)
    return conditions


def run_page_ids(session: Session, where: RunFilter, limit: int) -> list[int]:
    """The ids of the page's runs, newest first."""
    conditions = _run_conditions(where)
    if where.agent_id is not None:
        query = select(AgentRun.id).where(AgentRun.agent_id == where.agent_id, *conditions)
    elif where.owner_id is not None:
        newest_of_each = (
            select(AgentRun.id)
            .where(AgentRun.agent_id == Agent.id, *conditions)
            .order_by(AgentRun.id.desc())
            .limit(limit)
            .lateral("newest")
        )
        query = (
            select(newest_of_each.c.id)
            .select_from(Agent)
            .join(newest_of_each, true())
            .where(Agent.user_id == where.owner_id)
        )
        return list(
            session.execute(query.order_by(newest_of_each.c.id.desc()).limit(limit)).scalars()
        )
    else:
        query = select(AgentRun.id).where(*conditions)
    return list(session.execute(query.order_by(AgentRun.id.desc()).limit(limit)).scalars())


def runs_by_ids(session: Session, ids: Sequence[int]) -> list[OwnedRun]:
    """The runs with their agents, newest first.

    The ids go as one array parameter (`= ANY`), not an expanded `IN (...)`: the statement
    stays one short text that psycopg prepares once per connection, where a page's 51
    expanded parameters made a statement too long for its cache, parsed and planned on
    every page. The agent comes as the columns `OwnedAgent` shows, not the whole row (its
    prompt and its JSON schedule and metadata, decoded for every run of the page).
    `achilles bench api` measured both."""
    if not ids:
        return []
    rows = session.execute(
        select(
            AgentRun,
            Agent.id,
            User.key,
            Agent.name,
            Agent.cr_namespace,
            Agent.cr_name,
            Agent.description,
            AgentModel.name,
            Agent.enabled,
            Agent.admin_paused,
        )
        .join(Agent, Agent.id == AgentRun.agent_id)
        .join(User, User.id == Agent.user_id)
        .outerjoin(AgentModel, AgentModel.id == Agent.model_id)
        .where(AgentRun.id == any_(cast(list(ids), ARRAY(BigInteger))))
        .order_by(AgentRun.id.desc())
    ).all()
    return [OwnedRun(run=row[0], agent=OwnedAgent(*row[1:])) for row in rows]
