"""Every kind the operator mirrors converges, whatever it missed (issue 18, items 1 and 6).

Through the real database and the same services the operator's handlers and sweeper
call: a model withdrawal whose `spec.model` patches fail half-way is finished later
(the writes are owed in the rows, not held by a handler); a model re-created before
that revives nobody; models and tools deleted while no operator watched are withdrawn
and removed like their delete events would have done; an owner deactivated a second
time is followed a second time. The cluster tier runs the same paths with a real API
server and operator (tests/cluster/install/test_operator_convergence.py).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.k8s.resources.agent_model import AgentModelSpec
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import agents, catalogue, users
from tests.db.factories import make_owner
from tests.db.reconciling import reconcile_event


def _model(database: Database, name: str) -> None:
    spec = AgentModelSpec.model_validate({"baseURL": "http://127.0.0.1:1/v1", "model": "m"})
    catalogue.mirror_model(database, name, spec)


def _tool(database: Database, name: str) -> None:
    spec = AgentToolSpec.model_validate({"implementation": "inbox"})
    catalogue.mirror_tool(database, name, spec)


def _row(db: Engine, uid: str) -> Any:
    with db.begin() as conn:
        return conn.execute(
            text("SELECT id, model_id, enabled, meta FROM agents WHERE cr_uid = :u"), {"u": uid}
        ).one()


def _owed(database: Database) -> dict[str, dict[str, Any]]:
    return {owed.name: owed.patch for owed in agents.owed_specs(database)}


def test_a_withdrawal_whose_patches_failed_is_finished_and_a_new_model_revives_nobody(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    _model(database, "gpt-small")
    for name in ("first", "second"):
        reconciled = reconcile_event(database, name, owner, model="gpt-small")
        assert reconciled.status["phase"] == "Ready"

    stopped = catalogue.withdraw_model(database, "gpt-small")  # the delete event

    assert sorted(agent.name or "" for agent in stopped) == ["first", "second"]
    assert _owed(database) == {"first": {"model": None}, "second": {"model": None}}
    # The first CR was patched; the patch of the second failed (API error, operator
    # killed): only the first is delivered.
    first = next(owed for owed in agents.owed_specs(database) if owed.name == "first")
    agents.spec_delivered(database, first)
    # The handler's retry finds the model row gone, as before; what is owed is not.
    assert catalogue.withdraw_model(database, "gpt-small") == []
    assert _owed(database) == {"second": {"model": None}}

    # The admin re-creates the model before the second CR was patched; an event of that
    # CR, still saying `model: gpt-small`, arrives.
    _model(database, "gpt-small")
    stale = reconcile_event(database, "second", owner, model="gpt-small")
    assert stale.status["phase"] == "NoModel"
    assert _row(db, "uid-second").model_id is None
    assert _owed(database) == {"second": {"model": None}}

    # The delivery lands; the CR's next event says `model` is gone: nothing owed.
    delivered = reconcile_event(database, "second", owner)
    assert delivered.status["phase"] == "NoModel"
    assert _owed(database) == {}
    # From then on the owner's own choice counts, the same model included.
    chosen = reconcile_event(database, "second", owner, model="gpt-small")
    assert chosen.status["phase"] == "Ready"


def test_models_and_tools_deleted_while_no_operator_watched_are_withdrawn(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    for name in ("kept", "deleted"):
        _model(database, name)
        _tool(database, f"{name}-tool")
    reconcile_event(database, "a", owner, model="deleted", tools=["deleted-tool"])
    reconcile_event(database, "b", owner, model="kept", tools=["kept-tool"])
    listed_at = agents.database_clock(database)
    # Created while the listings were being taken: not in them, and must survive.
    _model(database, "new")
    _tool(database, "new-tool")

    converged = catalogue.forget_deleted_catalogue(
        database, live_models={"kept"}, live_tools={"kept-tool"}, listed_at=listed_at
    )

    assert list(converged.withdrawn_models) == ["deleted"]
    assert [agent.name for agent in converged.withdrawn_models["deleted"]] == ["a"]
    # The agents that were linked to it, which the operator reads again (its CR still
    # names the tool: ToolsResolved False, linked again if it is created again).
    assert list(converged.removed_tools) == ["deleted-tool"]
    assert [agent.name for agent in converged.removed_tools["deleted-tool"]] == ["a"]
    with db.begin() as conn:
        models = set(conn.execute(text("SELECT name FROM agent_models")).scalars())
        tools = set(conn.execute(text("SELECT name FROM tools")).scalars())
        links = conn.execute(
            text(
                "SELECT a.cr_name, t.name FROM agent_tools l"
                " JOIN agents a ON a.id = l.agent_id JOIN tools t ON t.id = l.tool_id"
            )
        ).all()
    assert models == {"kept", "new"}
    assert tools == {"kept-tool", "new-tool"}
    assert [tuple(link) for link in links] == [("b", "kept-tool")]
    assert _row(db, "uid-a").model_id is None
    assert _row(db, "uid-b").model_id is not None
    assert _owed(database) == {"a": {"model": None}}
    # A listing that failed judges nothing.
    nothing = catalogue.forget_deleted_catalogue(
        database, live_models=None, live_tools=None, listed_at=agents.database_clock(database)
    )
    assert nothing == catalogue.CatalogueConverged()


def test_an_owner_deactivated_a_second_time_is_switched_off_a_second_time(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    _model(database, "m")
    uid = f"uid-{uuid.uuid4().hex[:6]}"
    assert reconcile_event(database, "d", owner, uid=uid, model="m").status["phase"] == "Ready"

    for round_ in (1, 2):
        # Deactivated by whoever owns `users` (Auth), not through our CLI.
        with db.begin() as conn:
            conn.execute(text("UPDATE users SET active = false WHERE key = :k"), {"k": owner})
        switched = agents.switch_off_agents_of_inactive_owners(database)
        assert switched == [_row(db, uid).id], f"deactivation {round_}"
        assert _owed(database) == {"d": {"enabled": False}}
        assert agents.switch_off_agents_of_inactive_owners(database) == []  # once
        # The operator patches the CR; its event comes back saying enabled: false.
        delivered = next(iter(agents.owed_specs(database)))
        agents.spec_delivered(database, delivered)
        back = reconcile_event(database, "d", owner, uid=uid, model="m", enabled=False)
        assert back.status["phase"] == "OwnerInactive"
        assert _owed(database) == {}
        # Reactivated: the agent stays off until its owner switches it on.
        users.upsert_user(database, owner, timezone=None, active=True)
        assert _row(db, uid).enabled is False
        switched_on = reconcile_event(database, "d", owner, uid=uid, model="m", enabled=True)
        assert switched_on.status["phase"] == "Ready"


def test_deactivation_through_the_cli_owes_the_resources_their_switch(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    _model(database, "m")
    reconcile_event(database, "c", owner, model="m")

    users.upsert_user(database, owner, timezone=None, active=False)

    assert _row(db, "uid-c").enabled is False
    assert _owed(database) == {"c": {"enabled": False}}
    # An event of the CR that still says enabled: true does not switch it back on.
    stale = reconcile_event(database, "c", owner, model="m", enabled=True)
    assert stale.status["phase"] in ("Disabled", "OwnerInactive")
    assert _row(db, "uid-c").enabled is False
