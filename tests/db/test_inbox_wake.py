"""A reply wakes the agent through the `RunRequester` it is given (a fake here; the
Kubernetes one is exercised in tests/cluster/install/test_inbox_wake.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.domain.inbox import ItemState
from achilles.errors import ClusterUnavailable
from achilles.services import inbox as service
from tests.db import inbox_support as box
from tests.db.factories import make_agent


@dataclass
class FakeRequester:
    refuse_with: Exception | None = None
    requests: list[tuple[str, str, datetime]] = field(default_factory=list)

    def request(self, namespace: str, name: str, at: datetime) -> str:
        if self.refuse_with is not None:
            raise self.refuse_with
        self.requests.append((namespace, name, at))
        return f"request-{len(self.requests)}"


def _waking_agent(db: Engine, database: Database, *, with_resource: bool = True) -> int:
    agent_id = make_agent(db, name="waker")
    service.wake_on_reply(database, str(agent_id), enabled=True)
    if with_resource:
        with db.begin() as conn:
            conn.execute(
                text("UPDATE agents SET cr_namespace = 'team-a', cr_name = 'waker' WHERE id = :a"),
                {"a": agent_id},
            )
    return agent_id


def test_a_reply_to_a_blocked_item_requests_one_run_at_the_replys_time(
    db: Engine, database: Database
) -> None:
    item = box.ask(db, _waking_agent(db, database)).item
    requester = FakeRequester()

    receipt = service.reply(database, item.id, "Use Postgres", requester=requester)

    assert receipt.accepted
    assert receipt.item.reply is not None
    assert requester.requests == [("team-a", "waker", receipt.item.reply.handled_at)]
    assert receipt.wake == service.WakeOutcome(
        requested=True, delivered=True, agent_resource="team-a/waker", request="request-1"
    )


def test_no_wake_without_the_owners_consent_or_a_blocked_item(
    db: Engine, database: Database
) -> None:
    agent_id = _waking_agent(db, database)
    tracked = box.ask(db, agent_id, key="t", state=ItemState.TRACKED).item
    requester = FakeRequester()
    assert service.reply(database, tracked.id, "fyi", requester=requester).wake.requested is False

    service.wake_on_reply(database, str(agent_id), enabled=False)
    blocked = box.ask(db, agent_id, key="b").item
    assert service.reply(database, blocked.id, "x", requester=requester).wake.requested is False
    assert requester.requests == []


def test_an_undeliverable_wake_is_reported_and_the_reply_stands(
    db: Engine, database: Database
) -> None:
    item = box.ask(db, _waking_agent(db, database)).item
    requester = FakeRequester(refuse_with=ClusterUnavailable("no cluster"))

    receipt = service.reply(database, item.id, "Use Postgres", requester=requester)

    # The client's text (an address) stays in the log, not in the answer (issue 37).
    assert receipt.wake == service.WakeOutcome(
        requested=True,
        agent_resource="team-a/waker",
        detail="run not requested: the cluster's API server cannot be reached right now",
    )
    stored, _ = box.read(db, item.id)
    assert stored.reply is not None
    assert stored.reply.text == "Use Postgres"


def test_an_agent_without_a_resource_is_not_asked_for(db: Engine, database: Database) -> None:
    item = box.ask(db, _waking_agent(db, database, with_resource=False)).item
    requester = FakeRequester()

    wake = service.reply(database, item.id, "Use Postgres", requester=requester).wake

    assert (wake.requested, wake.delivered, requester.requests) == (True, False, [])
    assert wake.detail is not None
    assert "no Agent resource on record" in wake.detail
