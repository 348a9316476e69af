"""The tools of an agent's MCP sources, as the model sees and calls them (issue 38).

Each tool a source offers (its server's last listing through the admin's allowlist,
`domain/mcp_tools.py`) becomes one function named `<agenttool>__<tool>`, described by the
server's description and input schema: the server's words, which the model reads as data
about the tool and which the platform never follows. A call:

- sends the model's arguments to the server with the official SDK client, within the
  source's timeout, with the headers the run's pod got from the admin's Secrets (by
  reference in the Job; never in the prompt, a step, a log line or a message);
- comes back to the model as the server's text, cut to the source's `maxResultBytes`;
  a tool's own failure, a server that cannot be reached or does not answer in time, or
  arguments that are not a JSON object, come back as an error result, never a crash;
- is a step of the run with the SHA-256 of its canonical arguments and their size, the
  result's size, its latency and outcome, never the arguments or the result.

A tool whose calls wait for the owner's approval asks it instead (`tools/approvals.py`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from achilles.domain.mcp_tools import (
    OfferedTool,
    RunSource,
    arguments_digest,
    canonical_arguments,
    cut_result,
    header_env,
)
from achilles.domain.run_trace import StepKind
from achilles.tools.base import ModelTool, ToolContext, ToolResult, error_result

if TYPE_CHECKING:
    from achilles.mcp_client.client import CallOutcome, McpEndpoint
    from achilles.mcp_client.sessions import McpSessions

# The property a tool that waits for approval adds to its schema: the agent's reason,
# shown to the person who decides (and not sent to the server).
REASON_PROPERTY = "reason_for_owner"


@dataclass(frozen=True)
class McpCall:
    """One call as the model asked it: the source, the tool, the arguments."""

    source: RunSource
    offered: OfferedTool
    arguments: dict[str, Any]
    reason: str | None

    @property
    def argument_sha256(self) -> bytes:
        return arguments_digest(self.arguments)


# Makes one call (the tool's, with its run's credentials and sessions): its result.
MakeCall = Callable[[McpCall], ToolResult]
# Asks the owner to approve a call (or makes it, approved meanwhile): the model's result
# (`tools/approvals.py`).
AskApproval = Callable[[McpCall, ToolContext, MakeCall], ToolResult]


class McpConnections:
    """The run's MCP sessions (`mcp_client/sessions.py`): one per server, opened at its
    first call, closed with `close` when the run ends. The SDK is imported at the first
    call: it brings OpenTelemetry's API with it, which a run without MCP tools (or with
    tracing off) should not load (`achilles bench run-steps`)."""

    def __init__(self) -> None:
        self._sessions: McpSessions | None = None

    def call(self, endpoint: McpEndpoint, name: str, arguments: dict[str, Any]) -> CallOutcome:
        if self._sessions is None:
            from achilles.mcp_client.sessions import McpSessions

            self._sessions = McpSessions()
        return self._sessions.call_tool(endpoint, name, arguments)

    def close(self) -> None:
        if self._sessions is not None:
            self._sessions.close()
            self._sessions = None


def perform(
    call: McpCall, headers: Mapping[str, str] | None, connections: McpConnections | None = None
) -> ToolResult:
    """Make the call on the server (on the run's session when `connections` is given,
    else a session of its own); its result for the model (an error result when the
    server failed, could not be reached, or the run has no credentials for it)."""
    from achilles.mcp_client.client import McpEndpoint, McpUnreachable, call_tool

    digest = call.argument_sha256
    if headers is None:
        message = f"{call.offered.function_name}: this run has no credentials for its server"
        return ToolResult(error_result(message), message, digest)
    endpoint = McpEndpoint(call.source.url, float(call.source.timeout_seconds), headers)
    try:
        if connections is not None:
            outcome = connections.call(endpoint, call.offered.tool.name, call.arguments)
        else:
            outcome = call_tool(endpoint, call.offered.tool.name, call.arguments)
    except McpUnreachable as exc:
        message = f"{call.offered.function_name}: {exc}"
        return ToolResult(error_result(message), message, digest)
    text = cut_result(outcome.text, call.source.max_result_bytes)
    if outcome.is_error:
        message = f"{call.offered.function_name} failed: {text}"
        return ToolResult(error_result(message), message[:200], digest)
    return ToolResult(json.dumps({"result": text}, ensure_ascii=False), None, digest)


def run_headers(source: RunSource, environ: Mapping[str, str]) -> dict[str, str] | None:
    """The source's headers from the run pod's environment; None when one is missing."""
    values: dict[str, str] = {}
    for index, header in enumerate(source.headers):
        value = environ.get(header_env(source.tool_id, index))
        if not value:
            return None
        values[header.name] = value.strip()
    return values


class McpTool:
    """One tool of an MCP source, offered to the model (a `ModelTool`)."""

    step_kind = StepKind.TOOL_CALL

    def __init__(
        self,
        source: RunSource,
        offered: OfferedTool,
        headers: Mapping[str, str] | None,
        ask: AskApproval | None = None,
        connections: McpConnections | None = None,
    ) -> None:
        self._source = source
        self._offered = offered
        self._headers = headers
        self._ask = ask
        self._connections = connections

    @property
    def name(self) -> str:
        return self._offered.function_name

    @property
    def needs_approval(self) -> bool:
        return self._offered.needs_approval

    def spec(self) -> dict[str, Any]:
        tool = self._offered.tool
        schema = dict(tool.input_schema or {"type": "object"})
        properties = dict(schema.get("properties") or {})
        if self.needs_approval and REASON_PROPERTY not in properties:
            properties[REASON_PROPERTY] = {
                "type": "string",
                "description": "Why you make this call: the owner reads it before approving.",
            }
            schema["properties"] = properties
        description = tool.description or f"The {tool.name} tool of {self._source.url}."
        if self.needs_approval:
            description += (
                " (Calls wait for the owner's approval: the call is asked in the owner's"
                " inbox and made by a later run once approved.)"
            )
        return {
            "type": "function",
            "function": {"name": self.name, "description": description, "parameters": schema},
        }

    def call(self, arguments: str, ctx: ToolContext) -> ToolResult:
        try:
            parsed = json.loads(arguments.strip() or "{}")
        except json.JSONDecodeError as exc:
            message = f"invalid arguments for {self.name}: not JSON ({exc.msg})"
            return ToolResult.failed(message)
        if not isinstance(parsed, dict):
            return ToolResult.failed(f"invalid arguments for {self.name}: not a JSON object")
        reason = None
        if self.needs_approval and REASON_PROPERTY not in self._offered.tool.input_schema.get(
            "properties", {}
        ):
            given = parsed.pop(REASON_PROPERTY, None)
            reason = given if isinstance(given, str) else None
        call = McpCall(self._source, self._offered, parsed, reason)
        if not self.needs_approval:
            return self._make(call)
        if self._ask is None:
            message = f"{self.name} needs the owner's approval, which this run cannot ask"
            return ToolResult(error_result(message), message, call.argument_sha256)
        return self._ask(call, ctx, self._make)

    def _make(self, call: McpCall) -> ToolResult:
        return perform(call, self._headers, self._connections)


def mcp_tools(
    sources: tuple[RunSource, ...],
    environ: Mapping[str, str],
    ask: AskApproval | None = None,
    connections: McpConnections | None = None,
) -> list[ModelTool]:
    """The functions the agent's MCP sources offer this run."""
    return [
        McpTool(source, offered, run_headers(source, environ), ask, connections)
        for source in sources
        for offered in source.offered
    ]


def canonical(call: McpCall) -> str:
    """The call's arguments as people see and approve them."""
    return canonical_arguments(call.arguments)
