"""Approvals over HTTP (issue 38): `GET`/`POST /v1/inbox/{id}/approval`, a real uvicorn,
real OIDC tokens, the session's PostgreSQL. The owner reads the call exactly as it will
be made and decides once; another owner sees nothing; a decided or expired approval and
an item that asks none are refused with nothing written."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.tools import approvals
from achilles.domain.mcp_tools import APPROVAL_TTL, arguments_digest
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import catalogue
from tests.api.conftest import ServedApi, Tokens
from tests.api.support import assert_problem, bearer, database_snapshot, make_cr_agent

ARGUMENTS = {"entities": [{"name": "<script>alert(1)</script>", "entityType": "x"}]}


def _approval_item(db: Engine, database: Database, agent_id: int) -> int:
    spec = AgentToolSpec.model_validate(
        {"implementation": "mcp", "mcp": {"url": "http://127.0.0.1:9/mcp"}}
    )
    tool_id = catalogue.mirror_tool(database, "memory-api", spec).tool_id
    with Session(db) as session, session.begin():
        item = board.ask(session, agent_id, f"approval-{agent_id}", "May I create entities?").item
        now = session.execute(text("SELECT now()")).scalar_one()
        approvals.create_approval(
            session, agent_id=agent_id, tool_id=tool_id, item_id=item.id,
            mcp_tool="create_entities", arguments=ARGUMENTS, digest=arguments_digest(ARGUMENTS),
            reason="remember", run_id=0, expires_at=now + APPROVAL_TTL,
        )  # fmt: skip
    return item.id


def _post(api: ServedApi, token: str, item_id: int, body: Any) -> httpx.Response:
    return httpx.post(
        f"{api.url}/v1/inbox/{item_id}/approval", json=body, headers=bearer(token), timeout=30
    )


def _get(api: ServedApi, token: str, item_id: int) -> httpx.Response:
    return httpx.get(f"{api.url}/v1/inbox/{item_id}/approval", headers=bearer(token), timeout=30)


def test_the_owner_reads_the_call_and_decides_it_once(
    api: ServedApi, tokens: Tokens, db: Engine, api_database: Database
) -> None:
    item_id = _approval_item(db, api_database, make_cr_agent(db, "alice", name="memo"))
    alice, bob = tokens("alice"), tokens("bob")

    shown = _get(api, alice, item_id)
    assert shown.status_code == 200, shown.text
    body = shown.json()
    assert (body["tool"], body["agent_tool"], body["state"]) == (
        "create_entities",
        "memory-api",
        "pending",
    )
    assert body["arguments"] == ARGUMENTS  # as stored: the page escapes it, the API does not
    assert body["reason"] == "remember"
    assert _get(api, bob, item_id).status_code == 404

    before = database_snapshot(db)
    assert _post(api, bob, item_id, {"decision": "approve"}).status_code == 404
    assert database_snapshot(db) == before

    decided = _post(api, alice, item_id, {"decision": "approve", "note": "go"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["approval"]["state"] == "approved"
    assert decided.json()["approval"]["decided_by"] == "alice"
    with db.connect() as conn:
        reply = conn.execute(
            text("SELECT reply, reply_by FROM agent_inbox_items WHERE id = :i"), {"i": item_id}
        ).one()
    assert tuple(reply) == ("approved: go", "alice")

    before = database_snapshot(db)
    again = _post(api, alice, item_id, {"decision": "reject"})
    assert_problem(again, 409)
    assert again.json()["type"].endswith("approval-decided")
    assert database_snapshot(db) == before


def test_an_expired_approval_and_a_plain_item_are_refused(
    api: ServedApi, tokens: Tokens, db: Engine, api_database: Database
) -> None:
    agent_id = make_cr_agent(db, "alice", name="late")
    item_id = _approval_item(db, api_database, agent_id)
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE tool_approvals SET expires_at = now() - interval '1 s' WHERE item_id = :i"
            ),
            {"i": item_id},
        )
    with Session(db) as session, session.begin():
        plain = board.ask(session, agent_id, "plain", "Ship it?").item.id
    alice = tokens("alice")

    before = database_snapshot(db)
    late = _post(api, alice, item_id, {"decision": "approve"})
    assert_problem(late, 409)
    assert late.json()["type"].endswith("approval-expired")
    assert _post(api, alice, plain, {"decision": "approve"}).status_code == 404
    assert _post(api, alice, item_id, {"decision": "maybe"}).status_code in (400, 422)
    assert database_snapshot(db) == before
