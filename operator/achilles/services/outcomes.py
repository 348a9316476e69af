"""Folding what Kubernetes says about run pods and Jobs into the journal, and reaping.

Nothing is left `queued` or `running` forever: a pod that failed, was evicted or
OOM-killed, a Job stopped at its deadline, a pod that never starts, a runner silent
past `STALE_AFTER`, a Job that vanished — each ends its run `failed` with a precise
error. Every write is the journal's guarded transition, so a runner that wakes up
after being reaped cannot write again, and folding the same observation twice is a
no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal.runs import ReapedRun, fail_run, fail_unclaimed_run, reap_stale_runs
from achilles.db.journal.settings import database_now, database_started_at
from achilles.domain.pod_outcome import (
    START_DEADLINE,
    JobObservation,
    PodObservation,
    job_verdict,
    pod_verdict,
)
from achilles.domain.runs import STALE_AFTER, FailReason, RunState
from achilles.k8s.jobs import RunJobs

# How long a dispatched run may have no Job before we believe it is really gone (the
# Job list and the journal are read at different instants).
MISSING_JOB_GRACE = timedelta(seconds=30)


@dataclass(frozen=True)
class FailedRun:
    run_id: int
    error: str
    reason: FailReason = FailReason.ERROR


@dataclass
class SweepResult:
    failed: list[FailedRun] = field(default_factory=list)
    reaped: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)


def fold_pod(
    database: Database,
    jobs: RunJobs,
    pod: PodObservation,
    *,
    start_deadline: timedelta = START_DEADLINE,
) -> FailedRun | None:
    with database.transaction() as session:
        verdict = pod_verdict(pod, database_now(session), start_deadline)
        if verdict is None:
            return None
        if verdict.unclaimed_only:
            failed = fail_unclaimed_run(session, pod.run_id, FailReason.ERROR, verdict.error)
        else:
            failed = fail_run(
                session, pod.run_id, FailReason.ERROR, verdict.error, from_queued=True
            )
    if failed and not verdict.ended:
        jobs.delete(pod.run_id)  # a pod stuck before starting would hold a slot
    return FailedRun(pod.run_id, verdict.error) if failed else None


def fold_job(
    database: Database,
    job: JobObservation,
    jobs: RunJobs | None = None,
    *,
    start_deadline: timedelta = START_DEADLINE,
) -> FailedRun | None:
    verdict = job_verdict(job)
    if verdict is None:
        return None
    if jobs is not None and job.failed_reason != "DeadlineExceeded":
        # "BackoffLimitExceeded" only says that the pod failed; the pod says why (the
        # runner's exit code, OOMKilled, an eviction). Whichever watcher sees its object
        # first writes the error, so the Job's fold asks the pod first.
        for pod in jobs.list_pods(run_id=job.run_id):
            folded = fold_pod(database, jobs, pod, start_deadline=start_deadline)
            if folded is not None:
                return folded
    with database.transaction() as session:
        failed = fail_run(session, job.run_id, FailReason.ERROR, verdict.error, from_queued=True)
    return FailedRun(job.run_id, verdict.error) if failed else None


def sweep(
    database: Database, jobs: RunJobs, *, stale_after: timedelta = STALE_AFTER
) -> SweepResult:
    """Reap stale runs, then repair runs whose Job is missing.

    Silence counts only while the database is up: a runner cannot beat while PostgreSQL
    is down, so for `stale_after` after the server (re)starts nothing is reaped, and the
    runners that outlived the outage beat again meanwhile (each retries at its next beat).
    """
    result = SweepResult()
    with database.transaction() as session:
        now = database_now(session)
        reaped: list[ReapedRun] = []
        if now - database_started_at(session) >= stale_after:
            reaped = reap_stale_runs(session, now=now, stale_after=stale_after)
    for run in reaped:
        jobs.delete(run.run_id)
        result.reaped.append(run.run_id)
    existing = jobs.list_run_ids()
    with database.transaction() as session:
        now = database_now(session)
        lost_queued: list[int] = []
        for active in queue.active_runs(session):
            if active.run_id in existing or active.dispatched_at is None:
                continue
            if not queue.older_than(active.dispatched_at, now, MISSING_JOB_GRACE):
                continue
            if active.state is RunState.QUEUED:
                lost_queued.append(active.run_id)  # never created, or deleted before it ran
                continue
            error = f"Job achilles-run-{active.run_id} disappeared while the run was running"
            if fail_run(session, active.run_id, FailReason.ERROR, error, now=now):
                result.failed.append(FailedRun(active.run_id, error))
        queue.release_dispatch(session, lost_queued)
        result.requeued = lost_queued
    return result


def fold_pending_pods(
    database: Database, jobs: RunJobs, *, start_deadline: timedelta = START_DEADLINE
) -> list[FailedRun]:
    """Judge every run pod that has not started again, on the sweeper's tick.

    A pod's verdict is otherwise computed only when the pod watcher sees it change, and
    a pod stuck waiting (a Secret that does not exist: `CreateContainerConfigError`)
    may never change after its first status: no event comes once it passes
    `START_DEADLINE`, so only this pass fails its run (found by `achilles chaos
    bad-input`, scenario no-secret).
    """
    pending = jobs.list_pods(pending_only=True)
    return [
        f
        for pod in pending
        if (f := fold_pod(database, jobs, pod, start_deadline=start_deadline)) is not None
    ]


def fold_listing(
    database: Database, jobs: RunJobs, *, start_deadline: timedelta = START_DEADLINE
) -> list[FailedRun]:
    """One pass over every run pod and Job (after a watch restarts, nothing is missed)."""
    failed = [
        f
        for pod in jobs.list_pods()
        if (f := fold_pod(database, jobs, pod, start_deadline=start_deadline)) is not None
    ]
    failed += [
        f
        for job in jobs.list_jobs()
        if (f := fold_job(database, job, jobs, start_deadline=start_deadline)) is not None
    ]
    return failed
