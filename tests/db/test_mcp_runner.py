"""A run calls its agent's MCP tools (issue 38): a real `achilles runner` process, as the
runner's login with its run secret, a real model server scripted to call the tool, the
registry's `mcp-server-time` (read-only tools) behind supergateway.

Each call is a step of the run (tool, outcome, SHA-256 of the arguments and their size,
the result's size, latency), never the arguments or the result; a tool's failure and an
unreachable server come back to the model as error results and the run goes on; results
are cut to the source's cap; a source withdrawn (`agentsAllowed: false`) is simply not
offered (the seed's soft degradation)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine, text, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.models import Tool
from achilles.db.journal.run_trace import run_steps, used_by_run
from achilles.domain.mcp_tools import arguments_digest
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.secrets import SecretUnavailable
from achilles.services import catalogue, mcp_sources
from achilles_dev.mcp_servers import McpServer
from achilles_dev.ports import free_port, release
from tests.db.factories import make_owner
from tests.db.runner_support import achilles, add_model, queue_run, run_row, run_to_end, serving

pytestmark = pytest.mark.db

NOW = "time__get_current_time"
BERLIN = {"timezone": "Europe/Berlin"}


def _no_secrets(name: str, key: str) -> bytes:
    raise SecretUnavailable(f"Secret {name} does not exist")


def _mcp_tool(database: Database, name: str, url: str, **mcp: Any) -> int:
    spec = AgentToolSpec.model_validate({"implementation": "mcp", "mcp": {"url": url, **mcp}})
    tool_id = catalogue.mirror_tool(database, name, spec).tool_id
    found = mcp_sources.discover(database, _no_secrets, name)
    assert found is not None
    assert found.ready, found.message
    return tool_id


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def _offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def _run(db: Engine, database_url: str, script: dict[str, Any], tool_ids: list[int]) -> Any:
    owner = make_owner(db)
    with serving(script) as server:
        model = add_model(db, server, name=f"model-{owner}")
        run_id = queue_run(db, owner=owner, model=model, tool_ids=tool_ids)
        code, log = run_to_end(database_url, run_id)
        assert code == 0, log
        return run_id, server.recorded()


def test_a_run_calls_a_read_only_mcp_tool_and_its_step_is_journalled(
    database: Database, db: Engine, database_url: str, mcp_time: McpServer
) -> None:
    tool_id = _mcp_tool(database, "time", mcp_time.url)
    script = {
        "rules": [
            {
                "when": {"turn": 0, "tools_offered": [NOW]},
                "reply": {"tool_calls": [{"name": NOW, "arguments": BERLIN}]},
            },
            {
                "when": {"turn": 1, "result_has": "/result"},
                "reply": {"content": "Berlin: ${last_result:/result}"},
            },
            {"reply": {"content": "the tool was not offered or failed: ${last_result}"}},
        ]
    }

    run_id, requests = _run(db, database_url, script, [tool_id])

    row = run_row(db, run_id)
    assert row.state == "succeeded", row
    assert row.output is not None
    assert '"timezone": "Europe/Berlin"' in row.output
    assert "day_of_week" in row.output
    assert NOW in _offered(requests[0].body)
    assert "time__convert_time" in _offered(requests[0].body)
    with Session(db) as session:
        steps = run_steps(session, run_id)
        used = used_by_run(session, run_id)
    (call,) = [step for step in steps if step.kind == "tool_call"]
    assert (call.tool, call.status, call.error) == (NOW, "ok", None)
    assert call.argument_sha256 == arguments_digest(BERLIN)
    assert call.argument_bytes == len(json.dumps(BERLIN).encode())
    assert call.result_bytes is not None
    assert call.result_bytes > 0
    assert call.latency_ms > 0
    assert used is not None
    assert NOW in used.tools
    # The journal keeps no argument or result.
    with db.connect() as conn:
        text_of_steps = conn.execute(
            text("SELECT row_to_json(s)::text FROM agent_run_steps s WHERE run_id = :r"),
            {"r": run_id},
        ).scalars()
        assert not any("Berlin" in line for line in text_of_steps)


def test_failures_come_back_to_the_model_and_the_run_goes_on(
    database: Database, db: Engine, database_url: str, mcp_time: McpServer
) -> None:
    tool_id = _mcp_tool(database, "time-errors", mcp_time.url)
    closed = free_port("127.0.0.1")
    # Listed first at the default timeout (a loaded machine's server may take seconds);
    # the 5 s bound is for the call to where nothing listens, which is refused at once.
    gone_id = _mcp_tool(database, "time-gone", mcp_time.url)
    try:
        # The server of time-gone moves to where nothing listens: its last listing stays.
        catalogue.mirror_tool(
            database,
            "time-gone",
            AgentToolSpec.model_validate(
                {
                    "implementation": "mcp",
                    "mcp": {"url": f"http://127.0.0.1:{closed}/mcp", "timeoutSeconds": 5},
                }
            ),
        )
        bad = "time-errors__get_current_time"
        gone = "time-gone__get_current_time"
        script = {
            "rules": [
                {
                    "when": {"turn": 0},
                    "reply": {
                        "tool_calls": [
                            {"name": bad, "arguments": {"timezone": "Mars/Olympus_Mons"}},
                            {"name": gone, "arguments": BERLIN},
                            {"name": bad, "arguments": "[1, 2]"},
                        ]
                    },
                },
                {"reply": {"content": "done despite: ${last_result}"}},
            ]
        }
        run_id, requests = _run(db, database_url, script, [tool_id, gone_id])
    finally:
        release([closed])

    assert run_row(db, run_id).state == "succeeded"
    results = [json.loads(result) for result in _tool_results(requests[1].body)]
    assert "Mars/Olympus_Mons" in results[0]["error"]
    assert f"cannot reach http://127.0.0.1:{closed}/mcp" in results[1]["error"]
    assert "not a JSON object" in results[2]["error"]
    with Session(db) as session:
        calls = [step for step in run_steps(session, run_id) if step.kind == "tool_call"]
    assert [(c.tool, c.status) for c in calls] == [
        (bad, "error"),
        (gone, "error"),
        (bad, "error"),
    ]


def test_results_are_cut_to_the_sources_cap(
    database: Database, db: Engine, database_url: str, mcp_everything: McpServer
) -> None:
    tool_id = _mcp_tool(
        database, "everything-capped", mcp_everything.url, maxResultBytes=256,
        allowedTools=["echo"],
    )  # fmt: skip
    echo = "everything-capped__echo"
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {"tool_calls": [{"name": echo, "arguments": {"message": "x" * 2000}}]},
            },
            {"reply": {"content": "${last_result:/result}"}},
        ]
    }

    run_id, requests = _run(db, database_url, script, [tool_id])

    assert _offered(requests[0].body)[-1:] == [echo]  # the allowlist: only echo
    output = run_row(db, run_id).output
    assert output is not None
    assert output.startswith("Echo: xxx")
    assert output.endswith("[result cut at 256 bytes of 2006]")
    assert len(output.encode()) <= 256


def test_a_withdrawn_source_is_not_offered_and_the_agent_runs_on_the_core(
    database: Database, db: Engine, database_url: str, mcp_everything: McpServer
) -> None:
    tool_id = _mcp_tool(database, "everything-withdrawn", mcp_everything.url)
    with Session(db) as session, session.begin():
        session.execute(update(Tool).where(Tool.id == tool_id).values(agents_allowed=False))
    script = {"rules": [{"reply": {"content": "offered: ${tools}"}}]}

    run_id, requests = _run(db, database_url, script, [tool_id])

    row = run_row(db, run_id)
    assert row.state == "succeeded"
    assert not any(name.startswith("everything-withdrawn") for name in _offered(requests[0].body))
    assert "search_knowledge" in _offered(requests[0].body)


def _session_log(server: McpServer) -> tuple[int, int]:
    """Sessions the server opened and was told to end, from its own log."""
    text_ = server.log.read_text()
    return text_.count("Session initialized with ID"), text_.count(
        "Received session termination request"
    )


def test_a_runs_calls_share_one_session_which_ends_with_the_run(
    database: Database, db: Engine, database_url: str, mcp_everything: McpServer
) -> None:
    tool_id = _mcp_tool(database, "everything-session", mcp_everything.url)
    echo = "everything-session__echo"
    calls = [{"name": echo, "arguments": {"message": f"m{n}"}} for n in range(3)]
    script = {
        "rules": [
            {"when": {"turn": 0}, "reply": {"tool_calls": calls[:2]}},
            {"when": {"turn": 1}, "reply": {"tool_calls": calls[2:]}},
            {"reply": {"content": "${last_result:/result}"}},
        ]
    }
    opened, ended = _session_log(mcp_everything)

    run_id, _ = _run(db, database_url, script, [tool_id])

    assert run_row(db, run_id).output == "Echo: m2"
    assert _session_log(mcp_everything) == (opened + 1, ended + 1)


def test_the_cli_shows_a_calls_argument_digest_never_the_arguments(
    database: Database, db: Engine, database_url: str, mcp_time: McpServer
) -> None:
    tool_id = _mcp_tool(database, "time-cli", mcp_time.url)
    call = "time-cli__get_current_time"
    script = {
        "rules": [
            {"when": {"turn": 0}, "reply": {"tool_calls": [{"name": call, "arguments": BERLIN}]}},
            {"reply": {"content": "done"}},
        ]
    }
    run_id, _ = _run(db, database_url, script, [tool_id])

    shown = achilles(database_url, "runs", "show", str(run_id), "--steps", "--json")

    assert shown.returncode == 0, shown.stderr
    (step,) = [s for s in json.loads(shown.stdout)["steps"] if s["kind"] == "tool_call"]
    assert step["argument_sha256"] == arguments_digest(BERLIN).hex()
    assert "Berlin" not in shown.stdout
