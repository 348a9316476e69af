"""An Agent reconciled before an AgentTool it names exists (`kubectl apply -f` of a folder
takes `agent.yaml` before `tool.yaml`) links to it when the tool is created: the agent's
row records the names it found missing (`agents.meta["unknown_tools"]`, written only when
they change), the new tool lists the agents that recorded its name, which the operator
reads again; an agent written while the tool commits finds it itself, and a tool created
while such an agent commits finds the agent (the tool name's advisory lock,
`agent_links.lock_tool_name`). A deleted tool lists the agents that were linked to it,
which read again show it unknown and link to it once it is created again; a link being
committed while the tool is deleted is waited for and listed. Through the real database,
the races with two real connections."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import agent_links
from achilles.db.journal import catalogue as catalogue_rows
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import agent_events, catalogue
from tests.db.factories import make_owner
from tests.db.reconciling import blocked_until_commit, reconcile_event

TOOL = AgentToolSpec.model_validate({"implementation": "inbox"})


def _sees_no_awaiting_agent(session: Session, tool: str) -> None:
    assert catalogue_rows.agents_awaiting_a_tool(session, tool) == []


def _tools_condition(reconciled: agent_events.AgentReconciled) -> tuple[str, str]:
    (tools,) = [c for c in reconciled.status["conditions"] if c["type"] == "ToolsResolved"]
    return str(tools["status"]), str(tools["message"])


def _meta(db: Engine, name: str) -> dict[str, Any]:
    with db.connect() as conn:
        meta = conn.execute(
            text("SELECT meta FROM agents WHERE cr_name = :n"), {"n": name}
        ).scalar_one()
    return dict(meta or {})


def _xmin(db: Engine, name: str) -> str:
    """The row version: a write of the row, even of the same values, changes it."""
    with db.connect() as conn:
        return str(
            conn.execute(text("SELECT xmin FROM agents WHERE cr_name = :n"), {"n": name}).scalar()
        )


def _linked(db: Engine, name: str) -> list[str]:
    with db.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT t.name FROM agent_tools l JOIN tools t ON t.id = l.tool_id"
                    " JOIN agents a ON a.id = l.agent_id WHERE a.cr_name = :n ORDER BY t.name"
                ),
                {"n": name},
            ).scalars()
        )


def test_an_agent_that_came_before_its_tool_is_read_again_when_the_tool_is_created(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    catalogue.mirror_tool(database, "known-tool", TOOL)
    early = reconcile_event(
        database, "early", owner, tools=["known-tool", "late-tool"], wakeOnReply=True
    )
    assert _tools_condition(early) == ("False", "not in the tool catalogue: late-tool")
    assert _meta(db, "early") == {"inbox": {"wake_on_reply": True}, "unknown_tools": ["late-tool"]}
    # Its next event, the tool still missing: the record is kept, not written again.
    before = _xmin(db, "early")
    again = reconcile_event(
        database, "early", owner, tools=["known-tool", "late-tool"], wakeOnReply=True
    )
    assert _tools_condition(again) == _tools_condition(early)
    assert _xmin(db, "early") == before
    reconcile_event(database, "elsewhere", owner, tools=["other-tool"])  # awaits another tool
    plain = reconcile_event(database, "plain", owner, tools=["known-tool"])
    assert _tools_condition(plain)[0] == "True"
    assert "unknown_tools" not in _meta(db, "plain")  # nothing recorded when none is missing
    reconcile_event(database, "changed", owner, tools=["late-tool"])
    assert _meta(db, "changed") == {"unknown_tools": ["late-tool"]}
    reconcile_event(database, "changed", owner, tools=[])  # its owner dropped it meanwhile
    assert _meta(db, "changed") == {}

    created = catalogue.mirror_tool(database, "late-tool", TOOL)
    updated = catalogue.mirror_tool(database, "late-tool", TOOL)  # its status echo

    assert [ref.name for ref in created.awaiting] == ["early"]
    assert updated.awaiting == []
    # What the operator's requeue does with it: read and reconciled again.
    linked = reconcile_event(database, "early", owner, tools=["known-tool", "late-tool"])
    assert _tools_condition(linked) == ("True", "")
    assert _linked(db, "early") == ["known-tool", "late-tool"]
    assert _meta(db, "early") == {"inbox": {"wake_on_reply": True}}  # only its own key went
    assert [ref.name for ref in catalogue.mirror_tool(database, "other-tool", TOOL).awaiting] == [
        "elsewhere"
    ]


def test_an_agent_written_while_its_tool_commits_finds_the_tool(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    # The tool's transaction, as `mirror_tool` runs it, held open before its commit: its
    # row is written and it has looked for awaiting agents.
    tool = Session(db)
    tool.begin()
    try:
        agent_links.lock_tool_name(tool, "racing-tool", shared=False)
        catalogue_rows.upsert_tool(tool, "racing-tool", None, "inbox", True)
        # The agent's reconcile on a second connection: its links do not see the
        # uncommitted tool, so it waits on the name's lock to look again. The tool does not
        # see the agent's uncommitted record meanwhile; without the lock both would miss
        # each other and the agent would wait for an event of its own.
        reconciled = blocked_until_commit(
            db,
            tool,
            lambda: reconcile_event(database, "racer", owner, tools=["racing-tool"]),
            "the agent's reconcile waiting on the tool name's lock",
            meanwhile=lambda: _sees_no_awaiting_agent(tool, "racing-tool"),
        )
    finally:
        tool.close()
    assert _tools_condition(reconciled) == ("True", "")
    assert _linked(db, "racer") == ["racing-tool"]
    assert "unknown_tools" not in _meta(db, "racer")


def test_a_tool_created_while_an_agent_records_it_missing_finds_the_agent(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    agent_id = reconcile_event(database, "recorder", owner).agent_id
    assert agent_id is not None
    # The agent's transaction, as `reconcile_agent` runs it, held open before its commit:
    # it found the tool missing under the name's shared lock and recorded so.
    recording = Session(db)
    recording.begin()
    try:
        assert agent_links.link_awaited_tools(recording, agent_id, ("slow-tool",)) == ("slow-tool",)
        agent_links.record_unknown_tools(recording, agent_id, ("slow-tool",), None)
        created = blocked_until_commit(
            db,
            recording,
            lambda: catalogue.mirror_tool(database, "slow-tool", TOOL),
            "the tool's mirroring waiting on its name's lock",
        )
    finally:
        recording.close()
    assert [ref.name for ref in created.awaiting] == ["recorder"]


def test_the_agents_of_a_deleted_tool_show_it_unknown_and_link_to_it_once_it_is_created_again(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    catalogue.mirror_tool(database, "kept-tool", TOOL)
    catalogue.mirror_tool(database, "gone-tool", TOOL)
    phases = {}
    for name in ("first", "second"):
        linked = reconcile_event(database, name, owner, tools=["kept-tool", "gone-tool"])
        assert _tools_condition(linked) == ("True", "")
        phases[name] = linked.status["phase"]
    reconcile_event(database, "bystander", owner, tools=["kept-tool"])

    unlinked = catalogue.remove_tool(database, "gone-tool")  # the delete event

    # The agents that were linked, which the operator reads again (their CRs still name
    # it); the others are not touched.
    assert [ref.name for ref in unlinked] == ["first", "second"]
    assert [ref.uid for ref in unlinked] == ["uid-first", "uid-second"]
    assert _linked(db, "first") == ["kept-tool"]
    assert _linked(db, "bystander") == ["kept-tool"]
    assert catalogue.remove_tool(database, "gone-tool") == []  # a retry, or DELETED after
    # What the operator's requeue does with them: the CR is the source of truth.
    for name in ("first", "second"):
        unknown = reconcile_event(database, name, owner, tools=["kept-tool", "gone-tool"])
        assert _tools_condition(unknown) == ("False", "not in the tool catalogue: gone-tool")
        assert unknown.status["phase"] == phases[name]  # a warning only: no lock closes
        assert _meta(db, name) == {"unknown_tools": ["gone-tool"]}

    recreated = catalogue.mirror_tool(database, "gone-tool", TOOL)

    assert [ref.name for ref in recreated.awaiting] == ["first", "second"]
    relinked = reconcile_event(database, "first", owner, tools=["kept-tool", "gone-tool"])
    assert _tools_condition(relinked) == ("True", "")
    assert _linked(db, "first") == ["gone-tool", "kept-tool"]
    assert "unknown_tools" not in _meta(db, "first")


def test_a_tool_deleted_while_an_agent_links_to_it_waits_for_that_link(
    db: Engine, database: Database
) -> None:
    owner = make_owner(db)
    catalogue.mirror_tool(database, "contested-tool", TOOL)
    agent_id = reconcile_event(database, "linker", owner).agent_id
    assert agent_id is not None
    # The agent's reconcile, held open before its commit, has linked the tool: its link's
    # foreign key holds the tool row's key.
    linking = Session(db)
    linking.begin()
    try:
        assert agent_links.link_tools(linking, agent_id, ("contested-tool",)) == ()
        unlinked = blocked_until_commit(
            db,
            linking,
            lambda: catalogue.remove_tool(database, "contested-tool"),
            "the tool's deletion waiting on the linking agent",
        )
    finally:
        linking.close()
    # Seen once committed: without the row lock first, the links' snapshot would miss it
    # (the cascade would still remove it) and the agent would keep ToolsResolved True.
    assert [ref.name for ref in unlinked] == ["linker"]
    assert _linked(db, "linker") == []
