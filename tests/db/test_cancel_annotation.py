"""The Agent's `achilles.io/cancel-run` annotation as the operator answers it
(services/agent_events.py, through the real database): a new value naming a run of this
agent cancels it and asks for its Job to go; the same value again, a value that is no run
id and another agent's run change nothing, each answered once."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.domain.agent_event import AgentEvent, is_own_status_echo
from achilles.domain.vocabulary import EventReason, EventType
from achilles.k8s.annotations import CANCEL_RUN, RUN_REQUESTED_AT
from achilles.services.agent_events import reconcile_agent_event
from tests.db.factories import make_model, make_owner


def _event(
    uid: str, spec: dict[str, Any], status: dict[str, Any], **annotations: str
) -> AgentEvent:
    return AgentEvent(
        uid=uid,
        namespace="team",
        name=f"agent-{uid}",
        generation=1,
        deleted=False,
        spec=spec,
        status=status,
        annotations=annotations,
    )


def _state(db: Engine, run_id: int) -> tuple[str, str | None]:
    with db.begin() as conn:
        row = conn.execute(
            text("SELECT state, reason FROM agent_runs WHERE id = :r"), {"r": run_id}
        ).one()
    return row.state, row.reason


def test_a_cancel_request_ends_the_agents_run_once(db: Engine, database: Database) -> None:
    spec = {"owner": make_owner(db), "prompt": "Summarise.", "model": make_model(db)}
    created = reconcile_agent_event(database, _event("u-c", spec, {}))
    assert created.status is not None
    asked = reconcile_agent_event(
        database, _event("u-c", spec, created.status, **{RUN_REQUESTED_AT: "r1"})
    )
    assert asked.status is not None
    run_id = int(asked.status["conditions"][-1]["message"].split()[-1])

    # The operator's own status write comes back: not an echo while the cancel is new.
    # (`run_request`, `cancel_request`: the values of its annotations.)
    meta, cancel = {"generation": 1}, str(run_id)
    echo = is_own_status_echo(
        "MODIFIED", meta, asked.status, run_request="r1", cancel_request=cancel
    )
    assert not echo

    done = reconcile_agent_event(
        database, _event("u-c", spec, asked.status, **{CANCEL_RUN: str(run_id)})
    )
    assert done.status is not None
    assert done.status["lastHandledCancelRequest"] == str(run_id)
    assert _state(db, run_id) == ("failed", "cancelled")
    assert [(e.kind, e.reason, e.message) for e in done.events] == [
        (EventType.NORMAL, EventReason.RUN_CANCELLED, f"run {run_id} cancelled (it was queued)")
    ]
    assert done.wake_dispatcher
    assert done.delete_job_of is None  # it had no Job yet

    # Seen again (a resync, another replica): handled, nothing happens.
    again = reconcile_agent_event(
        database, _event("u-c", spec, done.status, **{CANCEL_RUN: str(run_id)})
    )
    assert again.events == []
    # The status as the API server keeps it (merge patches: the run request's value too).
    kept = {**asked.status, **done.status}
    assert is_own_status_echo("MODIFIED", meta, kept, run_request="r1", cancel_request=cancel)


def test_a_cancel_request_for_no_run_of_this_agent_changes_nothing(
    db: Engine, database: Database
) -> None:
    owner, model = make_owner(db), make_model(db)
    spec = {"owner": owner, "prompt": "Summarise.", "model": model}
    other = reconcile_agent_event(database, _event("u-o", spec, {}))
    assert other.status is not None
    asked = reconcile_agent_event(
        database, _event("u-o", spec, other.status, **{RUN_REQUESTED_AT: "r1"})
    )
    assert asked.status is not None
    others_run = int(asked.status["conditions"][-1]["message"].split()[-1])
    mine = reconcile_agent_event(database, _event("u-m", spec, {}))
    assert mine.status is not None
    for value, words in ((str(others_run), "has no run"), ("latest", "is not a run id")):
        done = reconcile_agent_event(
            database, _event("u-m", spec, mine.status, **{CANCEL_RUN: value})
        )
        assert done.status is not None
        assert done.status["lastHandledCancelRequest"] == value
        (event,) = done.events
        assert (event.kind, event.reason) == (EventType.WARNING, EventReason.RUN_CANCELLED)
        assert words in event.message
    assert _state(db, others_run) == ("queued", None)
