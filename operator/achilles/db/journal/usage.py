"""Weekly token usage per owner: derived from the journal, never a counter (seed 000).

Usage counts runs whose `finished_at` falls in the budget week, so a run still
going counts only once it ends; a small overshoot within the week is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentRun
from achilles.db.journal.settings import load_settings
from achilles.db.journal.users import find_owner_id
from achilles.domain.budget import BudgetWindow, week_window
from achilles.domain.gates import is_budget_exhausted


def weekly_tokens_used(session: Session, user_id: int, window: BudgetWindow) -> int:
    total = session.execute(
        select(func.coalesce(func.sum(AgentRun.tokens_used), 0))
        .join(Agent, Agent.id == AgentRun.agent_id)
        .where(
            Agent.user_id == user_id,
            AgentRun.finished_at >= window.start,
            AgentRun.finished_at < window.end,
        )
    ).scalar_one()
    return int(total)


@dataclass(frozen=True)
class BudgetStatus:
    owner: str
    window: BudgetWindow
    timezone: str
    used: int
    limit: int

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)

    @property
    def exhausted(self) -> bool:
        return is_budget_exhausted(self.used, self.limit)


def owner_budget(session: Session, owner_key: str, now: datetime) -> BudgetStatus:
    user_id = find_owner_id(session, owner_key)
    settings = load_settings(session)
    window = week_window(now, settings.zone)
    return BudgetStatus(
        owner=owner_key,
        window=window,
        timezone=settings.timezone,
        used=weekly_tokens_used(session, user_id, window),
        limit=settings.weekly_token_budget,
    )
