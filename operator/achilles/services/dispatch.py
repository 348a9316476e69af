"""The dispatcher: queued runs become Jobs, FIFO, while fewer than the cap execute.

The cap and the order are decided in the database (`db/journal/dispatch.py`); the Job
name is the run's, so a crash between creating a Job and recording it is repaired by
the next pass (AlreadyExists counts as dispatched). An API refusal (quota, overload)
leaves the run queued for the next pass; a run whose agent was disabled while it
waited does not start.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal.runs import fail_run
from achilles.db.journal.settings import database_now, load_settings
from achilles.domain.runs import FailReason
from achilles.k8s.jobs import (
    JobRejected,
    JobTemplate,
    RunJobs,
    RunJobSpec,
    SecretKey,
    build_run_job,
)

BATCH = 200
PARALLEL_CREATES = 8


@dataclass
class DispatchResult:
    created: list[queue.DispatchableRun] = field(default_factory=list)
    cancelled: list[queue.DispatchableRun] = field(default_factory=list)
    rejected: str | None = None
    executing: int = 0
    waiting: int = 0


def _spec(run: queue.DispatchableRun, timeout: int) -> RunJobSpec:
    secret = None
    if run.model_secret_name:
        secret = SecretKey(run.model_secret_name, run.model_secret_key or "api-key")
    return RunJobSpec(
        run_id=run.run_id,
        agent_id=run.agent_id,
        agent_uid=run.agent_uid,
        agent_namespace=run.agent_namespace,
        agent_name=run.agent_name,
        trigger=run.trigger,
        scheduled_for=run.scheduled_for,
        run_timeout_seconds=timeout,
        model_secret=secret,
    )


def dispatch_queued_runs(
    database: Database, jobs: RunJobs, template: JobTemplate, *, batch: int = BATCH
) -> DispatchResult:
    result = DispatchResult()
    with database.transaction() as session:
        now = database_now(session)
        settings = load_settings(session)
        runs = queue.take_dispatchable_runs(session, settings.max_concurrency, batch)
        startable = []
        for run in runs:
            if run.startable:
                startable.append(run)
                continue
            fail_run(
                session,
                run.run_id,
                FailReason.ERROR,
                "not started: a durable lock closed while the run waited"
                " (disabled, paused, model withdrawn or owner deactivated)",
                now=now,
                from_queued=True,
            )
            result.cancelled.append(run)

        def create(run: queue.DispatchableRun) -> str | None:
            try:
                jobs.create(build_run_job(_spec(run, settings.run_timeout_seconds), template))
            except JobRejected as exc:
                return str(exc)
            return None

        with ThreadPoolExecutor(max_workers=PARALLEL_CREATES) as pool:
            errors = list(pool.map(create, startable))
        for run, error in zip(startable, errors, strict=True):
            if error is None:
                result.created.append(run)
            else:
                result.rejected = error
        queue.mark_dispatched(session, [run.run_id for run in result.created], now)
        result.executing = queue.count_executing(session)
        result.waiting = queue.count_waiting(session)
    return result
