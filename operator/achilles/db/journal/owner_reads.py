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

import enum
import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    DateTime,
    Integer,
    Row,
    Select,
    Text,
    bindparam,
    func,
    select,
    true,
)
from sqlalchemy.orm import InstrumentedAttribute, Session

from achilles.db.journal.models import Agent, AgentModel, AgentRun, User
from achilles.errors import NotFound


class OwnedAgent(NamedTuple):
    # NamedTuples, not frozen dataclasses: a page makes 51 of these from plain rows, and
    # a frozen dataclass's __init__ sets each field through object.__setattr__ (four
    # times the CPU; `achilles bench api`).
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

    owner_key: str | None = None
    agent_id: int | None = None
    states: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    request_key: str | None = None
    before_id: int | None = None


class RunRow(NamedTuple):
    """What a person reads of a run (the row's columns but its secret and bookkeeping)."""

    id: int
    trigger: str
    state: str
    reason: str | None
    request_key: str | None
    tokens_used: int
    error: str | None
    output: str | None  # on a page, its first `output_chars` characters
    created_at: datetime
    scheduled_for: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None


class OwnedRun(NamedTuple):
    run: RunRow
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


def agent_by_ref(session: Session, ref: str) -> OwnedAgent | None:
    """An agent by id, by its Agent's `namespace/name`, or by its journal name when that
    is unique (`NotFound` naming the ambiguity when it is not)."""
    if ref.isdigit():
        return agent_by_id(session, int(ref))
    if "/" in ref:
        namespace, _, name = ref.partition("/")
        return agent_by_resource(session, namespace, name) if name else None
    rows = session.execute(_agents().where(Agent.name == ref).limit(2)).all()
    if len(rows) > 1:
        raise NotFound(f"agent name {ref!r} is ambiguous; use the id or namespace/name")
    return _owned(*rows[0]) if rows else None


class _Scope(enum.Enum):
    AGENT = "agent"  # where.agent_id
    OWNER = "owner"  # where.owner_key
    EVERY = "every"  # neither (an admin)


def runs_page(
    session: Session | Connection, where: RunFilter, *, limit: int, output_chars: int | None
) -> list[OwnedRun]:
    """The `limit` newest runs matching `where`, with their agents, newest first; each
    output cut to its first `output_chars` characters (None: whole). One statement: the
    page's ids (one index range per agent) and then their rows by primary key."""
    scope = _Scope.EVERY
    params: dict[str, Any] = {"limit": limit}
    if output_chars is not None:
        params["output_chars"] = output_chars
    if where.agent_id is not None:
        scope = _Scope.AGENT
        params["agent_id"] = where.agent_id
    elif where.owner_key is not None:
        scope = _Scope.OWNER
        params["owner_key"] = where.owner_key
    if where.states:
        params["states"] = list(where.states)
    for name in ("since", "until", "request_key", "before_id"):
        if getattr(where, name) is not None:
            params[name] = getattr(where, name)
    statement = _page_statement(
        scope,
        states=bool(where.states),
        since=where.since is not None,
        until=where.until is not None,
        request_key=where.request_key is not None,
        before=where.before_id is not None,
        whole_output=output_chars is None,
    )
    return [_owned_run(row) for row in session.execute(statement, params).all()]


def find_run(session: Session | Connection, run_id: int) -> OwnedRun | None:
    """One run with its agent, its whole output."""
    row = session.execute(_one_run_statement(), {"run_id": run_id}).first()
    return None if row is None else _owned_run(row)


def _owned_run(row: Row[Any]) -> OwnedRun:
    return OwnedRun(RunRow._make(row[:13]), OwnedAgent._make(row[13:]))


def _run_conditions(
    *, states: bool, since: bool, until: bool, request_key: bool, before: bool
) -> list[ColumnElement[bool]]:
    moment = DateTime(timezone=True)
    conditions: list[ColumnElement[bool]] = []
    if before:
        conditions.append(AgentRun.id < bindparam("before_id", type_=BigInteger))
    if states:
        conditions.append(AgentRun.state.in_(bindparam("states", expanding=True)))
    if since:
        conditions.append(AgentRun.created_at >= bindparam("since", type_=moment))
    if until:
        conditions.append(AgentRun.created_at < bindparam("until", type_=moment))
    if request_key:
        conditions.append(AgentRun.request_key == bindparam("request_key", type_=Text))
    return conditions


def _page_ids(scope: _Scope, conditions: list[ColumnElement[bool]]) -> Select[Any]:
    """The ids of the page's runs, newest first."""
    limit = bindparam("limit", type_=Integer)
    if scope is _Scope.OWNER:
        owner_id = select(User.id).where(User.key == bindparam("owner_key")).scalar_subquery()
        newest_of_each = (
            select(AgentRun.id)
            .where(AgentRun.agent_id == Agent.id, *conditions)
            .order_by(AgentRun.id.desc())
            .limit(limit)
            .lateral("newest")
        )
        return (
            select(newest_of_each.c.id)
            .select_from(Agent)
            .join(newest_of_each, true())
            .where(Agent.user_id == owner_id)
            .order_by(newest_of_each.c.id.desc())
            .limit(limit)
        )
    if scope is _Scope.AGENT:
        conditions = [AgentRun.agent_id == bindparam("agent_id", type_=BigInteger), *conditions]
    return select(AgentRun.id).where(*conditions).order_by(AgentRun.id.desc()).limit(limit)


def _runs_with_agents(output: ColumnElement[Any] | InstrumentedAttribute[Any]) -> Select[Any]:
    """Runs with the agent columns `OwnedAgent` shows (not the agent's whole row: its
    prompt, JSON schedule and metadata), as plain rows: no ORM entity per run."""
    return (
        select(
            AgentRun.id,
            AgentRun.trigger,
            AgentRun.state,
            AgentRun.reason,
            AgentRun.request_key,
            AgentRun.tokens_used,
            AgentRun.error,
            output,
            AgentRun.created_at,
            AgentRun.scheduled_for,
            AgentRun.started_at,
            AgentRun.finished_at,
            AgentRun.heartbeat_at,
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
        .select_from(AgentRun)
        .join(Agent, Agent.id == AgentRun.agent_id)
        .join(User, User.id == Agent.user_id)
        .outerjoin(AgentModel, AgentModel.id == Agent.model_id)
    )


# Statements are built once per shape of the question (their values are bound
# parameters): building and hashing a SELECT of this size cost more CPU than running it.
@functools.cache
def _page_statement(
    scope: _Scope,
    *,
    states: bool,
    since: bool,
    until: bool,
    request_key: bool,
    before: bool,
    whole_output: bool,
) -> Select[Any]:
    conditions = _run_conditions(
        states=states, since=since, until=until, request_key=request_key, before=before
    )
    output: ColumnElement[Any] | InstrumentedAttribute[Any] = AgentRun.output
    if not whole_output:
        output = func.left(AgentRun.output, bindparam("output_chars", type_=Integer))
    # `IN (the page's ids)`: the ids' index ranges first, then 51 primary-key lookups.
    return (
        _runs_with_agents(output)
        .where(AgentRun.id.in_(_page_ids(scope, conditions)))
        .order_by(AgentRun.id.desc())
    )


@functools.cache
def _one_run_statement() -> Select[Any]:
    return _runs_with_agents(AgentRun.output).where(
        AgentRun.id == bindparam("run_id", type_=BigInteger)
    )
