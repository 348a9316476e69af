"""The inbox over HTTP: a real uvicorn, real OIDC tokens, the session's PostgreSQL.

Every refusal asserts that nothing was written (a digest of every table)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.domain.inbox import ItemState
from achilles.services import inbox as service
from tests.api.conftest import ServedApi, Tokens
from tests.api.support import assert_problem, bearer, database_snapshot, make_cr_agent
from tests.db import inbox_support as box


def _post_reply(
    api: ServedApi,
    token: str,
    item_id: int | str,
    body: Any,
    *,
    if_match: str | None = None,
    key: str | None = None,
) -> httpx.Response:
    headers = bearer(token)
    if if_match is not None:
        headers["If-Match"] = if_match
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{api.url}/v1/inbox/{item_id}/reply", json=body, headers=headers, timeout=30)


def _raw_reply(
    api: ServedApi, token: str, item_id: int, content: bytes, *, if_match: str
) -> httpx.Response:
    headers = {**bearer(token), "If-Match": if_match, "Content-Type": "application/json"}
    return httpx.post(
        f"{api.url}/v1/inbox/{item_id}/reply", content=content, headers=headers, timeout=30
    )


def _get(api: ServedApi, token: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{api.url}{path}", params=params, headers=bearer(token), timeout=30)


def _replies(db: Engine, item_id: int) -> list[tuple[int, str]]:
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT revision, reply FROM agent_inbox_item_revisions"
                " WHERE item_id = :i AND change = 'replied' ORDER BY revision"
            ),
            {"i": item_id},
        )
        return [(row.revision, row.reply) for row in rows]


def test_my_inbox_is_blocked_first_in_pages_and_never_anyone_elses(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    first = make_cr_agent(db, "alice", name="reports")
    second = make_cr_agent(db, "alice", name="mail")
    tracked = box.ask(db, first, key="t", state=ItemState.TRACKED).item
    blocked = [box.ask(db, second, key=f"b{i}").item for i in range(3)]
    box.ask(db, make_cr_agent(db, "bob"), key="bobs")
    token = tokens("alice")

    seen: list[int] = []
    cursor = None
    for _ in range(10):
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = _get(api, token, "/v1/inbox", **params)
        assert page.status_code == 200, page.text
        seen += [item["id"] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == [item.id for item in blocked] + [tracked.id]
    assert page.json()["next_cursor"] is None  # the last page says it is the last
    listed = _get(api, token, "/v1/inbox", agent="team/mail", state="blocked").json()["items"]
    assert [item["agent_name"] for item in listed] == ["mail"] * 3
    assert {item["owner"] for item in listed} == {"alice"}

    assert_problem(_get(api, token, "/v1/inbox", limit=0), 422)
    assert_problem(_get(api, token, "/v1/inbox", limit=501), 422)
    assert_problem(_get(api, token, "/v1/inbox", cursor="not-a-cursor"), 400)
    assert_problem(_get(api, token, "/v1/inbox", state="sleeping"), 422)
    assert_problem(_get(api, token, "/v1/inbox", agent="team/\u0000"), 422)
    assert_problem(_get(api, tokens("bob"), "/v1/inbox", agent="team/mail"), 404)
    assert_problem(_get(api, tokens("bob"), "/v1/inbox", owner="alice"), 403)
    mine = _get(api, token, "/v1/inbox", owner="alice", limit=10)
    assert [item["id"] for item in mine.json()["items"]] == seen


def test_an_item_with_its_history_and_etag_only_for_its_owner(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    item = box.ask(db, make_cr_agent(db, "alice"), question="Which database?").item
    replied = _post_reply(api, tokens("alice"), item.id, {"text": "Postgres"}, if_match='"1"')
    assert replied.status_code == 200, replied.text

    found = _get(api, tokens("alice"), f"/v1/inbox/{item.id}")
    assert found.status_code == 200, found.text
    assert found.headers["etag"] == '"2"'
    body = found.json()
    assert body["revision"] == 2
    assert body["reply"]["by"] == "alice"
    history = [
        (h["revision"], h["change"], h["reply_by"], h["reply_channel"]) for h in body["history"]
    ]
    assert history == [(1, "asked", None, None), (2, "replied", "alice", "inbox")]
    assert body["history"][1]["reply"] == "Postgres"

    assert_problem(_get(api, tokens("bob"), f"/v1/inbox/{item.id}"), 404)
    assert_problem(_get(api, tokens("alice"), "/v1/inbox/999999"), 404)
    assert_problem(_get(api, tokens("alice"), "/v1/inbox/abc"), 422)
    assert_problem(_get(api, tokens("alice"), f"/v1/inbox/{2**63}"), 422)


def test_refused_replies_write_nothing(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    item = box.ask(db, make_cr_agent(db, "alice")).item
    token = tokens("alice")
    before = database_snapshot(db)

    cases = [
        (_post_reply(api, token, item.id, {"text": "hi"}), 428),  # no If-Match
        (_post_reply(api, token, item.id, {"text": "hi"}, if_match='"7"'), 412),
        (_post_reply(api, token, item.id, {"text": "hi"}, if_match="W/1"), 400),
        (_post_reply(api, token, item.id, {"text": "hi", "urgent": True}, if_match="1"), 422),
        (_post_reply(api, token, item.id, {"text": "hi", "kind": "shout"}, if_match="1"), 422),
        (_post_reply(api, token, item.id, {"text": "   "}, if_match="1"), 400),
        (_post_reply(api, token, item.id, {"text": "a\u0000b"}, if_match="1"), 422),
        (_raw_reply(api, token, item.id, b'{"text": "\\ud800"}', if_match="1"), 422),
        (_raw_reply(api, token, item.id, b'{"text": "\xff"}', if_match="1"), 400),
        (_raw_reply(api, token, item.id, b'{"text": ', if_match="1"), 400),
        (_post_reply(api, tokens("bob"), item.id, {"text": "hi"}, if_match="1"), 404),
        (
            _post_reply(api, token, item.id, {"text": "hi"}, if_match="1", key="a key with spaces"),
            400,
        ),
    ]
    for response, status in cases:
        assert_problem(response, status)
    stale = cases[1][0].json()
    assert stale["current_revision"] == 1
    assert database_snapshot(db) == before

    # A chat reply over the inbox reply the agent has not taken: 409, nothing written.
    assert _post_reply(api, token, item.id, {"text": "first"}, if_match="1").status_code == 200
    before = database_snapshot(db)
    refused = _post_reply(
        api, token, item.id, {"text": "chat", "channel": "chat"}, if_match="2", key="k-chat"
    )
    assert assert_problem(refused, 409)["current_revision"] == 2
    assert database_snapshot(db) == before  # the key is not remembered either

    box.take(db, item.id)
    over_taken = _post_reply(
        api, token, item.id, {"text": "chat", "channel": "chat"}, if_match="2", key="k-chat"
    )
    assert over_taken.status_code == 200, over_taken.text
    assert _replies(db, item.id) == [(2, "first"), (3, "chat")]


def test_a_retried_key_gives_the_first_response_and_one_write(
    api: ServedApi, tokens: Tokens, db: Engine, api_database: Database
) -> None:
    agent = make_cr_agent(db, "alice", name="waker")
    service.wake_on_reply(api_database, str(agent), enabled=True)
    item = box.ask(db, agent).item
    token = tokens("alice")

    first = _post_reply(api, token, item.id, {"text": "Postgres"}, if_match="1", key="r-1")
    again = _post_reply(api, token, item.id, {"text": "Postgres"}, if_match='"1"', key="r-1")
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert again.json() == first.json()
    assert again.headers["etag"] == first.headers["etag"] == '"2"'
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert first.json()["wake"]["delivered"] is True  # the amended response, replayed too
    assert [request[:2] for request in api.requester.requests] == [("team", "waker")]
    assert _replies(db, item.id) == [(2, "Postgres")]

    before = database_snapshot(db)
    other_body = _post_reply(api, token, item.id, {"text": "SQLite"}, if_match="1", key="r-1")
    assert assert_problem(other_body, 422)["type"].endswith("idempotency-key-reused")
    assert database_snapshot(db) == before


@pytest.mark.parametrize("if_match", ["2", '"2"'])
def test_if_match_is_the_revision_bare_or_quoted(
    api: ServedApi, tokens: Tokens, db: Engine, if_match: str
) -> None:
    item = box.ask(db, make_cr_agent(db, "alice")).item
    box.ask(db, item.agent_id, question="Which database, really?")  # revision 2
    response = _post_reply(api, tokens("alice"), item.id, {"text": "x"}, if_match=if_match)
    assert response.status_code == 200, response.text
    assert response.json()["item"]["revision"] == 3


def test_an_inbox_reply_over_a_chat_reply_is_written_a_changed_question_is_412(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    """Seed 003 (issue 36 item 5): an inbox reply replaces the current reply whatever it
    is; `If-Match` protects a person from answering a question that changed, never from a
    chat reply that came while they wrote."""
    item = box.ask(db, make_cr_agent(db, "alice")).item
    token = tokens("alice")
    read = _get(api, token, f"/v1/inbox/{item.id}")
    assert read.headers["etag"] == '"1"'

    # Meanwhile a chat reply lands (no reply yet, so the chat rule lets it in).
    chat = _post_reply(
        api, token, item.id, {"text": "chat: SQLite", "channel": "chat"}, if_match="1"
    )
    assert chat.status_code == 200, chat.text
    inbox = _post_reply(api, token, item.id, {"text": "inbox: Postgres"}, if_match="1")
    assert inbox.status_code == 200, inbox.text
    assert inbox.json()["item"]["reply"]["text"] == "inbox: Postgres"
    assert _replies(db, item.id) == [(2, "chat: SQLite"), (3, "inbox: Postgres")]

    # The agent re-asks: a reply over the revision read before it is refused.
    box.take(db, item.id)
    box.ask(db, item.agent_id, question="Which database, for the archive?")  # revision 4
    before = database_snapshot(db)
    stale = _post_reply(api, token, item.id, {"text": "inbox: late"}, if_match="3")
    assert assert_problem(stale, 412)["current_revision"] == 4
    assert database_snapshot(db) == before
    assert _post_reply(api, token, item.id, {"text": "x"}, if_match="4").status_code == 200
