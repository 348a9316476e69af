"""The notification outbox (issue 22) on the real database: a notification is written in
the transaction of the change it announces, whoever makes the change (the operator's
login, a run pod's login, the API's), never without it; and two notifiers claiming at
once on their own connections never claim the same row.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.journal import runs as journal
from achilles.db.journal.models import Agent
from achilles.db.outbox.delivery import claim_due, enqueue, record_delivered
from achilles.db.outbox.models import NotificationOutbox
from achilles.db.roles import Component
from achilles.domain.inbox import ItemState
from achilles.domain.notifications import NotificationKind
from achilles.domain.runs import FailReason, RunState, RunTrigger, SkipReason
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.logins import admin, login_url, run_pod
from tests.db.runner_support import give_run_secret

HOOK = "http://127.0.0.1:9/hooks/achilles"


@pytest.fixture
def operator_db(db: Engine, database_url: str) -> Iterator[Database]:
    """The operator's login (no superuser: its grants must suffice), a webhook set."""
    set_settings(db, agent_webhook_url=HOOK, agent_webhook_secret_name="hook")
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=8)
    yield database
    database.dispose()


def _outbox(engine: Engine) -> list[NotificationOutbox]:
    with Session(engine) as session:
        return list(
            session.execute(select(NotificationOutbox).order_by(NotificationOutbox.id)).scalars()
        )


def _queued_run(database: Database, agent_id: int) -> int:
    with database.transaction() as session:
        return journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id


def test_a_failed_run_is_announced_in_its_own_transaction(
    db: Engine, operator_db: Database
) -> None:
    owner = make_owner(db, "nina")
    agent_id = make_agent(db, owner, name="digest")
    run_id = _queued_run(operator_db, agent_id)
    assert _outbox(db) == []  # queued is no news

    # A failure rolled back announces nothing (no phantom notification).
    def fail_then_roll_back() -> None:
        with operator_db.transaction() as session:
            assert journal.fail_unclaimed_run(session, run_id, FailReason.ERROR, "pod lost")
            assert len(session.execute(select(NotificationOutbox)).all()) == 1  # same transaction
            raise RuntimeError("the transaction fails after the change")

    with pytest.raises(RuntimeError):
        fail_then_roll_back()
    assert _outbox(db) == []

    with operator_db.transaction() as session:
        assert journal.fail_unclaimed_run(session, run_id, FailReason.ERROR, "pod lost")
    [row] = _outbox(db)
    assert (row.kind, row.state, row.attempts) == (NotificationKind.RUN_FAILED, "pending", 0)
    assert row.payload["owner"] == "nina"
    assert row.payload["agent"]["id"] == agent_id
    assert row.payload["agent"]["name"] == "digest"
    assert row.payload["run"]["id"] == run_id
    assert (row.payload["run"]["state"], row.payload["run"]["reason"]) == ("failed", "error")


def test_a_skipped_run_is_announced_and_a_success_is_not(
    db: Engine, database_url: str, operator_db: Database
) -> None:
    agent_id = make_agent(db)
    first = _queued_run(operator_db, agent_id)
    with operator_db.transaction() as session:  # inserted skipped: already_running
        second = journal.enqueue_run(session, agent_id, RunTrigger.SCHEDULED)
    assert second.state == RunState.SKIPPED
    with admin(database_url).transaction() as session:  # the runner's part
        assert journal.claim_run(session, first)
        assert journal.succeed_run(session, first, "done")
    [row] = _outbox(db)
    assert row.kind == NotificationKind.RUN_SKIPPED
    assert row.payload["run"]["id"] == second.run_id
    assert row.payload["run"]["reason"] == SkipReason.ALREADY_RUNNING


def test_a_run_pod_failing_its_own_run_writes_the_notification(
    db: Engine, database_url: str, operator_db: Database
) -> None:
    """The runner's login has no grant on the outbox: the trigger writes it for it."""
    agent_id = make_agent(db)
    run_id = _queued_run(operator_db, agent_id)
    secret = give_run_secret(database_url, run_id)
    runner = run_pod(database_url, run_id, secret)
    try:
        with runner.transaction() as session:
            assert journal.claim_run(session, run_id)
        with runner.transaction() as session:
            assert journal.fail_run(session, run_id, FailReason.ITERATION_CAP, "8 rounds")
    finally:
        runner.dispose()
    [row] = _outbox(db)
    assert (row.kind, row.payload["run"]["reason"]) == ("run.failed", "iteration_cap")


def test_an_item_becoming_blocked_and_an_agent_suspended_are_announced(
    db: Engine, operator_db: Database
) -> None:
    agent_id = make_agent(db)
    with operator_db.transaction() as session:
        tracked = board.ask(session, agent_id, "q1", "Which quarter?", state=ItemState.TRACKED)
        board.ask(session, agent_id, "q2", "Which team?")  # blocked when new
    with operator_db.transaction() as session:
        session.execute(
            text("UPDATE agent_inbox_items SET state = 'blocked' WHERE id = :id"),
            {"id": tracked.item.id},
        )
        # Blocked again (no change of state): no second notification.
        session.execute(
            text("UPDATE agent_inbox_items SET state = 'blocked' WHERE id = :id"),
            {"id": tracked.item.id},
        )
    with operator_db.transaction() as session:
        session.execute(
            update(Agent).where(Agent.id == agent_id).values(suspended_at=text("now()"))
        )
    kinds = [(row.kind, row.payload.get("item", {}).get("key")) for row in _outbox(db)]
    assert kinds == [
        (NotificationKind.INBOX_ITEM_BLOCKED, "q2"),
        (NotificationKind.INBOX_ITEM_BLOCKED, "q1"),
        (NotificationKind.AGENT_SUSPENDED, None),
    ]


def test_nothing_is_written_without_a_webhook(db: Engine, operator_db: Database) -> None:
    set_settings(db, agent_webhook_url=None, agent_webhook_secret_name=None)
    agent_id = make_agent(db)
    run_id = _queued_run(operator_db, agent_id)
    with operator_db.transaction() as session:
        assert journal.fail_unclaimed_run(session, run_id, FailReason.ERROR, "pod lost")
        enqueue(
            session,
            NotificationKind.BUDGET_THRESHOLD_CROSSED,
            owner=None,
            agent=agent_id,
            details={},
        )
    assert _outbox(db) == []


def test_concurrent_notifiers_never_claim_the_same_notification(
    db: Engine, database_url: str, operator_db: Database
) -> None:
    agent_id = make_agent(db)
    with operator_db.transaction() as session:
        for n in range(300):
            enqueue(
                session, NotificationKind.RUN_FAILED, owner=None, agent=agent_id, details={"n": n}
            )
    workers = 6
    start = threading.Barrier(workers)
    claimed: list[list[int]] = [[] for _ in range(workers)]
    errors: list[BaseException] = []

    def notifier(index: int) -> None:
        # Each its own connection, as two replicas (or more) have.
        database = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
        try:
            start.wait()
            while True:
                with database.transaction() as session:
                    batch = claim_due(session, batch=7, lease=timedelta(minutes=5))
                    if not batch:
                        return
                with database.transaction() as session:
                    record_delivered(session, [n.id for n in batch])
                claimed[index].extend(n.id for n in batch)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            database.dispose()

    threads = [threading.Thread(target=notifier, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    every = [notification for ids in claimed for notification in ids]
    assert len(every) == 300
    assert len(set(every)) == 300  # no notification claimed twice
    assert sum(1 for ids in claimed if ids) > 1  # they did claim side by side
    assert {row.state for row in _outbox(db)} == {"delivered"}
    assert all(row.attempts == 1 for row in _outbox(db))
