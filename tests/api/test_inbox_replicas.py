"""Two API replicas (two uvicorn servers, each its own app and pool) on one database, 40
people replying at once: no reply lost, none duplicated.

Each writer is a careful client: it reads the item, replies over that revision with its
own Idempotency-Key, and sends that same request to *both* replicas at once (a retry
after a response that got lost, landing on the other pod behind the Service). A 412 means
someone else replied first: read again and reply over the new revision. At the end every
writer's reply is in the item's history exactly once, and both copies of each request got
the same answer (the same response for the write; 412 both, for a stale read)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import Engine, text

from achilles.api.app import create_app
from achilles.api.settings import ApiSettings
from achilles.db.database import Database
from tests.api.conftest import Tokens
from tests.api.support import RecordingRunRequester, bearer, make_cr_agent, served
from tests.db import inbox_support as box

WRITERS = 40
ITEMS = 4
ATTEMPTS = 60  # a writer loses at most WRITERS - 1 races per item; bounded, never hit


@pytest.fixture(scope="module")
def replicas(api_settings: ApiSettings, database_url: str) -> Iterator[tuple[str, str]]:
    databases = [
        Database(database_url, pool_size=5, application_name=f"replica-{i}") for i in (1, 2)
    ]
    apps = [create_app(api_settings, d, run_requester=RecordingRunRequester()) for d in databases]
    try:
        with served(apps[0]) as first, served(apps[1]) as second:
            yield first, second
    finally:
        for database in databases:
            database.dispose()


def test_forty_writers_through_two_replicas_lose_and_duplicate_nothing(
    replicas: tuple[str, str], tokens: Tokens, db: Engine
) -> None:
    agent = make_cr_agent(db, "alice")
    items = [box.ask(db, agent, key=f"q{i}").item.id for i in range(ITEMS)]
    token = tokens("alice")
    barrier = threading.Barrier(WRITERS)
    mismatches: list[str] = []

    def write(writer: int) -> int:
        item_id = items[writer % ITEMS]
        text_ = f"reply of writer {writer}"
        headers = {**bearer(token), "Idempotency-Key": f"writer-{writer}"}
        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(2) as both:
            barrier.wait()
            for attempt in range(ATTEMPTS):
                read = client.get(f"{replicas[attempt % 2]}/v1/inbox/{item_id}", headers=headers)
                assert read.status_code == 200, read.text
                revision = read.json()["revision"]

                def send(url: str, revision: int = revision) -> httpx.Response:
                    return client.post(
                        f"{url}/v1/inbox/{item_id}/reply",
                        json={"text": text_},
                        headers={**headers, "If-Match": str(revision)},
                    )

                first, second = both.map(send, replicas)
                # The same answer twice: one write replayed, or two refusals (a refusal is
                # not remembered, so each names the revision current when it was judged).
                if first.status_code != second.status_code or (
                    first.status_code == 200 and first.json() != second.json()
                ):
                    mismatches.append(f"writer {writer}: {first.text} != {second.text}")
                if first.status_code == 200:
                    replayed = {r.headers.get("idempotent-replayed") for r in (first, second)}
                    if replayed != {None, "true"}:
                        mismatches.append(f"writer {writer}: not one write and one replay")
                    return attempt
                assert first.status_code == 412, first.text
        raise AssertionError(f"writer {writer} never got its reply in")

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(write, range(WRITERS)))

    assert mismatches == []
    with db.connect() as conn:
        replies = conn.execute(
            text("SELECT item_id, reply FROM agent_inbox_item_revisions WHERE change = 'replied'")
        ).all()
        serials = conn.execute(
            text("SELECT id, reply_serial FROM agent_inbox_items WHERE agent_id = :a"),
            {"a": agent},
        ).all()
    expected = sorted((items[w % ITEMS], f"reply of writer {w}") for w in range(WRITERS))
    assert sorted((row.item_id, row.reply) for row in replies) == expected
    final = {row.id: row.reply_serial for row in serials}
    assert final == {item_id: WRITERS // ITEMS for item_id in items}
