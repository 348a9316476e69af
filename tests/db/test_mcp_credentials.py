"""MCP credentials stay out of the agent's reach (issue 38): the headers of a source go,
by Secret reference, only to the runs of agents allowed it (the dispatcher's rows, which
its Jobs are built from); a run reads them from its pod's environment and sends them to
the server, and no step, output, tool result or log line of the run carries them."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, text, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.models import AgentToolLink, Tool
from achilles.db.tools.sources import header_secrets_of_agents
from achilles.domain.mcp_tools import HeaderSecret, header_env
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.services import catalogue, mcp_sources
from achilles_dev.mcp_servers import McpServer
from tests.db.factories import make_agent, make_owner
from tests.db.runner_support import add_model, queue_run, run_row, run_to_end, serving

pytestmark = pytest.mark.db

SECRET = "Bearer 7f3c-credential-of-the-admin"
HEADERS = [{"name": "Authorization", "secretKeyRef": {"name": "mcp-token", "key": "auth"}}]


def _echo(name: str, message: str) -> dict[str, Any]:
    return {"name": name, "arguments": {"message": message}}


def _spec(url: str) -> AgentToolSpec:
    return AgentToolSpec.model_validate(
        {"implementation": "mcp", "mcp": {"url": url, "headers": HEADERS}}
    )


def test_only_agents_allowed_a_source_get_its_credentials(database: Database, db: Engine) -> None:
    tool_id = catalogue.mirror_tool(database, "guarded", _spec("http://127.0.0.1:9/mcp")).tool_id
    owner = make_owner(db)
    linked, unlinked = make_agent(db, owner), make_agent(db, owner)
    with Session(db) as session, session.begin():
        session.add(AgentToolLink(agent_id=linked, tool_id=tool_id))

    with Session(db) as session:
        found = header_secrets_of_agents(session, [linked, unlinked])
    assert found == {linked: (HeaderSecret(header_env(tool_id, 0), "mcp-token", "auth"),)}

    with Session(db) as session, session.begin():
        session.execute(update(Tool).where(Tool.id == tool_id).values(agents_allowed=False))
        assert header_secrets_of_agents(session, [linked, unlinked]) == {}


def test_a_run_sends_the_credentials_and_keeps_them_to_itself(
    database: Database, db: Engine, database_url: str, mcp_everything: McpServer
) -> None:
    def read(name: str, key: str) -> bytes:
        assert (name, key) == ("mcp-token", "auth")
        return SECRET.encode()

    tool_id = catalogue.mirror_tool(database, "keyed", _spec(mcp_everything.url)).tool_id
    found = mcp_sources.discover(database, read, "keyed")
    assert found is not None
    assert found.ready, found.message
    echo = "keyed__echo"
    script: dict[str, Any] = {
        "rules": [
            {"when": {"turn": 0}, "reply": {"tool_calls": [_echo(echo, "hi")]}},
            {"when": {"turn": 1}, "reply": {"tool_calls": [_echo(echo, "again")]}},
            {"reply": {"content": "${last_result}"}},
        ]
    }
    owner = make_owner(db)
    with serving(script) as server:
        model = add_model(db, server, name=f"model-{owner}")
        run_id = queue_run(db, owner=owner, model=model, tool_ids=[tool_id])
        env = {header_env(tool_id, 0): SECRET}
        code, log = run_to_end(database_url, run_id, extra_env=env)
        requests = server.recorded()
    assert code == 0, log
    row = run_row(db, run_id)
    assert row.state == "succeeded"
    assert row.output is not None
    assert "Echo: again" in row.output
    assert SECRET not in log
    assert all(SECRET not in str(request.body) for request in requests)
    with db.connect() as conn:
        journal = conn.execute(
            text(
                "SELECT coalesce(string_agg(row_to_json(s)::text, ''), '')"
                " FROM agent_run_steps s WHERE run_id = :r"
            ),
            {"r": run_id},
        ).scalar_one()
    assert "7f3c" not in journal


def test_a_run_without_the_credentials_hears_so_and_goes_on(
    database: Database, db: Engine, database_url: str, mcp_everything: McpServer
) -> None:
    tool_id = catalogue.mirror_tool(database, "keyless", _spec(mcp_everything.url)).tool_id
    found = mcp_sources.discover(database, lambda name, key: SECRET.encode(), "keyless")
    assert found is not None
    script: dict[str, Any] = {
        "rules": [
            {"when": {"turn": 0}, "reply": {"tool_calls": [_echo("keyless__echo", "x")]}},
            {"reply": {"content": "${last_result}"}},
        ]
    }
    owner = make_owner(db)
    with serving(script) as server:
        model = add_model(db, server, name=f"model-{owner}")
        run_id = queue_run(db, owner=owner, model=model, tool_ids=[tool_id])
        code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    output = run_row(db, run_id).output
    assert output is not None
    assert "this run has no credentials for its server" in output
