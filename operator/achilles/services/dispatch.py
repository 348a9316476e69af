"""The dispatcher: queued runs become Jobs, FIFO, while fewer than the cap execute.

The cap and the order are decided in the database (`db/journal/dispatch.py`); the Job
name is the run's, so a crash between creating a Job and recording it is repaired by
the next pass (AlreadyExists counts as dispatched). An API refusal (quota, overload)
leaves the run queued for the next pass.

The start gates are checked again, since a run may wait behind the cap for a while:
- a durable lock closed meanwhile (disabled, paused, model withdrawn, owner
  deactivated), found on every pass wherever the run waits: the run never started and
  a closed lock leaves no row (seed 000), so its row is removed, as if the request had
  been refused at once (`withdrawn`);
- its owner's weekly budget ran out meanwhile, when its turn comes: it ends
  `skipped/budget_exceeded` with no tokens, as the same request at enqueue would have
  (`skipped`). The seed's small
  overrun is for runs already running, not for runs that have not started.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal.dispatch import DispatchableRun as DispatchableRun
from achilles.db.journal.runs import skip_queued_run
from achilles.db.journal.settings import database_now, load_settings
from achilles.domain.budget import week_window
from achilles.domain.gates import LockReason, closed_locks, is_budget_exhausted
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import SkipReason
from achilles.k8s.jobs import (
    JobRejected,
    JobTemplate,
    RunJobs,
    RunJobSpec,
    SecretKey,
    build_run_job,
)
from achilles.services.status import LOCK_MESSAGES

BATCH = 200
PARALLEL_CREATES = 8


@dataclass(frozen=True)
class WithdrawnRun:
    """A waiting run removed because a durable lock closed; `refusal` says which, in
    the words a refused run request gets."""

    run: queue.DispatchableRun
    refusal: str


@dataclass
class DispatchResult:
    created: list[queue.DispatchableRun] = field(default_factory=list)
    withdrawn: list[WithdrawnRun] = field(default_factory=list)
    skipped: list[queue.DispatchableRun] = field(default_factory=list)  # budget_exceeded
    rejected: str | None = None
    executing: int = 0
    waiting: int = 0

    @property
    def progressed(self) -> bool:
        """Some waiting runs left the queue (more may wait for the next pass at once)."""
        return bool(self.created or self.withdrawn or self.skipped)


def refusal_message(closed: tuple[LockReason, ...]) -> str:
    """What a run request refused by closed locks is told (at enqueue or at dispatch)."""
    return "run refused: " + "; ".join(LOCK_MESSAGES[lock] for lock in closed)


def _spec(run: queue.DispatchableRun, timeout: int, run_secret: RunSecret) -> RunJobSpec:
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
        run_secret=run_secret,
    )


def _withdrawn(runs: list[queue.DispatchableRun], removed: list[int]) -> list[WithdrawnRun]:
    """The `runs` whose rows were removed, each with why (their closed locks)."""
    return [
        WithdrawnRun(run, refusal_message(closed_locks(run.locks)))
        for run in runs
        if run.run_id in set(removed)
    ]


def dispatch_queued_runs(
    database: Database, jobs: RunJobs, template: JobTemplate, *, batch: int = BATCH
) -> DispatchResult:
    result = DispatchResult()
    with database.transaction() as session:
        now = database_now(session)
        settings = load_settings(session)
        window = week_window(now, settings.zone)
        # Locked ones first, wherever they wait: they will never start.
        locked = queue.take_locked_waiting_runs(session, batch, window)
        ids = [run.run_id for run in locked]
        result.withdrawn = _withdrawn(locked, queue.withdraw_queued_runs(session, ids))
        runs = queue.take_dispatchable_runs(session, settings.max_concurrency, batch, window)
        startable = []
        for run in runs:
            if closed_locks(run.locks):  # closed since the look above
                removed = queue.withdraw_queued_runs(session, [run.run_id])
                result.withdrawn.extend(_withdrawn([run], removed))
            elif is_budget_exhausted(run.owner_tokens, settings.weekly_token_budget):
                if skip_queued_run(session, run.run_id, SkipReason.BUDGET_EXCEEDED, now=now):
                    result.skipped.append(run)
            else:
                startable.append(run)

        def create(run: queue.DispatchableRun) -> RunSecret | str:
            """The secret the run's Job carries, or why the Job was refused."""
            secret = RunSecret.new()
            try:
                if jobs.create(
                    build_run_job(_spec(run, settings.run_timeout_seconds, secret), template)
                ):
                    return secret
                # Made by a dispatch that never committed: its pod holds that one's secret.
                return jobs.run_secret(run.run_id) or secret
            except JobRejected as exc:
                return str(exc)

        with ThreadPoolExecutor(max_workers=PARALLEL_CREATES) as pool:
            outcomes = list(pool.map(create, startable))
        digests = {}
        for run, outcome in zip(startable, outcomes, strict=True):
            if isinstance(outcome, RunSecret):
                result.created.append(run)
                digests[run.run_id] = outcome.digest
            else:
                result.rejected = outcome
        queue.mark_dispatched(session, digests, now)
        result.executing = queue.count_executing(session)
        result.waiting = queue.count_waiting(session)
    return result
