"""Queries of `tool_mcp_sources`: an AgentTool's MCP server, its rules and its listing.

The caller owns the transaction. The operator writes the source as the AgentTool says
(`write_source`) and the server's listing as it finds it (`record_listing`,
`record_list_error`); a runner reads the sources of its agent's allowed tools
(`sources_of_agent`), under its login's row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentToolLink, Tool
from achilles.db.tools.models import ToolMcpSource
from achilles.domain.mcp_tools import (
    Approval,
    HeaderRef,
    HeaderSecret,
    ListedTool,
    RunSource,
    SourceRules,
    header_env,
    offered_tools,
)


@dataclass(frozen=True)
class SourceRow:
    """What the AgentTool's spec.mcp says."""

    url: str
    headers: tuple[HeaderRef, ...]
    credentials: str
    rules: SourceRules
    timeout_seconds: int
    max_result_bytes: int


@dataclass(frozen=True)
class Source:
    """A source as stored: its tool's row, the spec and the last listing."""

    tool_id: int
    tool_name: str
    spec: SourceRow
    listed: tuple[ListedTool, ...] | None  # None: never listed
    listing_digest: str | None
    listed_at: datetime | None
    list_error: str | None


def write_source(session: Session, tool_id: int, source: SourceRow) -> None:
    """The tool's source as its spec says (the listing is kept: the operator lists again)."""
    rules = source.rules
    values = {
        "url": source.url,
        "headers": [
            {"name": h.name, "secret_name": h.secret_name, "secret_key": h.secret_key}
            for h in source.headers
        ],
        "credentials": source.credentials,
        "allowed_tools": None if rules.allowed_tools is None else sorted(rules.allowed_tools),
        "approval": str(rules.approval),
        "tool_approvals": {name: str(policy) for name, policy in rules.tool_approvals.items()},
        "timeout_seconds": source.timeout_seconds,
        "max_result_bytes": source.max_result_bytes,
    }
    session.execute(
        insert(ToolMcpSource)
        .values(tool_id=tool_id, **values)
        .on_conflict_do_update(
            index_elements=[ToolMcpSource.tool_id], set_={**values, "updated_at": func.now()}
        )
    )


def delete_source(session: Session, tool_id: int) -> None:
    """The tool is no longer an MCP source (its implementation changed)."""
    session.execute(delete(ToolMcpSource).where(ToolMcpSource.tool_id == tool_id))


@dataclass(frozen=True)
class Listed:
    previous_digest: str | None  # the listing's before this one (None: the first)
    listed_at: datetime


def record_listing(
    session: Session, tool_id: int, listed: Sequence[ListedTool], digest: str
) -> Listed | None:
    """The server's tools as just listed; None when the source is gone meanwhile."""
    previous = session.execute(
        select(ToolMcpSource.listing_digest)
        .where(ToolMcpSource.tool_id == tool_id)
        .with_for_update()
    ).one_or_none()
    if previous is None:
        return None
    at: datetime = session.execute(
        update(ToolMcpSource)
        .where(ToolMcpSource.tool_id == tool_id)
        .values(
            listed_tools=[tool.as_json() for tool in listed],
            listing_digest=digest,
            listed_at=func.now(),
            list_error=None,
        )
        .returning(func.coalesce(ToolMcpSource.listed_at, func.now()))
    ).scalar_one()
    return Listed(previous[0], at)


def record_list_error(session: Session, tool_id: int, error: str) -> None:
    """The listing failed; the last good one stays what runs offer."""
    session.execute(
        update(ToolMcpSource).where(ToolMcpSource.tool_id == tool_id).values(list_error=error)
    )


