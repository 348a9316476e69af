"""Budget warnings (issue 22): an owner's weekly tokens crossed 80 % or 95 % of the limit.

The weekly tokens are derived from runs finished this budget week (seed 000), so a
threshold can only be crossed when one of the owner's runs finishes, by the runner, the
reaper or a cancel alike. Rather than in each of those transactions (where two runs of
one owner finishing at once would each see the other's tokens missing), the operator's
budget-warnings pass sums the owners whose runs finished since its last look and records
what they crossed: the row of `budget_warnings` and the outbox's notification in one
transaction, once per (owner, week, threshold) whichever replica gets there first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from achilles.db.database import Database
from achilles.db.journal.settings import database_now, load_settings
from achilles.db.outbox.budget_warnings import (
    CrossedThreshold,
    OwnedAgent,
    agents_of_owners,
    forget_warnings_before,
    owners_with_runs_finished_since,
    record_crossed_thresholds,
)
from achilles.db.outbox.delivery import enqueue
from achilles.domain.budget import week_window
from achilles.domain.notifications import NotificationKind
from achilles.domain.timestamps import iso_utc

# How far back each pass looks again: a run's `finished_at` is its transaction's clock,
# and that transaction may commit after a pass that looked past it.
LOOKBACK = timedelta(minutes=10)


@dataclass(frozen=True)
class WarningPass:
    crossed: list[CrossedThreshold]
    agents: dict[int, list[OwnedAgent]]  # owner id -> their agents
    next_since: datetime  # where the next pass looks from


def warn_crossed_thresholds(database: Database, since: datetime | None) -> WarningPass:
    """`since`: the previous pass's `next_since`; None (the first pass) looks at the
    whole budget week."""
    with database.transaction() as session:
        now = database_now(session)
        settings = load_settings(session)
        window = week_window(now, settings.zone)
        start = window.start if since is None else max(window.start, since)
        owners = owners_with_runs_finished_since(session, start)
        crossed = record_crossed_thresholds(session, owners, window, settings.weekly_token_budget)
        for warning in crossed:
            enqueue(
                session,
                NotificationKind.BUDGET_THRESHOLD_CROSSED,
                owner=warning.user_id,
                agent=None,
                details={
                    "budget": {
                        "thresholdPercent": warning.threshold,
                        "used": warning.used,
                        "limit": warning.budget,
                        "windowStart": iso_utc(window.start),
                        "windowEnd": iso_utc(window.end),
                    }
                },
            )
        agents = agents_of_owners(session, {warning.user_id for warning in crossed})
        forget_warnings_before(session, window.start)
    return WarningPass(crossed=crossed, agents=agents, next_since=now - LOOKBACK)
