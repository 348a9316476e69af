"""`GET /v1/runs` (keyset pages, filters, owner scope) and `GET /v1/runs/{id}`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Engine

from tests.api.conftest import ServedApi, Tokens
from tests.api.support import add_runs, assert_problem, bearer, make_cr_agent

START = datetime(2026, 11, 2, 9, tzinfo=UTC)


def _runs(api: ServedApi, token: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{api.url}/v1/runs", params=params, headers=bearer(token), timeout=10)


def _ids(response: httpx.Response) -> list[int]:
    assert response.status_code == 200, response.text
    return [run["id"] for run in response.json()["items"]]


def test_my_runs_newest_first_and_only_mine(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    first = make_cr_agent(db, "alice", name="first")
    second = make_cr_agent(db, "alice", namespace="home", name="second")
    bobs = make_cr_agent(db, "bob", name="bobs")
    mine = add_runs(db, first, 4) + add_runs(db, second, 3, state="failed")
    add_runs(db, bobs, 5)

    response = _runs(api, tokens("alice"))

    assert _ids(response) == sorted(mine, reverse=True)
    run = response.json()["items"][0]
    assert run["agent"] == {"id": second, "namespace": "home", "name": "second"}
    assert run["owner"] == "alice"
    assert run["state"] == "failed"
    assert run["reason"] == "error"
    assert run["error"] == "boom"
    assert response.json()["next_cursor"] is None


def test_filters(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    agent = make_cr_agent(db, "alice", name="helper")
    other = make_cr_agent(db, "alice", name="other")
    early = add_runs(db, agent, 3, start=START)
    failed = add_runs(db, agent, 2, state="failed", start=START + timedelta(hours=1))
    skipped = add_runs(db, other, 2, state="skipped", start=START + timedelta(hours=2))
    token = tokens("alice")

    assert _ids(_runs(api, token, agent="team/helper")) == sorted(early + failed, reverse=True)
    assert _ids(_runs(api, token, agent=str(other))) == sorted(skipped, reverse=True)
    by_state = _runs(api, token, state=["failed", "skipped"])
    assert _ids(by_state) == sorted(failed + skipped, reverse=True)
    window = _runs(
        api,
        token,
        since=(START + timedelta(minutes=30)).isoformat(),
        until=(START + timedelta(hours=2)).isoformat(),
    )
    assert _ids(window) == sorted(failed, reverse=True)


def test_pages_are_stable_while_runs_are_added(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    agent = make_cr_agent(db, "alice", name="helper")
    other = make_cr_agent(db, "alice", name="other")
    existing = add_runs(db, agent, 4) + add_runs(db, other, 3)
    token = tokens("alice")

    walked: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = _runs(api, token, **params)
        walked += _ids(page)
        # New runs arrive between pages: they are newer than every page, so no run
        # shifts into or out of the pages still to come.
        add_runs(db, agent, 2, start=datetime.now(UTC))
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break

    assert walked == sorted(existing, reverse=True)


def test_one_agent_in_pages(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    agent = make_cr_agent(db, "alice", name="helper")
    ids = add_runs(db, agent, 5)
    token = tokens("alice")
    first = _runs(api, token, agent="team/helper", limit=2)
    second = _runs(api, token, agent="team/helper", limit=2, cursor=first.json()["next_cursor"])
    third = _runs(api, token, agent="team/helper", limit=2, cursor=second.json()["next_cursor"])
    assert _ids(first) + _ids(second) + _ids(third) == sorted(ids, reverse=True)
    assert third.json()["next_cursor"] is None


def test_one_run_with_its_output(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    agent = make_cr_agent(db, "alice", name="helper")
    long_output = "Résumé ✓ " + "x" * 1000
    (run_id,) = add_runs(db, agent, 1, output=long_output, start=START)

    response = httpx.get(f"{api.url}/v1/runs/{run_id}", headers=bearer(tokens("alice")), timeout=10)

    assert response.status_code == 200, response.text
    run = response.json()
    assert run["output"] == long_output
    assert run["output_preview"] == long_output[:280]
    assert run["state"] == "succeeded"
    assert run["trigger"] == "manual"
    assert run["tokens_used"] == 10
    assert datetime.fromisoformat(run["queued_at"]) == START
    assert datetime.fromisoformat(run["started_at"]) == START
    assert datetime.fromisoformat(run["finished_at"]) == START + timedelta(seconds=30)


def test_another_owners_runs_read_as_missing(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    (bobs_run,) = add_runs(db, make_cr_agent(db, "bob", name="bobs"), 1)
    token = tokens("alice")
    theirs = httpx.get(f"{api.url}/v1/runs/{bobs_run}", headers=bearer(token), timeout=10)
    missing = httpx.get(f"{api.url}/v1/runs/{bobs_run + 1000}", headers=bearer(token), timeout=10)
    assert assert_problem(theirs, 404)["detail"] == f"run {bobs_run} not found"
    assert assert_problem(missing, 404)["detail"] == f"run {bobs_run + 1000} not found"
    by_agent = _runs(api, token, agent="team/bobs")
    assert assert_problem(by_agent, 404)["detail"] == "agent team/bobs not found"
    assert _ids(_runs(api, token)) == []
