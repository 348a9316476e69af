"""Approval before side effects (issue 38), through real runs: a call of a write tool
becomes a blocked inbox item and a pending approval, and the run ends waiting; the owner
approves (or rejects); the next run makes exactly the approved call, once, and tells the
model; later runs never make it again; a rejected or expired approval is never made.
Checked on the server's side: the registry's `@modelcontextprotocol/server-memory`
(behind supergateway) keeps its knowledge graph in a file the test reads."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.journal import runs as journal
from achilles.db.journal.agents import create_agent
from achilles.db.journal.models import AgentRun
from achilles.db.tools import approvals
from achilles.domain.mcp_tools import arguments_digest
from achilles.domain.runs import RunTrigger
from achilles.errors import NotFound
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.secrets import SecretUnavailable
from achilles.ks.bundle import KnowledgeBundle
from achilles.services import catalogue, knowledge, mcp_sources, tool_approvals
from achilles.services.tool_approvals import Decision, DecisionRefusal
from achilles_dev.mcp_servers import McpServer
from tests.db.factories import make_owner
from tests.db.runner_support import add_model, queue_run, run_row, run_to_end, serving

pytestmark = pytest.mark.db

CREATE = "memory__create_entities"
DEMO_BUNDLE = Path(__file__).parents[2] / "examples" / "knowledge" / "demo.yaml"
READ = "memory__read_graph"


def _entity(name: str) -> dict[str, Any]:
    return {"entities": [{"name": name, "entityType": "person", "observations": ["likes tea"]}]}


def _no_secrets(name: str, key: str) -> bytes:
    raise SecretUnavailable(f"Secret {name} does not exist")


def _entities(server: McpServer) -> list[str]:
    """The server's own record: every entity line of its memory file."""
    assert server.state is not None
    if not server.state.exists():
        return []
    lines = [json.loads(line) for line in server.state.read_text().splitlines() if line.strip()]
    return [line["name"] for line in lines if line.get("type") == "entity"]


def _source(database: Database, url: str) -> int:
    spec = AgentToolSpec.model_validate({"implementation": "mcp", "mcp": {"url": url}})
    tool_id = catalogue.mirror_tool(database, "memory", spec).tool_id
    found = mcp_sources.discover(database, _no_secrets, "memory")
    assert found is not None
    assert found.ready, found.message
    return tool_id


class Agent:
    """One agent with the memory source, and its runs against a scripted model."""

    def __init__(
        self,
        db: Engine,
        database_url: str,
        tool_id: int,
        script: dict[str, Any],
        owner: str | None = None,
    ):
        self.db, self.url, self.script = db, database_url, script
        self.owner = owner or make_owner(db)
        self.tool_id = tool_id
        self.agent_id: int | None = None

    def run(self) -> tuple[int, list[Any]]:
        with serving(self.script) as server:
            if self.agent_id is None:
                model = add_model(self.db, server, name=f"model-{self.owner}")
                run_id = queue_run(self.db, owner=self.owner, model=model, tool_ids=[self.tool_id])
                with Session(self.db) as session:
                    self.agent_id = session.execute(
                        select(AgentRun.agent_id).where(AgentRun.id == run_id)
                    ).scalar_one()
            else:
                with Session(self.db) as session, session.begin():
                    self._point_model_at(session, server.base_url)
                    queued = journal.enqueue_run(session, self.agent_id, RunTrigger.MANUAL)
                    assert queued.is_queued
                    run_id = queued.run_id
            code, log = run_to_end(self.url, run_id)
            assert code == 0, log
            return run_id, server.recorded()

    def _point_model_at(self, session: Session, base_url: str) -> None:
        session.execute(
            text(
                "UPDATE agent_models SET base_url = :u"
                " WHERE id = (SELECT model_id FROM agents WHERE id = :a)"
            ),
            {"u": base_url, "a": self.agent_id},
        )


def _script(arguments: dict[str, Any]) -> dict[str, Any]:
    """Turn 0 of a fresh run: a note about approvals -> answer with it; else call CREATE."""
    return {
        "rules": [
            {
                "when": {"turn": 0, "contains": "Approvals decided"},
                "reply": {"content": "${last_user}"},
            },
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [
                        {"name": READ, "arguments": {}},
                        {
                            "name": CREATE,
                            "arguments": {**arguments, "reason_for_owner": "to remember Ada"},
                        },
                    ]
                },
            },
            {"reply": {"content": "unexpected: ${last_result}"}},
        ]
    }


def _items(db: Engine, agent_id: int) -> list[tuple[int, str, str]]:
    with db.connect() as conn:
        return [
            (row[0], row[1], row[2])
            for row in conn.execute(
                text(
                    "SELECT id, state, question FROM agent_inbox_items WHERE agent_id = :a"
                    " ORDER BY id"
                ),
                {"a": agent_id},
            )
        ]