def _source(row: ToolMcpSource, tool_name: str) -> Source:
    return Source(
        tool_id=row.tool_id,
        tool_name=tool_name,
        spec=SourceRow(
            url=row.url,
            headers=tuple(
                HeaderRef(h["name"], h["secret_name"], h["secret_key"]) for h in row.headers
            ),
            credentials=row.credentials,
            rules=SourceRules(
                allowed_tools=None if row.allowed_tools is None else frozenset(row.allowed_tools),
                approval=Approval(row.approval),
                tool_approvals={name: Approval(p) for name, p in row.tool_approvals.items()},
            ),
            timeout_seconds=row.timeout_seconds,
            max_result_bytes=row.max_result_bytes,
        ),
        listed=None
        if row.listed_tools is None
        else tuple(ListedTool.from_json(tool) for tool in row.listed_tools),
        listing_digest=row.listing_digest,
        listed_at=row.listed_at,
        list_error=row.list_error,
    )


def source_by_tool_name(session: Session, name: str) -> Source | None:
    row = session.execute(
        select(ToolMcpSource, Tool.name)
        .join(Tool, Tool.id == ToolMcpSource.tool_id)
        .where(Tool.name == name)
    ).one_or_none()
    return None if row is None else _source(row[0], row[1])


def source_tool_names(session: Session) -> list[str]:
    """The names of the tools that are MCP sources."""
    return list(
        session.execute(
            select(Tool.name)
            .join(ToolMcpSource, ToolMcpSource.tool_id == Tool.id)
            .order_by(Tool.name)
        ).scalars()
    )


def sources_of_agent(session: Session, agent_id: int) -> list[Source]:
    """The MCP sources among the agent's tools whose `agents_allowed` is true now (the
    seed's soft degradation: a withdrawn tool is simply not offered)."""
    rows = session.execute(
        select(ToolMcpSource, Tool.name)
        .join(Tool, Tool.id == ToolMcpSource.tool_id)
        .join(AgentToolLink, AgentToolLink.tool_id == Tool.id)
        .where(AgentToolLink.agent_id == agent_id, Tool.agents_allowed.is_(True))
        .order_by(Tool.name)
    ).all()
    return [_source(row[0], row[1]) for row in rows]


def run_sources(session: Session, agent_id: int) -> tuple[RunSource, ...]:
    """What a run of the agent offers from its MCP sources: each allowed source's last
    listing through the admin's rules (a source never listed offers nothing)."""
    return tuple(
        RunSource(
            tool_id=source.tool_id,
            catalogue_name=source.tool_name,
            url=source.spec.url,
            headers=source.spec.headers,
            timeout_seconds=source.spec.timeout_seconds,
            max_result_bytes=source.spec.max_result_bytes,
            offered=tuple(offered_tools(source.tool_name, source.listed or (), source.spec.rules)),
        )
        for source in sources_of_agent(session, agent_id)
    )


def header_secrets_of_agents(
    session: Session, agent_ids: Sequence[int]
) -> dict[int, tuple[HeaderSecret, ...]]:
    """Each agent's MCP credentials as its runs' pods get them: the headers of the
    sources it is allowed now (`agents_allowed`), by Secret reference only. An agent
    not allowed a source never gets its credentials (issue 38)."""
    if not agent_ids:
        return {}
    rows = session.execute(
        select(AgentToolLink.agent_id, ToolMcpSource.tool_id, ToolMcpSource.headers)
        .join(Tool, Tool.id == AgentToolLink.tool_id)
        .join(ToolMcpSource, ToolMcpSource.tool_id == Tool.id)
        .where(AgentToolLink.agent_id.in_(agent_ids), Tool.agents_allowed.is_(True))
        .order_by(AgentToolLink.agent_id, ToolMcpSource.tool_id)
    ).all()
    found: dict[int, list[HeaderSecret]] = {}
    for agent_id, tool_id, headers in rows:
        found.setdefault(agent_id, []).extend(
            HeaderSecret(header_env(tool_id, index), h["secret_name"], h["secret_key"])
            for index, h in enumerate(headers)
        )
    return {agent_id: tuple(secrets) for agent_id, secrets in found.items()}
