"""The invariant monitor (issue 36 item 10, `achilles_dev/invariants.py`) sees each
violation it watches for, and nothing in a run that keeps the rules, on the real database.
The violations are written here as a faulty component would write them (straight into the
journal, as the superuser), since the product's own paths no longer can."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox.settings import set_wake_on_reply
from achilles.db.inbox.wakes import owed_wakes
from achilles.db.journal import runs as journal
from achilles.db.roles import Component
from achilles.domain.runs import RunTrigger
from achilles.errors import StartRefused
from achilles.k8s.annotations import format_run_request
from achilles.services.reply_wakes import wake_for_waiting_replies
from achilles_dev.invariants import InvariantMonitor
from tests.db import inbox_support as box
from tests.db.factories import make_agent, make_owner
from tests.db.logins import login_url

Pods = list[tuple[str, str | None, str]]


def _monitor(db: Engine, pods: Pods | None = None) -> InvariantMonitor:
    listed: Pods = pods if pods is not None else []
    return InvariantMonitor(db.url.render_as_string(hide_password=False), lambda: list(listed))


def _run(db: Engine, agent_id: int, tokens: int = 0, key: str | None = None) -> int:
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL, request_key=key).run_id
        assert journal.claim_run(session, run_id)
        assert journal.add_tokens(session, run_id, tokens)
        assert journal.succeed_run(session, run_id, "done")
    return run_id


def _pause(db: Engine, agent_id: int) -> None:
    with db.begin() as conn:
        conn.execute(text("UPDATE agents SET admin_paused = true WHERE id = :a"), {"a": agent_id})


def test_a_run_that_keeps_the_rules_is_no_violation(db: Engine) -> None:
    owner = make_owner(db)
    agent = make_agent(db, owner)
    monitor = _monitor(db, [("p1", str(agent), "Running"), ("p0", str(agent), "Succeeded")])
    monitor.sample()
    _run(db, agent, tokens=30)
    monitor.sample()
    _pause(db, agent)
    monitor.sample()
    with Session(db) as session, session.begin(), pytest.raises(StartRefused):
        journal.enqueue_run(session, agent, RunTrigger.MANUAL)  # refused by the lock: no row
    verdict = monitor.stop()
    assert verdict.violations == []
    assert verdict.samples == 4
    assert verdict.most_pods == 1  # the Succeeded pod is not running
    assert monitor.transactions == 4  # one per sample: what a benchmark takes off


def test_each_violation_is_seen(db: Engine) -> None:
    owner = make_owner(db)
    paused, spender, twice = make_agent(db, owner), make_agent(db, owner), make_agent(db, owner)
    pods: Pods = []
    monitor = _monitor(db, pods)
    spent = _run(db, spender, tokens=50)
    item = box.ask(db, twice).item
    reply = box.reply(db, item.id).item.reply
    assert reply is not None
    with Session(db) as session, session.begin():  # queued before the pause
        queued = journal.enqueue_run(session, paused, RunTrigger.MANUAL).run_id
    _pause(db, paused)
    monitor.sample()

    pods.extend([("a", str(spender), "Running"), ("b", str(spender), "Running")])
    with db.begin() as conn:
        # A claim past the closed lock, a skipped row the lock should have prevented.
        conn.execute(
            text(
                "UPDATE agent_runs SET state = 'running', started_at = now(),"
                " heartbeat_at = now() WHERE id = :r"
            ),
            {"r": queued},
        )
        conn.execute(
            text(
                "INSERT INTO agent_runs (agent_id, trigger, state, reason, finished_at)"
                " VALUES (:a, 'scheduled', 'skipped', 'budget_exceeded', now())"
            ),
            {"a": paused},
        )
        # Spent tokens given back (a run deleted before its week ended).
        conn.execute(text("DELETE FROM agent_runs WHERE id = :r"), {"r": spent})
    # One reply, two wake runs.
    value = format_run_request(reply.handled_at)
    _run(db, twice, key=value)
    _run(db, twice, key=f"{value}+1")

    violations = monitor.stop().violations
    kinds = sorted(violation.split(":")[0] for violation in violations)
    assert kinds == [
        "claim under a closed lock",
        "closed lock wrote a row",
        "reply woke twice",
        "tokens went down",
        "two runner pods",
    ], violations


def test_a_monitor_that_cannot_sample_says_so(db: Engine) -> None:
    """An API server that never answers: the journal is still read, the samples are not
    whole, and a monitor that watched nothing fails rather than pass."""

    def unreachable() -> Pods:
        raise ConnectionRefusedError("the API server does not answer")

    monitor = InvariantMonitor(db.url.render_as_string(hide_password=False), unreachable)
    verdict = monitor.stop()
    assert verdict.samples == 0
    assert verdict.failed_samples == 1
    assert monitor.transactions == 1  # the journal was read all the same
    assert verdict.violations == [
        "the monitor could not sample: 1 of 1 samples failed, the last:"
        " ConnectionRefusedError: the API server does not answer"
    ]
    assert not verdict.passed


def _owed_reply(db: Engine) -> tuple[int, int]:
    """An agent whose owner lets replies wake it, and a reply to its blocked question: a
    wake owed (as the product's own query finds it too); (agent, item)."""
    agent = make_agent(db, make_owner(db))
    with Session(db) as session, session.begin():
        set_wake_on_reply(session, agent, True)
    item = box.ask(db, agent).item
    box.reply(db, item.id)
    with Session(db) as session:
        assert [wake.item_id for wake in owed_wakes(session)] == [item.id]
    return agent, item.id


def _sample_for(db: Engine, monitor: InvariantMonitor, seconds: float) -> None:
    """Sample until the journal's clock moved `seconds` on, or a violation was seen."""
    with db.connect() as conn:
        until = conn.execute(text("SELECT now() + make_interval(secs => :s)"), {"s": seconds})
        deadline = until.scalar_one()
    pace = threading.Event()
    while not monitor.violations:
        monitor.sample(last=True)
        with db.connect() as conn:
            if conn.execute(text("SELECT now() >= :d"), {"d": deadline}).scalar_one():
                return
        pace.wait(0.05)


def _operator_transaction(database: Database) -> None:
    with database.transaction() as session:
        session.execute(text("SELECT 1"))


@pytest.fixture
def operator_db(db: Engine, database_url: str) -> Iterator[Database]:
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
    yield database
    database.dispose()


def test_a_reply_never_woken_counts_only_while_an_operator_is_live(
    db: Engine, operator_db: Database
) -> None:
    _, item = _owed_reply(db)
    monitor = _monitor(db)
    monitor.wake_within = 0.5
    # No operator: the wake waits, rightly, however long.
    _sample_for(db, monitor, 1.5)
    assert monitor.violations == []
    # An operator's login is live (it ended a transaction just now) and never asks.
    _operator_transaction(operator_db)
    _sample_for(db, monitor, 5)
    assert monitor.stop().violations == [
        f"reply never woken: item {item} reply 1 owed its wake past 0.5 s with an operator live"
    ]


def test_a_reply_the_sweeper_wakes_is_no_violation(db: Engine, operator_db: Database) -> None:
    agent, _ = _owed_reply(db)
    monitor = _monitor(db)
    monitor.wake_within = 0.5
    monitor.sample(last=True)
    # The sweeper's reply-wakes pass, as the operator's login: the wake's run is queued.
    woken = wake_for_waiting_replies(operator_db)
    assert [wake.owed.agent_id for wake in woken] == [agent]
    _sample_for(db, monitor, 1.5)
    # The run takes the reply: answered, never owed again.
    run_id = woken[0].result.run_id if woken[0].result else None
    assert run_id is not None
    with Session(db) as session, session.begin():
        assert journal.claim_run(session, run_id)
        assert journal.succeed_run(session, run_id, "done")
    _operator_transaction(operator_db)
    _sample_for(db, monitor, 1.5)
    assert monitor.stop().violations == []
