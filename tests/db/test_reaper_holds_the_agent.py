"""The reaper and seed 002's one runner alive per agent (0021), on the real database.

A silent runner is not always a dead one (a frozen process, a node cut off): the fault
suite's invariant monitor saw the reaper end a frozen run `failed/stale` at once, which
freed its agent while the frozen pod was still there, so the agent's next run started
beside it. Now a silent run whose Job exists is asked to stop: it holds its agent (no
other run of it starts, however many ask at once) and the tokens its runner reports
meanwhile count, its Job is deleted with its pods, and it ends `failed/stale` when the
Job is gone. A silent run with no Job ends at once, and one whose pod is never seen gone
ends at the stop deadline (a zombie does not lock its agent for ever). A cancel and the
reaper racing for one run: whichever asked first gives the end its reason, once."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentRun
from achilles.db.journal.settings import database_now, database_started_at
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import STOP_GRACE, FailReason, RunState, RunTrigger
from achilles.k8s.jobs import RunJobs
from achilles.services import outcomes, run_cancel
from tests.db.factories import make_agent
from tests.db.logins import admin, run_pod
from tests.db.runner_support import run_row

RACES = 12
SILENT = timedelta(minutes=10)


def _threshold(db: Engine) -> timedelta:
    """The reaper's threshold here: the sweep counts silence only once the database has
    been up that long (test_reaper_database_restart), and the tier's server is young."""
    with Session(db) as session:
        return (database_now(session) - database_started_at(session)) / 2


class _Jobs:
    """The runs namespace as the sweep uses it: the Jobs it deletes, and how."""

    def __init__(self) -> None:
        self.deleted: list[tuple[int, bool]] = []

    def delete(self, run_id: int, *, foreground: bool = False) -> bool:
        self.deleted.append((run_id, foreground))
        return True


def _silent_running_run(db: Engine, agent_id: int) -> tuple[int, str]:
    """A run its runner claimed, reported 40 tokens in, then went silent; its secret."""
    secret = RunSecret.new()
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id
        assert journal.claim_run(session, run_id)
        assert journal.add_tokens(session, run_id, 40)
        session.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id)
            .values(runner_secret_hash=secret.digest, heartbeat_at=AgentRun.heartbeat_at - SILENT)
        )
    return run_id, secret.value


def _parallel_requests(database_url: str, agent_id: int) -> list[str]:
    """RACES manual requests for the agent at once, each on a connection of its own."""
    barrier = threading.Barrier(RACES)

    def enqueue(_: int) -> str:
        engine = Database(database_url, pool_size=1)
        try:
            barrier.wait()
            with engine.transaction() as session:
                result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
                return str(result.reason or result.state)
        finally:
            engine.dispose()

    with ThreadPoolExecutor(RACES) as threads:
        return list(threads.map(enqueue, range(RACES)))


def test_a_silent_run_with_a_pod_holds_its_agent_until_the_pod_is_gone(
    db: Engine, database_url: str
) -> None:
    agent = make_agent(db)
    run_id, secret = _silent_running_run(db, agent)
    operator = Database(database_url, pool_size=2)
    pod = run_pod(database_url, run_id, secret)
    jobs = _Jobs()
    try:
        swept = outcomes.sweep(operator, cast(RunJobs, jobs), {run_id}, stale_after=_threshold(db))
        assert swept.reaped == [run_id]
        # Its Job goes with its pods first (foreground): the Job's deletion says they are.
        assert jobs.deleted == [(run_id, True)]
        assert run_row(db, run_id).state == "running"
        assert _parallel_requests(database_url, agent) == ["already_running"] * RACES

        # Thawed before its node killed it: it reports the tokens of the call in flight,
        # and its own end keeps the run active while its pod is there.
        with pod.transaction() as session:
            assert journal.add_tokens(session, run_id, 5)
            assert journal.succeed_run(session, run_id, "a late answer")
        assert (run_row(db, run_id).state, run_row(db, run_id).tokens_used) == ("running", 45)
        # A second pass asks nothing again and deletes the Job again (it still exists).
        again = outcomes.sweep(operator, cast(RunJobs, jobs), {run_id}, stale_after=_threshold(db))
        assert (again.reaped, again.cancelled, again.overdue) == ([], [], [])

        assert outcomes.job_gone(operator, run_id)  # the Job watcher's DELETED
        ended = run_row(db, run_id)
        assert (ended.state, ended.reason, ended.tokens_used) == ("failed", "stale", 45)
        assert ended.error is not None
        assert ended.error.startswith("no heartbeat for more than")
        with pod.transaction() as session:
            assert not journal.add_tokens(session, run_id, 5)
        assert run_row(db, run_id) == ended
        # The pod is gone: the agent runs again.
        assert sorted(_parallel_requests(database_url, agent)) == sorted(
            ["queued"] + ["already_running"] * (RACES - 1)
        )
    finally:
        pod.dispose()
        operator.dispose()


