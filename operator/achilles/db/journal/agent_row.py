"""An Agent row's reconcile: the statements the reconcile of an Agent event runs on
its row (services/agent_events.py owns the transaction and the decisions between them;
the row's links to models and tools are agent_links.py's).

Level-triggered: every event of an Agent (and every periodic resync) makes the row say
what the CR says and recomputes the status from the journal; doing it twice changes
nothing. The row is keyed by the CR's uid, so a re-created CR of the same name is a new
agent with a journal of its own.

At an operator restart every changed Agent is reconciled on a few threads that share the
GIL with kopf's event loop, so each statement's Python cost and round trip slows the
restart (issue 20, `achilles bench intake`). The reads are folded into two:
`begin_reconcile` reads the database clock, the platform settings, the owner and the
CR's row (locked) in one statement; after the writes, `settle_slot_and_status` reads the
reconciled row with its schedule inputs, its last run and its owner's tokens of the
budget week in one more, and gives it its slot and status from that.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Boolean,
    DateTime,
    Insert,
    Select,
    Table,
    Update,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from achilles.db.inbox.settings import meta_with_wake_on_reply
from achilles.db.journal.agent_links import UNKNOWN_TOOLS_KEY
from achilles.db.journal.models import Agent, AgentModel, AgentRun, PlatformSettings, User
from achilles.db.journal.owed_spec import META_KEY, OwedWrite, delivered, writes_from
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
from achilles.domain.agent_event import ListedSpec
from achilles.domain.agent_status import AgentStatusRow
from achilles.domain.budget import week_window
from achilles.domain.inbox_wake import META_SECTION, WAKE_ON_REPLY
from achilles.domain.schedule import schedule_to_db


@dataclass(frozen=True)
class LockedAgent:
    """The row of an Agent CR, locked for the rest of the transaction: a scheduler tick
    cannot advance `next_run_at` from a schedule that is being replaced."""

    agent_id: int
    schedule: dict[str, Any] | None
    owed: Any  # `meta["owed_spec"]` as stored (`settle_owed` reads it)
    # `meta["unknown_tools"]` as stored (`agent_links.record_unknown_tools`
    # compares with it).
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


def settle_owed(
    session: Session, agent_id: int | None, section: Any, spec: Mapping[str, Any]
) -> dict[str, Any]:
    """Reconciling a CR whose spec says `spec` (field -> value), its row `agent_id` (None:
    no row yet) owing `section` (its `meta[META_KEY]`, read with the row locked): the
    owed values that must be used instead of the CR's. A write the CR already shows is
    forgotten here (its delivery's own event came back)."""
    if agent_id is None:
        return {}
    overrides: dict[str, Any] = {}
    shown: dict[str, OwedWrite] = {}
    for field, write in writes_from(section).items():
        if field in spec and spec[field] == write.value:
            shown[field] = write
        else:
            overrides[field] = write.value
    delivered(session, agent_id, shown)
    return overrides


@dataclass(frozen=True)
class AgentDefinition:
    """What an Agent CR says, in the database's terms (owner by key, model by name)."""

    uid: str
    namespace: str
    cr_name: str
    name: str
    description: str | None
    prompt: str
    schedule: dict[str, Any] | None
    model_name: str | None
    tool_names: tuple[str, ...]
    enabled: bool
    admin_paused: bool
    # The run controls (0013_run_controls); None: the platform's.
    max_run_tokens: int | None = None
    suspend_after_failures: int | None = None


def definition_of(
    uid: str, namespace: str, name: str, spec: ListedSpec, model_name: str | None
) -> AgentDefinition:
    """The definition of the Agent CR `namespace/name` (`uid`) whose spec says `spec`,
    naming the model `model_name` (the spec's, or what the operator owes it)."""
    return AgentDefinition(
        uid=uid,
        namespace=namespace,
        cr_name=name,
        name=spec.display_name or name,
        description=spec.description,
        prompt=spec.prompt,
        schedule=schedule_to_db(spec.schedule) if spec.schedule is not None else None,
        model_name=model_name,
        tool_names=tuple(spec.tools),
        enabled=spec.enabled,
        admin_paused=spec.admin_paused,
        max_run_tokens=spec.max_run_tokens,
        suspend_after_failures=spec.suspend_after_failures,
    )


# The columns an Agent's definition writes (`upsert_agent`), each bound as `v_<column>`
# (a parameter may not be named as the column it sets).
_DEFINED = (
    "user_id",
    "name",
    "description",
    "prompt",
    "schedule",
    "model_id",
    "enabled",
    "admin_paused",
    "max_run_tokens",
    "suspend_after_failures",
    "cr_namespace",
    "cr_name",
)


@functools.cache
def _upsert_statement(*, insert_row: bool, scheduled: bool) -> Insert | Update:
    """The INSERT (returning the id) or the UPDATE of `upsert_agent`, built once for each
    case and run on the session's connection: building the statement and its cache key
    on each call, then the ORM's execution around it, was most of the write's Python (a
    cProfile of changed Agents' reconciles; the module's docstring says why it
    matters). `scheduled`: False writes SQL NULL, not JSON null, as the schedule: "no
    schedule" must read `schedule IS NULL`."""
    agents = cast(Table, Agent.__table__)
    values: dict[str, Any] = {column: bindparam(f"v_{column}") for column in _DEFINED}
    # The model by name inside the write itself (NULL when no model of that name exists,
    # or none is named): one round trip fewer per reconcile.
    values["model_id"] = (
        select(AgentModel.id).where(AgentModel.name == bindparam("model_name")).scalar_subquery()
    )
    if not scheduled:
        values["schedule"] = null()
    if insert_row:
        return insert(agents).values(cr_uid=bindparam("v_cr_uid"), **values).returning(agents.c.id)
    # Written only when something differs: an Agent event that changed nothing (a status
    # write, a resync) must not churn the row.
    changed = or_(*(agents.c[column].is_distinct_from(value) for column, value in values.items()))
    # Auto-suspend switched the owner's lock off (docs/operator.md, "Run controls"); the
    # owner switching it on resumes the agent, and the note of why it was off goes. Its
    # `updated_at` moves with the edit, so the runs before no longer count.
    resumed = case((bindparam("v_enabled", type_=Boolean), null()), else_=agents.c.suspended_at)
    return (
        update(agents)
        .where(agents.c.id == bindparam("agent_id"), changed)
        .values(**values, suspended_at=resumed)
    )


def upsert_agent(
    session: Session, definition: AgentDefinition, user_id: int, existing: LockedAgent | None
) -> tuple[int, bool, bool]:
    """Insert or update the row keyed by the CR's uid: (id, created, schedule changed).

    `existing`: the CR's row as `begin_reconcile` read and locked it (None:
    it has none yet), so a scheduler tick cannot advance `next_run_at` from a schedule
    that is being replaced.
    """
    params: dict[str, Any] = {
        "v_user_id": user_id,
        "v_name": definition.name,
        "v_description": definition.description,
        "v_prompt": definition.prompt,
        "v_schedule": definition.schedule,
        "model_name": definition.model_name,
        "v_enabled": definition.enabled,
        "v_admin_paused": definition.admin_paused,
        "v_max_run_tokens": definition.max_run_tokens,
        "v_suspend_after_failures": definition.suspend_after_failures,
        "v_cr_namespace": definition.namespace,
        "v_cr_name": definition.cr_name,
    }
    scheduled = definition.schedule is not None
    if not scheduled:
        del params["v_schedule"]
    connection = session.connection()
    if existing is None:
        statement = _upsert_statement(insert_row=True, scheduled=scheduled)
        agent_id = connection.execute(
            statement, {**params, "v_cr_uid": definition.uid}
        ).scalar_one()
        return int(agent_id), True, True
    statement = _upsert_statement(insert_row=False, scheduled=scheduled)
    connection.execute(statement, {**params, "agent_id": existing.agent_id})
    return existing.agent_id, False, existing.schedule != definition.schedule


def _mirror_statement() -> Update:
    """`spec.wakeOnReply` into the row's inbox section, written only when it differs (a
    reconcile that changes nothing writes nothing): the comparison in its WHERE."""
    # What `inbox_settings_from_meta` reads as on: exactly JSON `true` (a section that
    # is not an object, subscripted, gives NULL: off).
    is_on = func.coalesce(
        Agent.meta[META_SECTION][WAKE_ON_REPLY] == sql_cast(literal("true"), JSONB), false()
    )
    # Not `enabled`: a column of the table (an UPDATE reserves its name for the SET clause).
    enabled = bindparam("wake_on_reply", type_=Boolean)
    return (
        update(Agent)
        .where(Agent.id == bindparam("agent_id"), is_on.is_distinct_from(enabled))
        .values(meta=meta_with_wake_on_reply(enabled))
        .returning(Agent.id)
    )


# Built once (see `_BEGIN`): every reconcile of an Agent that says `spec.wakeOnReply` runs it.
_MIRROR_WAKE = _mirror_statement()


def mirror_wake_on_reply(session: Session, agent_id: int, enabled: bool) -> bool:
    """The Agent resource's `spec.wakeOnReply` mirrored into the row's inbox settings
    (db/inbox/settings.py), the owner's consent as the portal writes it; one statement.
    True when it was written."""
    written = (
        session.connection()
        .execute(_MIRROR_WAKE, {"agent_id": agent_id, "wake_on_reply": enabled})
        .scalar_one_or_none()
    )
    return written is not None


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


def delete_agent_by_uid(session: Session, uid: str) -> int | None:
    """Remove the row (its runs and links cascade); the id it had, if any."""
    return session.execute(
        delete(Agent).where(Agent.cr_uid == uid).returning(Agent.id)
    ).scalar_one_or_none()


def agent_id_by_uid(session: Session, uid: str) -> int | None:
    return session.execute(select(Agent.id).where(Agent.cr_uid == uid)).scalar_one_or_none()
