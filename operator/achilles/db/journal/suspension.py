"""Auto-suspend's queries: an agent's recent ended runs, and the suspension itself.

The streak is read from the journal when the agent's slot comes due (the scheduler
holds its row `FOR UPDATE SKIP LOCKED`), never counted: the runs since the agent was
last edited, newest first, through the `(agent_id, id DESC)` index (0006).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentRun
from achilles.domain.run_controls import RunOutcome
from achilles.domain.runs import FailReason, RunState


def recent_outcomes(
    session: Session, agent_id: int, *, since: datetime, counted: int
) -> list[RunOutcome]:
    """The agent's last `counted` runs created at or after `since` that count in a streak
    (succeeded, or failed but not cancelled; `domain/run_controls.py` says the same),
    newest first."""
    rows = session.execute(
        select(AgentRun.id, AgentRun.state, AgentRun.reason)
        .where(
            AgentRun.agent_id == agent_id,
            AgentRun.created_at >= since,
            AgentRun.state.in_([RunState.SUCCEEDED, RunState.FAILED]),
            AgentRun.reason.is_distinct_from(FailReason.CANCELLED),
        )
        .order_by(AgentRun.id.desc())
        .limit(counted)
    ).all()
    return [RunOutcome(row.id, RunState(row.state), row.reason) for row in rows]


def suspend_agent(session: Session, agent_id: int, now: datetime) -> bool:
    """Stop scheduling the agent: no slot until an edit clears `suspended_at`
    (`agents.upsert_agent`). False when it was suspended already."""
    changed = session.execute(
        update(Agent)
        .where(Agent.id == agent_id, Agent.suspended_at.is_(None))
        .values(suspended_at=now, next_run_at=None, schedule_zone=None)
        .returning(Agent.id)
    ).first()
    return changed is not None
