"""The budget thresholds owners crossed this week (`budget_warnings`), found from the
journal: the weekly tokens are a sum over finished runs (seed 000), so a threshold is
crossed only when a run of the owner finishes, and only those owners are summed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentRun, User
from achilles.db.journal.usage import weekly_tokens_by_owner
from achilles.db.outbox.models import BudgetWarning
from achilles.domain.budget import BudgetWindow
from achilles.domain.notifications import crossed_thresholds


@dataclass(frozen=True)
class CrossedThreshold:
    user_id: int
    owner: str
    threshold: int
    used: int
    budget: int
    window: BudgetWindow


def owners_with_runs_finished_since(session: Session, since: datetime) -> list[int]:
    """Owners with a run that spent tokens and finished at or after `since` (the
    `finished_at` index)."""
    query = (
        select(Agent.user_id)
        .join(AgentRun, AgentRun.agent_id == Agent.id)
        .where(AgentRun.finished_at >= since, AgentRun.tokens_used > 0)
        .distinct()
    )
    return list(session.execute(query).scalars())


def record_crossed_thresholds(
    session: Session, owners: Iterable[int], window: BudgetWindow, budget: int
) -> list[CrossedThreshold]:
    """Insert the thresholds these owners' weekly tokens reached and that are not yet
    recorded for this week; returns only the ones this call inserted (a concurrent pass
    that inserted first gets none: the primary key decides)."""
    used_by_owner = weekly_tokens_by_owner(session, owners, window)
    rows = [
        {
            "user_id": user_id,
            "window_start": window.start,
            "threshold": threshold,
            "used": used,
            "budget": budget,
        }
        for user_id, used in sorted(used_by_owner.items())
        for threshold in crossed_thresholds(used, budget)
    ]
    if not rows:
        return []
    inserted = session.execute(
        insert(BudgetWarning)
        .values(rows)
        .on_conflict_do_nothing()
        .returning(BudgetWarning.user_id, BudgetWarning.threshold, BudgetWarning.used)
    ).all()
    if not inserted:
        return []
    owner_keys = select(User.id, User.key).where(User.id.in_({row.user_id for row in inserted}))
    keys = {user_id: key for user_id, key in session.execute(owner_keys).tuples()}
    return sorted(
        (
            CrossedThreshold(
                user_id=row.user_id,
                owner=keys[row.user_id],
                threshold=row.threshold,
                used=row.used,
                budget=budget,
                window=window,
            )
            for row in inserted
        ),
        key=lambda c: (c.user_id, c.threshold),
    )


@dataclass(frozen=True)
class OwnedAgent:
    agent_id: int
    name: str | None  # the Agent's; None while no CR mirrors the row
    namespace: str | None
    uid: str | None


def agents_of_owners(session: Session, user_ids: Iterable[int]) -> dict[int, list[OwnedAgent]]:
    ids = sorted(set(user_ids))
    if not ids:
        return {}
    found: dict[int, list[OwnedAgent]] = {user_id: [] for user_id in ids}
    query = select(Agent.user_id, Agent.id, Agent.cr_name, Agent.cr_namespace, Agent.cr_uid).where(
        Agent.user_id.in_(ids)
    )
    for row in session.execute(query).all():
        found[row.user_id].append(OwnedAgent(row.id, row.cr_name, row.cr_namespace, row.cr_uid))
    return found


def forget_warnings_before(session: Session, window_start: datetime) -> int:
    """Warnings of weeks before this one: nothing reads them any more."""
    result = session.execute(
        delete(BudgetWarning)
        .where(BudgetWarning.window_start < window_start)
        .returning(BudgetWarning.user_id)
    )
    return len(result.all())
