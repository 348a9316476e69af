"""The scheduler: due slots become queued (or skipped) runs, each slot once.

Wakes at the nearest slot, on a `next_run_at` NOTIFY, or after SCHEDULER_MAX_SLEEP.
Owns nothing in memory but the time of its last slot repair.
"""

from __future__ import annotations

import time
from functools import partial

from achilles.domain.runs import RunState
from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers import events, metrics
from achilles.handlers.context import RuntimeContext
from achilles.handlers.owed_specs import deliver_owed_specs
from achilles.handlers.signals import Happened
from achilles.services import scheduler

# Slots come with a NOTIFY (`next_run_at` moved) and the loop sleeps until the nearest:
# the cap on its sleep is a safety net, and each pass is a transaction even when idle.
SCHEDULER_MAX_SLEEP = 30.0
# The slot repair (closed locks, missing slots, moved zones) reads every agent: every
# pass would cost O(agents) per slot and per NOTIFY (docs/performance.md); a zone moved
# in `users` shows in the slots within this.
SCHEDULE_REPAIR_EVERY = 60.0
NAME = "scheduler"


def run(context: RuntimeContext) -> None:
    woken = context.wakes.target(NAME)
    last_repair = float("-inf")
    while not context.stop.is_set():
        repair = time.monotonic() - last_repair >= SCHEDULE_REPAIR_EVERY
        tick = context.run_pass("scheduler", partial(schedule_once, context, repair=repair))
        sleep = SCHEDULER_MAX_SLEEP
        if tick is not None:
            if repair:
                last_repair = time.monotonic()
            if tick.nearest_next_run is not None and tick.now is not None:
                until = (tick.nearest_next_run - tick.now).total_seconds()
                sleep = min(sleep, max(0.0, until))
        woken.wait(sleep)


def schedule_once(context: RuntimeContext, *, repair: bool) -> scheduler.TickResult:
    with context.spans.span("scheduler pass", {"achilles.scheduler.repair": repair}) as span:
        tick = scheduler.schedule_due_agents(context.database, repair=repair)
        span.set_attribute("achilles.scheduler.enqueued", len(tick.enqueued))
    for agent_id, outcome in tick.enqueued:
        metrics.count_enqueued("scheduled", outcome.state, outcome.reason or "")
        if outcome.state is RunState.SKIPPED:
            message = f"scheduled run {outcome.run_id} skipped: {outcome.reason}"
            events.on_agent(context, agent_id, EventType.NORMAL, EventReason.RUN_SKIPPED, message)
    for late in tick.lateness_seconds:
        metrics.SLOT_LATENESS.observe(late)
    for _, closed in tick.refused:
        metrics.count_refused("scheduled", closed)
    if tick.suspended:
        # Each suspended agent owes its resource `spec.enabled: false`; delivered now,
        # with its `AgentSuspended` Event (what is not stays owed for the sweeper).
        deliver_owed_specs(context)
    if tick.enqueued:
        context.wakes.emit(Happened.DISPATCHABLE)
        context.mark_dirty(agent_id for agent_id, _ in tick.enqueued)
    # A zone changed: nextRunAt moved, and the Scheduled condition may have too.
    # ... and a suspended agent's phase and Scheduled condition say why and how to resume.
    context.want_reconcile(
        [*tick.rescheduled, *tick.unschedulable, *(s.agent_id for s in tick.suspended)]
    )
    return tick
