"""The start gates again when a waiting run's turn comes (issue 18, items 3 and 4).

A run can wait behind the concurrency cap. If its owner's weekly budget ran out
meanwhile, it ends `skipped/budget_exceeded` with no tokens, as the same request at
enqueue would have; the seed's overrun is for runs already running. If a durable lock
closed meanwhile, the run never started and leaves no row (seed 000: a closed lock
leaves no trace in the journal), and the request is refused with the lock's words.

The Jobs the dispatcher makes are recorded here, not sent: the cluster tier
(tests/cluster/install/test_operator_locks.py) runs the same pass against a real API
server.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from sqlalchemy import Engine, delete, select, text, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.models import Agent, AgentModel, AgentRun, User
from achilles.domain.runs import RunState, RunTrigger
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.run_metadata import RUN_ID_LABEL
from achilles.services.dispatch import DispatchResult, dispatch_queued_runs
from tests.db.factories import make_agent, make_owner, set_settings

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)


class _RecordedJobs:
    """The runs namespace as the dispatcher writes it: each Job made, by run id."""

    def __init__(self) -> None:
        self.created: list[int] = []

    def create(self, manifest: dict[str, Any], secret: object) -> bool:
        self.created.append(int(manifest["metadata"]["labels"][RUN_ID_LABEL]))
        return True


def _dispatch(database_url: str, jobs: _RecordedJobs) -> DispatchResult:
    database = Database(database_url, pool_size=1)
    try:
        return dispatch_queued_runs(database, cast(RunJobs, jobs), TEMPLATE)
    finally:
        database.dispose()


def _enqueue(db: Engine, agent_id: int, request_key: str | None = None) -> int:
    with Session(db) as session, session.begin():
        result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL, request_key=request_key)
    assert result.state is RunState.QUEUED
    return result.run_id


def _row(db: Engine, run_id: int) -> AgentRun | None:
    with Session(db) as session:
        return session.get(AgentRun, run_id)


def test_a_waiting_run_is_skipped_when_the_budget_ran_out_ahead_of_it(
    db: Engine, database_url: str
) -> None:
    set_settings(db, agent_weekly_token_budget=1000, agent_max_concurrency=1)
    owner = make_owner(db)
    first = _enqueue(db, make_agent(db, owner))
    waiting = _enqueue(db, make_agent(db, owner))  # both queued: nothing spent yet
    jobs = _RecordedJobs()
    assert [run.run_id for run in _dispatch(database_url, jobs).created] == [first]
    with Session(db) as session, session.begin():
        assert journal.claim_run(session, first)
        assert journal.add_tokens(session, first, 1000)
        assert journal.succeed_run(session, first, "spent the week's budget")

    done = _dispatch(database_url, jobs)
    assert [run.run_id for run in done.skipped] == [waiting]
    assert done.created == []
    assert jobs.created == [first]  # no Job for the refused run
    row = _row(db, waiting)
    assert row is not None
    assert (row.state, row.reason, row.tokens_used) == ("skipped", "budget_exceeded", 0)
    assert row.started_at is None
    assert row.finished_at is not None


def test_a_waiting_run_under_the_budget_still_starts(db: Engine, database_url: str) -> None:
    set_settings(db, agent_weekly_token_budget=1000)
    run_id = _enqueue(db, make_agent(db))
    jobs = _RecordedJobs()
    done = _dispatch(database_url, jobs)
    assert [run.run_id for run in done.created] == [run_id]
    assert (done.skipped, done.withdrawn) == ([], [])


def _pause(db: Engine, agent_id: int) -> None:
    with Session(db) as session, session.begin():
        session.execute(update(Agent).where(Agent.id == agent_id).values(admin_paused=True))


def _disable(db: Engine, agent_id: int) -> None:
    with Session(db) as session, session.begin():
        session.execute(update(Agent).where(Agent.id == agent_id).values(enabled=False))


def _deactivate_owner(db: Engine, agent_id: int) -> None:
    with Session(db) as session, session.begin():
        owner = select(Agent.user_id).where(Agent.id == agent_id).scalar_subquery()
        session.execute(update(User).where(User.id == owner).values(active=False))


def _withdraw_model(db: Engine, agent_id: int) -> None:
    with Session(db) as session, session.begin():
        model = select(Agent.model_id).where(Agent.id == agent_id).scalar_subquery()
        session.execute(delete(AgentModel).where(AgentModel.id == model))


@pytest.mark.parametrize(
    ("close", "words"),
    [
        (_pause, "an admin paused the agent"),
        (_disable, "the owner switched the agent off"),
        (_deactivate_owner, "the owner's account is deactivated"),
        (_withdraw_model, "no model"),
    ],
)
def test_a_lock_closed_on_a_waiting_run_leaves_no_row(
    db: Engine, database_url: str, close: Any, words: str
) -> None:
    agent_id = make_agent(db)
    run_id = _enqueue(db, agent_id, request_key="2026-12-01T20:00:00.000000Z")
    close(db, agent_id)
    jobs = _RecordedJobs()

    done = _dispatch(database_url, jobs)
    assert jobs.created == []
    assert [withdrawn.run.run_id for withdrawn in done.withdrawn] == [run_id]
    withdrawn = done.withdrawn[0]
    assert withdrawn.run.request_key == "2026-12-01T20:00:00.000000Z"
    assert withdrawn.refusal.startswith("run refused: ")
    assert words in withdrawn.refusal
    assert _row(db, run_id) is None  # not a failure the user did not cause: no row at all
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM agent_runs")).scalar_one() == 0
    assert _dispatch(database_url, jobs).withdrawn == []  # once


def test_a_run_already_dispatched_is_not_withdrawn(db: Engine, database_url: str) -> None:
    """Its Job exists: the runner's claim decides, as before (the row is not removed
    under a pod that may already be starting)."""
    agent_id = make_agent(db)
    run_id = _enqueue(db, agent_id)
    jobs = _RecordedJobs()
    assert [run.run_id for run in _dispatch(database_url, jobs).created] == [run_id]
    _pause(db, agent_id)
    assert _dispatch(database_url, jobs).withdrawn == []
    row = _row(db, run_id)
    assert row is not None
    assert row.state == "queued"


def test_a_locked_run_waiting_behind_a_full_cap_is_withdrawn_at_once(
    db: Engine, database_url: str
) -> None:
    """Its turn might be far off: the requester hears of the refusal on the next pass."""
    set_settings(db, agent_max_concurrency=1)
    owner = make_owner(db)
    running = _enqueue(db, make_agent(db, owner))
    jobs = _RecordedJobs()
    assert [run.run_id for run in _dispatch(database_url, jobs).created] == [running]
    paused_agent = make_agent(db, owner)
    waiting = _enqueue(db, paused_agent, request_key="2026-12-01T21:00:00.000000Z")
    behind = _enqueue(db, make_agent(db, owner))
    assert _dispatch(database_url, jobs).withdrawn == []  # nothing closed: they wait
    _pause(db, paused_agent)

    done = _dispatch(database_url, jobs)
    assert [withdrawn.run.run_id for withdrawn in done.withdrawn] == [waiting]
    assert done.created == []  # the cap is still full
    assert _row(db, waiting) is None
    row = _row(db, behind)
    assert row is not None
    assert row.state == "queued"
    assert done.waiting == 1
