"""Notifications to the portal (issue 22): what is announced, and how a delivery retries.

Every notification is a row of the outbox, written in the transaction of the change it
announces (a trigger for runs and inbox items, the budget-warning pass for thresholds),
and delivered at least once to the platform's webhook by the operator's notifier loop.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum


class NotificationKind(StrEnum):
    """The `type` of a webhook body (and the outbox's `kind`)."""

    INBOX_ITEM_BLOCKED = "inbox.item_blocked"
    RUN_FAILED = "run.failed"
    RUN_SKIPPED = "run.skipped"
    BUDGET_THRESHOLD_CROSSED = "budget.threshold_crossed"
    AGENT_SUSPENDED = "agent.suspended"


class DeliveryState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    # Retried MAX_ATTEMPTS times without a 2xx: kept with its last error for admins.
    DEAD = "dead"


# Percent of the weekly budget at which an owner is warned, once per threshold per week.
BUDGET_THRESHOLDS: tuple[int, ...] = (80, 95)

# Exponential backoff between attempts: 5 s, 10 s, 20 s, ... capped at 10 min. Twelve
# attempts span about 50 minutes, so a receiver down for half an hour loses nothing;
# after that a row is dead (`achilles notifications retry` sends the dead again).
FIRST_RETRY = timedelta(seconds=5)
MAX_RETRY = timedelta(minutes=10)
MAX_ATTEMPTS = 12


def retry_delay(attempts: int) -> timedelta:
    """How long to wait after the `attempts`-th failed attempt (1-based)."""
    exponent = max(0, min(attempts - 1, 20))
    delay: timedelta = FIRST_RETRY * (2**exponent)
    return min(delay, MAX_RETRY)


def crossed_thresholds(used: int, limit: int) -> tuple[int, ...]:
    """The thresholds `used` tokens have reached out of `limit` (none for a zero
    limit: every run is refused there, and a warning would say nothing)."""
    if limit <= 0:
        return ()
    return tuple(t for t in BUDGET_THRESHOLDS if used * 100 >= t * limit)


def budget_warning(used: int, limit: int) -> tuple[int, str] | None:
    """The highest threshold reached and the `BudgetWarning` condition's message; None
    below the first. The message names no figure that moves with every run, so a status
    written again stays the same."""
    crossed = crossed_thresholds(used, limit)
    if not crossed:
        return None
    top = crossed[-1]
    return top, (
        f"the owner's agents used {top} % or more of the weekly token budget ({limit});"
        " runs are skipped once it is spent, until the budget week ends"
    )
