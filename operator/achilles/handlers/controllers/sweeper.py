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
- MCP listings: every MCP AgentTool put on the catalogue workqueue to be listed again
  (mcp_listings.py; the catalogue's threads list it, one listing per source at a time);
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
from dataclasses import dataclass
from datetime import timedelta

from achilles.db.database import Database
from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers import events, metrics
from achilles.handlers.agent_queue import QueuedAgent, agent_ref, requeue_agents
from achilles.handlers.catalogue_queue import CatalogueKey, QueuedCatalogue
from achilles.handlers.context import StatusMarks
from achilles.handlers.controllers.budget_warnings import BUDGET_WARNINGS_EVERY, BudgetWarningsPass
from achilles.handlers.controllers.mcp_listings import McpListingsPass
from achilles.handlers.controllers.retention import RETENTION_BUSY_EVERY, RetentionPass
from achilles.handlers.controllers.run_metrics import RUN_METRICS_EVERY, RunMetricsPass
from achilles.handlers.owed_specs import deliver_owed_specs
from achilles.handlers.signals import Happened
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import Resources
from achilles.k8s.resources.kinds import AGENT_MODEL, AGENT_TOOL
from achilles.runtime.backoff import Backoff
from achilles.runtime.loops import Passes
from achilles.runtime.manager import LOOP_RETRY, LoopHandle
from achilles.runtime.memory import TRIM_EVERY, MemoryPass
from achilles.runtime.wake import Wake, Wakes
from achilles.runtime.workqueue import WorkQueue
from achilles.services import agents, catalogue, outcomes, reply_wakes
from achilles.services.run_objects import RunObjects

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


@dataclass(frozen=True)
class Sweeper:
    """The sweeper's reconciler, with exactly what its passes use (handlers/manager.py
    builds it): the journal's database, the Jobs client, the API server, what the
    watchers keep of run pods and Jobs, the Agent workqueue (a deleted tool's Agents read
    again), the catalogue workqueue (the MCP sources to list again), the status marks,
    `emit` (runs to dispatch), the reaper's threshold, and the MCP listings' period."""

    database: Database
    jobs: RunJobs
    resources: Resources
    run_objects: RunObjects
    agent_queue: WorkQueue[str, QueuedAgent]
    catalogue_queue: WorkQueue[CatalogueKey, QueuedCatalogue]
    marks: StatusMarks
    emit: Callable[[Happened], None]
    stale_after: timedelta
    mcp_relist_every: float

    def periods(self) -> dict[str, tuple[float, Callable[[], object]]]:
        """pass name -> (seconds between passes, the pass)."""
        stale = self.stale_after.total_seconds()
        return {
            "sweeper": (max(SWEEP_TICK, stale / REAP_FRACTION), self.reap),
            "pending-pods": (PENDING_PODS_EVERY, self.judge_pending_pods),
            "owners": (OWNERS_EVERY, self.follow_owner_deactivation),
            "reply-wakes": (REPLY_WAKES_EVERY, self.wake_for_waiting_replies),
            "orphans": (ORPHANS_EVERY, self.forget_deleted_objects),
            "run-metrics": (RUN_METRICS_EVERY, RunMetricsPass(self.database)),
            "memory": (TRIM_EVERY, MemoryPass()),
            "budget-warnings": (
                BUDGET_WARNINGS_EVERY,
                BudgetWarningsPass(self.database, self.resources),
            ),
            "retention": (RETENTION_BUSY_EVERY, RetentionPass(self.database)),
            "mcp-listings": (
                self.mcp_relist_every,
                McpListingsPass(self.database, self.catalogue_queue),
            ),
        }

    def reap(self) -> outcomes.SweepResult:
        swept = outcomes.sweep(
            self.database,
            self.jobs,
            self.run_objects.existing_run_ids(),
            stale_after=self.stale_after,
        )
        silence = int(self.stale_after.total_seconds())
        for run_id in swept.reaped:
            metrics.RUNS_REAPED.inc()
            message = f"run {run_id} reaped: no heartbeat for {silence} s; its Job was deleted"
            events.on_run(self, run_id, EventType.WARNING, EventReason.RUN_REAPED, message)
        events.run_failures(self, swept.failed)
        if swept.requeued:
            self.emit(Happened.DISPATCHABLE)
        return swept

    def judge_pending_pods(self) -> bool:
        """Pods stuck before starting fail their run at the start deadline, event or not."""
        events.run_failures(self, self.run_objects.judge_pending_pods())
        return True

    def follow_owner_deactivation(self) -> bool:
        """Owner deactivated (`users.active`): switch their agents off. Read from the rows
        on every pass, never remembered here, so a second deactivation is followed too."""
        agents.switch_off_agents_of_inactive_owners(self.database)
        return deliver_owed_specs(self)

    def wake_for_waiting_replies(self) -> bool:
        """A reply whose wake was lost (it came during a run, or never reached the
        cluster) gets its run now: derived from the rows, so nothing is lost to a
        restart."""
        for wake in reply_wakes.wake_for_waiting_replies(self.database):
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
                self.resources.post_event(ref, EventType.NORMAL, reason, message)
            self.marks.mark_dirty([owed.agent_id])
            self.emit(Happened.DISPATCHABLE)
        return True

    def forget_deleted_objects(self) -> bool:
        """Whatever was deleted while no operator watched: Agents (their rows and runs),
        AgentModels (withdrawn from their agents) and AgentTools (their links; the agents
        that had them are read again)."""
        database, resources = self.database, self.resources
        listed_at = agents.database_clock(database)  # before the listings begin
        live = resources.agent_uids()
        if live is not None:
            forgotten = agents.forget_agents_not_in(database, live, listed_at=listed_at)
            if forgotten:
                jobs = self.jobs.delete_for_agents(forgotten)
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
            requeue_agents(self.agent_queue, unlinked)
            log.info(
                "tool %s removed (its AgentTool no longer exists): %d agent(s) read again",
                name,
                len(unlinked),
            )
        return deliver_owed_specs(self)


def wakes(targets: Wakes[Happened]) -> dict[str, Wake]:
    """pass name -> the wake that runs it at the next tick, before its period is up."""
    return {name: targets.target(f"{NAME}.{name}") for name in WOKEN_PASSES}


class PassSchedule:
    """When each pass is due: its period after it last ran (every pass at the first
    tick), or at the first tick after its wake was set. A pass that failed is due again
    after the loop's backoff (`retry`, the runtime's: its first delay, doubling with each
    failure in a row, never later than its period), as a workqueue re-adds a failed
    key: the reaper's pass that met a database restart runs at the next tick, not a
    third of `stale_after` later."""

    def __init__(
        self,
        every: Mapping[str, float],
        woken_by: Mapping[str, Wake],
        retry: Backoff = LOOP_RETRY,
    ) -> None:
        self.every = dict(every)
        self.woken_by = dict(woken_by)
        self.retry = retry
        self.last: dict[str, float] = {}
        self.failures: dict[str, int] = {}

    def is_due(self, name: str, now: float) -> bool:
        """Takes the pass's wake: a pass about to run answers what woke it (the rows it
        reads were committed before their NOTIFY came)."""
        wake = self.woken_by.get(name)
        woken = wake is not None and wake.take()
        return woken or now - self.last.get(name, float("-inf")) >= self.wait(name)

    def wait(self, name: str) -> float:
        """Seconds from its last pass to its next: its period, or its backoff."""
        failures = self.failures.get(name, 0)
        if failures == 0:
            return self.every[name]
        return min(self.every[name], self.retry.delay(failures))

    def ran(self, name: str, now: float, *, failed: bool = False) -> None:
        self.last[name] = now
        if failed:
            self.failures[name] = self.failures.get(name, 0) + 1
        else:
            self.failures.pop(name, None)


def run(reconciler: Sweeper, loop: LoopHandle, woken_by: Mapping[str, Wake]) -> None:
    """`woken_by`: the wakes of the passes also woken (`wakes`)."""
    passes = reconciler.periods()
    every = {name: seconds for name, (seconds, _) in passes.items()}
    schedule = PassSchedule(every, woken_by, loop.retry)
    while not loop.stop.is_set():
        tick(loop.passes, passes, schedule)
        loop.stop.wait(SWEEP_TICK)


def tick(
    counted: Passes,
    passes: Mapping[str, tuple[float, Callable[[], object]]],
    schedule: PassSchedule,
    clock: Callable[[], float] = time.monotonic,
) -> list[str]:
    """One tick: the passes due, in `periods` order, each counted under its own name (a
    failed one is due again after its backoff); returns their names."""
    done = []
    for name, (_, work) in passes.items():
        if schedule.is_due(name, clock()):
            completed, _ = counted.attempt(name, work)
            schedule.ran(name, clock(), failed=not completed)
            done.append(name)
    return done