def test_a_write_waits_for_approval_and_is_made_once_after_it(
    database: Database, db: Engine, database_url: str, mcp_memory: McpServer
) -> None:
    tool_id = _source(database, mcp_memory.url)
    arguments = _entity("Ada")
    agent = Agent(db, database_url, tool_id, _script(arguments))

    asking, requests = agent.run()

    # The read-only call was made; the write was asked, and the run ended waiting.
    row = run_row(db, asking)
    assert row.state == "succeeded"
    assert row.output is not None
    assert row.output.startswith(f"Waiting for the owner's approval of {CREATE} (inbox item")
    assert len(requests) == 1
    assert "Ada" not in _entities(mcp_memory)
    assert agent.agent_id is not None
    ((item_id, state, question),) = _items(db, agent.agent_id)
    assert state == "blocked"
    assert CREATE in question
    assert '"name":"Ada"' in question
    assert "Reason: to remember Ada" in question
    with Session(db) as session:
        pending = approvals.approval_by_item(session, item_id)
    assert pending is not None
    assert pending.state == "pending"
    assert pending.arguments == arguments  # the reason is the owner's, not the server's
    assert pending.arguments_sha256 == arguments_digest(arguments)

    # The same call asked again while it waits: the same item, no second approval.
    agent.run()
    assert [item for item, _, _ in _items(db, agent.agent_id)] == [item_id]

    decided = tool_approvals.decide(database, item_id, Decision.APPROVE, requester=None, by="owner")
    assert decided.accepted
    assert decided.approval.state == "approved"
    twice = tool_approvals.decide(database, item_id, Decision.REJECT, requester=None)
    assert twice.refusal is DecisionRefusal.ALREADY_DECIDED

    performing, requests = agent.run()

    assert _entities(mcp_memory).count("Ada") == 1
    row = run_row(db, performing)
    assert row.state == "succeeded"
    assert row.output is not None
    note = json.loads(row.output.splitlines()[1])
    assert note["tool"] == CREATE
    assert note["outcome"] == "executed"
    assert note["arguments"] == arguments
    assert "Ada" in json.dumps(note["result"])
    with Session(db) as session:
        made = approvals.approval_by_item(session, item_id)
    assert made is not None
    assert (made.state, made.executed_by_run_id) == ("executed", performing)
    assert made.reported_at is not None
    assert _items(db, agent.agent_id)[0][1] == "done"

    # Later runs never make it again (and ask it anew only as a new approval).
    _, requests = agent.run()
    assert _entities(mcp_memory).count("Ada") == 1
    assert "Approvals decided" not in json.dumps(requests[0].body)
    assert len(_items(db, agent.agent_id)) == 2  # the model asked again: a new item


def test_a_rejected_or_expired_call_is_never_made_and_the_agent_hears_so(
    database: Database, db: Engine, database_url: str, mcp_memory: McpServer
) -> None:
    tool_id = _source(database, mcp_memory.url)
    agent = Agent(db, database_url, tool_id, _script(_entity("Bob")))
    agent.run()
    assert agent.agent_id is not None
    ((rejected_item, _, _),) = _items(db, agent.agent_id)
    refused = tool_approvals.decide(
        database, rejected_item, Decision.REJECT, requester=None, note="not Bob"
    )
    assert refused.accepted

    told, _ = agent.run()

    assert "Bob" not in _entities(mcp_memory)
    output = run_row(db, told).output
    assert output is not None
    assert json.loads(output.splitlines()[1])["outcome"] == "rejected"

    # Asked again, left unanswered past its expiry.
    agent.script = _script(_entity("Bob"))
    agent.run()
    open_items = [i for i, state, _ in _items(db, agent.agent_id) if state == "blocked"]
    assert len(open_items) == 1
    with db.begin() as conn:
        conn.execute(
            text("UPDATE tool_approvals SET expires_at = now() - interval '1 second'"
                 " WHERE item_id = :i"),
            {"i": open_items[0]},
        )  # fmt: skip
    late = tool_approvals.decide(database, open_items[0], Decision.APPROVE, requester=None)
    assert late.refusal is DecisionRefusal.EXPIRED

    expired, _ = agent.run()
    output = run_row(db, expired).output
    assert output is not None
    assert json.loads(output.splitlines()[1])["outcome"] == "expired"
    assert "Bob" not in _entities(mcp_memory)


