"""The sweeper's woken passes on the real database, through the operator's own pieces:
the listener's LISTEN connection (handlers/controllers/listener.py), the RuntimeContext's
wakes as the manager routes them (handlers/manager.py) and the sweeper's tick
(handlers/controllers/sweeper.py) with the real owners and budget-warnings passes. A
deactivated owner's agent goes off at the tick after the NOTIFY, not at the owners pass's
period; a run that crossed a budget threshold is warned at the tick after its NOTIFY, not
at the budget pass's period.

The ticks are instants of the test's clock (`sweeper.tick(..., clock=...)`); the only
wait is for the listener to hear the NOTIFY, on the wake's own event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

import pytest
from kubernetes import client
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.models import Agent
from achilles.db.outbox.models import BudgetWarning
from achilles.db.roles import Component
from achilles.handlers.config import OperatorConfig
from achilles.handlers.context import RuntimeContext
from achilles.handlers.controllers import sweeper
from achilles.handlers.controllers.budget_warnings import BUDGET_WARNINGS_EVERY
from achilles.handlers.controllers.sweeper import OWNERS_EVERY, SWEEP_TICK, PassSchedule
from achilles.handlers.manager import Runtime, listener_loop, sweeper_of
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.objects import Resources
from achilles.runtime.wake import Wake
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.logins import login_url
from tests.db.test_budget_deleted_agents import _spend

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)
NOWHERE = "http://127.0.0.1:9"
HEARD_WITHIN = 30.0  # seconds for the listener to hear a NOTIFY; it takes milliseconds
# The passes that really run here; the others only say when they would have.
REAL = ("owners", "budget-warnings")
Passes = dict[str, tuple[float, Callable[[], object]]]


@dataclass
class Sweeper:
    context: RuntimeContext
    passes: Passes
    schedule: PassSchedule
    now: float = 0.0

    def tick_at(self, now: float) -> list[str]:
        self.now = now
        return sweeper.tick(self.context.passes, self.passes, self.schedule, clock=lambda: self.now)


def _heard(wake: Wake) -> None:
    assert wake.event.wait(HEARD_WITHIN), "the listener did not hear the NOTIFY"


@pytest.fixture
def operator_sweeper(db: Engine, database_url: str) -> Iterator[Sweeper]:
    """The operator's context on its own login (no Kubernetes: the agents here have no
    resource, so no pass calls the API server), its listener running."""
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=2)
    context = RuntimeContext(
        config=OperatorConfig(database_url, TEMPLATE, 0, timedelta(minutes=5)),
        database=database,
        resources=cast(Resources, None),
        # A client that nothing here calls (the passes that would are not run).
        jobs=RunJobs(client.ApiClient(client.Configuration(host=NOWHERE)), TEMPLATE.namespace),
    )
    # Routes the listener's signals as the operator does, and builds its loops' handles
    # (not started).
    runtime = Runtime(context)
    periods = sweeper_of(context).periods()
    passes: Passes = {
        name: (every, work if name in REAL else lambda: None)
        for name, (every, work) in periods.items()
    }
    schedule = PassSchedule(
        {name: every for name, (every, _) in periods.items()}, sweeper.wakes(context.wakes)
    )
    handle = runtime.manager.handles["listener"]
    thread = threading.Thread(target=listener_loop, args=(context, handle), daemon=True)
    thread.start()
    try:
        # LISTENing: the listener wakes every loop when it connects, these two among
        # them; taken here, so that each test hears its own NOTIFYs.
        for wake in sweeper.wakes(context.wakes).values():
            _heard(wake)
            assert wake.take()
        yield Sweeper(context, passes, schedule)
    finally:
        context.stop.set()
        thread.join(timeout=10)
        database.dispose()


def _enabled(db: Engine, agent_id: int) -> bool:
    with Session(db) as session:
        return bool(session.execute(select(Agent.enabled).where(Agent.id == agent_id)).scalar_one())


def test_a_deactivated_owners_agent_goes_off_at_the_next_tick(
    db: Engine, operator_sweeper: Sweeper
) -> None:
    owner = make_owner(db)
    agent_id = make_agent(db, owner)
    wake = sweeper.wakes(operator_sweeper.context.wakes)["owners"]
    assert "owners" in operator_sweeper.tick_at(0.0)  # every pass at the first tick
    assert "owners" not in operator_sweeper.tick_at(SWEEP_TICK)
    assert _enabled(db, agent_id)

    # Whoever owns `users` flips the flag: no Agent event, no CLI, only the NOTIFY.
    with db.begin() as conn:
        conn.execute(text("UPDATE users SET active = false WHERE key = :k"), {"k": owner})
    _heard(wake)
    assert _enabled(db, agent_id)  # nothing switched it off but the pass
    assert "owners" in operator_sweeper.tick_at(2 * SWEEP_TICK)
    assert not _enabled(db, agent_id)
    # The wake was taken: the next tick is the period's again.
    assert "owners" not in operator_sweeper.tick_at(3 * SWEEP_TICK)
    assert 3 * SWEEP_TICK < OWNERS_EVERY


def test_a_reactivation_wakes_nothing(db: Engine, operator_sweeper: Sweeper) -> None:
    owner = make_owner(db)
    with db.begin() as conn:
        conn.execute(text("UPDATE users SET active = false WHERE key = :k"), {"k": owner})
    _heard(sweeper.wakes(operator_sweeper.context.wakes)["owners"])
    operator_sweeper.tick_at(0.0)  # takes it
    with db.begin() as conn:
        conn.execute(text("UPDATE users SET active = true WHERE key = :k"), {"k": owner})
        # A run's NOTIFY after it, on the same connection: heard once the other was.
        conn.execute(text("SELECT pg_notify('achilles_runs', '')"))
    _heard(sweeper.wakes(operator_sweeper.context.wakes)["budget-warnings"])
    assert "owners" not in operator_sweeper.tick_at(SWEEP_TICK)


def test_a_run_past_a_threshold_is_warned_at_the_next_tick(
    db: Engine, operator_sweeper: Sweeper
) -> None:
    set_settings(db, agent_weekly_token_budget=1000)
    agent_id = make_agent(db, make_owner(db))
    wake = sweeper.wakes(operator_sweeper.context.wakes)["budget-warnings"]
    assert "budget-warnings" in operator_sweeper.tick_at(0.0)
    assert "budget-warnings" not in operator_sweeper.tick_at(SWEEP_TICK)

    _spend(db, agent_id, 850)  # a run queued, run and ended in one transaction: 85 %
    _heard(wake)
    assert "budget-warnings" in operator_sweeper.tick_at(2 * SWEEP_TICK)
    with Session(db) as session:
        assert session.execute(select(BudgetWarning.threshold)).scalars().all() == [80]
    assert "budget-warnings" not in operator_sweeper.tick_at(3 * SWEEP_TICK)
    assert 3 * SWEEP_TICK < BUDGET_WARNINGS_EVERY
