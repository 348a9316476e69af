"""The one-active-run lock under truly parallel enqueues (seed 000: the database is the lock)."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.journal import runs as journal
from achilles.domain.runs import RunState, RunTrigger, SkipReason
from tests.db.factories import make_agent

WRITERS = 50


def _race(engine: Engine, agent_id: int) -> list[journal.EnqueueResult]:
    barrier = threading.Barrier(WRITERS)

    def enqueue(index: int) -> journal.EnqueueResult:
        trigger = RunTrigger.MANUAL if index % 2 else RunTrigger.SCHEDULED
        with Session(engine) as session, session.begin():
            # Each writer holds its own connection before the start line.
            session.connection()
            barrier.wait(timeout=60)
            return journal.enqueue_run(session, agent_id, trigger)

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        return list(pool.map(enqueue, range(WRITERS)))


@pytest.mark.parametrize("round_", range(5))
def test_fifty_parallel_enqueues_leave_exactly_one_active_run(db: Engine, round_: int) -> None:
    agent_id = make_agent(db)
    results = _race(db, agent_id)

    outcomes = Counter((r.state, r.reason) for r in results)
    assert outcomes == {
        (RunState.QUEUED, None): 1,
        (RunState.SKIPPED, SkipReason.ALREADY_RUNNING): WRITERS - 1,
    }
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT state, reason, tokens_used, count(*) FROM agent_runs "
                "WHERE agent_id = :a GROUP BY 1, 2, 3"
            ),
            {"a": agent_id},
        ).all()
    assert sorted(tuple(r) for r in rows) == [
        ("queued", None, 0, 1),
        ("skipped", "already_running", 0, WRITERS - 1),
    ]


def test_parallel_enqueues_for_different_agents_do_not_block_each_other(db: Engine) -> None:
    agents = [make_agent(db) for _ in range(10)]
    barrier = threading.Barrier(len(agents))

    def enqueue(agent_id: int) -> journal.EnqueueResult:
        with Session(db) as session, session.begin():
            session.connection()
            barrier.wait(timeout=60)
            return journal.enqueue_run(session, agent_id, RunTrigger.SCHEDULED)

    with ThreadPoolExecutor(max_workers=len(agents)) as pool:
        results = list(pool.map(enqueue, agents))
    assert all(r.state is RunState.QUEUED for r in results)
