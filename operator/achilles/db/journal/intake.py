"""The rows of every Agent linked to a CR, read a page at a time for the operator's
start-up intake (`services/agent_intake.py`): what a reconcile would write, and what
its status would show, without writing anything."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, AgentToolLink, Tool, User
from achilles.db.journal.settings import database_now, load_settings
from achilles.db.journal.status import STATUS_COLUMNS, status_rows_of
from achilles.db.journal.usage import weekly_tokens_by_owner
from achilles.domain.agent_status import AgentStatusRow
from achilles.domain.budget import week_window


class IntakeRow(NamedTuple):
    """One agent's row as a reconcile of its CR reads and writes it (a tuple: every
    agent is made into one at each intake)."""

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
    max_run_tokens: int | None = None
    suspend_after_failures: int | None = None


def intake_tokens(session: Session) -> dict[int, int]:
    """Every owner's weekly tokens, read once for all the pages of one intake."""
    window = week_window(database_now(session), load_settings(session).zone)
    return weekly_tokens_by_owner(session, None, window)


def intake_page(
    session: Session, after_id: int, limit: int, used_by_owner: Mapping[int, int]
) -> list[IntakeRow]:
    """Up to `limit` agents linked to a CR with ids above `after_id`, in id order;
    `used_by_owner` from `intake_tokens` (an owner missing from it: none used).

    Plain columns on the session's connection: the ORM's row loading around them was a
    sixth of the snapshot's time at 10,000 rows (a py-spy profile of `achilles bench
    intake`)."""
    connection = session.connection()
    rows = connection.execute(
        select(
            *STATUS_COLUMNS,
            Agent.name,
            Agent.description,
            Agent.prompt,
            AgentModel.name.label("model_name"),
            User.key.label("owner_key"),
            Agent.meta,
            Agent.schedule_zone,
            Agent.max_run_tokens,
            Agent.suspend_after_failures,
        )
        .join(User, User.id == Agent.user_id)
        .outerjoin(AgentModel, AgentModel.id == Agent.model_id)
        .where(Agent.cr_uid.is_not(None), Agent.id > after_id)
        .order_by(Agent.id)
        .limit(limit)
    ).all()
    if not rows:
        return []
    tools: dict[int, list[str]] = defaultdict(list)
    for agent_id, tool in connection.execute(
        select(AgentToolLink.agent_id, Tool.name)
        .join(Tool, Tool.id == AgentToolLink.tool_id)
        .where(AgentToolLink.agent_id.between(rows[0].id, rows[-1].id))
    ).tuples():
        tools[agent_id].append(tool)
    used = {row.user_id: used_by_owner.get(row.user_id, 0) for row in rows}
    statuses = {status.agent_id: status for status in status_rows_of(session, rows, used)}
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
            max_run_tokens=row.max_run_tokens,
            suspend_after_failures=row.suspend_after_failures,
        )
        for row in rows
        if row.id in statuses
    ]
