"""Everything one run needs, read once at run start (DESIGN.md §4, "Runner").

Settings are a snapshot: the iteration cap, timeout and platform prompt as they
were when the run was claimed; the optional tools are those the owner picked
whose `agents_allowed` was true at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass

from achilles.domain.mcp_tools import RunSource
from achilles.domain.runs import RunTrigger


@dataclass(frozen=True)
class ModelEndpoint:
    name: str  # the AgentModel's name (for messages)
    base_url: str
    provider_model: str
    # Whether the AgentModel references an API key Secret; the Job passes the
    # key as an environment variable.
    has_api_key: bool


@dataclass(frozen=True)
class RunSpec:
    run_id: int
    trigger: RunTrigger
    agent_id: int
    agent_name: str
    prompt: str  # the owner's layer
    owner_user_id: int
    owner_key: str
    owner_timezone: str  # the owner's zone, else the organisation's
    model: ModelEndpoint | None  # None: the agent has no model (it was withdrawn)
    tool_implementations: tuple[str, ...]  # allowed optional tools, by implementation
    platform_prompt: str
    max_iterations: int
    run_timeout_seconds: int
    # From the run's Job being created (`dispatched_at`) to the claim, by the database's
    # clock; None for a run that has no Job (a runner started by hand). The Job's
    # activeDeadlineSeconds (= run_timeout_seconds) counts from its start, so the run's
    # deadline is this much nearer than run_timeout_seconds.
    seconds_since_dispatch: float | None = None
    # The tokens this run may spend (the Agent's maxRunTokens, else the platform's);
    # None: no cap. The runner fails the run with `token_cap` when its tokens reach it.
    max_run_tokens: int | None = None
    # The agent's allowed MCP sources and the tools each offers (issue 38).
    mcp_sources: tuple[RunSource, ...] = ()
    # Whether the agent has approvals to settle at start (open, or an outcome untold).
    approvals_owed: bool = False
