"""A reply's wake is never lost (seed 003: "the human will not wait for a decision
indefinitely"; issue 18 item 5), through the real database and the services the CLI and
the operator's sweeper call.

A reply that lands while the agent runs used to be a `skipped/already_running` wake and
nothing more: a manual-only agent's answered question then waited for ever. Now the run
that ends leaves the reply owed a wake, which the operator's pass turns into a run; the
cluster tier runs it end to end (tests/cluster/install/test_operator_convergence.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.domain.inbox import ItemState
from achilles.domain.runs import FailReason, RunState, RunTrigger, SkipReason
from achilles.errors import ClusterUnavailable
from achilles.k8s.annotations import format_run_request
from achilles.k8s.resources.agent import AgentSpec
from achilles.services import agent_events, reply_wakes
from achilles.services import inbox as inbox_service
from achilles.services.run_journal import RunJournal
from tests.db import inbox_support as box
from tests.db.factories import make_agent, make_model, make_owner


def _waking_agent(db: Engine, database: Database) -> int:
    agent_id = make_agent(db, name=f"waker-{make_owner(db)}")
    inbox_service.wake_on_reply(database, str(agent_id), enabled=True)
    return agent_id


def _manual(db: Engine, agent_id: int, key: str | None = None) -> journal.EnqueueResult:
    with Session(db) as session, session.begin():
        return journal.enqueue_run(session, agent_id, RunTrigger.MANUAL, request_key=key)


def _runs(db: Engine, agent_id: int) -> list[tuple[Any, ...]]:
    with db.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT state, reason, request_key FROM agent_runs WHERE agent_id = :a ORDER BY id"
            ),
            {"a": agent_id},
        )
        return [tuple(row) for row in rows]


def test_a_reply_during_a_run_wakes_the_agent_once_the_run_ends(
    db: Engine, database: Database
) -> None:
    agent_id = _waking_agent(db, database)
    item = box.ask(db, agent_id).item
    running = _manual(db, agent_id, "first")
    runner = RunJournal(database)
    assert runner.claim(running.run_id) is not None

    reply = box.reply(db, item.id, "Use Postgres").item.reply
    assert reply is not None
    # The reply's own wake (what `achilles inbox reply` annotates) is lost to the run.
    lost = _manual(db, agent_id, format_run_request(reply.handled_at))
    assert (lost.state, lost.reason) == (RunState.SKIPPED, SkipReason.ALREADY_RUNNING)
    assert reply_wakes.wake_for_waiting_replies(database) == []  # still running

    assert runner.succeed(running.run_id, "done, without the reply")
    woken = reply_wakes.wake_for_waiting_replies(database)

    assert [(w.owed.item_id, w.request) for w in woken] == [
        (item.id, format_run_request(reply.handled_at) + "+1")
    ]
    assert woken[0].result is not None
    assert woken[0].result.state is RunState.QUEUED
    assert reply_wakes.wake_for_waiting_replies(database) == []  # one wake, not two
    # The woken run takes the reply at its start (the runner's inbox start note).
    assert runner.claim(woken[0].result.run_id) is not None
    assert box.take(db, item.id) is not None
    assert runner.succeed(woken[0].result.run_id, "used the reply")
    assert reply_wakes.wake_for_waiting_replies(database) == []
    assert [state for state, _, _ in _runs(db, agent_id)] == ["succeeded", "skipped", "succeeded"]


def test_a_wake_that_never_reached_the_cluster_is_made_and_the_late_request_is_the_same_run(
    db: Engine, database: Database
) -> None:
    agent_id = _waking_agent(db, database)
    item = box.ask(db, agent_id).item
    reply = box.reply(db, item.id, "Go").item.reply
    assert reply is not None

    woken = reply_wakes.wake_for_waiting_replies(database)

    request = format_run_request(reply.handled_at)
    assert [w.request for w in woken] == [request]
    made = woken[0].result
    assert made is not None
    assert made.state is RunState.QUEUED
    # The reply's annotation arrives after all: answered by the same run, no second row.
    late = _manual(db, agent_id, request)
    assert late.duplicate_request
    assert late.run_id == made.run_id
    assert len(_runs(db, agent_id)) == 1


def test_no_wake_without_consent_an_open_lock_a_blocked_item_or_when_a_run_answered(
    db: Engine, database: Database
) -> None:
    silent = make_agent(db)  # the owner never allowed wakes
    box.reply(db, box.ask(db, silent).item.id)
    tracked = _waking_agent(db, database)  # a reply to an item that is not blocked
    box.reply(db, box.ask(db, tracked, state=ItemState.TRACKED).item.id)
    off = _waking_agent(db, database)  # switched off by its owner
    box.reply(db, box.ask(db, off).item.id)
    with db.begin() as conn:
        conn.execute(text("UPDATE agents SET enabled = false WHERE id = :a"), {"a": off})
    failed = _waking_agent(db, database)  # a run after the reply failed: it was answered
    box.reply(db, box.ask(db, failed).item.id)
    run = _manual(db, failed)
    runner = RunJournal(database)
    assert runner.claim(run.run_id) is not None
    assert runner.fail(run.run_id, FailReason.ERROR, "model unreachable")

    assert reply_wakes.wake_for_waiting_replies(database) == []

    # The owner switches the agent back on: its answered question wakes it now.
    with db.begin() as conn:
        conn.execute(text("UPDATE agents SET enabled = true WHERE id = :a"), {"a": off})
    assert [w.owed.agent_id for w in reply_wakes.wake_for_waiting_replies(database)] == [off]


def test_the_agent_spec_carries_the_owners_consent(db: Engine, database: Database) -> None:
    owner = make_owner(db)
    model = make_model(db)

    def reconcile(**spec: Any) -> int:
        obj = agent_events.AgentObject(
            uid="uid-consent",
            namespace="team",
            name="consent",
            generation=1,
            spec=AgentSpec.model_validate({"owner": owner, "prompt": "p", "model": model, **spec}),
            status={},
        )
        agent_id = agent_events.reconcile_agent(database, obj).agent_id
        assert agent_id is not None
        return agent_id

    agent_id = reconcile(wakeOnReply=True)
    assert inbox_service.wake_on_reply(database, str(agent_id)).wake_on_reply is True
    reconcile(wakeOnReply=False)
    assert inbox_service.wake_on_reply(database, str(agent_id)).wake_on_reply is False
    # A resource that does not say it leaves the CLI's setting alone.
    inbox_service.wake_on_reply(database, str(agent_id), enabled=True)
    reconcile()
    assert inbox_service.wake_on_reply(database, str(agent_id)).wake_on_reply is True


@dataclass
class SpecWriter:
    refuse_with: Exception | None = None
    writes: list[tuple[str, str, dict[str, object]]] = field(default_factory=list)

    def write(self, namespace: str, name: str, fields: dict[str, object]) -> None:
        if self.refuse_with is not None:
            raise self.refuse_with
        self.writes.append((namespace, name, fields))


def test_the_cli_setting_writes_the_agents_resource_when_it_has_one(
    db: Engine, database: Database
) -> None:
    standalone = make_agent(db)
    writer = SpecWriter()
    assert inbox_service.wake_on_reply(
        database, str(standalone), True, spec_writer=writer
    ) == inbox_service.WakeSetting(standalone, wake_on_reply=True)
    assert writer.writes == []  # no resource: the row is the setting

    with_resource = make_agent(db)
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET cr_namespace = 'team', cr_name = 'w' WHERE id = :a"),
            {"a": with_resource},
        )
    written = inbox_service.wake_on_reply(database, str(with_resource), True, spec_writer=writer)
    assert (written.agent_resource, written.resource_written) == ("team/w", True)
    assert writer.writes == [("team", "w", {"wakeOnReply": True})]

    unreachable = SpecWriter(refuse_with=ClusterUnavailable("the API server is unreachable"))
    refused = inbox_service.wake_on_reply(
        database, str(with_resource), False, spec_writer=unreachable
    )
    assert refused.wake_on_reply is False  # the row is written either way
    assert refused.resource_written is False
    assert refused.detail == "spec not written: the API server is unreachable"
