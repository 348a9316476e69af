"""The run secret a dispatch stores is the one its run's Job carries, also when the Job was
made by a dispatch that never committed (its operator killed between creating the Job and
the commit): the next dispatch finds the Job there and stores that Job's secret's hash, so
its pod can claim the run. The cluster tier kills a real operator mid-dispatch
(tests/cluster/install/test_operator_runs.py); here the Jobs are recorded, not sent."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentRun
from achilles.domain.run_secret import RUN_SECRET_ENV, RunSecret
from achilles.domain.runs import RunTrigger
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.run_metadata import RUN_ID_LABEL
from achilles.services.dispatch import dispatch_queued_runs
from tests.db.factories import make_agent

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)


class _Namespace:
    """Jobs by run id, each with the secret its manifest carries; `create` of an existing
    one changes nothing (409), as the API server does."""

    def __init__(self) -> None:
        self.secrets: dict[int, str] = {}

    def create(self, manifest: dict[str, Any]) -> bool:
        run_id = int(manifest["metadata"]["labels"][RUN_ID_LABEL])
        if run_id in self.secrets:
            return False
        (container,) = manifest["spec"]["template"]["spec"]["containers"]
        env = {item["name"]: item.get("value") for item in container["env"]}
        self.secrets[run_id] = env[RUN_SECRET_ENV]
        return True

    def run_secret(self, run_id: int) -> RunSecret | None:
        value = self.secrets.get(run_id)
        return RunSecret(value) if value else None


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