def test_a_silent_run_without_a_job_ends_stale_at_once(db: Engine, database_url: str) -> None:
    agent = make_agent(db)
    run_id, _ = _silent_running_run(db, agent)
    operator = Database(database_url, pool_size=1)
    jobs = _Jobs()
    try:
        swept = outcomes.sweep(operator, cast(RunJobs, jobs), set(), stale_after=_threshold(db))
    finally:
        operator.dispose()
    assert swept.reaped == [run_id]
    assert jobs.deleted == []  # no Job, no pod to wait for
    row = run_row(db, run_id)
    assert (row.state, row.reason, row.tokens_used) == ("failed", "stale", 40)
    with Session(db) as session, session.begin():
        assert journal.enqueue_run(session, agent, RunTrigger.MANUAL).state is RunState.QUEUED


def test_a_stop_whose_pod_is_never_seen_gone_ends_at_the_deadline(
    db: Engine, database_url: str
) -> None:
    """A node that no longer answers never confirms its pod gone: the run ends
    `STOP_GRACE` past the reaper's threshold anyway, so a zombie does not lock its agent
    for ever (seed 002); a run asked to stop more recently waits on."""
    agent, other = make_agent(db), make_agent(db)
    overdue, _ = _silent_running_run(db, agent)
    recent, _ = _silent_running_run(db, other)
    operator = Database(database_url, pool_size=1)
    jobs = _Jobs()
    try:
        assert sorted(
            outcomes.sweep(
                operator, cast(RunJobs, jobs), {overdue, recent}, stale_after=_threshold(db)
            ).reaped
        ) == [
            overdue,
            recent,
        ]
        late = STOP_GRACE + SILENT
        with Session(db) as session, session.begin():
            session.execute(
                update(AgentRun)
                .where(AgentRun.id == overdue)
                .values(stop_requested_at=AgentRun.stop_requested_at - late)
            )
        swept = outcomes.sweep(
            operator, cast(RunJobs, jobs), {overdue, recent}, stale_after=_threshold(db)
        )
    finally:
        operator.dispose()
    assert swept.overdue == [overdue]
    row = run_row(db, overdue)
    assert (row.state, row.reason, row.tokens_used) == ("failed", "stale", 40)
    assert run_row(db, recent).state == "running"


def test_a_cancel_racing_the_reaper_ends_the_run_once_with_the_first_ones_reason(
    db: Engine, database_url: str
) -> None:
    agent = make_agent(db)
    reaper = Database(database_url, pool_size=1)
    operator = Database(database_url, pool_size=1)
    try:
        for _ in range(RACES):
            run_id, _ = _silent_running_run(db, agent)
            start = threading.Barrier(2)

            def reap() -> list[int]:
                start.wait()
                with reaper.transaction() as session:
                    return [r.run_id for r in journal.reap_stale_runs(session)]

            def cancel(run_id: int) -> Any:
                start.wait()
                return run_cancel.cancel_run(
                    admin(database_url), run_cancel.CancelRequest(run_id, "a test", None)
                )

            with ThreadPoolExecutor(2) as threads:
                reaped_f = threads.submit(reap)
                cancel_f = threads.submit(functools.partial(cancel, run_id))
                reaped, outcome = reaped_f.result(), cancel_f.result()
            # Exactly one of them asked the run to stop; both left it running for its pod.
            assert (run_id in reaped) != outcome.cancelled
            assert run_row(db, run_id).state == "running"
            assert outcomes.job_gone(operator, run_id)
            row = run_row(db, run_id)
            expected = FailReason.CANCELLED if outcome.cancelled else FailReason.STALE
            assert (row.state, row.reason) == ("failed", expected)
    finally:
        reaper.dispose()
        operator.dispose()
