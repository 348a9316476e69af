"""Agent rows: creation, lookup and the durable-lock view the start gates read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, User
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
            schedule=schedule,
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
