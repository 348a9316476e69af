"""Folding what the watchers see costs transactions by what it may write, not by how many
pods and Jobs are kept (services/outcomes.fold_pods / fold_jobs, issue 20): a listing's
page is folded in one transaction, objects that can give no verdict cost none, and the
rows of runs that ended are never written again. Transactions are counted at the
Database's own engine (every BEGIN it sends), on the real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.domain.pod_outcome import ContainerObservation, JobObservation, PodObservation
from achilles.domain.runs import RunTrigger
from achilles.k8s.jobs import RunJobs
from achilles.services import outcomes
from tests.db.factories import make_agent


class _Deletions:
    def __init__(self) -> None:
        self.deleted: list[int] = []

    def delete(self, run_id: int) -> bool:
        self.deleted.append(run_id)
        return True

    def list_pods(self, run_id: int | None = None) -> list[PodObservation]:
        return []  # the failed Job's pod is gone: the Job's own verdict is written


@contextmanager
def _counted(database: Database) -> Iterator[list[int]]:
    """The number of transactions `database` begins inside the block (in `[0]`)."""
    begun = [0]

    def on_begin(connection: Any) -> None:
        begun[0] += 1

    event.listen(database.engine, "begin", on_begin)
    try:
        yield begun
    finally:
        event.remove(database.engine, "begin", on_begin)


def _pod(run_id: int, phase: str, exit_code: int | None = None, **extra: Any) -> PodObservation:
    runner = None
    if exit_code is not None:
        runner = ContainerObservation(terminated_reason="Completed", exit_code=exit_code)
    return PodObservation(
        run_id=run_id,
        name=f"achilles-run-{run_id}-{phase.lower()}",
        phase=phase,
        reason=None,
        message=None,
        created_at=datetime.now(UTC),
        runner=runner,
        **extra,
    )


def _job(run_id: int, failed_reason: str | None = None) -> JobObservation:
    return JobObservation(
        run_id=run_id,
        name=f"achilles-run-{run_id}",
        failed_reason=failed_reason,
        failed_message="Job has reached the specified backoff limit" if failed_reason else None,
        succeeded=failed_reason is None,
        active_deadline_seconds=900,
    )


def _runs(db: Engine, count: int, *, claimed: bool, finished: bool = False) -> list[int]:
    ids = []
    with Session(db) as session, session.begin():
        for _ in range(count):
            run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
            if claimed:
                assert journal.claim_run(session, run_id)
            if finished:
                assert journal.succeed_run(session, run_id, "done")
            ids.append(run_id)
    return ids


def _states(db: Engine, run_ids: list[int]) -> dict[int, str]:
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT id, state FROM agent_runs WHERE id = ANY(:ids)"), {"ids": run_ids}
        )
        return {row.id: row.state for row in rows}


def test_a_listing_page_is_folded_in_one_transaction(db: Engine, database_url: str) -> None:
    """A page of a restart's listing: the pods of runs that ended (most of any page), pods
    running, one that crashed under a running run and one that exited under a run no
    runner claimed. One transaction; only the two live runs are written."""
    ended = _runs(db, 40, claimed=True, finished=True)
    (running,) = _runs(db, 1, claimed=True)
    (unclaimed,) = _runs(db, 1, claimed=False)
    live = _runs(db, 5, claimed=True)
    page = [
        *(_pod(run_id, "Succeeded", 0) for run_id in ended),
        *(_pod(run_id, "Running") for run_id in live),
        _pod(running, "Failed", 3),
        _pod(unclaimed, "Succeeded", 0),
    ]
    database = Database(database_url, pool_size=1)
    try:
        with _counted(database) as begun:
            folded = outcomes.fold_pods(database, cast(RunJobs, _Deletions()), page)
        assert begun[0] == 1
        assert sorted(run.run_id for run in folded.failed) == sorted([running, unclaimed])
        # Every pod that gave a verdict is judged for good; the running ones are not.
        assert folded.settled == {pod.name for pod in page if pod.phase != "Running"}
        with _counted(database) as begun:  # the same page again: nothing more to write
            again = outcomes.fold_pods(database, cast(RunJobs, _Deletions()), page)
        assert begun[0] == 1
        assert again.failed == []
    finally:
        database.dispose()
    states = _states(db, [*ended, running, unclaimed, *live])
    assert {states[run_id] for run_id in ended} == {"succeeded"}
    assert {states[run_id] for run_id in live} == {"running"}
    assert (states[running], states[unclaimed]) == ("failed", "failed")


def test_pods_and_jobs_that_can_give_no_verdict_cost_no_transaction(
    db: Engine, database_url: str
) -> None:
    """A running pod and Jobs that did not fail cost nothing; a pod waiting in
    ContainerCreating may fail (at the start deadline), so it is judged."""
    runs = _runs(db, 3, claimed=True)
    pods = [
        _pod(runs[0], "Running"),
        PodObservation(
            run_id=runs[1],
            name="achilles-run-pending",
            phase="Pending",
            reason=None,
            message=None,
            created_at=datetime.now(UTC) - timedelta(hours=1),
            runner=ContainerObservation(waiting_reason="ContainerCreating"),
        ),
    ]
    database = Database(database_url, pool_size=1)
    try:
        with _counted(database) as begun:
            folded_pods = outcomes.fold_pods(database, cast(RunJobs, _Deletions()), pods[:1])
            folded_jobs = outcomes.fold_jobs(
                database, cast(RunJobs, _Deletions()), [_job(run_id) for run_id in runs]
            )
        assert begun[0] == 0
        assert (folded_pods.failed, folded_pods.settled) == ([], set())
        assert (folded_jobs.failed, folded_jobs.settled) == ([], set())
        # ContainerCreating past the start deadline may fail: that one is judged.
        with _counted(database) as begun:
            folded = outcomes.fold_pods(database, cast(RunJobs, _Deletions()), pods[1:])
        assert begun[0] == 1
        assert [run.run_id for run in folded.failed] == [runs[1]]
    finally:
        database.dispose()


def test_failed_jobs_of_ended_runs_cost_one_read_and_no_write(
    db: Engine, database_url: str
) -> None:
    """A listing of failed Jobs whose runs already ended (folded before a restart): one
    transaction reads their rows, none is written; a failed Job of a live run is folded."""
    ended = _runs(db, 20, claimed=True, finished=True)
    (live,) = _runs(db, 1, claimed=True)
    page = [_job(run_id, "BackoffLimitExceeded") for run_id in [*ended, live]]
    database = Database(database_url, pool_size=1)
    try:
        with _counted(database) as begun:
            folded = outcomes.fold_jobs(database, cast(RunJobs, _Deletions()), page)
        # One read of the rows, then the live run's fold (its pod gone: the Job's verdict).
        assert begun[0] == 2
        assert [run.run_id for run in folded.failed] == [live]
        assert folded.settled == {job.name for job in page}
    finally:
        database.dispose()
    states = _states(db, [*ended, live])
    assert {states[run_id] for run_id in ended} == {"succeeded"}
    assert states[live] == "failed"
