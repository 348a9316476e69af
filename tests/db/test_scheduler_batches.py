"""The scheduler's batches grow (services/scheduler.py): a burst's first runs commit, and
wake the dispatcher, after `FIRST_BATCH` enqueues, not after `BATCH` of them, and the
pass still enqueues every due agent once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.services import scheduler
from tests.db.factories import make_agent, make_owner
from tests.db.reconciling import waiting_on_a_lock
from tests.waiting import wait_for


def _due_in_order(db: Engine, owners: list[str]) -> list[int]:
    """An agent due now for each of `owners`, the first one longest overdue."""
    ids = [
        make_agent(db, owner, schedule={"type": "interval", "every_hours": 6}) for owner in owners
    ]
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE agents SET schedule_zone = 'UTC', next_run_at = now()"
                " - make_interval(secs => :count - array_position(:ids, id))"
                " WHERE id = ANY(:ids)"
            ),
            {"count": len(ids) + 1, "ids": ids},
        )
    return ids


def _runs(db: Engine) -> int:
    with db.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM agent_runs")).scalar_one())


def test_a_bursts_first_runs_commit_before_the_rest_are_enqueued(
    db: Engine, database_url: str
) -> None:
    first, rest = make_owner(db), make_owner(db)
    ids = _due_in_order(db, [first] * scheduler.FIRST_BATCH + [rest] * 75)
    # The second owner's row held: the scheduler's enqueues for that owner's agents (from
    # the second batch on) wait on it. Not a run of one of those agents: a run row locks
    # its agent's row (its foreign key), and the scheduler skips locked agents.
    blocker = Session(db)
    blocker.begin()
    blocker.execute(text("SELECT 1 FROM users WHERE key = :k FOR UPDATE"), {"k": rest})
    database = Database(database_url, pool_size=1)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            tick = pool.submit(scheduler.schedule_due_agents, database)
            wait_for(
                lambda: tick.done() or waiting_on_a_lock(db),
                timeout=30,
                what="the scheduler's second batch waiting on the held owner",
            )
            assert not tick.done()
            assert _runs(db) == scheduler.FIRST_BATCH  # the first batch committed on its own
            blocker.rollback()
            enqueued = [agent for agent, _ in tick.result(timeout=60).enqueued]
    finally:
        blocker.close()
        database.dispose()
    assert sorted(enqueued) == sorted(ids)  # each due agent once, in one pass
    assert enqueued[: scheduler.FIRST_BATCH] == ids[: scheduler.FIRST_BATCH]
    assert _runs(db) == 100
