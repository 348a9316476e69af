"""The rows of every Agent linked to a CR, read a page at a time for the operator's
start-up intake (`services/agent_intake.py`): what a reconcile would write, and what
its status would show, without writing anything."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, AgentToolLink, Tool, User
from achilles.db.journal.status import AgentStatusRow, agent_status_rows


@dataclass(frozen=True)
class IntakeRow:
    """One agent's row as a reconcile of its CR reads and writes it."""

    agent_id: int
    uid: str
    namespace: str | None
    cr_name: str | None
    name: str
    description: str | None
    prompt: str
    schedule: dict[str, Any] | None
    model_name: str | None
    tool_names: tuple[str, ...]  # sorted
    enabled: bool
    admin_paused: bool
    owner_key: str
    meta: dict[str, Any] | None
    next_run_at: datetime | None
    schedule_zone: str | None
    status: AgentStatusRow


def intake_page(session: Session, after_id: int, limit: int) -> list[IntakeRow]:
    """Up to `limit` agents linked to a CR with ids above `after_id`, in id order."""
    rows = session.execute(
        select(
            Agent.id,
            Agent.cr_uid,
            Agent.cr_namespace,
            Agent.cr_name,
            Agent.name,
            Agent.description,
            Agent.prompt,
            Agent.schedule,
            AgentModel.name.label("model_name"),
            Agent.enabled,
            Agent.admin_paused,
            User.key.label("owner_key"),
            Agent.meta,
            Agent.next_run_at,
            Agent.schedule_zone,
        )
        .join(User, User.id == Agent.user_id)
        .outerjoin(AgentModel, AgentModel.id == Agent.model_id)
        .where(Agent.cr_uid.is_not(None), Agent.id > after_id)
        .order_by(Agent.id)
        .limit(limit)
    ).all()
    if not rows:
        return []
    ids = [row.id for row in rows]
    tools: dict[int, list[str]] = defaultdict(list)
    for agent_id, tool in session.execute(
        select(AgentToolLink.agent_id, Tool.name)
        .join(Tool, Tool.id == AgentToolLink.tool_id)
        .where(AgentToolLink.agent_id.in_(ids))
    ).tuples():
        tools[agent_id].append(tool)
    statuses = {status.agent_id: status for status in agent_status_rows(session, ids)}
    return [
        IntakeRow(
            agent_id=row.id,
            uid=row.cr_uid,
            namespace=row.cr_namespace,
            cr_name=row.cr_name,
            name=row.name,
            description=row.description,
            prompt=row.prompt,
            schedule=row.schedule,
            model_name=row.model_name,
            tool_names=tuple(sorted(tools.get(row.id, ()))),
            enabled=row.enabled,
            admin_paused=row.admin_paused,
            owner_key=row.owner_key,
            meta=row.meta,
            next_run_at=row.next_run_at,
            schedule_zone=row.schedule_zone,
            status=statuses[row.id],
        )
        for row in rows
        if row.id in statuses
    ]
