"""The examples docs/runner.md shows are the ones that work: demo knowledge, the built-in
demo model script, and the adversarial script, through the CLI and the runner."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentRun
from achilles.db.journal.run_trace import run_steps
from achilles.db.tools import approvals
from achilles.domain.runs import RunTrigger
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.secrets import SecretUnavailable
from achilles.modelserver.script import load_script
from achilles.services import catalogue, mcp_sources, tool_approvals
from achilles.services.tool_approvals import Decision
from achilles_dev.demo import DEMO_KNOWLEDGE
from achilles_dev.demo_tools import MEMORY_TOOL, TIME_TOOL
from achilles_dev.mcp_servers import McpServer, memory_entities
from tests.db.runner_support import (
    achilles,
    add_model,
    queue_run,
    run_row,
    run_scripted,
    run_to_end,
    serving,
)

EXAMPLES = Path(__file__).parents[2] / "examples"


def _no_secrets(name: str, key: str) -> bytes:
    raise SecretUnavailable(f"Secret {name} does not exist")


def _mirrored(database: Database, name: str, url: str) -> int:
    """An AgentTool naming an MCP server, mirrored and listed as the operator does."""
    spec = AgentToolSpec.model_validate({"implementation": "mcp", "mcp": {"url": url}})
    tool_id = catalogue.mirror_tool(database, name, spec).tool_id
    found = mcp_sources.discover(database, _no_secrets, name)
    assert found is not None
    assert found.ready, found.message
    return tool_id


def _load_examples(database_url: str) -> None:
    loaded = achilles(database_url, "ks", "load", str(EXAMPLES / "knowledge" / "demo.yaml"))
    assert loaded.returncode == 0, loaded.stderr
    # docs/runner.md: in a fresh database bob's review is document 4.
    found = json.loads(achilles(database_url, "ks", "search", "--as", "bob", "salary").stdout)
    assert [(d["id"], d["title"]) for d in found] == [(4, "Bob's compensation review")]


def test_the_demo_agent_answers_from_the_onboarding_checklist(
    db: Engine, database_url: str
) -> None:
    _load_examples(database_url)
    with serving(load_script()) as server:
        run_id = queue_run(
            db,
            owner="alice",
            model=add_model(db, server),
            prompt="What should I do on my first day?",
        )
        code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    row = run_row(db, run_id)
    assert row.state == "succeeded"
    assert row.output is not None
    assert row.output.startswith('From "Onboarding checklist"')


def test_the_adversarial_example_gets_nothing_of_bobs(db: Engine, database_url: str) -> None:
    _load_examples(database_url)
    run = run_scripted(db, database_url, load_script(EXAMPLES / "model-scripts" / "adversary.yaml"))
    assert run.code == 0, run.log
    output = run.row.output
    assert output is not None
    assert 'read: {"error": "document 4 not found"}' in output
    assert "salary" not in output.lower()
    assert "compensation" not in output.lower()
    # alice sees the checklist's link to the runbook, not bob's review linking to it.
    assert "Deployment runbook" in output


def test_the_dev_demo_reads_alices_notes_asks_the_time_and_asks_before_a_note(
    database: Database, db: Engine, database_url: str, mcp_time: McpServer, mcp_memory: McpServer
) -> None:
    """`make dev`'s demo (issue 38 item 7), its model's part through the real runner: the
    demo's Knowledge Store, the built-in script, the demo's AgentTools `time` and `memory`
    on the registry's servers. The run reads alice's notes, calls the read-only time tool,
    and asks before the write (nothing written); once approved, the next run makes it
    (server-memory's own file) and tells what became of it."""
    for bundle in DEMO_KNOWLEDGE:
        loaded = achilles(database_url, "ks", "load", str(bundle))
        assert loaded.returncode == 0, loaded.stderr
    tools = [
        _mirrored(database, TIME_TOOL, mcp_time.url),
        _mirrored(database, MEMORY_TOOL, mcp_memory.url),
    ]
    prompt = yaml.safe_load((EXAMPLES / "agent.yaml").read_text())["spec"]["prompt"]
    # The server is the session's: other tests' entities may be there already.
    before = _entities(mcp_memory)
    with serving(load_script()) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server), prompt=prompt,
                           tool_ids=tools)  # fmt: skip
        code, log = run_to_end(database_url, run_id)
        assert code == 0, log
        with Session(db) as session:
            steps = run_steps(session, run_id)
            agent_id = session.get_one(AgentRun, run_id).agent_id
            (item_id,) = session.execute(
                text("SELECT item_id FROM tool_approvals WHERE agent_id = :a"), {"a": agent_id}
            ).scalars()
            approval = approvals.approval_by_item(session, item_id)
        assert approval is not None
        assert approval.state == "pending"
        row = run_row(db, run_id)
        assert row.output is not None
        assert row.output.startswith(
            "Waiting for the owner's approval of memory__create_entities"
        ), row.output
        assert [(s.tool, s.status) for s in steps if s.kind == "tool_call"] == [
            ("search_knowledge", "ok"),
            ("read_document", "ok"),
            ("time__get_current_time", "ok"),
            ("memory__create_entities", "ok"),
        ]
        ((entity,),) = [approval.arguments["entities"]]
        assert entity["name"] == "Projects you follow, this week"
        assert "Atlas (search service)" in entity["observations"][0]
        assert approval.reason is not None
        assert 'I read "Projects you follow, this week"' in approval.reason
        assert _entities(mcp_memory) == before  # nothing written before the approval

        decided = tool_approvals.decide(
            database, approval.item_id, Decision.APPROVE, requester=None, by="alice"
        )
        assert decided.accepted
        with Session(db) as session, session.begin():
            again = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
        code, log = run_to_end(database_url, again.run_id)
        assert code == 0, log

    written = _entities(mcp_memory)
    assert written.count("Projects you follow, this week") == 1 + before.count(
        "Projects you follow, this week"
    )
    told = run_row(db, again.run_id).output
    assert told is not None
    assert told.startswith("What became of the call you decided on:"), told
    assert '"outcome": "executed"' in told


def _entities(server: McpServer) -> list[str]:
    assert server.state is not None
    return memory_entities(server.state)