def test_a_withdrawn_source_leaves_the_agent_its_core_and_its_approved_call_unmade(
    database: Database, db: Engine, database_url: str, mcp_memory: McpServer
) -> None:
    """Seed 000's soft degradation: the admin withdraws the source (`agentsAllowed:
    false`, mirrored as the operator's handler does) after the owner approved a call of
    it. The next run is offered the Knowledge Store core only, searches and reads the
    owner's documents and answers; the approved call is not made (the server's own file),
    it is `failed` ("no longer offered") and the model is told."""
    knowledge.load_bundle(  # alice's documents
        database, KnowledgeBundle.model_validate(yaml.safe_load(DEMO_BUNDLE.read_text()))
    )
    tool_id = _source(database, mcp_memory.url)
    script = {
        "rules": [
            {
                "when": {"turn": 0, "tools_offered": [CREATE]},
                "reply": {"tool_calls": [{"name": CREATE, "arguments": _entity("Cy")}]},
            },
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [
                        {"name": "search_knowledge", "arguments": {"query": "onboarding"}}
                    ]
                },
            },
            {
                "when": {"last_tool": "search_knowledge", "result_has": "/results/0/id"},
                "reply": {
                    "tool_calls": [
                        {
                            "name": "read_document",
                            "arguments": {"document_id": "${last_result:/results/0/id}"},
                        }
                    ]
                },
            },
            {"reply": {"content": "offered: ${tools}\nread: ${last_result:/title}"}},
        ]
    }
    agent = Agent(db, database_url, tool_id, script, owner="alice")
    agent.run()
    assert agent.agent_id is not None
    ((item_id, _, _),) = _items(db, agent.agent_id)
    assert tool_approvals.decide(database, item_id, Decision.APPROVE, requester=None).accepted

    withdrawn = {"implementation": "mcp", "agentsAllowed": False, "mcp": {"url": mcp_memory.url}}
    catalogue.mirror_tool(database, "memory", AgentToolSpec.model_validate(withdrawn))
    after, requests = agent.run()

    row = run_row(db, after)
    assert row.state == "succeeded"
    assert row.output is not None
    offered = row.output.splitlines()[0].removeprefix("offered: ").split(", ")
    assert "search_knowledge" in offered
    assert "read_document" in offered
    assert not [name for name in offered if name.startswith("memory__")]
    assert row.output.splitlines()[1] == "read: Onboarding checklist"
    assert "Cy" not in _entities(mcp_memory)
    with Session(db) as session:
        approval = approvals.approval_by_item(session, item_id)
    assert approval is not None
    assert approval.state == "failed"
    assert approval.result_error is not None
    assert "no longer offered" in approval.result_error
    assert "no longer offered" in json.dumps(requests[0].body)  # the model was told


def test_only_one_of_many_racing_claims_makes_an_approved_call(
    database: Database, db: Engine
) -> None:
    """Retries and two replicas' wakes may race for one approved call: the guarded
    claim lets exactly one of many parallel connections have it."""
    spec = AgentToolSpec.model_validate(
        {"implementation": "mcp", "mcp": {"url": "http://127.0.0.1:9/mcp"}}
    )
    tool_id = catalogue.mirror_tool(database, "raced", spec).tool_id
    owner = make_owner(db)
    with Session(db) as session, session.begin():
        agent_id = create_agent(session, owner_key=owner, name="racer", prompt="p")
        item = board.ask(session, agent_id, "approval-race", "May I?").item
        approval_id = approvals.create_approval(
            session, agent_id=agent_id, tool_id=tool_id, item_id=item.id, mcp_tool="t",
            arguments={}, digest=arguments_digest({}), reason=None, run_id=0,
            expires_at=session.execute(text("SELECT now() + interval '1 day'")).scalar_one(),
        )  # fmt: skip
        assert approval_id is not None
        assert approvals.decide(session, approval_id, approve=True, by=None)
    barrier = threading.Barrier(16)
    wins: list[int] = []

    def claim(run_id: int) -> None:
        with Session(db) as session, session.begin():
            barrier.wait()
            if approvals.claim(session, approval_id, run_id):
                wins.append(run_id)

    for _ in range(5):
        threads = [threading.Thread(target=claim, args=(n,)) for n in range(1, 17)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        barrier.reset()
    assert len(wins) == 1


def test_an_item_without_an_approval_cannot_be_decided(database: Database, db: Engine) -> None:
    owner = make_owner(db)
    with Session(db) as session, session.begin():
        agent_id = create_agent(session, owner_key=owner, name="plain", prompt="p")
        item = board.ask(session, agent_id, "question", "Ship it?").item
    with pytest.raises(NotFound, match="asks no approval"):
        tool_approvals.decide(database, item.id, Decision.APPROVE, requester=None)
    with pytest.raises(NotFound, match="does not exist"):
        tool_approvals.decide(
            database, item.id, Decision.APPROVE, requester=None, owner_key="someone-else"
        )
