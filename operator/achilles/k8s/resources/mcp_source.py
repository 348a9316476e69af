"""An AgentTool's MCP source (issue 38): the server, its credentials and the admin's rules.

An AgentTool with `implementation: mcp` names an MCP server spoken to over streamable
HTTP. The operator lists the server's tools into the AgentTool's status; the runner
offers those the admin allows (`allowedTools`, on top of `agentsAllowed`) and calls them
with the official `mcp` client. Whether a call waits for its owner's approval is the
`approval` policy, per AgentTool and per tool (docs/tools.md).

Credentials are headers whose values sit in Secrets of the runs namespace: the CR names
them, never holds them, and only the runs of agents allowed the tool receive them.
`credentials: platform` says they are the platform's (one set for every agent); the
field is where per-owner credentials will be chosen later.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from achilles.k8s.resources.agent_model import SecretKeyRef
from achilles.k8s.resources.common import SpecModel

MCP_URL_PATTERN = r"^https?://[^ \t\r\n]+$"
MCP_URL_MAX_LENGTH = 2048
# An HTTP header's name (RFC 9110 token, the usual subset).
HEADER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9-]*$"
HEADER_NAME_MAX_LENGTH = 64
MAX_HEADERS = 8
# MCP's tool names (the 2025-11-25 specification: 1-128 of A-Z a-z 0-9 _ - .).
MCP_TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"
MCP_TOOL_NAME_MAX_LENGTH = 128
MAX_MCP_TOOLS = 256
DEFAULT_CALL_TIMEOUT_SECONDS = 30
MAX_CALL_TIMEOUT_SECONDS = 300
DEFAULT_MAX_RESULT_BYTES = 16384
MAX_RESULT_BYTES_LIMIT = 1048576

McpToolName = Annotated[
    str,
    Field(min_length=1, max_length=MCP_TOOL_NAME_MAX_LENGTH, pattern=MCP_TOOL_NAME_PATTERN),
]


# Whether a call waits for its owner's approval (an Agent Inbox item) first; the
# domain's `Approval` (`domain/mcp_tools.py`) reads it. `writes`, the default: a tool whose
# annotations do not say it is read-only and harmless waits.
ApprovalPolicy = Literal["never", "always", "writes"]


class McpHeader(SpecModel):
    """One header sent with every request to the server, its value from a Secret."""

    name: str = Field(
        min_length=1,
        max_length=HEADER_NAME_MAX_LENGTH,
        pattern=HEADER_NAME_PATTERN,
        description="The header's name, e.g. Authorization.",
    )
    secret_key_ref: SecretKeyRef = Field(
        description="The Secret (runs namespace) and key holding the header's value.",
    )


class McpToolPolicy(SpecModel):
    """The approval policy of one of the server's tools, over the AgentTool's."""

    name: str = Field(
        min_length=1,
        max_length=MCP_TOOL_NAME_MAX_LENGTH,
        pattern=MCP_TOOL_NAME_PATTERN,
        description="The tool's name as the server lists it.",
    )
    approval: ApprovalPolicy = Field(description="never, always or writes for this tool.")


def _no_duplicates(values: list[str], what: str) -> list[str]:
    duplicates = sorted({value for value in values if values.count(value) > 1})
    if duplicates:
        raise PydanticCustomError(
            "duplicate_value",
            "duplicate {what}: {names}",
            {"what": what, "names": ", ".join(duplicates)},
        )
    return values


class McpSource(SpecModel):
    """An MCP server (streamable HTTP) whose tools this AgentTool offers."""

    url: str = Field(
        min_length=1,
        max_length=MCP_URL_MAX_LENGTH,
        pattern=MCP_URL_PATTERN,
        description="The server's streamable-HTTP endpoint, e.g. http://mcp-time.tools:8000/mcp.",
    )
    headers: list[McpHeader] = Field(
        default_factory=list,
        max_length=MAX_HEADERS,
        description="Headers sent with every request (credentials), values from Secrets.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    credentials: Literal["platform"] = Field(
        default="platform",
        description="Whose credentials the headers are: platform (the same for every agent "
        "allowed the tool). Per-owner credentials are a later value of this field.",
    )
    allowed_tools: list[McpToolName] | None = Field(
        default=None,
        max_length=MAX_MCP_TOOLS,
        description="The admin's allowlist of the server's tool names agents may call "
        "(absent: every tool the server lists).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    approval: ApprovalPolicy = Field(
        default="writes",
        description="Whether calls wait for the owner's approval: never, always, or writes "
        "(default: a tool not annotated read-only, or annotated destructive, waits).",
    )
    tools: list[McpToolPolicy] = Field(
        default_factory=list,
        max_length=MAX_MCP_TOOLS,
        description="Per-tool approval policies over `approval`.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    timeout_seconds: int = Field(
        default=DEFAULT_CALL_TIMEOUT_SECONDS,
        ge=1,
        le=MAX_CALL_TIMEOUT_SECONDS,
        description="How long one call (or the operator's listing) may take.",
    )
    max_result_bytes: int = Field(
        default=DEFAULT_MAX_RESULT_BYTES,
        ge=256,
        le=MAX_RESULT_BYTES_LIMIT,
        description="A call's result is cut to this many bytes before the model reads it.",
    )

    @field_validator("allowed_tools", mode="after")
    @classmethod
    def _allowed_tools_a_set(cls, names: list[str] | None) -> list[str] | None:
        return None if names is None else _no_duplicates(names, "tool name(s)")

    @field_validator("headers", mode="after")
    @classmethod
    def _headers_unique(cls, headers: list[McpHeader]) -> list[McpHeader]:
        _no_duplicates([header.name for header in headers], "header(s)")
        return headers

    @field_validator("tools", mode="after")
    @classmethod
    def _policies_unique(cls, tools: list[McpToolPolicy]) -> list[McpToolPolicy]:
        _no_duplicates([tool.name for tool in tools], "tool policy name(s)")
        return tools

    def approval_of(self, tool: str) -> ApprovalPolicy:
        """The policy of one tool: its own, else the AgentTool's."""
        for policy in self.tools:
            if policy.name == tool:
                return policy.approval
        return self.approval
