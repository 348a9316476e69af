"""What one Agent event becomes (services/agent_events.py), through the real database:
the kopf handler only applies this answer, so the decision is tested here whole."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.domain.agent_event import AgentEvent
from achilles.domain.runs import RunState
from achilles.domain.vocabulary import ConditionType, EventReason
from achilles.k8s.annotations import RUN_REQUESTED_AT
from achilles.services.agent_events import reconcile_agent_event
from tests.db.factories import make_model, make_owner


def _event(uid: str, spec: dict[str, Any], **fields: Any) -> AgentEvent:
    values: dict[str, Any] = {
        "uid": uid,
        "namespace": "team",
        "name": f"agent-{uid}",
        "generation": 1,
        "deleted": False,
        "spec": spec,
        "status": {},
        "annotations": {},
    }
    return AgentEvent(**{**values, **fields})


def _condition(status: dict[str, Any], kind: ConditionType) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def test_a_new_agent_gets_its_row_and_a_ready_status(db: Engine, database: Database) -> None:
    spec = {"owner": make_owner(db), "prompt": "Summarise.", "model": make_model(db)}
    done = reconcile_agent_event(database, _event("u-new", spec))
    assert done.agent_id is not None
    assert not done.removed
    assert done.status is not None
    assert done.status["phase"] == "Ready"
    assert done.status["databaseId"] == done.agent_id
    assert done.events == []
    assert done.spec_patch == {}
    with db.begin() as conn:
        assert conn.execute(text("SELECT id FROM agents WHERE cr_uid = 'u-new'")).scalar() == (
            done.agent_id
        )


def test_a_run_request_is_answered_once_with_a_run(db: Engine, database: Database) -> None:
    spec = {"owner": make_owner(db), "prompt": "Summarise.", "model": make_model(db)}
    first = reconcile_agent_event(database, _event("u-req", spec))
    assert first.status is not None
    request = "2026-12-02T03:00:00Z"
    asked = _event("u-req", spec, status=first.status, annotations={RUN_REQUESTED_AT: request})
    done = reconcile_agent_event(database, asked)
    assert done.status is not None
    assert done.status["lastHandledRunRequest"] == request
    accepted = _condition(done.status, ConditionType.RUN_REQUEST_ACCEPTED)
    assert accepted["status"] == "True"
    assert done.enqueued == (RunState.QUEUED, "")
    assert done.wake_dispatcher
    assert [e.reason for e in done.events] == [EventReason.RUN_QUEUED]
    # The same request again (a retry, a second replica) makes no second run.
    again = reconcile_agent_event(
        database, _event("u-req", spec, status=done.status, annotations={RUN_REQUESTED_AT: request})
    )
    assert again.enqueued is None
    assert again.events == []
    with db.begin() as conn:
        runs = conn.execute(
            text("SELECT count(*) FROM agent_runs WHERE agent_id = :a"), {"a": done.agent_id}
        ).scalar()
    assert runs == 1


def test_a_request_to_a_paused_agent_is_refused_on_the_object(
    db: Engine, database: Database
) -> None:
    spec = {
        "owner": make_owner(db),
        "prompt": "Summarise.",
        "model": make_model(db),
        "adminPaused": True,
    }
    event = _event("u-paused", spec, annotations={RUN_REQUESTED_AT: "2026-12-02T03:00:00Z"})
    done = reconcile_agent_event(database, event)
    assert done.status is not None
    refused = _condition(done.status, ConditionType.RUN_REQUEST_ACCEPTED)
    assert (refused["status"], refused["reason"]) == ("False", "Refused")
    assert "admin paused" in refused["message"]
    assert done.request_outcome == "refused"
    assert done.enqueued is None
    assert [e.reason for e in done.events] == [EventReason.RUN_REFUSED]


def test_an_invalid_spec_is_reported_without_a_row(db: Engine, database: Database) -> None:
    done = reconcile_agent_event(database, _event("u-bad", {"owner": make_owner(db)}))
    assert done.agent_id is None
    assert done.status is not None
    assert done.status["phase"] == "Invalid"
    ready = _condition(done.status, ConditionType.READY)
    assert ready["reason"] == "InvalidSpec"
    assert "prompt" in ready["message"]
    with db.begin() as conn:
        assert (
            conn.execute(text("SELECT count(*) FROM agents WHERE cr_uid = 'u-bad'")).scalar() == 0
        )


def test_a_deleted_agent_takes_its_row_with_it(db: Engine, database: Database) -> None:
    spec = {"owner": make_owner(db), "prompt": "Summarise.", "model": make_model(db)}
    made = reconcile_agent_event(database, _event("u-gone", spec))
    done = reconcile_agent_event(database, _event("u-gone", spec, deleted=True))
    assert done.removed
    assert done.agent_id == made.agent_id
    assert done.status is None
    # A second delete (a retry of it) finds nothing and says so.
    assert reconcile_agent_event(database, _event("u-gone", spec, deleted=True)).agent_id is None
