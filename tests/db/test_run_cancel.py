"""Cancelling a run (issue 22, item 1; issue 36, item 3) on the real database: a queued
run with no Job ends `failed/cancelled` at once; a run with a pod holds its agent until
the pod is gone and then ends `failed/cancelled`, with the tokens it reported; a finished
one is left as it is, and a cancel racing what else may end the run (the runner's
outcome, the dispatcher; the reaper in test_reaper_holds_the_agent) ends it exactly
once. The Job side: the sweep deletes, pods first, the Job of a run cancelled behind the
operator's back (the dispatcher made it meanwhile, or the CLI cancelled), and the Job's
deletion ends it."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentRun
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import FailReason, RunState, RunTrigger
from achilles.errors import NotFound
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.run_metadata import RUN_ID_LABEL
from achilles.services import outcomes, run_cancel
from achilles.services.dispatch import dispatch_queued_runs
from tests.db.factories import make_agent, set_settings
from tests.db.logins import admin, run_pod
from tests.db.runner_support import run_row

RACES = 15
TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)


def _enqueue(db: Engine, agent_id: int) -> int:
    with Session(db) as session, session.begin():
        result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
    assert result.state is RunState.QUEUED
    return result.run_id


def _cancel(database_url: str, run_id: int, agent_id: int | None = None) -> Any:
    request = run_cancel.CancelRequest(run_id, "a test", agent_id)
    return run_cancel.cancel_run(admin(database_url), request)


def _with_secret(db: Engine, run_id: int) -> str:
    secret = RunSecret.new()
    with Session(db) as session, session.begin():
        session.execute(
            update(AgentRun).where(AgentRun.id == run_id).values(runner_secret_hash=secret.digest)
        )
    return secret.value


def test_a_queued_run_ends_cancelled_and_frees_the_agent(db: Engine, database_url: str) -> None:
    agent = make_agent(db)
    run_id = _enqueue(db, agent)
    outcome = _cancel(database_url, run_id)
    assert (outcome.cancelled, outcome.was_running, outcome.dispatched) == (True, False, False)
    row = run_row(db, run_id)
    assert (row.state, row.reason, row.tokens_used) == ("failed", "cancelled", 0)
    assert row.error == "cancelled by a test"
    assert row.finished_at is not None
    assert run_cancel.describe(outcome) == f"run {run_id} cancelled (it was queued)"
    # The one-active-run lock is released: the agent may run again.
    _enqueue(db, agent)


def test_a_second_cancel_and_a_cancel_of_a_finished_run_change_nothing(
    db: Engine, database_url: str
) -> None:
    cancelled = _enqueue(db, make_agent(db))
    _cancel(database_url, cancelled)
    before = run_row(db, cancelled)
    again = _cancel(database_url, cancelled)
    assert (again.cancelled, again.state, again.reason) == (False, "failed", "cancelled")
    assert run_row(db, cancelled) == before

    finished = _enqueue(db, make_agent(db))
    with Session(db) as session, session.begin():
        assert journal.claim_run(session, finished)
        assert journal.add_tokens(session, finished, 7)
        assert journal.succeed_run(session, finished, "done")
    before = run_row(db, finished)
    outcome = _cancel(database_url, finished)
    assert (outcome.cancelled, outcome.state, outcome.reason) == (False, "succeeded", None)
    assert run_cancel.describe(outcome) == (
        f"run {finished} had already ended (succeeded): nothing changed"
    )
    assert run_row(db, finished) == before


def test_a_request_on_an_agent_cancels_only_that_agents_runs(db: Engine, database_url: str) -> None:
    mine, theirs = make_agent(db), make_agent(db)
    run_id = _enqueue(db, theirs)
    with pytest.raises(NotFound):
        _cancel(database_url, run_id, agent_id=mine)
    assert run_row(db, run_id).state == "queued"
    with pytest.raises(NotFound):
        _cancel(database_url, run_id + 1000)


def test_a_cancelled_running_run_holds_its_agent_until_its_pod_is_gone(
    db: Engine, database_url: str
) -> None:
    """Issue 36 item 3 (seed 002: one active run, one runner alive per agent): a cancel
    asks the run's pod to stop; until the pod is gone the run stays active, so no other
    run of the agent starts beside it however many ask at once, and the tokens its
    runner reports meanwhile count. Its end, whatever the runner writes, is the cancel's."""
    agent = make_agent(db)
    run_id = _enqueue(db, agent)
    pod = run_pod(database_url, run_id, _with_secret(db, run_id))
    try:
        with pod.transaction() as session:
            assert journal.claim_run(session, run_id)
            assert journal.add_tokens(session, run_id, 40)
        outcome = _cancel(database_url, run_id)
        assert (outcome.cancelled, outcome.was_running, outcome.stopping) == (True, True, True)
        assert "its pod is being stopped" in run_cancel.describe(outcome)
        assert run_row(db, run_id).state == "running"

        # Many ask for a run of the agent at once, each on a connection of its own.
        barrier = threading.Barrier(RACES)

        def enqueue(_: int) -> str:
            engine = Database(database_url, pool_size=1)
            try:
                barrier.wait()
                with engine.transaction() as session:
                    return str(journal.enqueue_run(session, agent, RunTrigger.MANUAL).reason)
            finally:
                engine.dispose()

        with ThreadPoolExecutor(RACES) as threads:
            reasons = list(threads.map(enqueue, range(RACES)))
        assert reasons == ["already_running"] * RACES

        # The model call in flight reports its tokens; then the pod's SIGTERM writes: the
        # pod is still there, so the run stays active.
        with pod.transaction() as session:
            assert journal.record_heartbeat(session, run_id)
            assert journal.add_tokens(session, run_id, 5)
            assert journal.fail_run(
                session, run_id, FailReason.ERROR, "runner terminated by SIGTERM"
            )
        assert (run_row(db, run_id).state, run_row(db, run_id).tokens_used) == ("running", 45)
        with Session(db) as session, session.begin():
            skipped = journal.enqueue_run(session, agent, RunTrigger.MANUAL)
        assert skipped.reason == "already_running"
        # Its Job is gone, its pods before it (foreground): the run ends, the cancel's.
        operator = Database(database_url, pool_size=1)
        try:
            assert outcomes.job_gone(operator, run_id)
        finally:
            operator.dispose()
        ended = run_row(db, run_id)
        assert (ended.state, ended.reason, ended.tokens_used) == (
            "failed",
            "cancelled",
            45,
        )
        assert ended.error == "cancelled by a test"
        with pod.transaction() as session:
            assert not journal.add_tokens(session, run_id, 5)
        assert run_row(db, run_id) == ended
    finally:
        pod.dispose()
    _enqueue(db, agent)  # the pod is gone: the agent may run again


