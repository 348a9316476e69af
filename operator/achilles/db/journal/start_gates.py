"""The start gates of an enqueue in one statement: the agent's durable locks and its
owner's weekly tokens read, and the queued row inserted when they are open.

`runs.enqueue_run` decides from the values returned (`domain/gates.py`); this module only
builds and runs the statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Select,
    String,
    TextClause,
    and_,
    bindparam,
    cast,
    literal_column,
    select,
    text,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentRun, User
from achilles.db.journal.settings import Settings
from achilles.db.journal.usage import tokens_used_by
from achilles.domain.budget import BudgetWindow
from achilles.domain.gates import DurableLocks
from achilles.domain.runs import RunState
from achilles.errors import NotFound

# Built once, executed with parameters: the enqueue path runs them for every start, and
# building a statement costs more than PostgreSQL takes to answer it.
_START_GATES = (
    select(
        Agent.enabled,
        Agent.admin_paused,
        Agent.model_id,
        User.active,
        tokens_used_by(Agent.user_id, bindparam("start"), bindparam("end")).label("used"),
    )
    .outerjoin(User, User.id == Agent.user_id)
    .where(Agent.id == bindparam("agent_id"))
)


@dataclass(frozen=True)
class Gates:
    locks: DurableLocks
    used: int  # the owner's tokens this week
    run_id: int | None  # the queued run, when the gates were open and no index refused it


def _compiled(statement: Select[Any]) -> TextClause:
    """`statement` compiled once into text with named parameters (its constants bound):
    SQLAlchemy cannot cache a statement with `ON CONFLICT`, and compiling it costs more
    than PostgreSQL takes to run it (`achilles bench journal`)."""
    dialect = postgresql.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
    compiled = statement.compile(dialect=dialect)
    constants = {
        compiled.bind_names[bind]: bind.value
        for bind in compiled.binds.values()
        if bind.value is not None and not bind.required
    }
    return text(str(compiled)).bindparams(**constants)


def _build_enqueue_if_open() -> TextClause:
    """One statement for the common case: the agent's locks and its owner's weekly tokens,
    and the queued row inserted when they are open (ON CONFLICT DO NOTHING: the
    one-active-run and request-key indexes decide). The predicate mirrors
    `domain/gates.py`, which still decides from the values returned; `enqueue_run` treats a
    disagreement as a bug."""
    gate = _START_GATES.cte("gate")
    is_open = and_(
        gate.c.enabled.is_(True),
        gate.c.admin_paused.is_(False),
        gate.c.model_id.is_not(None),
        gate.c.active.is_(True),
        gate.c.used < bindparam("budget", type_=BigInteger),
    )
    queued = (
        postgresql.insert(AgentRun)
        .from_select(
            ["agent_id", "trigger", "state", "created_at", "request_key", "scheduled_for"],
            select(
                cast(bindparam("agent_id"), BigInteger),
                cast(bindparam("trigger"), String),
                literal_column(f"'{RunState.QUEUED.value}'"),
                cast(bindparam("created_at"), DateTime(timezone=True)),
                cast(bindparam("request_key"), String),
                cast(bindparam("scheduled_for"), DateTime(timezone=True)),
            ).where(is_open),
        )
        .on_conflict_do_nothing()
        .returning(AgentRun.id)
        .cte("queued")
    )
    return _compiled(select(gate, select(queued.c.id).scalar_subquery().label("run_id")))


_ENQUEUE_IF_OPEN = _build_enqueue_if_open()


def enqueue_if_open(
    session: Session, row: dict[str, object], window: BudgetWindow, settings: Settings
) -> Gates:
    found = session.execute(
        _ENQUEUE_IF_OPEN,
        {**row, "start": window.start, "end": window.end, "budget": settings.weekly_token_budget},
    ).first()
    if found is None:
        raise NotFound(f"agent {row['agent_id']} does not exist")
    locks = DurableLocks(
        enabled=found.enabled,
        admin_paused=found.admin_paused,
        has_model=found.model_id is not None,
        owner_present=found.active is not None,
        owner_active=bool(found.active),
    )
    return Gates(locks=locks, used=int(found.used), run_id=found.run_id)
