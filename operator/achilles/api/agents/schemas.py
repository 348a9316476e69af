"""What the agents endpoints answer with, and how a read agent becomes one."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from achilles.api.pagination import Page
from achilles.services.journal_reads import AgentView


class LastRun(BaseModel):
    id: int
    trigger: str
    state: str
    reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    tokens_used: int


class WeeklyTokens(BaseModel):
    """The owner's budget (shared by all their agents) this week."""

    used: int
    limit: int
    window_start: datetime


class AgentDocument(BaseModel):
    id: int
    namespace: str | None
    name: str
    owner: str
    description: str | None
    enabled: bool
    admin_paused: bool
    model: str | None
    phase: str
    schedule: str
    next_run_at: datetime | None
    last_run: LastRun | None
    weekly_tokens: WeeklyTokens


class AgentPage(Page[AgentDocument]):
    pass


class RunRequestBody(BaseModel):
    """Nothing to say yet: an empty object or no body at all; any field is refused."""

    model_config = ConfigDict(extra="forbid")


class RunRequested(BaseModel):
    request_key: str
    agent: str
    runs_url: str


def agent_document(view: AgentView) -> AgentDocument:
    agent, last = view.agent, view.last_run
    return AgentDocument(
        id=agent.id,
        namespace=agent.namespace,
        name=agent.cr_name or agent.name,
        owner=agent.owner_key,
        description=agent.description,
        enabled=agent.enabled,
        admin_paused=agent.admin_paused,
        model=agent.model,
        phase=view.phase,
        schedule=view.schedule,
        next_run_at=view.next_run_at,
        last_run=None
        if last is None
        else LastRun(
            id=last.run_id,
            trigger=last.trigger,
            state=last.state,
            reason=last.reason,
            started_at=last.started_at,
            finished_at=last.finished_at,
            tokens_used=last.tokens_used,
        ),
        weekly_tokens=WeeklyTokens(
            used=view.weekly_tokens_used,
            limit=view.weekly_token_limit,
            window_start=view.week_start,
        ),
    )