def test_a_stopping_run_whose_pod_went_silently_ends_when_its_job_is_gone(
    db: Engine, database_url: str
) -> None:
    """A pod killed before its runner wrote anything: the Job's deletion (its pods first,
    foreground) ends the run, or the sweep finds no Job."""
    agent = make_agent(db)
    operator = Database(database_url, pool_size=2)
    jobs = _Jobs()
    try:
        first, second = _enqueue(db, agent), _enqueue(db, make_agent(db))
        for run_id in (first, second):
            with Session(db) as session, session.begin():
                assert journal.claim_run(session, run_id)
                assert journal.add_tokens(session, run_id, 3)
            assert _cancel(database_url, run_id).stopping
        swept = outcomes.sweep(operator, cast(RunJobs, jobs), {first, second})
        assert sorted(swept.cancelled_jobs) == sorted([first, second])
        assert jobs.foreground == sorted([first, second])
        assert swept.cancelled == []
        assert {run_row(db, r).state for r in (first, second)} == {"running"}

        assert outcomes.job_gone(operator, first)  # the Job watcher's DELETED
        assert not outcomes.job_gone(operator, first)
        assert outcomes.sweep(operator, cast(RunJobs, jobs), set()).cancelled == [second]
        for run_id in (first, second):
            row = run_row(db, run_id)
            assert (row.state, row.reason, row.tokens_used) == ("failed", "cancelled", 3)
    finally:
        operator.dispose()


def _race(first: Callable[[], object], second: Callable[[], object]) -> tuple[Any, Any]:
    """Both at once from two threads (two connections), released together."""
    start = threading.Barrier(2)
    results: list[Any] = [None, None]
    errors: list[BaseException] = []

    def run(index: int, work: Callable[[], object]) -> None:
        try:
            start.wait()
            results[index] = work()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results[0], results[1]


