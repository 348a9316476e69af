"""The run secret a dispatch stores is the one its run's Job's pod reads (from the run's
Secret), also when the Job was made by a dispatch whose mark is gone: the next dispatch
finds the Job there and stores the hash that Job carries, so its pod can claim the run.
The cluster tier kills a real operator mid-dispatch
(tests/cluster/install/test_operator_runs.py) and makes real Jobs and Secrets
(tests/cluster/test_run_secret.py); here the Jobs are recorded, not sent."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from sqlalchemy import Engine, text, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentRun
from achilles.domain.pod_outcome import RUN_SECRET_GRACE, ContainerObservation, PodObservation
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import RunTrigger
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.run_metadata import RUN_ID_LABEL, RUN_SECRET_DIGEST_ANNOTATION
from achilles.services.dispatch import dispatch_queued_runs
from achilles.services.outcomes import give_missing_run_secrets
from tests.db.factories import make_agent
from tests.db.logins import run_pod
from tests.waiting import wait_for

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)


class _Namespace:
    """Jobs by run id, each with the secret its run Secret holds; `create` of an existing
    one changes nothing (409), as the API server does."""

    def __init__(self) -> None:
        self.secrets: dict[int, str] = {}
        self.without_secret: set[int] = set()  # Jobs whose Secret never came

    def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
        run_id = int(manifest["metadata"]["labels"][RUN_ID_LABEL])
        if run_id in self.secrets or run_id in self.without_secret:
            return False
        digest = manifest["metadata"]["annotations"][RUN_SECRET_DIGEST_ANNOTATION]
        assert digest == secret.digest.hex()  # the Job's hash is its Secret's
        self.secrets[run_id] = secret.value
        return True

    def run_secret_digest(self, run_id: int) -> bytes | None:
        value = self.secrets.get(run_id)
        return RunSecret(value).digest if value else None

    def give_run_secret(self, run_id: int, secret: RunSecret) -> bool:
        if run_id not in self.without_secret:
            return False  # no Job, or its Secret exists
        self.without_secret.discard(run_id)
        self.secrets[run_id] = secret.value
        return True


def _stored_hash(db: Engine, run_id: int) -> bytes | None:
    with Session(db) as session:
        row = session.get(AgentRun, run_id)
        assert row is not None
        return row.runner_secret_hash


def test_the_stored_hash_is_the_secret_of_the_job_that_exists(
    db: Engine, database_url: str
) -> None:
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
    namespace = _Namespace()
    # A dispatch made the Job, then its operator died before the commit: no hash stored.
    namespace.secrets[run_id] = RunSecret.new().value
    database = Database(database_url, pool_size=1)
    try:
        done = dispatch_queued_runs(database, cast(RunJobs, namespace), TEMPLATE)
    finally:
        database.dispose()
    assert [run.run_id for run in done.created] == [run_id]
    assert _stored_hash(db, run_id) == RunSecret(namespace.secrets[run_id]).digest


def test_a_new_job_gets_a_fresh_secret_and_its_hash(db: Engine, database_url: str) -> None:
    with Session(db) as session, session.begin():
        first = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
        second = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
    namespace = _Namespace()
    database = Database(database_url, pool_size=1)
    try:
        dispatch_queued_runs(database, cast(RunJobs, namespace), TEMPLATE)
    finally:
        database.dispose()
    assert namespace.secrets[first] != namespace.secrets[second]
    for run_id in (first, second):
        assert _stored_hash(db, run_id) == RunSecret(namespace.secrets[run_id]).digest


class _Killed(Exception):
    pass


class _DiesAfterTheJob(_Namespace):
    """The operator dies between creating the Job and its run Secret."""

    def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
        self.without_secret.add(int(manifest["metadata"]["labels"][RUN_ID_LABEL]))
        raise _Killed


def _waiting_pod(run_id: int) -> PodObservation:
    """The run's pod as the kubelet reports it while its run Secret is missing."""
    return PodObservation(
        run_id=run_id,
        name=f"achilles-run-{run_id}-x7k2p",
        phase="Pending",
        reason=None,
        message=None,
        created_at=datetime.now(UTC),
        runner=ContainerObservation(
            waiting_reason="CreateContainerConfigError",
            waiting_message=f'secret "achilles-run-{run_id}" not found',
        ),
        waiting_for_run_secret=True,
    )


