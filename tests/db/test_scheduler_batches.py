"""The scheduler's batches grow (services/scheduler.py): a burst's first runs commit, and
wake the dispatcher, after `FIRST_BATCH` enqueues, not after `BATCH` of them, and the
pass still enqueues every due agent once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.domain.runs import RunTrigger
from achilles.services import scheduler
from tests.db.factories import make_agent, make_owner
from tests.waiting import wait_for


def _due_in_order(db: Engine, count: int) -> list[int]:
    """`count` agents due now, the first one longest overdue."""
    owner = make_owner(db)
    ids = [
        make_agent(db, owner, schedule={"type": "interval", "every_hours": 6}) for _ in range(count)
    ]
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE agents SET schedule_zone = 'UTC', next_run_at = now()"
                " - make_interval(secs => :count - array_position(:ids, id))"
                " WHERE id = ANY(:ids)"
            ),
            {"count": count + 1, "ids": ids},
        )
    return ids


def _runs(db: Engine) -> int:
    with db.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM agent_runs")).scalar_one())


def test_a_bursts_first_runs_commit_before_the_rest_are_enqueued(
    db: Engine, database_url: str
) -> None:
    ids = _due_in_order(db, 100)
    # Agent 31's manual run, enqueued and not committed: the scheduler's enqueue for it
    # (in the second batch) waits on the one-active-run index until this ends.
    blocker = Session(db)
    blocker.begin()
    journal.enqueue_run(blocker, ids[30], RunTrigger.MANUAL)
    database = Database(database_url, pool_size=1)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            tick = pool.submit(scheduler.schedule_due_agents, database)
            wait_for(
                lambda: _runs(db) == scheduler.FIRST_BATCH,
                timeout=30,
                what="the first batch committed on its own",
            )
            assert not tick.done()
            blocker.rollback()
            enqueued = [agent for agent, _ in tick.result(timeout=60).enqueued]
    finally:
        blocker.close()
        database.dispose()
    assert sorted(enqueued) == sorted(ids)  # each due agent once, in one pass
    assert enqueued[: scheduler.FIRST_BATCH] == ids[: scheduler.FIRST_BATCH]
    assert _runs(db) == 100
