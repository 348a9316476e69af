"""Auto-suspend: an agent whose last N runs failed is switched off (issues 22, 36).

The one place an agent is suspended: the scheduler calls `suspend_if_failing` for each
due agent, inside its batch's transaction, before it would enqueue the slot's run. So
suspending writes no skipped row (the slot is simply not taken), two replicas cannot
both judge one agent (its row is locked `SKIP LOCKED`), and whatever else must happen
with a suspension (an outbox row, say) belongs here, in the same transaction.

N is the Agent's `spec.suspendAfterFailures`, else the AgentPlatform's. Seed 000 has two
locks and no third, so a suspension closes the owner's: the operator switches the agent
off (`enabled` false, `spec.enabled: false` owed to the Agent resource, delivered with a
Warning `AgentSuspended` Event that names the runs and says how to resume), as it does
for a deactivated owner. Resuming is the owner's switch (`spec.enabled: true`), an edit
after which only newer runs count; nothing else resumes it (an admin's toggle of
`adminPaused` included).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from achilles.db.journal.schedule import ScheduledAgent
from achilles.db.journal.settings import Settings
from achilles.db.journal.suspension import recent_outcomes, suspend_agent
from achilles.domain.run_controls import (
    effective_suspend_after,
    failure_streak,
    suspension_message,
)

if TYPE_CHECKING:
    # The caller's transaction: a suspension is written in the scheduler's batch.
    from achilles.db.database import Session


@dataclass(frozen=True)
class Suspension:
    agent_id: int
    threshold: int
    run_ids: tuple[int, ...]  # the failed runs that made the streak

    @property
    def message(self) -> str:
        return suspension_message(self.threshold, self.run_ids)


def suspend_if_failing(
    session: Session, agent: ScheduledAgent, settings: Settings, now: datetime
) -> Suspension | None:
    """Suspend the due `agent` (locked by the caller) when its last N runs since its last
    edit failed; None when it may run (no threshold, or a streak not that long)."""
    threshold = effective_suspend_after(
        agent.suspend_after_failures, settings.suspend_after_failures
    )
    if threshold is None or agent.updated_at is None:
        return None
    outcomes = recent_outcomes(session, agent.agent_id, since=agent.updated_at, counted=threshold)
    streak = failure_streak(outcomes, threshold)
    if streak is None:
        return None
    suspension = Suspension(agent.agent_id, threshold, streak)
    suspend_agent(session, agent.agent_id, now, suspension.message)
    return suspension
