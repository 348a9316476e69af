"""The AgentTool custom resource: one entry of the tool catalogue (`tools`).

Cluster-scoped, curated by admins. `implementation` names the built-in code the tool
maps to; the catalogue of built-ins lives with the tools, so the CRD only checks the
name's shape and the operator reports an unknown implementation in status.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from achilles.domain.mcp_tools import MCP_IMPLEMENTATION
from achilles.k8s.resources.cel import CelRule, Reason, cel_rules
from achilles.k8s.resources.common import (
    CustomResource,
    RowStatus,
    SpecModel,
    StatusModel,
)
from achilles.k8s.resources.mcp_source import (
    MAX_MCP_TOOLS,
    MCP_TOOL_NAME_MAX_LENGTH,
    McpSource,
)

IMPLEMENTATION_PATTERN = r"^[a-z][a-z0-9_.-]*$"
IMPLEMENTATION_MAX_LENGTH = 63
DESCRIPTION_MAX_LENGTH = 2000
# What the status keeps of a listed tool's description (the server's text, for people).
STATUS_DESCRIPTION_MAX_LENGTH = 1024

MCP_SOURCE_RULES = cel_rules(
    CelRule(
        rule=f"self.implementation == '{MCP_IMPLEMENTATION}' ? has(self.mcp) : !has(self.mcp)",
        message="spec.mcp is required with implementation: mcp, and only with it",
        field_path=".mcp",
        reason=Reason.REQUIRED,
    ),
)


class AgentToolSpec(SpecModel):
    """An optional tool agents may use on top of the Knowledge Store core."""

    model_config = ConfigDict(json_schema_extra=MCP_SOURCE_RULES)

    description: str | None = Field(
        default=None,
        max_length=DESCRIPTION_MAX_LENGTH,
        description="What the tool does, for people choosing it.",
    )
    implementation: str = Field(
        min_length=1,
        max_length=IMPLEMENTATION_MAX_LENGTH,
        pattern=IMPLEMENTATION_PATTERN,
        description="The built-in implementation this tool maps to (e.g. inbox), or mcp: "
        "the tools of the MCP server in spec.mcp.",
    )
    agents_allowed: bool = Field(
        default=True,
        description="Admin switch; false drops the tool from agents at their next run start.",
    )
    mcp: McpSource | None = Field(
        default=None,
        description="The MCP server (streamable HTTP) whose tools agents get; only with "
        "implementation: mcp.",
    )

    @model_validator(mode="after")
    def _mcp_source_iff_mcp(self) -> AgentToolSpec:
        if (self.implementation == MCP_IMPLEMENTATION) != (self.mcp is not None):
            raise PydanticCustomError(
                "mcp_source", "spec.mcp is required with implementation: mcp, and only with it"
            )
        return self


class McpToolStatus(StatusModel):
    """One tool the MCP server lists, and what the admin's rules make of it."""

    name: str = Field(max_length=MCP_TOOL_NAME_MAX_LENGTH, description="The tool's name.")
    description: str | None = Field(
        default=None,
        max_length=STATUS_DESCRIPTION_MAX_LENGTH,
        description="The server's description (clipped; the server's words, not ours).",
    )
    read_only: bool | None = Field(
        default=None, description="The server's readOnlyHint (absent: it says nothing)."
    )
    destructive: bool | None = Field(
        default=None, description="The server's destructiveHint (absent: it says nothing)."
    )
    allowed: bool = Field(description="Whether the admin's allowlist lets agents call it.")
    approval: Literal["never", "always"] = Field(
        description="Whether its calls wait for the owner's approval (the policy applied to "
        "its annotations)."
    )


class AgentToolStatus(RowStatus):
    """What the operator reports about the tool."""

    database_table = "tools"

    source: str | None = Field(
        default=None,
        max_length=16,
        description="builtin, or mcp (the tools of an MCP server).",
    )
    tool_count: int | None = Field(
        default=None, ge=0, description="How many tools agents may call through it."
    )
    mcp_tools: list[McpToolStatus] | None = Field(
        default=None,
        max_length=MAX_MCP_TOOLS,
        description="The MCP server's tools as last listed.",
    )
    schema_digest: str | None = Field(
        default=None,
        max_length=71,
        description="sha256 of the listed tools' names, annotations and input schemas.",
    )
    listed_at: datetime | None = Field(
        default=None, description="When the operator last listed the server's tools."
    )


class AgentToolResource(CustomResource):
    """An optional tool of the catalogue agents may add to the Knowledge Store core."""

    kind: Literal["AgentTool"]
    spec: AgentToolSpec
    status: AgentToolStatus | None = None
