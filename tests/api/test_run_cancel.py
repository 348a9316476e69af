"""`POST /v1/runs/{id}/cancel`: an owner cancels a queued or running run through its Agent
(the request the operator honours; the cluster tier writes and honours the real
annotation, tests/cluster/install/test_run_controls.py)."""

from __future__ import annotations

import httpx
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from achilles.db.journal import runs as journal
from achilles.domain.runs import RunTrigger
from tests.api.conftest import ServedApi, Tokens
from tests.api.support import add_runs, assert_problem, bearer, make_cr_agent
from tests.db.factories import make_agent, make_owner


def _queued(db: Engine, agent_id: int) -> int:
    with Session(db) as session, session.begin():
        return journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id


def _cancel(api: ServedApi, token: str, run_id: int) -> httpx.Response:
    return httpx.post(f"{api.url}/v1/runs/{run_id}/cancel", headers=bearer(token), timeout=10)


def test_an_owner_cancels_a_queued_run_through_its_agent(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    api.requester.cancels.clear()
    run_id = _queued(db, make_cr_agent(db, "alice", name="helper"))
    response = _cancel(api, tokens("alice"), run_id)
    assert response.status_code == 202, response.text
    assert response.json() == {
        "run_id": run_id,
        "agent": "team/helper",
        "cancel_requested": True,
        "state": "queued",
        "reason": None,
        "run_url": f"/v1/runs/{run_id}",
    }
    assert api.requester.cancels == [("team", "helper", run_id)]


def test_an_ended_run_is_left_as_it_is_and_another_owners_run_is_not_found(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    api.requester.cancels.clear()
    (ended,) = add_runs(db, make_cr_agent(db, "alice", name="done"), 1)
    response = _cancel(api, tokens("alice"), ended)
    assert response.status_code == 200, response.text
    assert (response.json()["cancel_requested"], response.json()["state"]) == (False, "succeeded")

    bobs = _queued(db, make_cr_agent(db, "bob", name="bobs"))
    assert_problem(_cancel(api, tokens("alice"), bobs), 404)
    assert api.requester.cancels == []


def test_a_run_of_an_agent_without_a_resource_is_refused_with_the_way_out(
    api: ServedApi, tokens: Tokens, db: Engine
) -> None:
    api.requester.cancels.clear()
    make_owner(db, "alice")
    run_id = _queued(db, make_agent(db, "alice"))
    problem = assert_problem(_cancel(api, tokens("alice"), run_id), 400)
    assert "achilles runs cancel" in problem["detail"]
    assert api.requester.cancels == []
