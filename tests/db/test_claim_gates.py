"""The claim is the last start gate (seed 000/002; issue 36 item 2), through the real
database, the runner's own login and a real `achilles runner` process.

A lock that closed after the dispatcher made a run's Job (an admin's pause, the owner's
switch, a withdrawn model, a deactivated owner) used to be ignored once the pod started:
the claim checked only the run's state and secret, and a withdrawn model then wrote
`failed/error`. Now the claim removes such a run (a closed lock leaves no row) and
records why for the operator, whose next dispatch pass tells the Agent and deletes the
Job; the budget run out by then ends the run `skipped/budget_exceeded`, as at enqueue.
The cluster tier runs it end to end (tests/cluster/install/test_operator_locks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier
from typing import Any, cast

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.run_claim import claim_run_alone, runner_conninfo
from achilles.domain.run_secret import RunSecret, session_settings
from achilles.domain.runs import RunState, RunTrigger
from achilles.k8s.jobs import JobTemplate, RunJobs, SecretKey
from achilles.k8s.run_metadata import RUN_ID_LABEL
from achilles.services.dispatch import DispatchResult, dispatch_queued_runs
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.runner_support import run_to_end, runner_login_url

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)


class _Namespace:
    """The runs namespace as the dispatcher writes it: each Job's secret, by run id, and
    the Jobs it deleted."""

    def __init__(self) -> None:
        self.secrets: dict[int, str] = {}
        self.deleted: list[int] = []

    def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
        run_id = int(manifest["metadata"]["labels"][RUN_ID_LABEL])
        self.secrets[run_id] = secret.value  # its run Secret's, which the pod reads
        return True

    def delete(self, run_id: int) -> bool:
        self.deleted.append(run_id)
        return self.secrets.pop(run_id, None) is not None


def _dispatch(database_url: str, jobs: _Namespace) -> DispatchResult:
    database = Database(database_url, pool_size=1)
    try:
        return dispatch_queued_runs(database, cast(RunJobs, jobs), TEMPLATE)
    finally:
        database.dispose()


def _queued(db: Engine, agent_id: int, request_key: str | None = None) -> int:
    with Session(db) as session, session.begin():
        result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL, request_key=request_key)
    assert result.state is RunState.QUEUED
    return result.run_id


def _execute(db: Engine, statement: str, **params: object) -> None:
    with db.begin() as conn:
        conn.execute(text(statement), params)


def _runs_of(db: Engine, agent_id: int) -> list[tuple[Any, ...]]:
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT state, reason, tokens_used, started_at FROM agent_runs"
                " WHERE agent_id = :a ORDER BY id"
            ),
            {"a": agent_id},
        )
        return [tuple(row) for row in rows]


def _refusals(db: Engine) -> list[int]:
    with db.connect() as conn:
        return list(conn.execute(text("SELECT run_id FROM run_start_refusals")).scalars())


# (what closes the lock, the refusal's words)
LOCKS: dict[str, tuple[Callable[[Engine, int], None], str]] = {
    "admin paused": (
        lambda db, a: _execute(db, "UPDATE agents SET admin_paused = true WHERE id = :a", a=a),
        "an admin paused the agent (spec.adminPaused: true)",
    ),
    "switched off": (
        lambda db, a: _execute(db, "UPDATE agents SET enabled = false WHERE id = :a", a=a),
        "the owner switched the agent off (spec.enabled: false)",
    ),
    "model withdrawn": (
        lambda db, a: _execute(
            db,
            "DELETE FROM agent_models WHERE id = (SELECT model_id FROM agents WHERE id = :a)",
            a=a,
        ),
        "no model: set spec.model to an AgentModel",
    ),
    "owner deactivated": (
        lambda db, a: _execute(
            db,
            "UPDATE users SET active = false WHERE id = (SELECT user_id FROM agents WHERE id = :a)",
            a=a,
        ),
        "the owner's account is deactivated",
    ),
}


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_a_lock_closed_after_the_job_was_made_stops_the_run_with_no_trace(
    db: Engine, database_url: str, lock: str
) -> None:
    close, words = LOCKS[lock]
    agent_id = make_agent(db, make_owner(db))
    run_id = _queued(db, agent_id, request_key="2026-12-05T01:00:00Z")
    jobs = _Namespace()
    assert [run.run_id for run in _dispatch(database_url, jobs).created] == [run_id]

    close(db, agent_id)
    code, log = run_to_end(database_url, run_id, run_secret=jobs.secrets[run_id])

    assert code == 0, log
    assert _runs_of(db, agent_id) == []  # no row: not failed, not skipped (seed 000)
    assert _refusals(db) == [run_id]
    done = _dispatch(database_url, jobs)
    assert [(w.run.run_id, w.run.request_key, w.refusal) for w in done.withdrawn] == [
        (run_id, "2026-12-05T01:00:00Z", f"run refused: {words}")
    ]
    assert done.refused_at_claim == [run_id]
    assert jobs.deleted == [run_id]
    assert _refusals(db) == []
    assert _dispatch(database_url, jobs).withdrawn == []  # told once


def test_a_budget_spent_after_the_job_was_made_skips_the_run_at_its_claim(
    db: Engine, database_url: str
) -> None:
    set_settings(db, agent_weekly_token_budget=1000)
    owner = make_owner(db)
    agent_id = make_agent(db, owner)
    run_id = _queued(db, agent_id)
    jobs = _Namespace()
    assert [run.run_id for run in _dispatch(database_url, jobs).created] == [run_id]
    spender = _queued(db, make_agent(db, owner))  # another agent of the owner spends it
    with Session(db) as session, session.begin():
        assert journal.claim_run(session, spender)
        assert journal.add_tokens(session, spender, 1000)
        assert journal.succeed_run(session, spender, "spent the week")

    code, log = run_to_end(database_url, run_id, run_secret=jobs.secrets[run_id])

    assert code == 0, log
    assert _runs_of(db, agent_id) == [("skipped", "budget_exceeded", 0, None)]
    assert _refusals(db) == []


def test_claims_racing_a_pause_never_start_a_paused_agent(db: Engine, database_url: str) -> None:
    """Many pods claim at once on connections of their own while an admin pauses every
    agent: a run starts only if its claim came before the pause, and every other run is
    gone, never failed nor skipped."""
    set_settings(db, agent_max_concurrency=50)
    runs = {make_agent(db, make_owner(db)): 0 for _ in range(16)}
    for agent_id in runs:
        runs[agent_id] = _queued(db, agent_id)
    jobs = _Namespace()
    assert len(_dispatch(database_url, jobs).created) == len(runs)
    runner = runner_login_url(database_url)
    barrier = Barrier(len(runs) + 1)

    def claim(run_id: int) -> bool:
        conninfo = runner_conninfo(
            runner,
            session_settings=session_settings(run_id, jobs.secrets[run_id]),
            application_name="claim-race",
            connect_timeout=10,
        )
        barrier.wait()
        return claim_run_alone(conninfo, run_id)

    def pause() -> None:
        barrier.wait()
        _execute(db, "UPDATE agents SET admin_paused = true")

    with ThreadPoolExecutor(len(runs) + 1) as pool:
        paused = pool.submit(pause)
        claimed = dict(zip(runs.values(), pool.map(claim, runs.values()), strict=True))
        paused.result()

    with db.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, state FROM agent_runs")).tuples().all())
    refused = set(_refusals(db))
    for run_id, started in claimed.items():
        if started:
            assert rows[run_id] == "running"
        else:
            assert run_id not in rows
            assert run_id in refused
    # After the pause, nothing claims.
    assert all(not claim_run_alone(
        runner_conninfo(
            runner,
            session_settings=session_settings(run_id, jobs.secrets[run_id]),
            application_name="claim-late",
            connect_timeout=10,
        ),
        run_id,
    ) for run_id in refused)  # fmt: skip
    done = _dispatch(database_url, jobs)
    assert sorted(done.refused_at_claim) == sorted(refused)
