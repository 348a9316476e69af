"""The AgentTool custom resource: one entry of the tool catalogue (`tools`).

Cluster-scoped, curated by admins. `implementation` names the built-in code the tool
maps to; the catalogue of built-ins lives with the tools, so the CRD only checks the
name's shape and the operator reports an unknown implementation in status.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from achilles.k8s.resources.common import (
    CustomResource,
    RowStatus,
    SpecModel,
)

IMPLEMENTATION_PATTERN = r"^[a-z][a-z0-9_.-]*$"
IMPLEMENTATION_MAX_LENGTH = 63
DESCRIPTION_MAX_LENGTH = 2000


class AgentToolSpec(SpecModel):
    """An optional tool agents may use on top of the Knowledge Store core."""

    description: str | None = Field(
        default=None,
        max_length=DESCRIPTION_MAX_LENGTH,
        description="What the tool does, for people choosing it.",
    )
    implementation: str = Field(
        min_length=1,
        max_length=IMPLEMENTATION_MAX_LENGTH,
        pattern=IMPLEMENTATION_PATTERN,
        description="The built-in implementation this tool maps to (e.g. inbox).",
    )
    agents_allowed: bool = Field(
        default=True,
        description="Admin switch; false drops the tool from agents at their next run start.",
    )


class AgentToolStatus(RowStatus):
    """What the operator reports about the tool."""

    database_table = "tools"


class AgentToolResource(CustomResource):
    """An optional tool of the catalogue agents may add to the Knowledge Store core."""

    kind: Literal["AgentTool"]
    spec: AgentToolSpec
    status: AgentToolStatus | None = None