def test_a_cancel_racing_the_runners_outcome_ends_the_run_once(
    db: Engine, database_url: str
) -> None:
    agent = make_agent(db)
    ended = {"succeeded": 0, "cancelled": 0}
    for _ in range(RACES):
        run_id = _enqueue(db, agent)
        pod = run_pod(database_url, run_id, _with_secret(db, run_id))
        try:
            with pod.transaction() as session:
                assert journal.claim_run(session, run_id)

            def finish(pod: Database = pod, run_id: int = run_id) -> bool:
                with pod.transaction() as session:
                    return journal.succeed_run(session, run_id, "the answer")

            succeeded, outcome = _race(finish, functools.partial(_cancel, database_url, run_id))
        finally:
            pod.dispose()
        assert succeeded
        if outcome.cancelled:  # asked to stop first: the run ends once its pod is gone
            operator = Database(database_url, pool_size=1)
            try:
                assert run_row(db, run_id).state == "running"
                assert outcomes.job_gone(operator, run_id)
            finally:
                operator.dispose()
        row = run_row(db, run_id)
        # The first decides: the answer, or the cancel.
        if outcome.cancelled:
            assert (row.state, row.reason, row.output) == ("failed", "cancelled", None)
            ended["cancelled"] += 1
        else:
            assert (row.state, row.output) == ("succeeded", "the answer")
            assert (outcome.state, outcome.reason) == ("succeeded", None)
            ended["succeeded"] += 1


class _Jobs:
    """The runs namespace as the dispatcher and the sweep use it: made and deleted Jobs."""

    def __init__(self) -> None:
        self.created: list[int] = []
        self.deleted: list[int] = []
        self.foreground: list[int] = []  # deleted after their pods

    def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
        self.created.append(int(manifest["metadata"]["labels"][RUN_ID_LABEL]))
        return True

    def delete(self, run_id: int, *, foreground: bool = False) -> bool:
        self.deleted.append(run_id)
        if foreground:
            self.foreground.append(run_id)
        return True


def test_a_run_cancelled_while_its_job_is_made_holds_its_slot_until_the_job_is_gone(
    db: Engine, database_url: str
) -> None:
    set_settings(db, agent_max_concurrency=1)
    first, waiting = _enqueue(db, make_agent(db)), _enqueue(db, make_agent(db))
    jobs = _Jobs()
    operator = Database(database_url, pool_size=2)
    try:
        # The dispatcher marked the run and made its Job; the cancel lands meanwhile.
        created = dispatch_queued_runs(operator, cast(RunJobs, jobs), TEMPLATE).created
        assert [run.run_id for run in created] == [first]
        outcome = _cancel(database_url, first)
        assert (outcome.dispatched, outcome.stopping) == (True, True)
        # Its pod may be starting: the slot stays taken under the cap of one.
        assert dispatch_queued_runs(operator, cast(RunJobs, jobs), TEMPLATE).created == []
        # The sweep finds the cancelled run's Job among those that exist and deletes it,
        # its pods first; the run ends when the Job is gone, and the slot frees.
        swept = outcomes.sweep(operator, cast(RunJobs, jobs), {first})
        assert swept.cancelled_jobs == [first]
        assert jobs.foreground == [first]
        assert run_row(db, first).state == "queued"
        assert outcomes.job_gone(operator, first)
        assert run_row(db, first).reason == "cancelled"
        created = dispatch_queued_runs(operator, cast(RunJobs, jobs), TEMPLATE).created
        assert [run.run_id for run in created] == [waiting]
    finally:
        operator.dispose()


def test_a_cancel_racing_the_dispatcher_ends_the_run_and_its_job_is_swept(
    db: Engine, database_url: str
) -> None:
    agent = make_agent(db)
    dispatcher = Database(database_url, pool_size=2)
    made = 0
    try:
        for _ in range(RACES):
            run_id = _enqueue(db, agent)
            jobs = _Jobs()
            _, outcome = _race(
                lambda: dispatch_queued_runs(dispatcher, cast(RunJobs, jobs), TEMPLATE),
                functools.partial(_cancel, database_url, run_id),
            )
            # Queued when it was cancelled, whether its Job was being made or not.
            assert (outcome.cancelled, outcome.was_running) == (True, False)
            if jobs.created:  # marked first: it holds its agent until its Job is gone
                made += 1
                assert outcome.stopping
                swept = outcomes.sweep(dispatcher, cast(RunJobs, jobs), set(jobs.created))
                assert swept.cancelled_jobs == [run_id]
                assert jobs.foreground == [run_id]
                assert outcomes.job_gone(dispatcher, run_id)
            row = run_row(db, run_id)
            assert (row.state, row.reason) == ("failed", "cancelled")
            dispatch_queued_runs(dispatcher, cast(RunJobs, jobs), TEMPLATE)
            assert run_row(db, run_id) == row  # nothing the dispatcher did changed it
    finally:
        dispatcher.dispose()
