"""Listing and calling an MCP server's tools over streamable HTTP, with the official SDK.

The operator lists (`list_tools`), a run calls (`call_tool`); both are synchronous
(one event loop per request, on the caller's thread: the operator's handlers and the
runner's loop are threads) and bounded by the source's timeout, so a silent server costs
a call its timeout and nothing more. Every failure to reach the server, to speak MCP with
it, or to hear back in time is `McpUnreachable`, with a message that never carries a
header's value; a tool that ran and failed is a result with `is_error`, which the model
reads like any other.

Headers carry credentials: they go to the server only, never to a log line or message.

The SDK is imported at the first listing or call, not with this module: it imports
OpenTelemetry's API itself, unconditionally, and the operator imports this module
(through services/mcp_sources) whether or not it ever talks MCP; with tracing off a
process that never does loads no OpenTelemetry module (docs/observability.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx2
from pydantic import ValidationError

from achilles.domain.mcp_tools import ListedTool

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult, ContentBlock

T = TypeVar("T")

# A listing longer than this many pages is a server that never ends its list.
MAX_LIST_PAGES = 20


class McpUnreachable(Exception):
    """The server could not be reached, did not speak MCP, or did not answer in time."""


@dataclass(frozen=True)
class McpEndpoint:
    url: str
    timeout_seconds: float
    # Header name -> value (credentials): sent, never shown.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class CallOutcome:
    """What the server answered: its content as text, and whether the tool failed."""

    text: str
    is_error: bool


def list_tools(endpoint: McpEndpoint) -> list[ListedTool]:
    """Every tool the server lists, in its order."""
    return _run(endpoint, _list_tools)


def call_tool(endpoint: McpEndpoint, name: str, arguments: dict[str, Any]) -> CallOutcome:
    """One call of `name` with `arguments`."""

    async def call(client: Client) -> CallOutcome:
        result = await client.call_tool(name, arguments)
        return CallOutcome(text=result_text(result), is_error=result.is_error)

    return _run(endpoint, call)


async def _list_tools(client: Client) -> list[ListedTool]:
    tools: list[ListedTool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        for tool in page.tools:
            hints = tool.annotations
            tools.append(
                ListedTool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=dict(tool.input_schema),
                    read_only=None if hints is None else hints.read_only_hint,
                    destructive=None if hints is None else hints.destructive_hint,
                )
            )
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise McpUnreachable(f"the server's tool list went on past {MAX_LIST_PAGES} pages")


def _run(endpoint: McpEndpoint, work: Callable[[Client], Awaitable[T]]) -> T:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.exceptions import MCPError

    async def session() -> T:
        http = create_mcp_http_client(
            headers=dict(endpoint.headers), timeout=httpx2.Timeout(endpoint.timeout_seconds)
        )
        async with http:
            transport = streamable_http_client(endpoint.url, http_client=http)
            with anyio.fail_after(endpoint.timeout_seconds):
                async with Client(
                    transport, read_timeout_seconds=endpoint.timeout_seconds, cache=None
                ) as client:
                    return await work(client)

    try:
        return anyio.run(session)
    except (TimeoutError, MCPError, ValidationError, httpx2.HTTPError, OSError) as exc:
        raise unreachable(endpoint, exc) from exc
    except BaseExceptionGroup as group:  # the transport's task group
        raise unreachable(endpoint, group) from group


def unreachable(endpoint: McpEndpoint, exc: BaseException) -> McpUnreachable:
    """What a failure to reach, or to speak MCP with, the server is called (no header)."""
    from mcp.shared.exceptions import MCPError

    if isinstance(exc, TimeoutError):
        seconds = _seconds(endpoint.timeout_seconds)
        return McpUnreachable(f"no answer from {endpoint.url} within {seconds}")
    if isinstance(exc, MCPError):
        return McpUnreachable(f"{endpoint.url} answered with an MCP error: {exc}")
    if isinstance(exc, ValidationError):
        return McpUnreachable(f"{endpoint.url} answered something that is not MCP")
    return McpUnreachable(f"cannot reach {endpoint.url}: {_reason(exc)}")


def _seconds(value: float) -> str:
    return f"{value:g} s" if math.isfinite(value) else "its timeout"


def _reason(exc: BaseException) -> str:
    """The innermost exception's class and message (never a request's headers)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def result_text(result: CallToolResult) -> str:
    """The result's content as the model reads it: text blocks as they are; structured
    content as JSON when there is no text; other blocks (images, resources) named."""
    from mcp_types import TextContent

    parts = [_block_text(block) for block in result.content]
    has_text = any(isinstance(block, TextContent) for block in result.content)
    if not has_text and result.structured_content is not None:
        parts.insert(0, json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(part for part in parts if part)


def _block_text(block: ContentBlock) -> str:
    from mcp_types import TextContent

    if isinstance(block, TextContent):
        return block.text
    kind = getattr(block, "type", "content")
    mime = getattr(block, "mime_type", None)
    return f"[{kind}{f' {mime}' if mime else ''} not shown]"
