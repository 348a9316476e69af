"""The sweeper: the passes that catch what no event reports, each at its own period
(`periods`), checked every SWEEP_TICK. Idle, they are the operator's steady cost in
database transactions, so each runs as rarely as what it catches allows. Two are also
woken (`wakes`, routed from the listener's NOTIFYs by manager.py) at the next tick: the
owners pass by an owner's deactivation, the budget-warnings pass by a run changing
state. The tick is their debounce (a burst of NOTIFYs costs one pass) and their period
stays the safety net (a lost NOTIFY delays, never loses); idle, nothing wakes them, so
they cost no transaction more than their period.

- reaper: runs silent past `stale_after` end `failed/stale`, their Jobs deleted; runs
  whose Job vanished are failed (running) or queued again (never started);
- pending pods: a pod stuck before starting fails its run at the start deadline;
- owners: an owner deactivated in `users` switches their agents off (no CR event says so);
- reply wakes: a reply whose wake was lost gets its run;
- run metrics: the journal's runs as Prometheus figures (run_metrics.py);
- memory: garbage cycles collected and the heaps' free pages given back to the system
  (achilles/runtime/memory.py);
- budget warnings: owners past 80 % / 95 % of the weekly budget are warned, once per
  threshold per week (budget_warnings.py);
- retention: finished runs older than `runRetentionDays` deleted in small batches
  (retention.py);
- orphans (at start, then every ORPHANS_EVERY): rows of Agents, AgentModels and
  AgentTools deleted while no operator watched (kopf's watch sees every deletion after
  that, so the listing of every Agent is rare).
Owns nothing in memory but where the run-metrics window closed, where the budget warnings
last looked and when retention is next due: each pass derives its
work from the rows, the API server and what the watchers keep of run pods and Jobs
(`services/run_objects.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers import events, metrics
from achilles.handlers.agent_queue import agent_ref, requeue_agents
from achilles.handlers.context import RuntimeContext
from achilles.handlers.controllers.budget_warnings import BUDGET_WARNINGS_EVERY, BudgetWarningsPass
from achilles.handlers.controllers.mcp_listings import McpListingsPass
from achilles.handlers.controllers.retention import RETENTION_BUSY_EVERY, RetentionPass
from achilles.handlers.controllers.run_metrics import RUN_METRICS_EVERY, RunMetricsPass
from achilles.handlers.owed_specs import deliver_owed_specs
from achilles.handlers.signals import Happened
from achilles.k8s.resources.kinds import AGENT_MODEL, AGENT_TOOL
from achilles.runtime.memory import TRIM_EVERY, MemoryPass
from achilles.runtime.wake import Wake
from achilles.services import agents, catalogue, outcomes, reply_wakes

log = logging.getLogger("achilles.operator")

SWEEP_TICK = 5.0
# A third of the silence that makes a run stale: a reaped run is found at most a third
# late (90 s -> 30 s).
REAP_FRACTION = 3
# The owners pass runs at the next tick after a deactivation's NOTIFY (migration 0015);
# this period only catches a NOTIFY lost with the listener's connection.
OWNERS_EVERY = 30.0
REPLY_WAKES_EVERY = 30.0
PENDING_PODS_EVERY = 10.0
ORPHANS_EVERY = 600.0
NAME = "sweeper"
# The passes also run at the next tick when woken (handlers/manager.py says by what).
WOKEN_PASSES = ("owners", "budget-warnings")


def periods(context: RuntimeContext) -> dict[str, tuple[float, Callable[[], object]]]:
    """pass name -> (seconds between passes, the pass)."""
    stale = context.config.stale_after.total_seconds()
    return {
        "sweeper": (max(SWEEP_TICK, stale / REAP_FRACTION), lambda: reap(context)),
        "pending-pods": (PENDING_PODS_EVERY, lambda: judge_pending_pods(context)),
        "owners": (OWNERS_EVERY, lambda: follow_owner_deactivation(context)),
        "reply-wakes": (REPLY_WAKES_EVERY, lambda: wake_for_waiting_replies(context)),
        "orphans": (ORPHANS_EVERY, lambda: forget_deleted_objects(context)),
        "run-metrics": (RUN_METRICS_EVERY, RunMetricsPass(context)),
        "memory": (TRIM_EVERY, MemoryPass()),
        "budget-warnings": (BUDGET_WARNINGS_EVERY, BudgetWarningsPass(context)),
        "retention": (RETENTION_BUSY_EVERY, RetentionPass(context)),
        "mcp-listings": (context.config.mcp_relist_every, McpListingsPass(context)),
    }


def wakes(context: RuntimeContext) -> dict[str, Wake]:
    """pass name -> the wake that runs it at the next tick, before its period is up."""
    return {name: context.wakes.target(f"{NAME}.{name}") for name in WOKEN_PASSES}


class PassSchedule:
    """When each pass is due: its period after it last ran (every pass at the first
    tick), or at the first tick after its wake was set."""

    def __init__(self, every: Mapping[str, float], woken_by: Mapping[str, Wake]) -> None:
        self.every = dict(every)
        self.woken_by = dict(woken_by)
        self.last: dict[str, float] = {}

    def is_due(self, name: str, now: float) -> bool:
        """Takes the pass's wake: a pass about to run answers what woke it (the rows it
        reads were committed before their NOTIFY came)."""
        wake = self.woken_by.get(name)
        woken = wake is not None and wake.take()
        return woken or now - self.last.get(name, float("-inf")) >= self.every[name]

    def ran(self, name: str, now: float) -> None:
        self.last[name] = now


def run(context: RuntimeContext) -> None:
    passes = periods(context)
    schedule = PassSchedule({name: every for name, (every, _) in passes.items()}, wakes(context))
    while not context.stop.is_set():
        tick(context, passes, schedule)
        context.stop.wait(SWEEP_TICK)


def tick(
    context: RuntimeContext,
    passes: Mapping[str, tuple[float, Callable[[], object]]],
    schedule: PassSchedule,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """One tick: the passes due, in `periods` order; returns their names."""
    done = []
    for name, (_, work) in passes.items():
        if schedule.is_due(name, clock()):
            context.run_pass(name, work)
            schedule.ran(name, clock())
            done.append(name)
    return done


def reap(context: RuntimeContext) -> outcomes.SweepResult:
    swept = outcomes.sweep(
        context.database,
        context.jobs,
        context.run_objects.existing_run_ids(),
        stale_after=context.config.stale_after,
    )
    silence = int(context.config.stale_after.total_seconds())
    for run_id in swept.reaped:
        metrics.RUNS_REAPED.inc()
        message = f"run {run_id} reaped: no heartbeat for {silence} s; its Job was deleted"
        events.on_run(context, run_id, EventType.WARNING, EventReason.RUN_REAPED, message)
    events.run_failures(context, swept.failed)
    if swept.requeued:
        context.wakes.emit(Happened.DISPATCHABLE)
    return swept


def judge_pending_pods(context: RuntimeContext) -> bool:
    """Pods stuck before starting fail their run at the start deadline, event or not."""
    events.run_failures(context, context.run_objects.judge_pending_pods())
    return True


def follow_owner_deactivation(context: RuntimeContext) -> bool:
    """Owner deactivated (`users.active`): switch their agents off. Read from the rows
    on every pass, never remembered here, so a second deactivation is followed too."""
    agents.switch_off_agents_of_inactive_owners(context.database)
    return deliver_owed_specs(context)


def wake_for_waiting_replies(context: RuntimeContext) -> bool:
    """A reply whose wake was lost (it came during a run, or never reached the cluster)
    gets its run now: derived from the rows, so nothing is lost to a restart."""
    for wake in reply_wakes.wake_for_waiting_replies(context.database):
        owed, result = wake.owed, wake.result
        if result is None:
            continue  # a lock closed meanwhile: owed again once it opens
        metrics.count_enqueued("manual", result.state, result.reason or "")
        if owed.namespace and owed.name:
            message = (
                f"run {result.run_id} {result.state}"
                f"{': ' + result.reason if result.reason else ''}"
                f" for the reply to inbox item {owed.item_id} that no run has taken yet"
            )
            reason = EventReason.RUN_QUEUED if result.is_queued else EventReason.RUN_SKIPPED
            ref = agent_ref(owed.name, owed.namespace, owed.uid)
            context.resources.post_event(ref, EventType.NORMAL, reason, message)
        context.mark_dirty([owed.agent_id])
        context.wakes.emit(Happened.DISPATCHABLE)
    return True


def forget_deleted_objects(context: RuntimeContext) -> bool:
    """Whatever was deleted while no operator watched: Agents (their rows and runs),
    AgentModels (withdrawn from their agents) and AgentTools (their links; the agents
    that had them are read again)."""
    database, resources = context.database, context.resources
    listed_at = agents.database_clock(database)  # before the listings begin
    live = resources.agent_uids()
    if live is not None:
        forgotten = agents.forget_agents_not_in(database, live, listed_at=listed_at)
        if forgotten:
            jobs = context.jobs.delete_for_agents(forgotten)
            log.info(
                "%d agent row(s) removed, their Agents no longer exist (%d Job(s) deleted): %s",
                len(forgotten),
                jobs,
                ", ".join(str(agent_id) for agent_id in forgotten),
            )
    converged = catalogue.forget_deleted_catalogue(
        database,
        live_models=resources.object_names(AGENT_MODEL.plural),
        live_tools=resources.object_names(AGENT_TOOL.plural),
        listed_at=listed_at,
    )
    for name, stopped in converged.withdrawn_models.items():
        log.info(
            "model %s withdrawn from %d agent(s): its AgentModel no longer exists",
            name,
            len(stopped),
        )
    for name, unlinked in converged.removed_tools.items():
        # As its delete event: the agents linked to it still name it, read again they
        # show it unknown and link to it if it is created again.
        requeue_agents(context.agent_queue, unlinked)
        log.info(
            "tool %s removed (its AgentTool no longer exists): %d agent(s) read again",
            name,
            len(unlinked),
        )
    return deliver_owed_specs(context)
