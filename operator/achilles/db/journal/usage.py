"""Weekly token usage per owner: derived from the journal, never a counter (seed 000).

Usage counts runs whose `finished_at` falls in the budget week, so a run still
going counts only once it ends; a small overshoot within the week is accepted. Runs
go with their agent (seed 000); what a deleted agent's runs spent stays counted
through `deleted_agent_tokens`, which a trigger fills before the cascade (0009), so
deleting and re-creating an agent does not give its tokens back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    SQLColumnExpression,
    any_,
    bindparam,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session, aliased

from achilles.db.journal.models import Agent, AgentRun, DeletedAgentTokens, User
from achilles.db.journal.settings import load_settings
from achilles.db.journal.users import find_owner_id
from achilles.domain.budget import BudgetWindow, week_window
from achilles.domain.gates import is_budget_exhausted

# The owner's agents inside the budget subquery, apart from an enclosing query's
# `agents`. Made once: an alias proxies every column, which costs more per call than
# the query itself (measured by `achilles bench journal`).
_OWNED = aliased(Agent, name="owned")


def tokens_used_by(
    owner: SQLColumnExpression[int] | int,
    start: SQLColumnExpression[datetime] | datetime,
    end: SQLColumnExpression[datetime] | datetime,
) -> ColumnElement[int]:
    """The owner's tokens of runs finished in [start, end) as an SQL expression; each
    argument may be a value, a bound parameter or a column of the enclosing query (the
    start gates read it beside the agent's locks). Runs of agents deleted since count
    too (`deleted_agent_tokens`)."""
    of_agents = (
        select(func.coalesce(func.sum(AgentRun.tokens_used), 0))
        .join(_OWNED, _OWNED.id == AgentRun.agent_id)
        .where(
            _OWNED.user_id == owner,
            AgentRun.finished_at >= start,
            AgentRun.finished_at < end,
        )
        .scalar_subquery()
    )
    of_deleted_agents = (
        select(func.coalesce(func.sum(DeletedAgentTokens.tokens_used), 0))
        .where(
            DeletedAgentTokens.user_id == owner,
            DeletedAgentTokens.finished_at >= start,
            DeletedAgentTokens.finished_at < end,
        )
        .scalar_subquery()
    )
    # A sum of two scalar subqueries, not a SELECT around them: each must stay correlated
    # with the enclosing query's `agents` when `owner` is its column.
    return of_agents + of_deleted_agents


def weekly_tokens_used(session: Session, user_id: int, window: BudgetWindow) -> int:
    used = select(tokens_used_by(user_id, window.start, window.end))
    return int(session.execute(used).scalar_one())


def weekly_tokens_by_owner(
    session: Session, user_ids: Iterable[int] | None, window: BudgetWindow
) -> dict[int, int]:
    """`weekly_tokens_used` of several owners (None: of every user) in one statement."""
    query = select(User.id, tokens_used_by(User.id, window.start, window.end))
    if user_ids is not None:
        ids = sorted(set(user_ids))
        if not ids:
            return {}
        query = query.where(User.id == any_(bindparam("ids", ids, type_=ARRAY(BigInteger))))
    return {int(user_id): int(used) for user_id, used in session.execute(query).tuples()}


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