def _claims(database_url: str, run_id: int, secret: str) -> bool:
    """What the run's pod does first: claim as the runner's login with its secret."""
    pod = run_pod(database_url, run_id, secret)
    try:
        with pod.transaction() as session:
            return journal.claim_run(session, run_id)
    finally:
        pod.dispose()


def _dispatched_long_ago(db: Engine, run_id: int) -> None:
    """The dispatch is older than RUN_SECRET_GRACE (its instant moved back)."""
    with Session(db) as session, session.begin():
        seconds = RUN_SECRET_GRACE.total_seconds() + 1
        session.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id)
            .values(dispatched_at=text(f"now() - interval '{seconds} seconds'"))
        )


def _died_after_the_job(db: Engine, database: Database) -> tuple[int, _Namespace]:
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
    dying = _DiesAfterTheJob()
    with pytest.raises(_Killed):
        dispatch_queued_runs(database, cast(RunJobs, dying), TEMPLATE)
    assert dying.without_secret == {run_id}
    namespace = _Namespace()
    namespace.without_secret = dying.without_secret
    return run_id, namespace


def test_a_job_whose_secret_never_came_gets_one_from_the_sweeper(
    db: Engine, database_url: str
) -> None:
    """Issue 37 item 2: the dispatcher died between the Job and its run Secret. Within
    the grace nothing is made (a dispatch pass may still be making it); after it the
    sweeper makes a Secret, the row holds its hash first, and the pod claims with it."""
    database = Database(database_url, pool_size=1)
    try:
        run_id, namespace = _died_after_the_job(db, database)
        marked = _stored_hash(db, run_id)
        jobs = cast(RunJobs, namespace)
        assert give_missing_run_secrets(database, jobs, [_waiting_pod(run_id)]) == []
        assert namespace.without_secret == {run_id}

        _dispatched_long_ago(db, run_id)
        assert give_missing_run_secrets(database, jobs, [_waiting_pod(run_id)]) == [run_id]
        given = namespace.secrets[run_id]
        assert _stored_hash(db, run_id) == RunSecret(given).digest != marked
        assert _claims(database_url, run_id, given)
        # Claimed: nothing more to make, whatever a stale pod status still says.
        assert give_missing_run_secrets(database, jobs, [_waiting_pod(run_id)]) == []
    finally:
        database.dispose()


def test_a_secret_found_there_leaves_the_row_on_the_dispatchers_hash(
    db: Engine, database_url: str
) -> None:
    """The sweeper's Secret is refused as already there (the dispatcher's create landed
    late): the row gets its old hash back, the one the dispatcher's Secret holds."""
    database = Database(database_url, pool_size=1)
    try:
        run_id, namespace = _died_after_the_job(db, database)
        marked = _stored_hash(db, run_id)
        namespace.without_secret.clear()  # its Secret exists, with a value not ours
        _dispatched_long_ago(db, run_id)
        pods = [_waiting_pod(run_id)]
        assert give_missing_run_secrets(database, cast(RunJobs, namespace), pods) == []
        assert _stored_hash(db, run_id) == marked
    finally:
        database.dispose()


def test_a_pod_that_claims_while_the_sweeper_makes_its_secret_waits_and_claims(
    db: Engine, database_url: str
) -> None:
    """The Secret exists before the sweeper's transaction commits the new hash: a pod
    that starts right then claims after the commit (its claim locks the row first), so
    it never meets the old hash."""
    database = Database(database_url, pool_size=1)
    claims: list[Future[bool]] = []

    class _PodStartsAtOnce(_Namespace):
        def give_run_secret(self, run_id: int, secret: RunSecret) -> bool:
            made = super().give_run_secret(run_id, secret)
            claims.append(pool.submit(_claims, database_url, run_id, secret.value))
            wait_for(lambda: _waiting_for_a_lock(db), 10, what="the pod's claim to wait")
            return made

    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            run_id, namespace = _died_after_the_job(db, database)
            starting = _PodStartsAtOnce()
            starting.without_secret = namespace.without_secret
            _dispatched_long_ago(db, run_id)
            jobs = cast(RunJobs, starting)
            assert give_missing_run_secrets(database, jobs, [_waiting_pod(run_id)]) == [run_id]
            (claim,) = claims
            assert claim.result(timeout=10) is True
        assert _stored_hash(db, run_id) == RunSecret(starting.secrets[run_id]).digest
    finally:
        database.dispose()


def _waiting_for_a_lock(db: Engine) -> bool:
    with db.connect() as conn:
        waiting = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
        return bool(waiting.scalar_one())
