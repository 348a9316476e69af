"""What the HTTP API reads and writes through services/inbox.py, at the database:
owner-scoped queue pages, the revision history, replies over an expected revision,
idempotency keys under real parallel connections (migration 0010_api)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.db.inbox.people import QueuePosition
from achilles.domain.inbox import ItemState, ReplyChannel, ReplyKind, ReplyRefusal
from achilles.errors import NotFound
from achilles.services import inbox as service
from achilles.services.idempotency import (
    IdempotencyKeyReused,
    IdempotentRequest,
    Once,
    Replayed,
    StoredResponse,
)
from tests.db import inbox_support as box
from tests.db.factories import make_agent, make_owner
from tests.db.test_inbox_wake import FakeRequester


@pytest.fixture
def database(database_url: str, db: Engine) -> Iterator[Database]:
    handle = Database(database_url, pool_size=25)
    yield handle
    handle.dispose()


def _reply(
    database: Database,
    item_id: int,
    *,
    expected_revision: int | None = None,
    owner_key: str | None = None,
    by: str | None = None,
    once: Once[service.ReplyReceipt] | None = None,
) -> service.ReplyReceipt:
    return service.reply(
        database,
        item_id,
        "Use Postgres",
        requester=FakeRequester(),
        expected_revision=expected_revision,
        owner_key=owner_key,
        by=by,
        once=once,
    )


def test_the_owner_queue_is_blocked_first_in_keyset_pages_and_only_mine(
    db: Engine, database: Database
) -> None:
    me = make_owner(db)
    first, second = make_agent(db, me), make_agent(db, me)
    other = make_agent(db)
    tracked = box.ask(db, first, key="t", state=ItemState.TRACKED).item
    blocked_a = box.ask(db, second, key="a").item
    done = box.ask(db, first, key="d", state=ItemState.DONE).item
    blocked_b = box.ask(db, first, key="b").item
    box.ask(db, other, key="theirs")

    pages, after = [], None
    while True:
        page = service.owner_inbox(database, me, after=after, limit=2)
        pages.append([listing.item.id for listing in page])
        if len(page) < 2:
            break
        last = page[-1].item
        after = QueuePosition(blocked=last.state is ItemState.BLOCKED, item_id=last.id)
    assert pages == [[blocked_a.id, blocked_b.id], [tracked.id, done.id], []]

    only_done = service.owner_inbox(database, me, states=(ItemState.DONE,), limit=10)
    assert [listing.item.id for listing in only_done] == [done.id]
    blocked_only = (ItemState.BLOCKED,)
    first_blocked = service.owner_inbox(database, me, states=blocked_only, limit=1)
    assert [listing.item.id for listing in first_blocked] == [blocked_a.id]
    after_first = QueuePosition(blocked=True, item_id=blocked_a.id)
    rest = service.owner_inbox(database, me, states=blocked_only, after=after_first, limit=5)
    assert [listing.item.id for listing in rest] == [blocked_b.id]
    past = QueuePosition(blocked=False, item_id=tracked.id)
    assert service.owner_inbox(database, me, states=blocked_only, after=past, limit=5) == []
    with pytest.raises(NotFound):
        service.owner_inbox(database, me, agent_ref=str(other), limit=10)
    mine = service.owner_inbox(database, me, agent_ref=str(second), limit=10)
    assert [listing.item.id for listing in mine] == [blocked_a.id]


def test_items_follow_their_agent_to_a_new_owner(db: Engine, database: Database) -> None:
    old, new = make_owner(db), make_owner(db)
    agent = make_agent(db, old)
    item = box.ask(db, agent).item
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET user_id = (SELECT id FROM users WHERE key = :k) WHERE id = :a"),
            {"k": new, "a": agent},
        )
    assert service.owner_inbox(database, old, limit=10) == []
    assert [x.item.id for x in service.owner_inbox(database, new, limit=10)] == [item.id]


def test_the_history_keeps_every_revision_and_who_replied_how(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    agent = make_agent(db, owner)
    item = box.ask(db, agent, question="Which database?").item
    _reply(database, item.id, by=owner, expected_revision=1)
    box.take(db, item.id)
    service.reply(
        database,
        item.id,
        "Which one do you mean?",
        kind=ReplyKind.CLARIFY,
        channel=ReplyChannel.CHAT,
        requester=FakeRequester(),
    )
    box.ask(db, agent, question="Which database, Postgres or SQLite?")

    history = service.item_history(database, item.id, owner_key=owner)
    changes = [
        (r.revision, r.change, r.reply, r.reply_channel, r.reply_by) for r in history.revisions
    ]
    assert changes == [
        (1, "asked", None, None, None),
        (2, "replied", "Use Postgres", ReplyChannel.INBOX, owner),
        (3, "replied", "Which one do you mean?", ReplyChannel.CHAT, None),
        (4, "updated", None, None, None),
    ]
    assert history.revisions[3].question == "Which database, Postgres or SQLite?"
    assert history.details.listing.item.reply is not None
    assert history.details.listing.item.reply.by is None  # the last reply came via the CLI
    with pytest.raises(NotFound):
        service.item_history(database, item.id, owner_key=make_owner(db))


def test_a_stale_revision_or_another_owner_writes_nothing(db: Engine, database: Database) -> None:
    owner = make_owner(db)
    item = box.ask(db, make_agent(db, owner)).item

    stale = _reply(database, item.id, expected_revision=7, owner_key=owner)
    assert stale.refusal is ReplyRefusal.STALE_REVISION
    with pytest.raises(NotFound):
        _reply(database, item.id, expected_revision=1, owner_key=make_owner(db))
    assert box.read(db, item.id)[0].revision == 1

    written = _reply(database, item.id, expected_revision=1, owner_key=owner)
    assert written.accepted
    assert written.item.revision == 2
    chat = service.reply(
        database,
        item.id,
        "again",
        channel=ReplyChannel.CHAT,
        requester=FakeRequester(),
        expected_revision=2,
    )
    assert chat.refusal is ReplyRefusal.CHAT_RULE
    assert box.read(db, item.id)[0].revision == 2


def _render(receipt: service.ReplyReceipt) -> StoredResponse:
    return StoredResponse(200 if receipt.accepted else 409, {"revision": receipt.item.revision})


def test_one_key_is_one_write_under_parallel_connections(db: Engine, database: Database) -> None:
    owner = make_owner(db)
    item = box.ask(db, make_agent(db, owner)).item
    writers = 16
    barrier = threading.Barrier(writers)
    once = Once(IdempotentRequest(owner, "key-1", "fingerprint"), _render)

    def attempt(_: int) -> tuple[str, object]:
        barrier.wait()
        try:
            receipt = _reply(database, item.id, once=once)
        except Replayed as replay:
            return "replayed", replay.response.body
        return "written", _render(receipt).body

    with ThreadPoolExecutor(writers) as pool:
        outcomes = list(pool.map(attempt, range(writers)))

    assert sorted(kind for kind, _ in outcomes) == ["replayed"] * (writers - 1) + ["written"]
    assert {str(body) for _, body in outcomes} == {str({"revision": 2})}
    current = box.read(db, item.id)[0]
    assert (current.revision, current.reply_serial) == (2, 1)

    with pytest.raises(IdempotencyKeyReused):
        _reply(database, item.id, once=Once(IdempotentRequest(owner, "key-1", "other"), _render))
    # Keys are per caller: another person's equal key is their own.
    other = Once(IdempotentRequest("someone-else", "key-1", "fingerprint"), _render)
    assert _reply(database, item.id, once=other).item.revision == 3


def test_an_expired_key_is_a_new_request(db: Engine, database: Database) -> None:
    owner = make_owner(db)
    item = box.ask(db, make_agent(db, owner)).item
    once = Once(IdempotentRequest(owner, "k", "f"), _render)
    _reply(database, item.id, once=once)
    with db.begin() as conn:
        conn.execute(text("UPDATE api_idempotency_keys SET created_at = now() - interval '25 h'"))
    assert _reply(database, item.id, once=once).item.revision == 3
