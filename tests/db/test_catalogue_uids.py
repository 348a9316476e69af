"""Catalogue objects are tracked by uid (issue 36 item 8), through the real database and
the services the AgentModel and AgentTool handlers call.

An AgentModel deleted and created again under its name while no operator watched used to
look like the same model (its row was keyed by name): its agents carried on with a model
an admin had withdrawn. Now the row keeps the uid of the object it mirrors: the first
event of the new object (kopf lists every object when the operator starts) withdraws the
old one from its agents first, as its delete event would have (seed 000: re-adding a
model revives nobody; the owner chooses again). A delete event of the old object that
arrives after the new one was mirrored leaves the new one alone. The cluster tier runs it
with the operator stopped (tests/cluster/install/test_catalogue_uids.py).
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import agents, catalogue
from tests.db.factories import make_owner, model_of
from tests.db.reconciling import reconcile_event

MODEL = AgentModelSpec.model_validate({"baseURL": "http://127.0.0.1:1/v1", "model": "m"})
TOOL = AgentToolSpec.model_validate({"implementation": "clock"})


def _tools_of(db: Engine, name: str) -> list[int]:
    with db.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT t.tool_id FROM agent_tools t JOIN agents a ON a.id = t.agent_id"
                    " WHERE a.cr_name = :n ORDER BY t.tool_id"
                ),
                {"n": name},
            ).scalars()
        )


def test_a_model_deleted_and_created_again_unseen_is_withdrawn_from_its_agents(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    first = catalogue.mirror_model(database, "gpt", MODEL, uid="uid-gpt-1")
    assert reconcile_event(database, "digest", owner, model="gpt").status["phase"] == "Ready"
    assert model_of(db, "digest") == first.model_id
    # Its status echo, and a resync: the same object, nothing withdrawn.
    assert catalogue.mirror_model(database, "gpt", MODEL, uid="uid-gpt-1").withdrawn == []

    # The operator was down while an admin deleted it and someone created it again.
    second = catalogue.mirror_model(database, "gpt", MODEL, uid="uid-gpt-2")

    assert [ref.name for ref in second.withdrawn] == ["digest"]
    assert model_of(db, "digest") is None
    (owed,) = agents.owed_specs(database)
    assert owed.patch == {"model": None}
    # The Agent's CR still names it until the owed write lands: it revives nobody.
    again = reconcile_event(database, "digest", owner, model="gpt")
    assert again.status["phase"] == "NoModel"
    assert model_of(db, "digest") is None

    # The old object's delete event, late: the new model stays.
    assert catalogue.withdraw_model(database, "gpt", uid="uid-gpt-1") == []
    with db.connect() as conn:
        row = conn.execute(text("SELECT cr_uid FROM agent_models WHERE name = 'gpt'")).one()
    assert row.cr_uid == "uid-gpt-2"
    # The owner chooses it again: it runs on the new model.
    agents.spec_delivered(database, owed)
    assert reconcile_event(database, "digest", owner, model="gpt").status["phase"] == "Ready"
    assert model_of(db, "digest") == second.model_id


def test_a_row_mirrored_before_uids_takes_its_objects_uid_without_a_withdrawal(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    catalogue.mirror_model(database, "legacy", MODEL)  # no uid: as before 0020
    reconcile_event(database, "kept", owner, model="legacy")
    assert catalogue.mirror_model(database, "legacy", MODEL, uid="uid-legacy").withdrawn == []
    assert model_of(db, "kept") is not None


def test_a_tool_deleted_and_created_again_unseen_is_a_new_tool(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    catalogue.mirror_model(database, "gpt", MODEL, uid="uid-gpt")
    old = catalogue.mirror_tool(database, "clock", TOOL, uid="uid-clock-1")
    reconcile_event(database, "timer", owner, model="gpt", tools=["clock"])
    assert _tools_of(db, "timer") == [old.tool_id]

    new = catalogue.mirror_tool(database, "clock", TOOL, uid="uid-clock-2")

    assert new.tool_id != old.tool_id
    assert [ref.name for ref in new.unlinked] == ["timer"]
    assert _tools_of(db, "timer") == []
    # Read again (the handler requeues them), the agent links to the new object.
    reconcile_event(database, "timer", owner, model="gpt", tools=["clock"])
    assert _tools_of(db, "timer") == [new.tool_id]
    # The old object's late delete event leaves the new one alone.
    assert catalogue.remove_tool(database, "clock", uid="uid-clock-1") == []
    assert _tools_of(db, "timer") == [new.tool_id]
