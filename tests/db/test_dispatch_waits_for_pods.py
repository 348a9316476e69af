"""Seed 002 counts runner pods, not rows (services/dispatch.py, step 1), on the real
database: a run's row ends before its pod is gone (the runner writes its end, then
exits; a cancelled or reaped run's pod is being stopped), so an agent's next run waits
until the pod watcher no longer sees its last run's pod, while other agents' runs go
on; a pod seen `STOP_GRACE` after its run ended is a zombie that holds nothing; while
the pod watcher knows nothing yet (an operator just started), every agent whose run ended
within the grace waits. The fault suite's invariant monitor
found the gap: two runner pods of one agent at once in `postgres-outage` (runs that
ended at the database's return, their next runs started before the pods were gone)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.settings import database_now
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import STOP_GRACE, RunState, RunTrigger
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.run_metadata import RUN_ID_LABEL
from achilles.services.dispatch import dispatch_queued_runs
from tests.db.factories import make_agent

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)


class _Jobs:
    """The runs namespace as the dispatcher uses it: the Jobs it makes."""

    def __init__(self) -> None:
        self.created: list[int] = []

    def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
        self.created.append(int(manifest["metadata"]["labels"][RUN_ID_LABEL]))
        return True


def _run(db: Engine, agent_id: int) -> int:
    with Session(db) as session, session.begin():
        result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
    assert result.state is RunState.QUEUED
    return result.run_id


def _ended_run(db: Engine, agent_id: int, ago: timedelta = timedelta(0)) -> int:
    """A run its runner ended `ago` (its pod may still be there)."""
    run_id = _run(db, agent_id)
    with Session(db) as session, session.begin():
        at = database_now(session) - ago
        assert journal.claim_run(session, run_id, now=at)
        assert journal.succeed_run(session, run_id, "done", now=at)
    return run_id


def test_an_agents_next_run_waits_for_its_last_runs_pod_and_others_go_on(
    db: Engine, database_url: str
) -> None:
    held, free = make_agent(db), make_agent(db)
    ended = _ended_run(db, held)
    waiting, other = _run(db, held), _run(db, free)
    dispatcher = Database(database_url, pool_size=2)
    jobs = _Jobs()
    try:
        # The pod of `ended` is still there: its agent waits, the other agent's run goes.
        done = dispatch_queued_runs(
            dispatcher, cast(RunJobs, jobs), TEMPLATE, pod_view=lambda: {ended}
        )
        assert jobs.created == [other]
        assert done.held_agents == {held}
        assert done.waiting == 1
        # Still there at the next pass: still held, nothing made.
        done = dispatch_queued_runs(
            dispatcher, cast(RunJobs, jobs), TEMPLATE, pod_view=lambda: {ended, other}
        )
        assert (jobs.created, done.held_agents) == ([other], {held})
        # The pod is gone: the run starts.
        done = dispatch_queued_runs(
            dispatcher, cast(RunJobs, jobs), TEMPLATE, pod_view=lambda: {other}
        )
        assert jobs.created == [other, waiting]
        assert done.held_agents == set()
    finally:
        dispatcher.dispose()


def test_a_pod_seen_past_the_grace_after_its_run_ended_holds_nothing(
    db: Engine, database_url: str
) -> None:
    agent = make_agent(db)
    zombie = _ended_run(db, agent, ago=STOP_GRACE + timedelta(seconds=1))
    waiting = _run(db, agent)
    dispatcher = Database(database_url, pool_size=2)
    jobs = _Jobs()
    try:
        done = dispatch_queued_runs(
            dispatcher, cast(RunJobs, jobs), TEMPLATE, pod_view=lambda: {zombie}
        )
    finally:
        dispatcher.dispose()
    assert (jobs.created, done.held_agents) == ([waiting], set())


def test_while_the_pod_watcher_knows_nothing_an_agent_whose_run_just_ended_waits(
    db: Engine, database_url: str
) -> None:
    """After an operator's restart, before its pod watcher's first listing: the pod of a
    run that just ended may still be there, so its agent's next run waits (at most the
    grace); an agent whose run ended before the grace, or that has none, goes on."""
    recent, old, fresh = make_agent(db), make_agent(db), make_agent(db)
    _ended_run(db, recent)
    _ended_run(db, old, ago=STOP_GRACE + timedelta(seconds=1))
    held = _run(db, recent)
    go = [_run(db, old), _run(db, fresh)]
    dispatcher = Database(database_url, pool_size=2)
    jobs = _Jobs()
    try:
        done = dispatch_queued_runs(
            dispatcher, cast(RunJobs, jobs), TEMPLATE, pod_view=lambda: None
        )
        assert (sorted(jobs.created), done.held_agents) == (go, {recent})
        # The listing came and the pod is not in it: the run starts.
        done = dispatch_queued_runs(
            dispatcher, cast(RunJobs, jobs), TEMPLATE, pod_view=lambda: set()
        )
    finally:
        dispatcher.dispose()
    assert (sorted(jobs.created), done.held_agents) == (sorted([*go, held]), set())
