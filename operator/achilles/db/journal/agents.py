"""Agent rows: creation, lookup and the durable-lock view the start gates read."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    Delete,
    Insert,
    Table,
    Update,
    all_,
    bindparam,
    case,
    delete,
    insert,
    null,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from achilles.db.journal.catalogue import UNKNOWN_TOOLS_KEY, lock_model_name, lock_tool_name
from achilles.db.journal.models import Agent, AgentModel, AgentToolLink, Tool, User
from achilles.db.journal.owed_spec import owing, owner_deactivated
from achilles.db.journal.reconcile import LockedAgent
from achilles.db.journal.users import find_owner_id
from achilles.domain.gates import DurableLocks
from achilles.errors import NotFound


def create_agent(
    session: Session,
    *,
    owner_key: str,
    name: str,
    prompt: str,
    model_name: str | None = None,
    schedule: dict[str, Any] | None = None,
    enabled: bool = True,
    admin_paused: bool = False,
    description: str | None = None,
    next_run_at: datetime | None = None,
) -> int:
    user_id = find_owner_id(session, owner_key)
    model_id: int | None = None
    if model_name is not None:
        model_id = session.execute(
            select(AgentModel.id).where(AgentModel.name == model_name)
        ).scalar_one_or_none()
        if model_id is None:
            raise NotFound(f"model {model_name!r} is not in the allowlist")
    return session.execute(
        insert(Agent)
        .values(
            user_id=user_id,
            name=name,
            description=description,
            prompt=prompt,
            # SQL NULL, not JSON null: "no schedule" must read `schedule IS NULL` (the
            # scheduler's repair parses every schedule that is not).
            schedule=schedule if schedule is not None else null(),
            model_id=model_id,
            enabled=enabled,
            admin_paused=admin_paused,
            next_run_at=next_run_at,
        )
        .returning(Agent.id)
    ).scalar_one()


def load_durable_locks(session: Session, agent_id: int) -> tuple[Agent, DurableLocks]:
    row = session.execute(
        select(Agent, User.active)
        .outerjoin(User, User.id == Agent.user_id)
        .where(Agent.id == agent_id)
    ).first()
    if row is None:
        raise NotFound(f"agent {agent_id} does not exist")
    agent, owner_active = row[0], row[1]
    return agent, DurableLocks(
        enabled=agent.enabled,
        admin_paused=agent.admin_paused,
        has_model=agent.model_id is not None,
        owner_present=owner_active is not None,
        owner_active=bool(owner_active),
    )


def find_agent_id(session: Session, ref: str) -> int:
    """An agent by numeric id, or by unique name."""
    if ref.isdigit():
        found = session.execute(select(Agent.id).where(Agent.id == int(ref))).scalar_one_or_none()
    else:
        ids = session.execute(select(Agent.id).where(Agent.name == ref)).scalars().all()
        if len(ids) > 1:
            raise NotFound(f"agent name {ref!r} is ambiguous ({len(ids)} agents); use the id")
        found = ids[0] if ids else None
    if found is None:
        raise NotFound(f"agent {ref!r} does not exist")
    return found


# --- the operator's view: rows reconciled from Agent custom resources ---


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
    cProfile of changed Agents' reconciles; `db/journal/reconcile.py` says why it
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

    `existing`: the CR's row as `reconcile.begin_reconcile` read and locked it (None:
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


def link_named_model(session: Session, agent_id: int, model_name: str) -> bool:
    """Link the agent to the model it names, which its write found missing; whether it is
    there now. Under the model name's shared lock (`catalogue.lock_model_name`), so a
    model created meanwhile is either seen here or sees this agent awaiting it."""
    lock_model_name(session, model_name, shared=True)
    linked = session.execute(
        update(Agent)
        .where(Agent.id == agent_id)
        .values(
            model_id=select(AgentModel.id).where(AgentModel.name == model_name).scalar_subquery()
        )
        .returning(Agent.model_id)
    ).scalar_one()
    return linked is not None


def _unlink_statement() -> Delete:
    links = cast(Table, AgentToolLink.__table__)
    kept = bindparam("kept", type_=ARRAY(BigInteger))
    return delete(links).where(
        links.c.agent_id == bindparam("agent_id"), links.c.tool_id != all_(kept)
    )


# Built once (see `_upsert_statement`): every changed Agent's reconcile runs it.
_UNLINK = _unlink_statement()


def link_tools(
    session: Session, agent_id: int, tool_names: tuple[str, ...], *, inserted: bool = False
) -> tuple[str, ...]:
    """Make the agent's optional tools exactly `tool_names`; return the unknown names.
    `inserted`: the row is this transaction's, so it has no links to remove."""
    known = (
        dict(
            session.execute(select(Tool.name, Tool.id).where(Tool.name.in_(tool_names)))
            .tuples()
            .all()
        )
        if tool_names
        else {}  # most agents: no round trip to learn that no name is known
    )
    wanted = set(known.values())
    if not inserted:
        # `<> ALL(kept)`: every link when none is kept, as NOT IN () would.
        session.connection().execute(_UNLINK, {"agent_id": agent_id, "kept": sorted(wanted)})
    if wanted:
        session.execute(
            pg_insert(AgentToolLink)
            .values([{"agent_id": agent_id, "tool_id": tool_id} for tool_id in sorted(wanted)])
            .on_conflict_do_nothing()
        )
    return tuple(name for name in tool_names if name not in known)


