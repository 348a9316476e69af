"""Folding what Kubernetes says about run pods and Jobs into the journal, and reaping.

Nothing is left `queued` or `running` forever: a pod that failed, was evicted or
OOM-killed, a Job stopped at its deadline, a pod that never starts, a runner silent
past `STALE_AFTER`, a Job that vanished — each ends its run `failed` with a precise
error. A run that has a pod ends only once the pod is gone (a cancelled or a silent one
is asked to stop and holds its agent meanwhile: seed 002's one runner alive per agent),
or `STOP_GRACE` past the reaper's threshold if its pod is never seen gone. Every write
is the journal's guarded transition, so a runner that wakes up after being reaped cannot
write again, and folding the same observation twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from datetime import timedelta

from achilles.db.database import Database
from achilles.db.journal import dispatched
from achilles.db.journal.cancel import end_stopped_runs, stopping_among
from achilles.db.journal.runs import ReapedRun, fail_run, fail_unclaimed_run, reap_stale_runs
from achilles.db.journal.settings import database_now, database_started_at
from achilles.domain.pod_outcome import (
    RUN_SECRET_GRACE,
    START_DEADLINE,
    JobObservation,
    PodObservation,
    job_verdict,
    may_fail,
    pod_verdict,
)
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import STALE_AFTER, STOP_GRACE, FailReason, RunState
from achilles.k8s.jobs import JobRejected, RunJobs

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
    # Runs being cancelled (or cancelled) whose Job still existed (cancelled by the CLI,
    # or while the dispatcher made the Job): their Jobs were deleted, with their pods.
    cancelled_jobs: list[int] = field(default_factory=list)
    # Runs asked to stop whose pod was gone: ended `failed/cancelled` or `failed/stale`.
    cancelled: list[int] = field(default_factory=list)
    # Runs asked to stop whose pod was not seen gone by the stop deadline: ended anyway.
    overdue: list[int] = field(default_factory=list)


@dataclass
class Folded:
    """What a fold wrote (`failed`) and the objects it judged for good (`settled`, by name):
    their verdict was applied, so nothing they say will be written again."""

    failed: list[FailedRun] = field(default_factory=list)
    settled: set[str] = field(default_factory=set)


ACTIVE = frozenset({RunState.QUEUED, RunState.RUNNING})


def fold_pods(
    database: Database,
    jobs: RunJobs,
    pods: Sequence[PodObservation],
    *,
    start_deadline: timedelta = START_DEADLINE,
) -> Folded:
    """Fold a batch of pods (a listing's page, one watch event) in one transaction.

    Pods that can give no verdict (`may_fail`) cost none; the rows of the runs the others
    name are read once, and only a run still active is written (the same guarded
    transitions: a run that ended is never written again)."""
    judged = [pod for pod in pods if may_fail(pod, start_deadline)]
    folded = Folded()
    if not judged:
        return folded
    stuck: list[int] = []
    with database.transaction() as session:
        now = database_now(session)
        states = dispatched.run_states(session, {pod.run_id for pod in judged})
        for pod in judged:
            verdict = pod_verdict(pod, now, start_deadline)
            if verdict is None:
                continue
            folded.settled.add(pod.name)
            state = states.get(pod.run_id)
            if state not in ACTIVE or (verdict.unclaimed_only and state is not RunState.QUEUED):
                continue
            if verdict.unclaimed_only:
                written = fail_unclaimed_run(
                    session, pod.run_id, FailReason.ERROR, verdict.error, now=now
                )
            else:
                written = fail_run(
                    session, pod.run_id, FailReason.ERROR, verdict.error, now=now, from_queued=True
                )
            if not written:
                continue
            states[pod.run_id] = RunState.FAILED
            folded.failed.append(FailedRun(pod.run_id, verdict.error))
            if not verdict.ended:
                stuck.append(pod.run_id)
    for run_id in stuck:
        jobs.delete(run_id)  # a pod stuck before starting would hold a slot
    return folded


def give_missing_run_secrets(
    database: Database,
    jobs: RunJobs,
    pods: Sequence[PodObservation],
    *,
    grace: timedelta = RUN_SECRET_GRACE,
) -> list[int]:
    """Make the run Secret of each pod that waits for one its dispatcher never made (it
    died between creating the Job and its Secret, or the Secret's create failed and the
    Job stayed), for a run still unclaimed and dispatched more than `grace` ago (no
    dispatch pass is still making it). The runs given one.

    One transaction per run holds its row (locked) while the Secret is made, one API
    call, on this rare path: the row takes the new secret's hash, then the Secret is
    made, then the transaction commits. A pod that starts meanwhile claims after the
    commit (its claim locks the row first), so it never sees a hash other than its
    secret's; another replica's pass at the same moment waits, then finds the Secret
    there (409) and leaves the hash as it was. A Secret found there (a late create) or
    refused leaves the row's hash unchanged; one that may have been made keeps the new
    (a next pass tries again if the pod still waits)."""
    given: list[int] = []
    for run_id in sorted({pod.run_id for pod in pods if pod.waiting_for_run_secret}):
        secret = RunSecret.new()
        with database.transaction() as session:
            old = dispatched.replace_run_secret(
                session, run_id, secret.digest, dispatched_for=grace
            )
            if old is None:
                continue
            try:
                made = jobs.give_run_secret(run_id, secret)
            except JobRejected as exc:
                made = exc.maybe_created
            if made:
                given.append(run_id)
            else:
                dispatched.adopt_job_secret(session, run_id, secret.digest, old)  # as it was
    return given


def fold_pod(
    database: Database,
    jobs: RunJobs,
    pod: PodObservation,
    *,
    start_deadline: timedelta = START_DEADLINE,
) -> FailedRun | None:
    failed = fold_pods(database, jobs, [pod], start_deadline=start_deadline).failed
    return failed[0] if failed else None


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


def fold_jobs(
    database: Database,
    jobs: RunJobs,
    observed: Sequence[JobObservation],
    *,
    start_deadline: timedelta = START_DEADLINE,
) -> Folded:
    """Fold a batch of Jobs: only a failed Job can say anything (most cost no transaction);
    their runs' rows are read in one, and a run still active is folded as `fold_job` does."""
    judged = [job for job in observed if job_verdict(job) is not None]
    folded = Folded()
    if not judged:
        return folded
    with database.transaction() as session:
        states = dispatched.run_states(session, {job.run_id for job in judged})
    for job in judged:
        folded.settled.add(job.name)
        if states.get(job.run_id) in ACTIVE:
            failed = fold_job(database, job, jobs, start_deadline=start_deadline)
            if failed is not None:
                folded.failed.append(failed)
    return folded


def sweep(
    database: Database,
    jobs: RunJobs,
    existing_run_ids: Set[int] | None,
    *,
    stale_after: timedelta = STALE_AFTER,
) -> SweepResult:
    """Reap stale runs (asked to stop, or ended at once if they have no Job), end the runs
    asked to stop whose pod is gone (their Job is) or whose stop is overdue (`stale_after`
    + `STOP_GRACE`), then repair runs whose Job is missing and find the stopping runs
    whose Job still exists (deleted after the transaction, with its pods), in one
    transaction.

    Silence counts only while the database is up: a runner cannot beat while PostgreSQL
    is down, so for `stale_after` after the server (re)starts nothing is reaped, and the
    runners that outlived the outage beat again meanwhile (each retries at its next beat).

    `existing_run_ids`: the runs whose Job exists, as the Job watcher knows them (read
    before this transaction: a Job made since belongs to a run dispatched since, which
    the grace covers); None while it does not know yet, and then no run is judged missing.
    """
    result = SweepResult()
    with database.transaction() as session:
        now = database_now(session)
        reaped: list[ReapedRun] = []
        if now - database_started_at(session) >= stale_after:
            reaped = reap_stale_runs(
                session, now=now, stale_after=stale_after, with_job=existing_run_ids
            )
        result.overdue = end_stopped_runs(session, asked_before=now - stale_after - STOP_GRACE)
        if existing_run_ids is not None:
            result.cancelled = end_stopped_runs(
                session,
                without_job=set(existing_run_ids),
                dispatched_before=now - MISSING_JOB_GRACE,
            )
            lost_queued: list[int] = []
            for active in dispatched.active_runs(session):
                if active.run_id in existing_run_ids or active.dispatched_at is None:
                    continue
                if not dispatched.older_than(active.dispatched_at, now, MISSING_JOB_GRACE):
                    continue
                if active.state is RunState.QUEUED:
                    lost_queued.append(active.run_id)  # never created, or deleted before it ran
                    continue
                error = f"Job achilles-run-{active.run_id} disappeared while the run was running"
                if fail_run(session, active.run_id, FailReason.ERROR, error, now=now):
                    result.failed.append(FailedRun(active.run_id, error))
            # Only marks older than the grace: a run undone and marked again since this
            # read (its Job perhaps being made now) keeps its new mark and secret.
            dispatched.release_dispatch(
                session, lost_queued, dispatched_before=now - MISSING_JOB_GRACE
            )
            result.requeued = lost_queued
            result.cancelled_jobs = stopping_among(session, set(existing_run_ids))
    result.reaped = [run.run_id for run in reaped]
    stopping = [run.run_id for run in reaped if not run.ended]
    for run_id in dict.fromkeys([*stopping, *result.cancelled_jobs]):
        # Its pods first (foreground propagation): the run ends when the Job is gone.
        jobs.delete(run_id, foreground=True)
    return result


def job_gone(database: Database, run_id: int) -> bool:
    """The run's Job was deleted, and with foreground propagation its pods before it: a
    run asked to stop ends `failed/cancelled` or `failed/stale` now (True), anything else
    is untouched."""
    with database.transaction() as session:
        return bool(end_stopped_runs(session, run_ids={run_id}))
