"""An AgentTool's MCP source: its spec into the catalogue, its server's tools into status.

The catalogue handler calls this module and applies what it returns; everything about
MCP sources (the Secret reads, the SDK, the rows) is here and in its own adapters, so the
handler stays thin and this moves unchanged with it (issue 40).

Discovery lists the server's tools with the headers from the admin's Secrets (read here,
used for the one request, never logged or stored) and records the listing, its digest and
when, or the failure with the last good listing kept: runs offer what was last listed.
The status it returns shows each tool's name, description (clipped: the server's words),
hints, whether the allowlist lets it through and whether its calls wait for approval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from achilles.db.database import Database
from achilles.db.tools import sources
from achilles.domain.mcp_tools import (
    Approval,
    HeaderRef,
    ListedTool,
    SourceRules,
    listing_digest,
    needs_approval,
)
from achilles.domain.vocabulary import ConditionReason, EventReason, EventType
from achilles.k8s.resources.agent_tool import STATUS_DESCRIPTION_MAX_LENGTH
from achilles.k8s.resources.mcp_source import McpSource
from achilles.k8s.rest import CoreApi
from achilles.k8s.secrets import SecretUnavailable, read_secret_key
from achilles.mcp_client.client import McpEndpoint, McpUnreachable, list_tools

SOURCE_MCP = "mcp"
SOURCE_BUILTIN = "builtin"


def source_row(spec: McpSource) -> sources.SourceRow:
    """What the rows keep of an AgentTool's spec.mcp."""
    return sources.SourceRow(
        url=spec.url,
        headers=tuple(
            HeaderRef(h.name, h.secret_key_ref.name, h.secret_key_ref.key) for h in spec.headers
        ),
        credentials=spec.credentials,
        rules=SourceRules(
            allowed_tools=None if spec.allowed_tools is None else frozenset(spec.allowed_tools),
            approval=Approval(spec.approval),
            tool_approvals={policy.name: Approval(policy.approval) for policy in spec.tools},
        ),
        timeout_seconds=spec.timeout_seconds,
        max_result_bytes=spec.max_result_bytes,
    )


@dataclass(frozen=True)
class Notice:
    """An Event to post on the AgentTool."""

    type: EventType
    reason: EventReason
    message: str


@dataclass(frozen=True)
class Discovery:
    """What the AgentTool's status and Events say after a listing."""

    ready: bool
    reason: ConditionReason
    message: str
    status: dict[str, Any]  # the status fields besides the conditions
    notice: Notice | None


# (Secret name, key) -> the value; raises SecretUnavailable.
ReadSecret = Callable[[str, str], bytes]


def secret_reader(core: CoreApi, namespace: str) -> ReadSecret:
    """Reads keys of the Secrets of the runs namespace, as the operator may."""

    def read(name: str, key: str) -> bytes:
        return read_secret_key(core, namespace, name, key)

    return read


def read_headers(read_secret: ReadSecret, headers: Sequence[HeaderRef]) -> dict[str, str]:
    """The headers' values from their Secrets (raises SecretUnavailable)."""
    values: dict[str, str] = {}
    for header in headers:
        raw = read_secret(header.secret_name, header.secret_key)
        try:
            values[header.name] = raw.decode().strip()
        except UnicodeDecodeError as exc:
            raise SecretUnavailable(
                f"Secret {header.secret_name} key {header.secret_key!r} is not UTF-8 text"
            ) from exc
    return values


def source_names(database: Database) -> list[str]:
    """The AgentTools that are MCP sources, by name."""
    with database.transaction() as session:
        return sources.source_tool_names(session)


def discover(database: Database, read_secret: ReadSecret, name: str) -> Discovery | None:
    """List the tools of AgentTool `name`'s server and record them; None when the tool
    has no MCP source (not mirrored yet, or not `implementation: mcp`)."""
    with database.transaction() as session:
        source = sources.source_by_tool_name(session, name)
    if source is None:
        return None
    try:
        headers = read_headers(read_secret, source.spec.headers)
    except SecretUnavailable as exc:
        return _failed(database, source, ConditionReason.CREDENTIALS_UNAVAILABLE, str(exc))
    endpoint = McpEndpoint(source.spec.url, float(source.spec.timeout_seconds), headers)
    try:
        listed = list_tools(endpoint)
    except McpUnreachable as exc:
        return _failed(database, source, ConditionReason.SERVER_UNREACHABLE, str(exc))
    digest = listing_digest(listed)
    with database.transaction() as session:
        recorded = sources.record_listing(session, source.tool_id, listed, digest)
    if recorded is None:
        return None  # the tool was deleted or stopped being an MCP source meanwhile
    notice = None
    allowed = [tool for tool in listed if source.spec.rules.is_allowed(tool.name)]
    counted = f"{len(allowed)} of {len(listed)} tool(s) allowed"
    if recorded.previous_digest is None:
        notice = Notice(EventType.NORMAL, EventReason.MCP_TOOLS_LISTED, f"listed: {counted}")
    elif recorded.previous_digest != digest:
        notice = Notice(
            EventType.NORMAL,
            EventReason.MCP_TOOLS_CHANGED,
            f"the server's tools changed: {counted}",
        )
    return Discovery(
        ready=True,
        reason=ConditionReason.TOOLS_LISTED,
        message=f"{counted} from {source.spec.url}",
        status=status_fields(listed, source.spec.rules, digest, recorded.listed_at),
        notice=notice,
    )


def _failed(
    database: Database, source: sources.Source, reason: ConditionReason, error: str
) -> Discovery:
    with database.transaction() as session:
        sources.record_list_error(session, source.tool_id, error)
    # Runs keep offering the last good listing; the status keeps showing it.
    status = (
        status_fields(
            source.listed, source.spec.rules, source.listing_digest or "", source.listed_at
        )
        if source.listed is not None
        else {"source": SOURCE_MCP, "toolCount": 0}
    )
    return Discovery(
        ready=False,
        reason=reason,
        message=error,
        status=status,
        notice=Notice(EventType.WARNING, EventReason.MCP_SERVER_UNREACHABLE, error),
    )


def status_fields(
    listed: Sequence[ListedTool], rules: SourceRules, digest: str, listed_at: datetime | None
) -> dict[str, Any]:
    tools = [
        {
            "name": tool.name,
            "description": _clip(tool.description),
            "readOnly": tool.read_only,
            "destructive": tool.destructive,
            "allowed": rules.is_allowed(tool.name),
            "approval": "always" if needs_approval(rules.policy_of(tool.name), tool) else "never",
        }
        for tool in listed
    ]
    return {
        "source": SOURCE_MCP,
        "toolCount": sum(1 for tool in tools if tool["allowed"]),
        "mcpTools": [{k: v for k, v in tool.items() if v is not None} for tool in tools],
        "schemaDigest": digest or None,
        "listedAt": None if listed_at is None else listed_at.isoformat().replace("+00:00", "Z"),
    }


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= STATUS_DESCRIPTION_MAX_LENGTH:
        return text
    return text[: STATUS_DESCRIPTION_MAX_LENGTH - 3] + "..."
