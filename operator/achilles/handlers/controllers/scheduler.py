"""The scheduler: due slots become queued (or skipped) runs, each slot once.

Wakes at the nearest slot, on a `next_run_at` NOTIFY (SCHEDULER_PACE after its last pass
at the soonest), or after SCHEDULER_MAX_SLEEP.
Owns nothing in memory but the time of its last slot repair.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from achilles.db.database import Database
from achilles.domain.runs import RunState
from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers import events, metrics
from achilles.handlers.context import StatusMarks
from achilles.handlers.owed_specs import deliver_owed_specs
from achilles.handlers.signals import Happened
from achilles.k8s.objects import Resources
from achilles.runtime.manager import LoopHandle
from achilles.services import scheduler
from achilles.telemetry.spans import Spans

# Slots come with a NOTIFY (`next_run_at` moved) and the loop sleeps until the nearest:
# the cap on its sleep is a safety net, and each pass is a transaction even when idle.
SCHEDULER_MAX_SLEEP = 30.0
# The slot repair (closed locks, missing slots, moved zones) reads every agent: every
# pass would cost O(agents) per slot and per NOTIFY (docs/performance.md); a zone moved
# in `users` shows in the slots within this.
SCHEDULE_REPAIR_EVERY = 60.0
# Every agent row whose slot moves NOTIFYs: at a restart's listing (each changed Agent
# reconciled) hundreds a second, each a pass of four statements that finds nothing due,
# a fifth of the operator's CPU in the restart (a py-spy --gil profile of `achilles bench
# intake`). A pass a NOTIFY asks for starts at least this long after the last one (the
# manager's pace); a slot due sooner keeps its timer.
SCHEDULER_PACE = 0.5
NAME = "scheduler"


@dataclass(frozen=True)
class Scheduler:
    """The scheduler's reconciler, with exactly what it uses (handlers/manager.py builds
    it): the journal's database, the API server (skipped runs' Events, owed specs), its
    spans, `emit` to say runs wait for the dispatcher, and the status marks of the Agents
    whose slots moved."""

    database: Database
    resources: Resources
    spans: Spans
    emit: Callable[[Happened], None]
    marks: StatusMarks

    def schedule_once(self, *, repair: bool) -> scheduler.TickResult:
        attributes = {"achilles.scheduler.repair": repair}
        with self.spans.span("scheduler pass", attributes) as span:
            tick = scheduler.schedule_due_agents(self.database, repair=repair)
            span.set_attribute("achilles.scheduler.enqueued", len(tick.enqueued))
        for agent_id, outcome in tick.enqueued:
            metrics.count_enqueued("scheduled", outcome.state, outcome.reason or "")
            if outcome.state is RunState.SKIPPED:
                message = f"scheduled run {outcome.run_id} skipped: {outcome.reason}"
                events.on_agent(self, agent_id, EventType.NORMAL, EventReason.RUN_SKIPPED, message)
        for late in tick.lateness_seconds:
            metrics.SLOT_LATENESS.observe(late)
        for _, closed in tick.refused:
            metrics.count_refused("scheduled", closed)
        if tick.suspended:
            # Each suspended agent owes its resource `spec.enabled: false`; delivered now,
            # with its `AgentSuspended` Event (what is not stays owed for the sweeper).
            deliver_owed_specs(self)
        if tick.enqueued:
            self.emit(Happened.DISPATCHABLE)
            self.marks.mark_dirty(agent_id for agent_id, _ in tick.enqueued)
        # A zone changed: nextRunAt moved, and the Scheduled condition may have too.
        # ... and a suspended agent's phase and Scheduled condition say why and how to
        # resume.
        self.marks.want_reconcile(
            [*tick.rescheduled, *tick.unschedulable, *(s.agent_id for s in tick.suspended)]
        )
        return tick


def run(reconciler: Scheduler, loop: LoopHandle) -> None:
    last_repair = float("-inf")

    def schedule() -> float:
        """One pass; the seconds to the nearest slot (SCHEDULER_MAX_SLEEP at most). A
        failed one is retried with the runtime's backoff (`LoopHandle.drive`)."""
        nonlocal last_repair
        repair = time.monotonic() - last_repair >= SCHEDULE_REPAIR_EVERY
        tick = reconciler.schedule_once(repair=repair)
        if repair:
            last_repair = time.monotonic()
        sleep = SCHEDULER_MAX_SLEEP
        if tick.nearest_next_run is not None and tick.now is not None:
            until = (tick.nearest_next_run - tick.now).total_seconds()
            sleep = min(sleep, max(0.0, until))
        return sleep

    loop.drive(schedule)
