"""The scheduler: one cluster-wide pass over the database, not a timer per agent.

Due agents (`next_run_at <= now()`) are taken in batches with `FOR UPDATE SKIP LOCKED`;
each gets one scheduled run (through the start gates) and its `next_run_at` advanced
in the same transaction, so two operator replicas can never enqueue one slot twice
and missed slots collapse into one run (DESIGN.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from achilles.db.database import Database
from achilles.db.journal import schedule as schedule_rows
from achilles.db.journal.runs import EnqueueResult, enqueue_run
from achilles.db.journal.settings import database_now, load_settings
from achilles.domain.runs import RunTrigger
from achilles.domain.schedule import collapse_missed_slots, load_timezone, parse_schedule
from achilles.errors import StartRefused, UnknownTimezoneError
from achilles.services.suspension import Suspension, suspend_if_failing

BATCH = 500
# A pass's first batch is small and each next one twice the last, up to BATCH: the
# first runs of a burst commit (and wake the dispatcher) within a few dozen enqueues
# instead of after 500 of them (1.4 s to the first Job at 1,000 agents due at once,
# `achilles bench burst-vs-cronjob`), and a big burst still goes in few transactions.
FIRST_BATCH = 25


@dataclass
class TickResult:
    enqueued: list[tuple[int, EnqueueResult]] = field(default_factory=list)
    lateness_seconds: list[float] = field(default_factory=list)
    # Agents whose lock closed since their slot was set: (agent id, the closed locks).
    refused: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    rescheduled: list[int] = field(default_factory=list)
    # Agents whose owner's zone is not a known zone: no slot can be computed for them.
    unschedulable: list[int] = field(default_factory=list)
    # Agents whose last N runs failed: suspended instead of run (services/suspension.py).
    suspended: list[Suspension] = field(default_factory=list)
    nearest_next_run: datetime | None = None
    now: datetime | None = None


def schedule_due_agents(
    database: Database, *, batch: int = BATCH, repair: bool = True
) -> TickResult:
    """Enqueue every due agent (in batches), then (with `repair`) keep every slot up to
    date: clear the slots of agents whose locks closed, give one to agents that lack it
    or whose owner's zone moved. The repair reads every agent (some 0.3 s at 100 k
    agents, `achilles bench journal`), so the loop runs it on a timer, not every tick."""
    result = TickResult()
    size = min(FIRST_BATCH, batch)
    while True:
        with database.transaction() as session:
            now = database_now(session)
            settings = load_settings(session)  # once per batch, not per enqueue
            due = schedule_rows.take_due_agents(session, now, size)
            # Each agent's next slot, written for the whole batch in one statement.
            slots: dict[int, tuple[datetime | None, str | None]] = {}
            for agent in due:
                assert agent.next_run_at is not None
                try:
                    zone = load_timezone(agent.zone)
                except UnknownTimezoneError:
                    # The owner's zone is no zone: no slot for this agent, and the others'
                    # slots still run (one bad `users` row must not stop the scheduler).
                    slots[agent.agent_id] = (None, None)
                    result.unschedulable.append(agent.agent_id)
                    continue
                suspension = suspend_if_failing(session, agent, settings, now)
                if suspension is not None:
                    slots[agent.agent_id] = (None, None)
                    result.suspended.append(suspension)
                    continue
                advance = collapse_missed_slots(
                    parse_schedule(agent.schedule),
                    agent.next_run_at,
                    now,
                    zone,
                    anchor=agent.next_run_at,
                )
                try:
                    outcome = enqueue_run(
                        session,
                        agent.agent_id,
                        RunTrigger.SCHEDULED,
                        now=now,
                        scheduled_for=agent.next_run_at,
                        settings=settings,
                    )
                except StartRefused as refused:
                    # A lock closed since the slot was set: no row, no slot.
                    slots[agent.agent_id] = (None, None)
                    result.refused.append((agent.agent_id, refused.reasons))
                    continue
                result.enqueued.append((agent.agent_id, outcome))
                result.lateness_seconds.append((now - agent.next_run_at).total_seconds())
                slots[agent.agent_id] = (advance.next_run_at, agent.zone)
            schedule_rows.set_next_runs(session, slots)
        if len(due) < size:
            break
        size = min(size * 2, batch)
    with database.transaction() as session:
        now = database_now(session)
        if repair:
            schedule_rows.clear_closed_schedules(session)
            while True:
                stale = schedule_rows.take_agents_to_reschedule(session, batch)
                given = 0
                for agent in stale:
                    if schedule_rows.refresh_next_run(session, agent.agent_id, now, reset=False):
                        given += 1
                        result.rescheduled.append(agent.agent_id)
                    else:
                        result.unschedulable.append(agent.agent_id)
                if len(stale) < batch or not given:
                    break  # the rest (if any) cannot have a slot: their zones are no zones
        result.nearest_next_run = schedule_rows.nearest_next_run(session)
        result.now = now
    return result
