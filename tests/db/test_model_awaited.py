"""An Agent reconciled before the model it names exists (`kubectl apply -f` of a folder
takes `agent.yaml` before `model.yaml`) links to it when the model is created: the new
model lists the agents without one, which the operator reads again; an agent written
while the model commits finds it itself (the model name's advisory lock,
`agent_links.lock_model_name`). A withdrawn model's agents are not among them (DESIGN §4:
re-creating a model revives nobody). Through the real database, the race with two real
connections."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import agent_links
from achilles.db.journal import catalogue as catalogue_rows
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.services import agent_events, catalogue
from tests.db.factories import make_owner, model_of
from tests.db.reconciling import blocked_until_commit, reconcile_event

MODEL = AgentModelSpec.model_validate({"baseURL": "http://127.0.0.1:1/v1", "model": "m"})


def _sees_no_awaiting_agent(session: Session) -> None:
    assert catalogue_rows.agents_awaiting_a_model(session) == []


def _ready_message(reconciled: agent_events.AgentReconciled) -> str:
    (ready,) = [c for c in reconciled.status["conditions"] if c["type"] == "Ready"]
    return str(ready["message"])


def test_an_agent_that_came_before_its_model_is_read_again_when_the_model_is_created(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    early = reconcile_event(database, "early", owner, model="late-model")
    assert early.status["phase"] == "NoModel"
    assert "late-model is not an AgentModel" in _ready_message(early)
    reconcile_event(database, "unset", owner)  # names no model
    catalogue.mirror_model(database, "old-model", MODEL)
    assert (
        reconcile_event(database, "withdrawn", owner, model="old-model").status["phase"] == "Ready"
    )
    catalogue.withdraw_model(database, "old-model")  # owes `spec.model: null`, undelivered

    created = catalogue.mirror_model(database, "late-model", MODEL)
    updated = catalogue.mirror_model(database, "late-model", MODEL)  # its status echo

    assert sorted(ref.name or "" for ref in created.awaiting) == ["early", "unset"]
    assert updated.awaiting == []
    # What the operator's requeue does with them: read and reconciled again.
    linked = reconcile_event(database, "early", owner, model="late-model")
    assert linked.status["phase"] == "Ready"
    assert model_of(db, "early") == created.model_id
    assert reconcile_event(database, "unset", owner).status["phase"] == "NoModel"
    # Re-created under its old name, the withdrawn model is still owed away from its agent.
    assert catalogue.mirror_model(database, "old-model", MODEL).awaiting == [
        ref for ref in created.awaiting if ref.name == "unset"
    ]
    assert (
        reconcile_event(database, "withdrawn", owner, model="old-model").status["phase"]
        == "NoModel"
    )


def test_an_agent_written_while_its_model_commits_finds_the_model(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    # The model's transaction, as `mirror_model` runs it, held open before its commit: its
    # row is written and it has looked for awaiting agents.
    model = Session(db)
    model.begin()
    try:
        agent_links.lock_model_name(model, "racing-model", shared=False)
        catalogue_rows.upsert_model(
            model, catalogue_rows.ModelRow("racing-model", "http://x/v1", "m", None, None, False)
        )
        # The agent's reconcile on a second connection: its write does not see the
        # uncommitted model, so it waits on the name's lock to look again. The model does
        # not see the agent's uncommitted row meanwhile; without the lock both would miss
        # each other and the agent would wait for an event of its own.
        reconciled = blocked_until_commit(
            db,
            model,
            lambda: reconcile_event(database, "racer", owner, model="racing-model"),
            "the agent's reconcile waiting on the model name's lock",
            meanwhile=lambda: _sees_no_awaiting_agent(model),
        )
    finally:
        model.close()
    assert reconciled.status["phase"] == "Ready"
    assert model_of(db, "racer") is not None
