"""An AgentTool naming an MCP server (issue 38): its spec mirrored into `tool_mcp_sources`,
the real server's tools listed into the rows and the status (names, descriptions, hints,
the allowlist, the approval each call needs, a digest), Events when the list is first
seen or changes or the server cannot be reached, and the last good listing kept then.

The server is the registry's `@modelcontextprotocol/server-everything` over streamable
HTTP, started by the fixture; PostgreSQL is the tests' real one."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.domain.vocabulary import ConditionReason, EventReason, EventType
from achilles.k8s.resources.agent_tool import AgentToolSpec
from achilles.k8s.secrets import SecretUnavailable
from achilles.services import catalogue, mcp_sources
from achilles_dev.mcp_servers import McpServer
from achilles_dev.ports import free_port, release

pytestmark = pytest.mark.db


def _spec(url: str, **mcp: Any) -> AgentToolSpec:
    return AgentToolSpec.model_validate(
        {"implementation": "mcp", "mcp": {"url": url, **mcp}, "description": "reference"}
    )


def _no_secrets(name: str, key: str) -> bytes:
    raise SecretUnavailable(f"Secret {name} does not exist")


def _tools(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in status["mcpTools"]}


def test_the_servers_tools_are_listed_into_rows_and_status(
    database: Database, db: Engine, mcp_everything: McpServer
) -> None:
    catalogue.mirror_tool(database, "everything", _spec(mcp_everything.url))

    first = mcp_sources.discover(database, _no_secrets, "everything")

    assert first is not None
    assert first.ready, first
    assert first.reason is ConditionReason.TOOLS_LISTED
    tools = _tools(first.status)
    assert {"echo", "get-sum", "gzip-file-as-resource"} <= set(tools)
    assert first.status["source"] == "mcp"
    assert first.status["toolCount"] == len(tools)
    assert first.status["schemaDigest"].startswith("sha256:")
    assert first.status["listedAt"].endswith("Z")
    # The server's hints, and the default policy `writes` applied to them.
    assert tools["echo"]["readOnly"] is True
    assert tools["echo"]["approval"] == "never"
    assert tools["gzip-file-as-resource"]["readOnly"] is False
    assert tools["gzip-file-as-resource"]["approval"] == "always"
    assert tools["echo"]["description"].startswith("Echoes back")
    assert first.notice is not None
    assert (first.notice.type, first.notice.reason) == (
        EventType.NORMAL,
        EventReason.MCP_TOOLS_LISTED,
    )
    with db.connect() as conn:
        row = conn.execute(
            text(
                "SELECT s.url, jsonb_array_length(s.listed_tools), s.listing_digest, s.list_error"
                " FROM tool_mcp_sources s JOIN tools t ON t.id = s.tool_id"
                " WHERE t.name = 'everything'"
            )
        ).one()
    assert row == (mcp_everything.url, len(tools), first.status["schemaDigest"], None)

    # The same list again: nothing to announce.
    again = mcp_sources.discover(database, _no_secrets, "everything")
    assert again is not None
    assert again.ready
    assert again.notice is None
    assert again.status["schemaDigest"] == first.status["schemaDigest"]


def test_the_allowlist_and_per_tool_policies_show_in_status(
    database: Database, mcp_everything: McpServer
) -> None:
    spec = _spec(
        mcp_everything.url,
        allowedTools=["echo", "get-sum"],
        approval="never",
        tools=[{"name": "get-sum", "approval": "always"}],
    )
    catalogue.mirror_tool(database, "everything-narrow", spec)

    found = mcp_sources.discover(database, _no_secrets, "everything-narrow")

    assert found is not None
    assert found.ready
    tools = _tools(found.status)
    assert found.status["toolCount"] == 2
    assert [name for name, tool in tools.items() if tool["allowed"]] == ["echo", "get-sum"]
    assert tools["echo"]["approval"] == "never"
    assert tools["get-sum"]["approval"] == "always"
    assert tools["gzip-file-as-resource"]["approval"] == "never"  # never, though it writes
    assert "2 of" in found.message


def test_an_unreachable_server_is_reported_and_the_last_listing_kept(
    database: Database, db: Engine, mcp_everything: McpServer
) -> None:
    catalogue.mirror_tool(database, "moving", _spec(mcp_everything.url))
    listed = mcp_sources.discover(database, _no_secrets, "moving")
    assert listed is not None
    assert listed.ready
    closed = free_port("127.0.0.1")  # leased to this process: nothing listens there
    try:
        catalogue.mirror_tool(
            database, "moving", _spec(f"http://127.0.0.1:{closed}/mcp", timeoutSeconds=3)
        )
        failed = mcp_sources.discover(database, _no_secrets, "moving")
    finally:
        release([closed])

    assert failed is not None
    assert not failed.ready
    assert failed.reason is ConditionReason.SERVER_UNREACHABLE
    assert f"127.0.0.1:{closed}" in failed.message
    assert failed.notice is not None
    assert (failed.notice.type, failed.notice.reason) == (
        EventType.WARNING,
        EventReason.MCP_SERVER_UNREACHABLE,
    )
    # Runs keep offering the last good listing, and the status keeps showing it.
    assert failed.status["schemaDigest"] == listed.status["schemaDigest"]
    with db.connect() as conn:
        error, count = conn.execute(
            text(
                "SELECT s.list_error, jsonb_array_length(s.listed_tools) FROM tool_mcp_sources s"
                " JOIN tools t ON t.id = s.tool_id WHERE t.name = 'moving'"
            )
        ).one()
    assert "cannot reach" in error
    assert count == listed.status["toolCount"]


def test_a_missing_credential_secret_is_reported_without_a_request(
    database: Database, mcp_everything: McpServer
) -> None:
    spec = _spec(
        mcp_everything.url,
        headers=[{"name": "Authorization", "secretKeyRef": {"name": "mcp-token", "key": "t"}}],
    )
    catalogue.mirror_tool(database, "guarded", spec)

    found = mcp_sources.discover(database, _no_secrets, "guarded")

    assert found is not None
    assert not found.ready
    assert found.reason is ConditionReason.CREDENTIALS_UNAVAILABLE
    assert "mcp-token" in found.message
    assert found.status == {"source": "mcp", "toolCount": 0}


def test_credentials_from_the_secret_reach_the_server_and_no_message(
    database: Database, mcp_everything: McpServer
) -> None:
    """The header's value is read for the request; the status says nothing of it."""
    secret = b"Bearer s3cr3t-value-0f-the-admin"
    reads: list[tuple[str, str]] = []

    def read(name: str, key: str) -> bytes:
        reads.append((name, key))
        return secret

    spec = _spec(
        mcp_everything.url,
        headers=[{"name": "Authorization", "secretKeyRef": {"name": "mcp-token", "key": "t"}}],
    )
    catalogue.mirror_tool(database, "with-token", spec)

    found = mcp_sources.discover(database, read, "with-token")

    assert found is not None
    assert found.ready
    assert reads == [("mcp-token", "t")]
    assert "s3cr3t" not in repr(found)


def test_a_builtin_tool_has_no_source_row_and_an_mcp_tool_that_changes_loses_it(
    database: Database, db: Engine, mcp_everything: McpServer
) -> None:
    catalogue.mirror_tool(database, "switching", _spec(mcp_everything.url))
    catalogue.mirror_tool(
        database, "switching", AgentToolSpec.model_validate({"implementation": "clock"})
    )

    assert mcp_sources.discover(database, _no_secrets, "switching") is None
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT count(*) FROM tool_mcp_sources s JOIN tools t ON t.id = s.tool_id"
                " WHERE t.name = 'switching'"
            )
        ).scalar()
    assert rows == 0
