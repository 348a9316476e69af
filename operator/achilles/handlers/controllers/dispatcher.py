"""The dispatcher: queued runs become Jobs under the concurrency cap (services/dispatch.py).

Wakes on what its sources say (handlers/manager.py: a run NOTIFY, runs to dispatch, the
platform changed), after a pass that left more waiting, or every DISPATCH_TICK; backs
off (1 s doubling to MAX_BACKOFF, the runtime's `LoopHandle.drive`, declared in the
manager's table) while the API server or the database refuses. Owns nothing in memory;
says when it is making Jobs (`dispatch_idle`), for the status writer to wait.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from achilles.db.database import Database
from achilles.domain.gates import closed_locks
from achilles.domain.runs import RunState, SkipReason
from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers import events, metrics
from achilles.handlers.agent_queue import agent_ref
from achilles.handlers.context import StatusMarks
from achilles.k8s.jobs import JobTemplate, RunJobs
from achilles.k8s.objects import Resources
from achilles.runtime.manager import LoopHandle
from achilles.services import dispatch
from achilles.telemetry.spans import Spans

log = logging.getLogger("achilles.operator")

# A run inserted or ending NOTIFYs the dispatcher, and the settings' handler wakes it: the
# tick only bounds what a lost notification costs (each pass is a transaction, idle too).
DISPATCH_TICK = 30.0
# The longest wait after refused passes in a row (the manager's table declares it).
MAX_BACKOFF = 30.0
NAME = "dispatcher"


@dataclass(frozen=True)
class Dispatcher:
    """The dispatcher's reconciler, with exactly what it uses (handlers/manager.py builds
    it): the journal's database, the Jobs client and template, the API server (Events,
    a withdrawn request's status), its spans, the pod view (`pod_run_ids`: the runs whose
    pod is still there, from the pod watcher), the status marks, and `dispatch_idle`,
    which it clears while it makes Jobs for the status writer to wait on."""

    database: Database
    jobs: RunJobs
    job_template: JobTemplate
    resources: Resources
    spans: Spans
    pod_run_ids: Callable[[], set[int] | None]
    marks: StatusMarks
    dispatch_idle: threading.Event

    def dispatch_once(self) -> dispatch.DispatchResult:
        done = dispatch.dispatch_queued_runs(
            self.database,
            self.jobs,
            self.job_template,
            spans=self.spans,
            pod_view=self.pod_run_ids,
        )
        now = datetime.now(UTC)
        for run in done.created:
            metrics.JOBS_CREATED.inc()
            if run.scheduled_for is not None:
                metrics.SLOT_TO_JOB.observe(max(0.0, (now - run.scheduled_for).total_seconds()))
        for run in done.skipped:
            # As the same refusal at enqueue: the budget ran out while the run waited.
            metrics.count_enqueued(run.trigger, RunState.SKIPPED, SkipReason.BUDGET_EXCEEDED)
            message = f"{run.trigger} run {run.run_id} skipped: budget_exceeded"
            events.on_dispatched(self, run, EventType.NORMAL, EventReason.RUN_SKIPPED, message)
        for withdrawn in done.withdrawn:
            # A closed lock leaves no row: the run is gone, and its request (if it was one)
            # is refused in the status, where `achilles run-now --wait` looks.
            run = withdrawn.run
            metrics.count_refused(run.trigger, closed_locks(run.locks))
            reason = EventReason.RUN_REFUSED
            events.on_dispatched(self, run, EventType.WARNING, reason, withdrawn.refusal)
            if run.request_key is not None and run.agent_name and run.agent_namespace:
                ref = agent_ref(run.agent_name, run.agent_namespace, run.agent_uid)
                refused = {"request": run.request_key, "message": withdrawn.refusal}
                patched = self.resources.patch_status(ref, {"withdrawnRunRequest": refused})
                metrics.count_status_patch("withdrawn-request", patched)
        self.marks.mark_dirty(
            run.agent_id for run in [*done.skipped, *(w.run for w in done.withdrawn)]
        )
        metrics.EXECUTING.set(done.executing)
        metrics.QUEUE_DEPTH.set(done.waiting)
        if done.rejected is not None:
            log.warning("Job creation refused (%s); the runs stay queued", done.rejected)
        return done


def run(reconciler: Dispatcher, loop: LoopHandle) -> None:
    idle = reconciler.dispatch_idle

    def dispatch() -> float | None:
        """One pass; the seconds to the next, or None when the API server or the
        database refused (the runs stay queued; the runtime backs off)."""
        idle.clear()  # Jobs first: the status writer waits (status_writer.py)
        busy = False
        try:
            done = reconciler.dispatch_once()
            # A full batch left the queue and more wait: go on at once, still busy.
            busy = done.rejected is None and done.progressed and done.waiting > 0
        finally:
            if not busy:
                idle.set()
        if done.rejected is not None:
            return None
        return 0.0 if busy else DISPATCH_TICK

    loop.drive(dispatch)
    idle.set()
