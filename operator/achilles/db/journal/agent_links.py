"""An Agent row's links to the catalogue: the model and the tools its CR names, linked
in the reconcile of an Agent event (services/agent_events.py, with agent_row.py), and the
name locks that reconcile shares with the catalogue's mirroring (db/journal/catalogue.py).

A model or tool created while an agent that names it is reconciled is either seen by
that reconcile or sees the agent awaiting it: whichever comes second under the name's
lock sees the other's commit.
"""

from __future__ import annotations

import json
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Delete,
    Table,
    all_,
    bindparam,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, AgentToolLink, Tool

# The first key of the two-key advisory locks on a model's name (`lock_model_name`); the
# one-key locks (dispatch, migrations) are a key space of their own.
MODEL_NAME_LOCK = 0x4AC43


def lock_model_name(session: Session, name: str, *, shared: bool) -> None:
    """Serialise a model's first mirroring with the reconciles of agents that name it
    and found no such model (`services/catalogue.mirror_model`), for this transaction.
    The model takes it exclusively before its row is written; such an agent takes it
    shared, then looks again. Whichever comes second sees the other's commit: the agent
    finds the model, or the model finds the agent awaiting it. Without it, an agent
    written while the model commits is missed by both and waits for its next event."""
    lock = func.pg_advisory_xact_lock_shared if shared else func.pg_advisory_xact_lock
    session.execute(select(lock(MODEL_NAME_LOCK, func.hashtext(name))))


# The first key of the two-key advisory locks on a tool's name (`lock_tool_name`): a key
# space of its own, beside the models' names.
TOOL_NAME_LOCK = 0x4AC44
# `agents.meta[UNKNOWN_TOOLS_KEY]`: the names of an Agent's `spec.tools` that were not in
# the catalogue at its last reconcile, a sorted JSON array; absent when there were none
# (most agents). Written by `record_unknown_tools` only, read by
# `catalogue.agents_awaiting_a_tool`: the row's links keep the tools found, not the names
# missed.
UNKNOWN_TOOLS_KEY = "unknown_tools"


def lock_tool_name(session: Session, name: str, *, shared: bool) -> None:
    """Serialise a tool's first mirroring with the reconciles of agents that name it and
    found no such tool (`services/catalogue.mirror_tool`), for this transaction: as
    `lock_model_name` for models. The tool takes it exclusively before its row is
    written; such an agent takes it shared, then looks again and records the names still
    unknown. Whichever comes second sees the other's commit."""
    lock = func.pg_advisory_xact_lock_shared if shared else func.pg_advisory_xact_lock
    session.execute(select(lock(TOOL_NAME_LOCK, func.hashtext(name))))


def link_named_model(session: Session, agent_id: int, model_name: str) -> bool:
    """Link the agent to the model it names, which its write found missing; whether it is
    there now. Under the model name's shared lock (`lock_model_name`), so a
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
    (`lock_tool_name`), so a tool created meanwhile is either seen here or
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
