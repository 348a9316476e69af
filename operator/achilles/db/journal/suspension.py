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
from achilles.db.journal.owed_spec import owing, suspended_after_failures
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


def suspend_agent(session: Session, agent_id: int, now: datetime, message: str) -> bool:
    """Switch the agent off, as its owner would (seed 000: two locks, no third; as for a
    deactivated owner): `enabled` false, no slot, the Agent resource owed
    `spec.enabled: false` with `message` for its Event. `suspended_at` records why the
    owner's lock is closed; the owner switching it on again clears it
    (`agents.upsert_agent`). False when the agent was off already."""
    changed = session.execute(
        update(Agent)
        .where(Agent.id == agent_id, Agent.enabled.is_(True))
        .values(
            enabled=False,
            suspended_at=now,
            next_run_at=None,
            schedule_zone=None,
            meta=owing(suspended_after_failures(message)),
        )
        .returning(Agent.id)
    ).first()
    return changed is not None
