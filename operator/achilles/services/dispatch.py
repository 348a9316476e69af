"""The dispatcher: queued runs become Jobs, FIFO, while fewer than the cap execute.

One pass, in three steps, none of which holds a transaction while it waits on the API
server (a slow API server must not stall the other replica's dispatch):

1. choose, in one short transaction under the dispatch lock (`db/journal/dispatch.py`):
   withdraw waiting runs whose agent a durable lock closed, skip those whose owner's
   budget ran out, take the oldest startable ones under the cap and mark them
   dispatched, each with the hash of a fresh run secret. The mark commits before any
   Job exists, so a pod can always claim, and the cap counts the runs at once;
2. create their Jobs, `PARALLEL_CREATES` at a time, no transaction open (while the
   last of them are made, the next batch is chosen and queued behind them), each followed
   by its run Secret (owned by the Job: its pod reads the run secret from it; the Job
   carries only the secret's hash, `k8s/jobs.py`). The Job name is the run's:
   AlreadyExists is a Job from an earlier dispatch, whose secret's hash (the Job's
   annotation) the row then takes (a short transaction), so that Job's pod can claim;
3. undo, in another short transaction, the marks of the runs whose Job the API server
   refused (quota, admission, overload, unreachable), or whose Secret it refused (the
   Job then deleted): back to waiting, FIFO place kept, unless the row moved on
   meanwhile (guarded by the hash it was marked with). A create that may have reached
   the API server (a timeout) keeps its mark: its pod may start, and if no Job appeared
   the sweeper's missing-Job repair (`services/outcomes.py`) requeues the run after
   `MISSING_JOB_GRACE`, as it does for a dispatcher that died between steps 1 and 2;
   a Job whose Secret never came (the dispatcher died between the two creates) gets
   one from the sweeper after `RUN_SECRET_GRACE`.

Creates start no later than `CREATE_DEADLINE` after their step 1 and give up after
`CREATE_TIMEOUT`, so a run's Job exists, if it ever will, well before the sweeper may
call it missing; runs whose create was not started by then are undone as in step 3.

The start gates are checked again in step 1, since a run may wait behind the cap, and
last by the run's claim (`achilles_claim_run`), since a lock may close after its Job was
made:
- a durable lock closed meanwhile (disabled, paused, model withdrawn, owner
  deactivated), found on every pass wherever the run waits: the run never started and
  a closed lock leaves no row (seed 000), so its row is removed, as if the request had
  been refused at once (`withdrawn`);
- its owner's weekly budget ran out meanwhile, when its turn comes: it ends
  `skipped/budget_exceeded` with no tokens, as the same request at enqueue would have
  (`skipped`). The seed's small
  overrun is for runs already running, not for runs that have not started;
- a durable lock closed after the Job was made: the claim removes the run and records
  why (`run_start_refusals`); step 1 reports it as a withdrawn run and the pass
  deletes its Job (its pod exits without running anything). The budget run out by then
  the claim ends `skipped/budget_exceeded` itself, as here.

One gate is not the journal's: a run's row ends before its pod does (the runner writes
its end, then exits, and the kubelet reports it later; a cancelled or reaped run's pod
is being stopped), and seed 002's one active run is one runner alive per agent. So an
agent whose last run's pod is still there, as the pod watcher sees it, waits in step 1
until that pod is gone (the watcher wakes the dispatcher), or `STOP_GRACE` after that
run ended (a pod a lost node never reports gone is a zombie that locks nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Set
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import Enum

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal import dispatched
from achilles.db.journal.dispatch import DispatchableRun as DispatchableRun
from achilles.db.journal.runs import skip_queued_run
from achilles.db.journal.settings import database_now, load_settings
from achilles.domain.agent_status import refusal_message
from achilles.domain.budget import week_window
from achilles.domain.gates import closed_locks, is_budget_exhausted
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import STOP_GRACE, SkipReason
from achilles.k8s.jobs import (
    JobRejected,
    JobTemplate,
    RunJobs,
    RunJobSpec,
    SecretKey,
    build_run_job,
)
from achilles.k8s.run_metadata import job_name
from achilles.telemetry.spans import NO_SPANS, Spans

BATCH = 200
# Runs whose creates are in flight at once. A run's are two in a row (its Job, then its
# Secret, which the Job owns): with 8 threads a burst made runs at half the rate of 8
# threads creating Jobs alone, the API server busy 0.82 cores against their 1.06 and the
# operator 0.46 (`achilles bench burst-vs-cronjob`): waiting on round trips, not on CPU.
PARALLEL_CREATES = 16
# The next batch is chosen when this many creates of the pass are left: enough
# to keep the create threads busy while the choice's transaction runs.
REFILL_AT = 4 * PARALLEL_CREATES
# A pass chooses again for this long at most, then ends with its creates (its Events,
# metrics and the status writer's turn come at a pass's end).
CHOOSE_FOR = 5.0
# No create starts later than this after its run was chosen (see the module's note):
# with the create's own timeout (k8s/jobs.py) it stays well inside the sweeper's grace.
CREATE_DEADLINE = 10.0


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
    # Of `withdrawn`, the runs their claim removed (a lock closed after the Job was
    # made): their Jobs were deleted by the pass.
    refused_at_claim: list[int] = field(default_factory=list)
    skipped: list[queue.DispatchableRun] = field(default_factory=list)  # budget_exceeded
    # Agents whose waiting runs were left for a later pass: an earlier run's pod is still
    # there (seed 002: one runner alive per agent; the pod watcher wakes the dispatcher
    # when it goes).
    held_agents: set[int] = field(default_factory=set)
    rejected: str | None = None
    executing: int = 0
    waiting: int = 0

    @property
    def progressed(self) -> bool:
        """Some waiting runs left the queue (more may wait for the next pass at once)."""
        return bool(self.created or self.withdrawn or self.skipped)


def _spec(
    run: queue.DispatchableRun, timeout: int, run_secret: RunSecret, traceparent: str | None
) -> RunJobSpec:
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
        traceparent=traceparent,
        # The agent's MCP credentials: by Secret reference, only for the sources it is
        # allowed (issue 38); never in the prompt, a step or a log line.
        secret_env=tuple(
            (header.env, SecretKey(header.secret_name, header.secret_key))
            for header in run.mcp_headers
        ),
    )


def _withdrawn(runs: list[queue.DispatchableRun], removed: list[int]) -> list[WithdrawnRun]:
    """The `runs` whose rows were removed, each with why (their closed locks)."""
    return [
        WithdrawnRun(run, refusal_message(closed_locks(run.locks)))
        for run in runs
        if run.run_id in set(removed)
    ]


@dataclass(frozen=True)
class _Marked:
    """A run marked dispatched in step 1, with the secret its Job is to carry, its Job's
    run timeout, and when it was chosen (its create starts within CREATE_DEADLINE)."""

    run: queue.DispatchableRun
    secret: RunSecret
    timeout: int
    chosen_at: float


class _Outcome(Enum):
    CREATED = "created"  # the Job exists and the row holds its secret's hash
    REFUSED = "refused"  # no Job: undo the mark
    UNKNOWN = "unknown"  # the Job may exist: keep the mark, the sweeper decides
    LATE = "late"  # not tried before CREATE_DEADLINE: undo the mark


def dispatch_queued_runs(
    database: Database,
    jobs: RunJobs,
    template: JobTemplate,
    *,
    batch: int = BATCH,
    spans: Spans = NO_SPANS,
    pod_view: Callable[[], Set[int] | None] = lambda: None,
) -> DispatchResult:
    """One pass (see the module's note). Each Job's create is a `dispatch` span, the root
    of its run's trace: the Job carries it (`TRACEPARENT`) to the runner.

    The creates of a batch run on `PARALLEL_CREATES` threads; when at most `REFILL_AT`
    of them are left, the next batch is chosen and queued behind them, so the
    threads never wait for a batch's slowest create or for the next choice (a burst of
    due runs is bound by the API server's creates, not by the passes). The pass stops
    choosing when a choice was not a full batch, a create was refused, or after
    `CHOOSE_FOR`; it ends when its creates have.

    `pod_view`: the runs whose pod is still there, as the pod watcher knows them (None
    while it does not know yet), read afresh for each choice: an agent one of them ended
    recently waits for that pod (seed 002 counts runner pods, not rows:
    `queue.agents_with_lingering_pods`); while it does not know, every agent whose run
    ended within the grace waits (until the watcher's listing, which wakes the
    dispatcher)."""
    began = time.monotonic()
    result = DispatchResult()
    created: list[tuple[_Marked, Future[tuple[_Outcome, str | None]]]] = []

    def create(mark: _Marked) -> tuple[_Outcome, str | None]:
        if time.monotonic() - mark.chosen_at > CREATE_DEADLINE:
            return _Outcome.LATE, None
        with spans.span("dispatch", _span_attributes(mark.run)) as span:
            outcome, why = _create(mark, span.traceparent)
            span.set_attribute("achilles.dispatch.outcome", outcome.value)
        return outcome, why

    def _create(mark: _Marked, traceparent: str | None) -> tuple[_Outcome, str | None]:
        spec = _spec(mark.run, mark.timeout, mark.secret, traceparent)
        try:
            if jobs.create(build_run_job(spec, template), mark.secret):
                return _Outcome.CREATED, None
            return _adopt_existing_job(database, jobs, mark), None
        except JobRejected as exc:
            return (_Outcome.UNKNOWN if exc.maybe_created else _Outcome.REFUSED), str(exc)

    def refused_so_far() -> bool:
        return any(f.done() and f.result()[1] is not None for _, f in created)

    with ThreadPoolExecutor(max_workers=PARALLEL_CREATES) as pool:
        while True:
            chose = _choose(database, batch, result, pod_view())
            for run_id in chose.refused_at_claim:
                jobs.delete(run_id)  # its pod exits without running: nothing else may start it
            created.extend((mark, pool.submit(create, mark)) for mark in chose.marked)
            if not chose.full or time.monotonic() - began > CHOOSE_FOR:
                break
            if created:  # choose again when REFILL_AT creates are left (a few: the first made)
                wait([created[max(len(created) - REFILL_AT, 0)][1]])
            if refused_so_far():
                break
    undo: dict[int, bytes] = {}
    for mark, future in created:
        outcome, why = future.result()
        if outcome is _Outcome.CREATED:
            result.created.append(mark.run)
        elif outcome is not _Outcome.UNKNOWN:
            undo[mark.run.run_id] = mark.secret.digest
        if why is not None:
            result.rejected = why
    if undo:
        with database.transaction() as session:
            undone = len(dispatched.undo_dispatch(session, undo))
        result.executing -= undone
        result.waiting += undone
    return result


def _span_attributes(run: queue.DispatchableRun) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {
        "achilles.run.id": run.run_id,
        "achilles.run.trigger": run.trigger,
        "achilles.agent.id": run.agent_id,
        "k8s.job.name": job_name(run.run_id),
    }
    if run.agent_name:
        attributes["gen_ai.agent.name"] = run.agent_name
    if run.agent_namespace:
        attributes["achilles.agent.namespace"] = run.agent_namespace
    return attributes


@dataclass(frozen=True)
class _Choice:
    marked: list[_Marked]
    refused_at_claim: list[int]
    # As many startable runs as the batch: more may wait behind them.
    full: bool


def _choose(
    database: Database, batch: int, result: DispatchResult, pod_run_ids: Set[int] | None
) -> _Choice:
    """Step 1, in one transaction under the dispatch lock: the runs marked dispatched,
    each with its secret and its Job's run timeout; the withdrawn and skipped ones, the
    held agents and the queue's counts go into `result`."""
    chosen_at = time.monotonic()
    with database.transaction() as session:
        now = database_now(session)
        settings = load_settings(session)
        window = week_window(now, settings.zone)
        timeout = settings.run_timeout_seconds
        # Refused at their claim: removed already, told here.
        refused = queue.take_start_refusals(session, batch)
        withdrawn = [WithdrawnRun(run, refusal_message(closed_locks(run.locks))) for run in refused]
        # Locked ones first, wherever they wait: they will never start.
        locked = queue.take_locked_waiting_runs(session, batch, window)
        ids = [run.run_id for run in locked]
        withdrawn.extend(_withdrawn(locked, queue.withdraw_queued_runs(session, ids)))
        held = queue.agents_with_lingering_pods(session, pod_run_ids, ended_after=now - STOP_GRACE)
        runs = queue.take_dispatchable_runs(
            session, settings.max_concurrency, batch, window, held_agents=held
        )
        marked = []
        skipped = []
        for run in runs:
            if closed_locks(run.locks):  # closed since the look above
                removed = queue.withdraw_queued_runs(session, [run.run_id])
                withdrawn.extend(_withdrawn([run], removed))
            elif is_budget_exhausted(run.owner_tokens, settings.weekly_token_budget):
                if skip_queued_run(session, run.run_id, SkipReason.BUDGET_EXCEEDED, now=now):
                    skipped.append(run)
            else:
                marked.append(_Marked(run, RunSecret.new(), timeout, chosen_at))
        queue.mark_dispatched(session, {m.run.run_id: m.secret.digest for m in marked}, now)
        result.executing = queue.count_executing(session)
        result.waiting = queue.count_waiting(session)
    result.refused_at_claim.extend(run.run_id for run in refused)
    result.withdrawn.extend(withdrawn)
    result.skipped.extend(skipped)
    result.held_agents = held
    return _Choice(marked, [run.run_id for run in refused], bool(marked or withdrawn or skipped))


def _adopt_existing_job(database: Database, jobs: RunJobs, mark: _Marked) -> _Outcome:
    """The run's Job already existed (AlreadyExists): an earlier dispatch made it, with
    its own secret, which its pod reads from the run's Secret. The row takes that
    secret's hash (the Job's annotation: the operator does not read Secrets)."""
    found = jobs.run_secret_digest(mark.run.run_id)
    if found is None or found == mark.secret.digest:
        return _Outcome.CREATED  # a Job with no secret: nothing its pod could claim with
    with database.transaction() as session:
        adopted = dispatched.adopt_job_secret(session, mark.run.run_id, mark.secret.digest, found)
    # Not adopted: the row moved on (the sweeper released it); the next pass finds the
    # Job again.
    return _Outcome.CREATED if adopted else _Outcome.REFUSED
