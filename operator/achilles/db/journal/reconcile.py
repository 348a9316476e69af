"""The reads of one Agent's full reconcile (`services/agent_events/agent_row.py`),
folded into two.

At an operator restart every changed Agent is reconciled on a few handler threads that
share the GIL with kopf's event loop, so each statement's Python cost and round trip
slows the restart (issue 20, `achilles bench intake`). `begin_reconcile` reads the
database clock, the platform settings, the owner and the CR's row (locked) in one
statement. After the writes, `settle_slot_and_status` reads the reconciled row with its
schedule inputs, its last run and its owner's tokens of the budget week in one more, and
gives it its slot and status from that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Select, bindparam, func, select, true
from sqlalchemy.orm import Session

from achilles.db.journal.catalogue import UNKNOWN_TOOLS_KEY
from achilles.db.journal.models import Agent, AgentRun, PlatformSettings, User
from achilles.db.journal.owed_spec import META_KEY
from achilles.db.journal.schedule import SCHEDULING_COLUMNS, scheduled_of, settle_next_run
from achilles.db.journal.settings import SETTINGS_COLUMNS, Settings, settings_of
from achilles.db.journal.status import (
    LAST_RUN_COLUMNS,
    STATUS_COLUMNS,
    last_run_of,
    status_rows_of,
)
from achilles.db.journal.usage import tokens_used_by
from achilles.db.journal.users import Owner
from achilles.domain.agent_status import AgentStatusRow
from achilles.domain.budget import week_window


@dataclass(frozen=True)
class LockedAgent:
    """The row of an Agent CR, locked for the rest of the transaction: a scheduler tick
    cannot advance `next_run_at` from a schedule that is being replaced."""

    agent_id: int
    schedule: dict[str, Any] | None
    owed: Any  # `meta["owed_spec"]` as stored (`owed_spec.settle_owed` reads it)
    # `meta["unknown_tools"]` as stored (`agents.record_unknown_tools` compares with it).
    unknown_tools: Any = None


@dataclass(frozen=True)
class ReconcileStart:
    now: datetime  # the database's clock (the transaction's start)
    settings: Settings
    owner: Owner | None  # None: no user has the key the CR names
    row: LockedAgent | None  # None: the CR has no row yet


def _begin_statement() -> Select[Any]:
    clock = select(func.now().label("now")).subquery("clock")
    locked = (
        select(
            Agent.id,
            Agent.schedule,
            Agent.meta[META_KEY].label("owed"),
            Agent.meta[UNKNOWN_TOOLS_KEY].label("unknown_tools"),
        )
        .where(Agent.cr_uid == bindparam("uid"))
        .with_for_update()
        .subquery("locked")
    )
    return (
        select(clock.c.now, *SETTINGS_COLUMNS, User.id.label("user_id"), User.active, locked)
        .select_from(clock)
        .join(PlatformSettings, PlatformSettings.id == 1)
        .outerjoin(User, User.key == bindparam("owner_key"))
        .outerjoin(locked, true())
    )


# Built once, with bound parameters, and run on the session's connection (Core, no ORM
# execution): building a statement and its cache key on each call, then the ORM's
# execution around it, was most of a reconcile's Python (a cProfile of 300 changed
# Agents: ~13 ms of CPU each), and 600 reconciles share the GIL with kopf's event loop
# at a restart (`achilles bench intake`).
_BEGIN = _begin_statement()


def begin_reconcile(session: Session, uid: str, owner_key: str) -> ReconcileStart:
    """The clock, the platform settings, the owner by key and the row of the CR `uid`,
    locked: one statement.

    The row is locked inside its own subquery (PostgreSQL refuses a lock on the
    nullable side of an outer join), so the answer has one row whether or not the owner
    and the agent exist."""
    found = session.connection().execute(_BEGIN, {"uid": uid, "owner_key": owner_key}).one()
    return ReconcileStart(
        now=found.now,
        settings=settings_of(found),
        owner=None if found.user_id is None else Owner(found.user_id, found.active),
        row=(
            None
            if found.id is None
            else LockedAgent(found.id, found.schedule, found.owed, found.unknown_tools)
        ),
    )


def _settle_statement() -> Select[Any]:
    last_run = (
        select(*LAST_RUN_COLUMNS)
        .where(AgentRun.agent_id == Agent.id)
        .order_by(AgentRun.id.desc())  # ix_agent_runs_agent_id_id
        .limit(1)
        .lateral("last_run")
    )
    week_start = bindparam("week_start", type_=DateTime(timezone=True))
    week_end = bindparam("week_end", type_=DateTime(timezone=True))
    return (
        select(
            *STATUS_COLUMNS,
            *SCHEDULING_COLUMNS,
            tokens_used_by(Agent.user_id, week_start, week_end).label("week_tokens"),
            last_run,
        )
        .join(User, User.id == Agent.user_id)
        .join(PlatformSettings, PlatformSettings.id == 1)
        .outerjoin(last_run, true())
        .where(Agent.id == bindparam("agent_id"))
    )


_SETTLE = _settle_statement()


def settle_slot_and_status(
    session: Session, agent_id: int, start: ReconcileStart, *, reset: bool
) -> AgentStatusRow:
    """The reconciled row's slot (`schedule.settle_next_run`; `reset`: its schedule
    changed) and status row, from one read of the row, its owner, its last run and the
    owner's tokens of the budget week (`start`: its clock and settings)."""
    now, settings = start.now, start.settings
    window = week_window(now, settings.zone)  # as `status.status_rows_of` computes it
    row = (
        session.connection()
        .execute(
            _SETTLE, {"agent_id": agent_id, "week_start": window.start, "week_end": window.end}
        )
        .one()
    )
    next_run_at, _zone = settle_next_run(
        session,
        agent_id,
        scheduled_of(row),
        now,
        reset=reset,
        current=(row.next_run_at, row.schedule_zone),
    )
    last = last_run_of(row)
    (status,) = status_rows_of(
        session,
        [row],
        {row.user_id: int(row.week_tokens)},  # a sum of BIGINTs: numeric
        now=now,
        settings=settings,
        last_runs={agent_id: last} if last else {},
    )
    return replace(status, next_run_at=next_run_at)
