"""`GET /v1/runs/{id}/steps` and the run's `used` (issue 21), under the owner's scope."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Engine, insert
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun, AgentRunStep
from tests.api.conftest import ServedApi, Tokens
from tests.api.support import add_runs, assert_problem, bearer, make_cr_agent

AT = datetime(2026, 11, 2, 9, tzinfo=UTC)
DIGEST = hashlib.sha256(b"the composed prompt").digest()


USED = {
    "used_model": "gpt-small",
    "used_endpoint_host": "llm.example.com",
    "used_provider_model": "gpt-small-2026",
    "used_prompt_sha256": DIGEST,
    "used_tools": ["search_knowledge", "read_document", "inbox_ask"],
}


def _traced_run(db: Engine, agent_id: int) -> int:
    """A run that ended with its steps and what it used, as a runner records them (the
    runner writes them in tests/db/test_run_steps.py): a terminal row never changes, so
    the row is written whole."""
    with Session(db) as session, session.begin():
        run_id = session.execute(
            insert(AgentRun)
            .values(
                agent_id=agent_id,
                trigger="manual",
                state="succeeded",
                output="done",
                tokens_used=128,
                created_at=AT,
                started_at=AT,
                finished_at=AT + timedelta(seconds=30),
                **USED,
            )
            .returning(AgentRun.id)
        ).scalar_one()
    _steps(db, run_id)
    return run_id


def _steps(db: Engine, run_id: int) -> None:
    steps: list[dict[str, Any]] = [
        {
            "seq": 1,
            "kind": "model_call",
            "model": "gpt-small-2026",
            "input_tokens": 120,
            "output_tokens": 8,
            "finish_reason": "tool_calls",
        },
        {
            "seq": 2,
            "kind": "tool_call",
            "tool": "read_document",
            "status": "error",
            "argument_bytes": 17,
            "result_bytes": 40,
            "error": "document 9 does not exist",
        },
        {"seq": 3, "kind": "inbox_ask", "tool": "inbox_ask", "status": "ok"},
    ]
    with Session(db) as session, session.begin():
        session.execute(
            insert(AgentRunStep),
            [
                {
                    "run_id": run_id,
                    "started_at": AT + timedelta(seconds=step["seq"]),
                    "ended_at": AT + timedelta(seconds=step["seq"], milliseconds=250),
                    "latency_ms": 250.0,
                    **step,
                }
                for step in steps
            ],
        )


def _get(api: ServedApi, token: str, path: str) -> httpx.Response:
    return httpx.get(f"{api.url}{path}", headers=bearer(token), timeout=10)


def test_my_runs_steps_in_order(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    run_id = _traced_run(db, make_cr_agent(db, "alice", name="helper"))

    response = _get(api, tokens("alice"), f"/v1/runs/{run_id}/steps")

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["run_id"], body["truncated"]) == (run_id, False)
    items = body["items"]
    assert [(s["seq"], s["kind"]) for s in items] == [
        (1, "model_call"),
        (2, "tool_call"),
        (3, "inbox_ask"),
    ]
    model, tool, _ask = items
    assert (model["model"], model["input_tokens"], model["output_tokens"]) == (
        "gpt-small-2026",
        120,
        8,
    )
    assert model["tool"] is None
    assert (tool["tool"], tool["status"], tool["error"]) == (
        "read_document",
        "error",
        "document 9 does not exist",
    )
    assert (tool["argument_bytes"], tool["result_bytes"], tool["latency_ms"]) == (17, 40, 250.0)
    assert datetime.fromisoformat(tool["started_at"]) == AT + timedelta(seconds=2)


def test_the_run_says_what_it_used(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    agent = make_cr_agent(db, "alice", name="helper")
    used_run = _traced_run(db, agent)
    (unused_run,) = add_runs(db, agent, 1)
    token = tokens("alice")

    used = _get(api, token, f"/v1/runs/{used_run}").json()["used"]
    assert used == {
        "model": "gpt-small",
        "endpoint_host": "llm.example.com",
        "provider_model": "gpt-small-2026",
        "prompt_sha256": DIGEST.hex(),
        "tools": ["search_knowledge", "read_document", "inbox_ask"],
    }
    assert _get(api, token, f"/v1/runs/{unused_run}").json()["used"] is None
    empty = _get(api, token, f"/v1/runs/{unused_run}/steps").json()
    assert (empty["items"], empty["truncated"]) == ([], False)


def test_another_owners_steps_read_as_missing(api: ServedApi, tokens: Tokens, db: Engine) -> None:
    bobs_run = _traced_run(db, make_cr_agent(db, "bob", name="bobs"))
    token = tokens("alice")
    theirs = _get(api, token, f"/v1/runs/{bobs_run}/steps")
    missing = _get(api, token, f"/v1/runs/{bobs_run + 1000}/steps")
    assert assert_problem(theirs, 404)["detail"] == f"run {bobs_run} not found"
    assert assert_problem(missing, 404)["detail"] == f"run {bobs_run + 1000} not found"
    assert _get(api, tokens("bob"), f"/v1/runs/{bobs_run}/steps").status_code == 200


def test_the_steps_endpoint_is_documented(api: ServedApi) -> None:
    document = httpx.get(f"{api.url}/openapi.json", timeout=10).json()
    operation = document["paths"]["/v1/runs/{run_id}/steps"]["get"]
    assert "200" in operation["responses"]
    assert "404" in operation["responses"]
    step = document["components"]["schemas"]["RunStep"]
    assert set(step["properties"]["kind"]["enum"]) == {
        "model_call",
        "tool_call",
        "inbox_ask",
        "truncated",
    }
