"""What the runs endpoints answer with, and how a read run becomes one."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from achilles.api.pagination import Page
from achilles.services.journal_reads import OwnedRun, RunTrace

OUTPUT_PREVIEW_CHARS = 280


class RunAgent(BaseModel):
    id: int
    namespace: str | None
    name: str


class RunSummary(BaseModel):
    id: int
    agent: RunAgent
    owner: str
    trigger: str
    state: str
    reason: str | None
    request_key: str | None
    tokens_used: int
    error: str | None
    output_preview: str | None
    queued_at: datetime
    scheduled_for: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


class RunPage(Page[RunSummary]):
    pass


class RunUsed(BaseModel):
    """What the run used, recorded by its runner at start."""

    model: str = Field(description="the AgentModel's name")
    endpoint_host: str = Field(description="the model endpoint's host[:port] (no secret)")
    provider_model: str = Field(description="the model id sent to the endpoint")
    prompt_sha256: str = Field(
        description="hex SHA-256 of the composed prompt (platform layer and owner's)"
    )
    tools: list[str] = Field(description="the tool names offered to the model")


class RunDocument(RunSummary):
    output: str | None
    used: RunUsed | None = Field(description="null until the run's runner started it")


class RunStep(BaseModel):
    """One step of a run: a model call, a tool call, an inbox ask, or the `truncated`
    marker after the 200th (later steps are not kept). Sizes and counts, never content."""

    seq: int
    kind: Literal["model_call", "tool_call", "inbox_ask", "truncated"]
    started_at: datetime
    ended_at: datetime
    latency_ms: float
    model: str | None = Field(description="model calls: the model that answered")
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    tool: str | None = Field(description="tool calls and inbox asks: the tool called")
    status: Literal["ok", "error"] | None
    argument_bytes: int | None
    result_bytes: int | None
    error: str | None
    argument_sha256: str | None = Field(
        default=None,
        description="MCP tool calls: SHA-256 (hex) of the canonical arguments (never them)",
    )


class RunSteps(BaseModel):
    run_id: int
    items: list[RunStep]
    truncated: bool = Field(description="true when the run had more steps than it keeps")


class CancelRequested(BaseModel):
    run_id: int
    agent: str = Field(description="the run's Agent, `namespace/name`")
    cancel_requested: bool = Field(
        description="true: the operator was asked (202); false: the run had ended (200)"
    )
    state: str = Field(description="the run's state when asked")
    reason: str | None
    run_url: str


def summary_fields(found: OwnedRun) -> dict[str, object]:
    """A run's `RunSummary` fields (its output cut to the preview already, on a page)."""
    run, agent = found.run, found.agent
    output = run.output
    return {
        "id": run.id,
        "agent": RunAgent(id=agent.id, namespace=agent.namespace, name=agent.cr_name or agent.name),
        "owner": agent.owner_key,
        "trigger": run.trigger,
        "state": run.state,
        "reason": run.reason,
        "request_key": run.request_key,
        "tokens_used": run.tokens_used,
        "error": run.error,
        "output_preview": None if output is None else output[:OUTPUT_PREVIEW_CHARS],
        "queued_at": run.created_at,
        "scheduled_for": run.scheduled_for,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def run_used(trace: RunTrace) -> RunUsed | None:
    used = trace.used
    if used is None:
        return None
    return RunUsed(
        model=used.model,
        endpoint_host=used.endpoint_host,
        provider_model=used.provider_model,
        prompt_sha256=used.prompt_digest_hex,
        tools=list(used.tools),
    )
