"""Reading everything a claimed run needs, as one consistent snapshot.

The optional tools filtered by `agents_allowed` as it is at this moment, the model as it
is now (NULL if it was withdrawn after the run was queued), the platform settings of
now. The runner reads it just after its claim (`achilles.db.run_claim`, on a connection
of its own); `claim_and_load` does both in one transaction.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, AgentRun, AgentToolLink, Tool, User
from achilles.db.journal.runs import claim_run
from achilles.db.journal.settings import load_settings
from achilles.db.tools.approvals import has_approvals_owed
from achilles.db.tools.sources import run_sources
from achilles.domain.mcp_tools import MCP_IMPLEMENTATION
from achilles.domain.run_controls import effective_max_run_tokens
from achilles.domain.run_spec import ModelEndpoint, RunSpec
from achilles.domain.runs import RunTrigger


def claim_and_load(session: Session, run_id: int) -> RunSpec | None:
    """`queued -> running` and the run's spec; None when the run is not claimable
    (no longer queued, or gone with its agent)."""
    if not claim_run(session, run_id):
        return None
    return load_run_spec(session, run_id)


def load_run_spec(session: Session, run_id: int) -> RunSpec | None:
    """The run's spec; None when the run is gone (deleted with its agent)."""
    row = session.execute(
        select(
            AgentRun.trigger,
            Agent.id.label("agent_id"),
            Agent.name.label("agent_name"),
            Agent.prompt,
            User.id.label("user_id"),
            User.key.label("user_key"),
            User.timezone,
            AgentModel.name.label("model_name"),
            AgentModel.base_url,
            AgentModel.provider_model,
            AgentModel.api_key_secret_name,
            Agent.max_run_tokens,
            func.extract("epoch", func.now() - AgentRun.dispatched_at).label("since_dispatch"),
        )
        .join(Agent, Agent.id == AgentRun.agent_id)
        .join(User, User.id == Agent.user_id)
        .outerjoin(AgentModel, AgentModel.id == Agent.model_id)
        .where(AgentRun.id == run_id)
    ).one_or_none()
    if row is None:
        return None
    implementations = session.execute(
        select(Tool.implementation)
        .join(AgentToolLink, AgentToolLink.tool_id == Tool.id)
        .where(
            AgentToolLink.agent_id == row.agent_id,
            Tool.agents_allowed.is_(True),
            # MCP sources offer the tools of their server (`mcp_sources` below).
            Tool.implementation != MCP_IMPLEMENTATION,
        )
        .order_by(Tool.implementation)
    ).scalars()
    settings = load_settings(session)
    model = None
    if row.model_name is not None:
        model = ModelEndpoint(
            name=row.model_name,
            base_url=row.base_url,
            provider_model=row.provider_model,
            has_api_key=row.api_key_secret_name is not None,
        )
    return RunSpec(
        run_id=run_id,
        trigger=RunTrigger(row.trigger),
        agent_id=row.agent_id,
        agent_name=row.agent_name,
        prompt=row.prompt,
        owner_user_id=row.user_id,
        owner_key=row.user_key,
        owner_timezone=row.timezone or settings.timezone,
        model=model,
        tool_implementations=tuple(dict.fromkeys(implementations)),
        platform_prompt=settings.platform_prompt,
        max_iterations=settings.max_iterations,
        run_timeout_seconds=settings.run_timeout_seconds,
        seconds_since_dispatch=(
            None if row.since_dispatch is None else max(0.0, float(row.since_dispatch))
        ),
        max_run_tokens=effective_max_run_tokens(row.max_run_tokens, settings.max_run_tokens),
        mcp_sources=run_sources(session, row.agent_id),
        approvals_owed=has_approvals_owed(session, row.agent_id),
    )
