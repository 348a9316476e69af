"""A reply's wake is requested once and never lost, whatever retention and cancel do
(seed 003, DESIGN.md §5; issue 36 item 6), through the real database and the services the
operator's sweeper and `achilles runs cancel` call.

Whether a reply was answered used to be read from the runs created after it. Retention
deletes old runs, so an old reply nobody took woke its agent again after each retention
pass; and a wake run cancelled before it started counted as the answer, so the wake was
lost. Now the answer is recorded per reply (`inbox_reply_wakes`, 0017) when a run starts
or ends.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.settings import database_now
from achilles.domain.runs import FailReason, RunState
from achilles.k8s.annotations import format_run_request
from achilles.services import inbox as inbox_service
from achilles.services import reply_wakes
from achilles.services.retention import apply_retention
from achilles.services.run_cancel import CancelRequest, cancel_run
from achilles.services.run_journal import RunJournal
from tests.db import inbox_support as box
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.test_run_retention import _finished_at


def _waking_agent(db: Engine, database: Database) -> int:
    agent_id = make_agent(db, name=f"waker-{make_owner(db)}")
    inbox_service.wake_on_reply(database, str(agent_id), enabled=True)
    return agent_id


def _one_wake(database: Database) -> reply_wakes.ReplyWake:
    woken = reply_wakes.wake_for_waiting_replies(database)
    assert len(woken) == 1, woken
    assert woken[0].result is not None
    return woken[0]


def test_retention_deleting_the_answering_run_does_not_wake_the_reply_again(
    db: Engine, database: Database
) -> None:
    set_settings(db, agent_run_retention_days=1)
    agent_id = _waking_agent(db, database)
    item = box.ask(db, agent_id).item
    box.reply(db, item.id, "Use Postgres")
    wake = _one_wake(database)
    assert wake.result is not None
    run_id = wake.result.run_id
    # The run starts and fails without taking the reply (say the agent has no inbox
    # tool): it answered the wake, and nothing retries it for ever.
    runner = RunJournal(database)
    assert runner.claim(run_id) is not None
    assert runner.fail(run_id, FailReason.ERROR, "the model endpoint refused")
    assert reply_wakes.wake_for_waiting_replies(database) == []

    with Session(db) as session:
        long_ago = database_now(session) - timedelta(days=30)
    _finished_at(db, run_id, long_ago)
    assert apply_retention(database).runs_deleted == 1
    with db.connect() as conn:
        left = conn.execute(
            text("SELECT count(*) FROM agent_runs WHERE agent_id = :a"), {"a": agent_id}
        ).scalar_one()
    assert left == 0

    assert reply_wakes.wake_for_waiting_replies(database) == []


def test_a_wake_run_cancelled_before_it_started_is_requested_again_once(
    db: Engine, database: Database, database_url: str
) -> None:
    agent_id = _waking_agent(db, database)
    item = box.ask(db, agent_id).item
    reply = box.reply(db, item.id, "Ship it").item.reply
    assert reply is not None
    first = _one_wake(database)
    assert first.request == format_run_request(reply.handled_at)
    assert first.result is not None
    cancelled = cancel_run(database, CancelRequest(first.result.run_id, "alice via the CLI"))
    assert cancelled.cancelled

    # Two sweeper replicas at once, each on connections of its own: one run between them.
    replicas = 6
    barrier = Barrier(replicas)

    def sweep(_: int) -> list[reply_wakes.ReplyWake]:
        database_of_replica = Database(database_url, pool_size=1)
        try:
            barrier.wait()
            return reply_wakes.wake_for_waiting_replies(database_of_replica)
        finally:
            database_of_replica.dispose()

    with ThreadPoolExecutor(replicas) as pool:
        results = [wake for woken in pool.map(sweep, range(replicas)) for wake in woken]
    made = {
        wake.result.run_id
        for wake in results
        if wake.result is not None and wake.result.state is RunState.QUEUED
    }
    assert len(made) == 1
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT state, reason, request_key FROM agent_runs WHERE agent_id = :a ORDER BY id"
            ),
            {"a": agent_id},
        ).all()
    request = format_run_request(reply.handled_at)
    assert [tuple(row) for row in rows] == [
        ("failed", "cancelled", request),
        ("queued", None, f"{request}+1"),
    ]

    # The new wake run starts: the reply is answered, and asked for no more.
    runner = RunJournal(database)
    assert runner.claim(made.pop()) is not None
    assert reply_wakes.wake_for_waiting_replies(database) == []
