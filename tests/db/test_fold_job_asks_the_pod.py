"""A failed run Job ("BackoffLimitExceeded") says only that its pod failed; the pod says why.
The Job watcher and the pod watcher race to fold a run's end, and the first write wins, so
the Job's fold asks the pod first (services/outcomes.fold_job). Found by `achilles chaos`:
one SIGKILLed runner in a hundred, and a runner cut off by a PostgreSQL outage, ended with
the Job's generic message instead of the runner's exit code."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.domain.pod_outcome import ContainerObservation, JobObservation, PodObservation
from achilles.domain.runs import RunTrigger
from achilles.k8s.jobs import RunJobs
from achilles.services.outcomes import fold_job
from tests.db.factories import make_agent


class _OnePod:
    def __init__(self, pod: PodObservation) -> None:
        self.pod = pod

    def list_pods(self, run_id: int | None = None) -> list[PodObservation]:
        return [self.pod] if run_id in (None, self.pod.run_id) else []

    def delete(self, run_id: int) -> bool:
        return True


def _running_run(db: Engine) -> int:
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
        assert journal.claim_run(session, run_id)
    return run_id


def _job(run_id: int, reason: str) -> JobObservation:
    return JobObservation(
        run_id=run_id,
        name=f"achilles-run-{run_id}",
        failed_reason=reason,
        failed_message="Job has reached the specified backoff limit",
        succeeded=False,
        active_deadline_seconds=900,
    )


def _killed_pod(run_id: int) -> PodObservation:
    return PodObservation(
        run_id=run_id,
        name=f"achilles-run-{run_id}-abcde",
        phase="Failed",
        reason=None,
        message=None,
        created_at=datetime.now(UTC),
        runner=ContainerObservation(terminated_reason="Error", exit_code=137),
    )


def _error(db: Engine, run_id: int) -> str:
    with db.begin() as conn:
        row = conn.execute(
            text("SELECT state, error FROM agent_runs WHERE id = :r"), {"r": run_id}
        ).one()
    assert row.state == "failed"
    return str(row.error)


def test_a_failed_job_folds_its_pods_reason(db: Engine, database_url: str) -> None:
    run_id = _running_run(db)
    database = Database(database_url, pool_size=1)
    try:
        jobs = cast(RunJobs, _OnePod(_killed_pod(run_id)))
        failed = fold_job(database, _job(run_id, "BackoffLimitExceeded"), jobs)
    finally:
        database.dispose()
    assert failed is not None
    assert "exited with code 137" in failed.error
    assert "exited with code 137" in _error(db, run_id)


def test_without_its_pod_the_job_says_what_it_knows(db: Engine, database_url: str) -> None:
    run_id = _running_run(db)
    database = Database(database_url, pool_size=1)
    try:
        jobs = cast(RunJobs, _OnePod(_killed_pod(run_id + 1000)))
        fold_job(database, _job(run_id, "BackoffLimitExceeded"), jobs)
    finally:
        database.dispose()
    assert "BackoffLimitExceeded" in _error(db, run_id)
