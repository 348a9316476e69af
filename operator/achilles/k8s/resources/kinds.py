"""The four kinds of the achilles.io API and how kubectl shows them.

One entry per CRD: names, scope, the root pydantic model its schema is generated from,
and the printer columns. `achilles.k8s.crd.generate` turns these into `crds/*.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from achilles.k8s.resources.agent import AgentResource
from achilles.k8s.resources.agent_model import AgentModelResource
from achilles.k8s.resources.agent_platform import AgentPlatformResource
from achilles.k8s.resources.agent_tool import AgentToolResource
from achilles.k8s.resources.common import API_GROUP, CustomResource

CATEGORY = "achilles"  # `kubectl get achilles` lists every kind


class Scope(StrEnum):
    NAMESPACED = "Namespaced"
    CLUSTER = "Cluster"


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    format: str | None = None
    priority: int = 0  # 1 = only with `kubectl get -o wide`


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", type="date")


@dataclass(frozen=True)
class CustomResourceKind:
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    scope: Scope
    model: type[CustomResource]
    printer_columns: tuple[PrinterColumn, ...]

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{API_GROUP}"


AGENT = CustomResourceKind(
    kind="Agent",
    plural="agents",
    singular="agent",
    short_names=("ag",),
    scope=Scope.NAMESPACED,
    model=AgentResource,
    printer_columns=(
        PrinterColumn("Owner", ".spec.owner", description="Owning user"),
        PrinterColumn("Enabled", ".spec.enabled", type="boolean", description="Owner's switch"),
        PrinterColumn(
            "Admin-Paused", ".spec.adminPaused", type="boolean", description="Admin's lock"
        ),
        PrinterColumn("Model", ".spec.model", description="AgentModel used for runs"),
        PrinterColumn("Schedule", ".status.scheduleSummary", description="Schedule in words"),
        # A string, not a date: kubectl prints dates as ages, and a future one as <invalid>.
        PrinterColumn("Next-Run", ".status.nextRunAt", description="Next slot (UTC)"),
        PrinterColumn("Last-State", ".status.lastRun.state", description="Last run's state"),
        PrinterColumn("Phase", ".status.phase", description="Why it can(not) run"),
        PrinterColumn(
            "Run-Token-Cap",
            ".spec.maxRunTokens",
            type="integer",
            description="Tokens one run may spend (absent: the platform's)",
            priority=1,
        ),
        PrinterColumn(
            "Suspend-After",
            ".spec.suspendAfterFailures",
            type="integer",
            description="Failed runs in a row that stop its schedule (0: never; absent: the "
            "platform's)",
            priority=1,
        ),
        AGE,
    ),
)

AGENT_MODEL = CustomResourceKind(
    kind="AgentModel",
    plural="agentmodels",
    singular="agentmodel",
    short_names=("agm",),
    scope=Scope.CLUSTER,
    model=AgentModelResource,
    printer_columns=(
        PrinterColumn("Provider-Model", ".spec.model", description="Provider's model id"),
        PrinterColumn(
            "Default", ".spec.default", type="boolean", description="Preset for new agents"
        ),
        PrinterColumn("Base-URL", ".spec.baseURL", description="API base URL", priority=1),
        AGE,
    ),
)

AGENT_TOOL = CustomResourceKind(
    kind="AgentTool",
    plural="agenttools",
    singular="agenttool",
    short_names=("agt",),
    scope=Scope.CLUSTER,
    model=AgentToolResource,
    printer_columns=(
        PrinterColumn("Implementation", ".spec.implementation", description="Built-in it maps to"),
        PrinterColumn(
            "Agents-Allowed", ".spec.agentsAllowed", type="boolean", description="Admin's switch"
        ),
        PrinterColumn("Source", ".status.source", description="builtin, or mcp (an MCP server)"),
        PrinterColumn(
            "Tools", ".status.toolCount", type="integer", description="Tools agents may call"
        ),
        PrinterColumn(
            "Ready",
            '.status.conditions[?(@.type=="Ready")].status',
            description="Listed (an MCP server reached) and in the catalogue",
        ),
        PrinterColumn("URL", ".spec.mcp.url", description="The MCP server", priority=1),
        AGE,
    ),
)

AGENT_PLATFORM = CustomResourceKind(
    kind="AgentPlatform",
    plural="agentplatforms",
    singular="agentplatform",
    short_names=("agp",),
    scope=Scope.CLUSTER,
    model=AgentPlatformResource,
    printer_columns=(
        PrinterColumn("Timezone", ".spec.timezone", description="Organisation's time zone"),
        PrinterColumn(
            "Weekly-Budget", ".spec.weeklyTokenBudget", type="integer", description="Per owner"
        ),
        PrinterColumn(
            "Max-Concurrency", ".spec.maxConcurrency", type="integer", description="Runs at once"
        ),
        PrinterColumn(
            "Run-Token-Cap",
            ".spec.maxRunTokens",
            type="integer",
            description="Tokens one run may spend",
            priority=1,
        ),
        PrinterColumn(
            "Suspend-After",
            ".spec.suspendAfterFailures",
            type="integer",
            description="Failed runs in a row that stop an agent's schedule",
            priority=1,
        ),
        PrinterColumn(
            "Retention-Days",
            ".spec.runRetentionDays",
            type="integer",
            description="Days finished runs are kept (absent: all)",
            priority=1,
        ),
        AGE,
    ),
)

KINDS: tuple[CustomResourceKind, ...] = (AGENT, AGENT_MODEL, AGENT_TOOL, AGENT_PLATFORM)