def link_awaited_tools(
    session: Session, agent_id: int, unknown: tuple[str, ...]
) -> tuple[str, ...]:
    """Link the agent to the tools its `link_tools` found missing, if they are there now;
    return the names still unknown. Under each name's shared lock
    (`catalogue.lock_tool_name`), so a tool created meanwhile is either seen here or
    sees this agent awaiting it (`record_unknown_tools`, in this same transaction)."""
    for name in sorted(set(unknown)):
        lock_tool_name(session, name, shared=True)
    found = dict(
        session.execute(select(Tool.name, Tool.id).where(Tool.name.in_(unknown))).tuples().all()
    )
    if found:
        session.execute(
            pg_insert(AgentToolLink)
            .values(
                [{"agent_id": agent_id, "tool_id": tool_id} for tool_id in sorted(found.values())]
            )
            .on_conflict_do_nothing()
        )
    return tuple(name for name in unknown if name not in found)


# `meta` with its unknown tools set, or without them; every other key is left as it is.
_RECORD_UNKNOWN = text(
    "UPDATE agents SET meta = coalesce(meta, '{}'::jsonb)"
    " || jsonb_build_object(CAST(:key AS text), CAST(:names AS jsonb)) WHERE id = :agent_id"
)
_FORGET_UNKNOWN = text("UPDATE agents SET meta = meta - CAST(:key AS text) WHERE id = :agent_id")


def record_unknown_tools(
    session: Session, agent_id: int, unknown: tuple[str, ...], recorded: Any
) -> None:
    """Keep the names of the agent's tools not in the catalogue (`unknown`, after
    `link_awaited_tools`) in `meta["unknown_tools"]`, where a tool's creation finds the
    agents awaiting it (`catalogue.agents_awaiting_a_tool`). `recorded`: what the row
    holds (`LockedAgent.unknown_tools`; None: nothing, or no row before). Written only
    when it changes: most agents have no unknown tool, then or now, and cost no
    statement. A change moves `updated_at` (the trigger counts `meta` as an edit); it
    comes with a change of the agent's tools, by its spec or by the catalogue."""
    names = sorted(set(unknown))
    if recorded == (names or None):
        return
    params = {"key": UNKNOWN_TOOLS_KEY, "agent_id": agent_id}
    if names:
        session.connection().execute(_RECORD_UNKNOWN, {**params, "names": json.dumps(names)})
    else:
        session.connection().execute(_FORGET_UNKNOWN, params)


def delete_agent_by_uid(session: Session, uid: str) -> int | None:
    """Remove the row (its runs and links cascade); the id it had, if any."""
    return session.execute(
        delete(Agent).where(Agent.cr_uid == uid).returning(Agent.id)
    ).scalar_one_or_none()


def agent_id_by_uid(session: Session, uid: str) -> int | None:
    return session.execute(select(Agent.id).where(Agent.cr_uid == uid)).scalar_one_or_none()


def agent_uids(session: Session, *, created_before: datetime | None = None) -> dict[str, int]:
    """Rows linked to a CR, by the CR's uid; with `created_before`, only rows older."""
    query = select(Agent.cr_uid, Agent.id).where(Agent.cr_uid.is_not(None))
    if created_before is not None:
        query = query.where(Agent.created_at < created_before)
    rows = session.execute(query)
    return {uid: agent_id for uid, agent_id in rows.tuples() if uid is not None}


# --- owner deactivation (seed 000: it writes the owner's own switch, no third lock) ---


def switch_off_agents_of_inactive_owners(session: Session) -> list[int]:
    """Agents still switched on whose owner is inactive (deactivated by whoever owns
    `users`, without `achilles users upsert --inactive`, which does this itself): switched
    off, and their CRs owed `spec.enabled: false` (`owed_spec`). Read from the rows on
    every call, never remembered: if the owner is reactivated, switches an agent on and is
    deactivated again, the agent is found again."""
    inactive = select(User.id).where(User.active.is_(False))
    return list(
        session.execute(
            update(Agent)
            .where(Agent.enabled.is_(True), Agent.user_id.in_(inactive))
            .values(enabled=False, next_run_at=None, meta=owing(owner_deactivated()))
            .returning(Agent.id)
        ).scalars()
    )
