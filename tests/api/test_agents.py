"""`GET /v1/me`, `GET /v1/agents` and `POST /v1/agents/{namespace}/{name}/runs` through a
real uvicorn, real tokens and the session's PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import Engine, func, update
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent
from achilles.db.journal.settings import database_now, load_settings
from achilles.domain.budget import week_window
from tests.api.conftest import ServedApi, Tokens
from tests.api.support import add_runs, assert_problem, bearer, database_snapshot, make_cr_agent
from tests.db.factories import set_settings


def test_me_is_the_token_subject(api: ServedApi, tokens: Tokens) -> None:
    response = httpx.get(f"{api.url}/v1/me", headers=bearer(tokens("alice")), timeout=10)
    assert response.status_code == 200, response.text
    assert response.json() == {"user_key": "alice", "is_admin": False, "via": "oidc"}


def _week(engine: Engine) -> datetime:
    """The first instant of the budget week the database is in."""
    with Session(engine) as session:
        return week_window(database_now(session), load_settings(session).zone).start


def test_my_agents_with_their_status_columns(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    set_settings(db, agent_weekly_token_budget=1000)
    helper = make_cr_agent(
        db, "alice", name="helper", schedule={"type": "interval", "every_hours": 6}
    )
    make_cr_agent(db, "alice", namespace="home", name="off", enabled=False, model_name=None)
    make_cr_agent(db, "bob", name="bobs")
    # Inside this budget week whatever the hour: an hour ago is last week early on Sunday.
    runs = add_runs(db, helper, 3, start=max(datetime.now(UTC) - timedelta(hours=1), _week(db)))

    response = httpx.get(f"{api.url}/v1/agents", headers=bearer(tokens("alice")), timeout=10)

    assert response.status_code == 200, response.text
    page = response.json()
    assert page["next_cursor"] is None
    by_name = {agent["name"]: agent for agent in page["items"]}
    assert sorted(by_name) == ["helper", "off"]
    helper_doc, off = by_name["helper"], by_name["off"]
    assert helper_doc["namespace"] == "team"
    assert helper_doc["owner"] == "alice"
    assert helper_doc["enabled"] is True
    assert helper_doc["admin_paused"] is False
    assert helper_doc["phase"] == "Ready"
    assert helper_doc["schedule"] == "every 6h"
    assert helper_doc["model"] is not None
    assert helper_doc["last_run"]["id"] == runs[-1]
    assert helper_doc["last_run"]["state"] == "succeeded"
    # The owner's budget: every agent of alice's shows the same week's use.
    assert helper_doc["weekly_tokens"]["used"] == 30
    assert helper_doc["weekly_tokens"]["limit"] == 1000
    assert off["weekly_tokens"] == helper_doc["weekly_tokens"]
    assert off["enabled"] is False
    assert off["phase"] == "Disabled"
    assert off["model"] is None
    assert off["schedule"] == "manual"
    assert off["last_run"] is None


def test_a_suspended_agent_reads_suspended_as_kubectl_shows_it(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    """Auto-suspend (issue 22) in the portal's list: the phase `kubectl get agents` shows,
    unless a closed lock explains more. Auto-suspend switches the agent off and records
    why (issue 36 item 7: the owner's lock, `suspended_at`), as the scheduler does."""
    hourly = {"type": "interval", "every_hours": 1}
    suspended = make_cr_agent(db, "alice", name="failing", schedule=hourly)
    paused = make_cr_agent(db, "alice", name="paused", schedule=hourly, admin_paused=True)
    with Session(db) as session, session.begin():
        session.execute(
            update(Agent)
            .where(Agent.id.in_([suspended, paused]))
            .values(enabled=False, suspended_at=func.now(), next_run_at=None)
        )
    response = httpx.get(f"{api.url}/v1/agents", headers=bearer(tokens("alice")), timeout=10)
    assert response.status_code == 200, response.text
    by_name = {agent["name"]: agent for agent in response.json()["items"]}
    assert by_name["failing"]["phase"] == "Suspended"
    assert by_name["failing"]["next_run_at"] is None
    # Paused by an admin too: not the only closed lock, so the first one (docs/operator.md).
    assert by_name["paused"]["phase"] == "Disabled"


def test_agents_come_in_pages(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    ids = [make_cr_agent(db, "alice") for _ in range(5)]
    seen: list[int] = []
    cursor = None
    for _ in range(5):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        response = httpx.get(
            f"{api.url}/v1/agents", params=params, headers=bearer(tokens("alice")), timeout=10
        )
        assert response.status_code == 200, response.text
        page = response.json()
        seen += [agent["id"] for agent in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(ids)


def test_another_owners_agents_only_for_admins(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    make_cr_agent(db, "bob", name="bobs")
    for owner in ("bob", "nobody-at-all", "*"):
        response = httpx.get(
            f"{api.url}/v1/agents",
            params={"owner": owner},
            headers=bearer(tokens("alice")),
            timeout=10,
        )
        # The same answer whether bob exists or not: nothing learnt about him.
        assert "only an admin" in assert_problem(response, 403)["detail"]


def _post(api: ServedApi, token: str, path: str, **kwargs: object) -> httpx.Response:
    return httpx.post(f"{api.url}{path}", headers=bearer(token), timeout=10, **kwargs)  # type: ignore[arg-type]


def test_a_manual_run_is_requested_once_per_idempotency_key(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    make_cr_agent(db, "alice", name="helper")
    token = tokens("alice")
    headers = {**bearer(token), "Idempotency-Key": "8c4f-first"}
    path = f"{api.url}/v1/agents/team/helper/runs"

    first = httpx.post(path, headers=headers, timeout=10)
    again = httpx.post(path, headers=headers, timeout=10)
    other = httpx.post(path, headers={**headers, "Idempotency-Key": "8c4f-second"}, timeout=10)

    assert first.status_code == 202, first.text
    body = first.json()
    assert body["agent"] == "team/helper"
    assert body["runs_url"].startswith("/v1/runs?agent=team/helper&request_key=")
    assert again.status_code == 202
    assert again.json() == body
    assert again.headers["idempotent-replayed"] == "true"
    assert other.status_code == 202
    assert other.json()["request_key"] != body["request_key"]
    assert [key for _, _, key in api.requester.requests] == [
        body["request_key"],
        other.json()["request_key"],
    ]


def test_a_closed_lock_refuses_the_run(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    make_cr_agent(db, "alice", name="paused", admin_paused=True, enabled=False)
    before = database_snapshot(db)
    response = _post(api, tokens("alice"), "/v1/agents/team/paused/runs")
    problem = assert_problem(response, 409)
    assert problem["reasons"] == ["disabled", "admin_paused"]
    assert "switched the agent off" in problem["detail"]
    assert problem["type"].endswith("/run-refused")
    assert api.requester.requests == []
    assert database_snapshot(db) == before


def test_another_owners_agent_reads_as_missing(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    make_cr_agent(db, "bob", name="bobs")
    before = database_snapshot(db)
    theirs = assert_problem(_post(api, tokens("alice"), "/v1/agents/team/bobs/runs"), 404)
    missing = assert_problem(_post(api, tokens("alice"), "/v1/agents/team/ghost/runs"), 404)
    assert theirs["detail"] == "agent team/bobs not found"
    assert missing["detail"] == "agent team/ghost not found"
    assert api.requester.requests == []
    assert database_snapshot(db) == before
