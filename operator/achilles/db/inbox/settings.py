"""The owner's inbox settings of an agent, kept in `agents.meta` under `"inbox"`.

An Agent resource that says `spec.wakeOnReply` has it mirrored here at every reconcile
(db/journal/agent_row.py's `mirror_wake_on_reply`, with `meta_with_wake_on_reply`);
`achilles inbox wake-on-reply` writes it for the others.

Only our own key is ever written (merged into the `inbox` section), so
whatever else reconciles into `meta` is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, case, cast, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent
from achilles.domain.inbox_wake import (
    META_SECTION,
    WAKE_ON_REPLY,
    InboxSettings,
    inbox_settings_from_meta,
)
from achilles.errors import NotFound


@dataclass(frozen=True)
class AgentInboxSettings:
    agent_id: int
    settings: InboxSettings
    # The Agent custom resource a run request is written to (None: no CR known).
    cr_namespace: str | None
    cr_name: str | None


def load_inbox_settings(session: Session, agent_id: int) -> AgentInboxSettings:
    row = session.execute(
        select(Agent.meta, Agent.cr_namespace, Agent.cr_name).where(Agent.id == agent_id)
    ).first()
    if row is None:
        raise NotFound(f"agent {agent_id} does not exist")
    return AgentInboxSettings(
        agent_id=agent_id,
        settings=inbox_settings_from_meta(row.meta),
        cr_namespace=row.cr_namespace,
        cr_name=row.cr_name,
    )


def meta_with_wake_on_reply(enabled: bool | ColumnElement[bool]) -> ColumnElement[Any]:
    """`agents.meta` with the inbox section's `wake_on_reply` set (an UPDATE's value;
    `enabled` a value, or a bound parameter of a statement built once)."""
    meta = func.coalesce(Agent.meta, cast(literal("{}"), JSONB))
    section = meta[META_SECTION]
    # A section that is not an object (hand-edited) is replaced, not merged into.
    current = case(
        (func.jsonb_typeof(section) == "object", section), else_=cast(literal("{}"), JSONB)
    )
    updated = current.op("||")(func.jsonb_build_object(WAKE_ON_REPLY, enabled))
    return meta.op("||")(func.jsonb_build_object(META_SECTION, updated))


def set_wake_on_reply(session: Session, agent_id: int, enabled: bool) -> InboxSettings:
    new_meta = session.execute(
        update(Agent)
        .where(Agent.id == agent_id)
        .values(meta=meta_with_wake_on_reply(enabled))
        .returning(Agent.meta)
    ).scalar_one_or_none()
    if new_meta is None:
        raise NotFound(f"agent {agent_id} does not exist")
    return inbox_settings_from_meta(new_meta)
