"""The `BudgetWarning` condition of an Agent: its owner's weekly tokens reached a warning
threshold (80 % or 95 % of the limit). Derived from the same figures as the status's
`weeklyTokens` (`domain.notifications.budget_warning`), so a reconcile keeps it and a new
week clears it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from achilles.domain.agent_status import BUDGET_REASONS, condition
from achilles.domain.notifications import budget_warning
from achilles.domain.vocabulary import ConditionType


def budget_condition(
    used: int, limit: int, previous: list[dict[str, Any]] | None, now: datetime
) -> dict[str, Any] | None:
    """The condition, or None while no threshold is reached."""
    warning = budget_warning(used, limit)
    if warning is None:
        return None
    threshold, message = warning
    return condition(
        ConditionType.BUDGET_WARNING, True, BUDGET_REASONS[threshold], message, previous, now
    )


def with_condition(
    conditions: list[dict[str, Any]] | None, replacement: dict[str, Any]
) -> list[dict[str, Any]]:
    """`conditions` with the one of the replacement's type replaced (or added)."""
    kept = [c for c in conditions or [] if c.get("type") != replacement["type"]]
    return [*kept, replacement]
