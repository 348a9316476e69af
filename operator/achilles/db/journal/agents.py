"""Agent rows: creation, lookup and the durable-lock view the start gates read. The rows
reconciled from Agent resources are written by agent_row.py and agent_links.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    insert,
    null,
    select,
    update,
)
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, User
from achilles.db.journal.owed_spec import owing, owner_deactivated
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
