"""The budget-warnings pass (one of the sweeper's): owners whose weekly tokens crossed
80 % or 95 % of the limit get, once per threshold per week, an Event and the
`BudgetWarning` condition on each of their Agents, and a notification through the
outbox (services/budget_warnings.py writes it with the threshold's row).

Keeps in memory only where the last pass looked from; a restarted operator looks at the
whole budget week again, and the thresholds already recorded are not warned again.
"""

from __future__ import annotations

from datetime import UTC, datetime

from achilles.db.database import Database
from achilles.domain.timestamps import iso_utc
from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers.agent_queue import agent_ref
from achilles.k8s.objects import ObjectRef, Resources
from achilles.services import budget_warnings
from achilles.services.budget_condition import budget_condition, with_condition

# A threshold is crossed when a run ends, and a run's NOTIFY wakes the pass at the
# sweeper's next tick (sweeper.wakes); the period is the safety net for a lost NOTIFY:
# a minute late is soon enough for a warning, for 5 transactions per 5 min of an idle
# operator.
BUDGET_WARNINGS_EVERY = 60.0


class BudgetWarningsPass:
    def __init__(self, database: Database, resources: Resources) -> None:
        self.database = database
        self.resources = resources
        self.since: datetime | None = None

    def __call__(self) -> budget_warnings.WarningPass:
        done = budget_warnings.warn_crossed_thresholds(self.database, self.since)
        # Ordered by threshold: each owner's highest is the last.
        highest = {crossed.user_id: crossed for crossed in done.crossed}
        for crossed in done.crossed:
            message = (
                f"owner {crossed.owner} used {crossed.used} of {crossed.budget} weekly tokens:"
                f" {crossed.threshold} % of the budget (week from"
                f" {iso_utc(crossed.window.start)}); runs are skipped once it is spent"
            )
            for agent in done.agents.get(crossed.user_id, []):
                if agent.name and agent.namespace:
                    ref = agent_ref(agent.name, agent.namespace, agent.uid)
                    self.resources.post_event(
                        ref, EventType.WARNING, EventReason.BUDGET_THRESHOLD_CROSSED, message
                    )
        for user_id, crossed in highest.items():
            for agent in done.agents.get(user_id, []):
                if agent.name and agent.namespace:
                    ref = agent_ref(agent.name, agent.namespace, agent.uid)
                    self._set_condition(ref, crossed.used, crossed.budget)
        self.since = done.next_since  # only once warned: a failed pass looks again
        return done

    def _set_condition(self, ref: ObjectRef, used: int, budget: int) -> None:
        """The condition now, not at the Agent's next reconcile (which keeps it)."""
        body = self.resources.read_object(ref)
        if body is None:
            return
        conditions = (body.get("status") or {}).get("conditions")
        warning = budget_condition(used, budget, conditions, datetime.now(UTC))
        if warning is not None:
            status = {"conditions": with_condition(conditions, warning)}
            self.resources.patch_status(ref, status)
