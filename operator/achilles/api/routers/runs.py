"""`GET /v1/runs` (the caller's runs, newest first, in keyset pages),
`GET /v1/runs/{id}` (one run with its output and what it used),
`GET /v1/runs/{id}/steps` (its steps) and `POST /v1/runs/{id}/cancel`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import AwareDatetime, BaseModel, Field
from starlette.concurrency import run_in_threadpool

from achilles.api.dependencies import authenticator, database, run_canceller
from achilles.api.identity.caller import Authenticator, Caller, current_caller
from achilles.api.owners import owner_scope
from achilles.api.pagination import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    decode_cursor,
    next_cursor,
)
from achilles.api.problems import PROBLEM_RESPONSES, Problem
from achilles.db.database import Database
from achilles.domain.runs import RunState
from achilles.services import journal_reads
from achilles.services.journal_reads import OwnedRun, RunFilter, RunTrace, step_record
from achilles.services.run_requests import RunCanceller, request_owned_cancel

router = APIRouter(prefix="/v1", tags=["runs"], responses=PROBLEM_RESPONSES)

# Run ids are PostgreSQL bigints.
MAX_ID = 2**63 - 1
OUTPUT_PREVIEW_CHARS = 280
# An agent's id (a bigint, so at most 18 digits here) or its Agent's `namespace/name`.
AGENT_REF_PATTERN = r"^([0-9]{1,18}|[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$"


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


class RunPage(BaseModel):
    items: list[RunSummary]
    next_cursor: str | None


def _fields(found: OwnedRun) -> dict[str, object]:
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


@router.get("/runs", response_model=RunPage)
async def list_runs(
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(database)],
    agent: Annotated[
        str | None,
        Query(pattern=AGENT_REF_PATTERN, description="`namespace/name` or the agent's id"),
    ] = None,
    state: Annotated[list[RunState] | None, Query(description="repeatable")] = None,
    since: Annotated[AwareDatetime | None, Query(description="queued at or after")] = None,
    until: Annotated[AwareDatetime | None, Query(description="queued before")] = None,
    request_key: Annotated[str | None, Query(pattern=r"^[\x21-\x7e]{1,100}$")] = None,
    owner: Annotated[str | None, Query(max_length=254)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN)] = None,
) -> RunPage:
    """The caller's runs (skipped ones too), newest first; `next_cursor` fetches the
    next page and is stable while runs are added."""
    if since is not None and until is not None and since >= until:
        raise Problem(422, "since: must be before until")
    where = RunFilter(
        states=tuple(s.value for s in state or ()),
        since=since,
        until=until,
        request_key=request_key,
        before_id=decode_cursor("runs", cursor),
    )
    # One thread-pool hop for the database and the page's models; the rest of the
    # request stays on the event loop (`achilles bench api`).
    return await run_in_threadpool(
        _runs_page, database, owner_scope(caller, owner), where, agent_ref=agent, limit=limit
    )


def _runs_page(
    database: Database,
    owner_key: str | None,
    where: RunFilter,
    *,
    agent_ref: str | None,
    limit: int,
) -> RunPage:
    found = journal_reads.runs_page(
        database,
        where,
        owner_key=owner_key,
        agent_ref=agent_ref,
        limit=limit + 1,
        output_chars=OUTPUT_PREVIEW_CHARS,
    )
    return RunPage(
        items=[RunSummary.model_validate(_fields(run)) for run in found[:limit]],
        next_cursor=next_cursor("runs", [run.run.id for run in found], limit),
    )


@router.get("/runs/{run_id}", response_model=RunDocument)
async def get_run(
    run_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(database)],
) -> RunDocument:
    """One run: state, reason, trigger, output, error, tokens, its times, and what it
    used (model, endpoint, prompt digest, tools offered)."""
    return await run_in_threadpool(
        _run_document, database, run_id, None if caller.is_admin else caller.user_key
    )


def _run_document(database: Database, run_id: int, owner_key: str | None) -> RunDocument:
    found, trace = journal_reads.run_and_trace(database, run_id, owner_key=owner_key, steps=False)
    return RunDocument.model_validate(
        {**_fields(found), "output": found.run.output, "used": _used(trace)}
    )


def _used(trace: RunTrace) -> RunUsed | None:
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


@router.get("/runs/{run_id}/steps", response_model=RunSteps)
async def get_run_steps(
    run_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(database)],
) -> RunSteps:
    """One run's steps in order (at most 200, then a `truncated` marker). Not mine: 404."""
    return await run_in_threadpool(
        _run_steps, database, run_id, None if caller.is_admin else caller.user_key
    )


def _run_steps(database: Database, run_id: int, owner_key: str | None) -> RunSteps:
    trace = journal_reads.run_trace(database, run_id, owner_key=owner_key, steps=True)
    return RunSteps(
        run_id=run_id,
        items=[RunStep.model_validate(step_record(step)) for step in trace.steps],
        truncated=any(step.kind == "truncated" for step in trace.steps),
    )


class CancelRequested(BaseModel):
    run_id: int
    agent: str = Field(description="the run's Agent, `namespace/name`")
    cancel_requested: bool = Field(
        description="true: the operator was asked (202); false: the run had ended (200)"
    )
    state: str = Field(description="the run's state when asked")
    reason: str | None
    run_url: str


@router.post(
    "/runs/{run_id}/cancel",
    status_code=202,
    response_model=CancelRequested,
    responses={200: {"model": CancelRequested, "description": "The run had ended: nothing"}},
)
def cancel_run(
    run_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    response: Response,
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(database)],
    canceller: Annotated[RunCanceller, Depends(run_canceller)],
    ways_in: Annotated[Authenticator, Depends(authenticator)],
) -> CancelRequested:
    """Cancel one of the caller's runs while it is queued or running (an admin with the
    write grant, `update` on `ownerdata`: any run; an admin who only reads: 403), as the
    portal does: the request goes on the run's Agent (`achilles.io/cancel-run`), the
    operator ends the run `failed/cancelled` and deletes its Job; `GET run_url` follows
    it. Idempotent: asking again is harmless, and a run that had ended is left as it is
    (200, `cancel_requested: false`). Not the caller's (and not an admin's): 404."""
    owner: str | None = caller.user_key
    if (
        caller.is_admin
        and journal_reads.find_run(database, run_id, owner_key=None).agent.owner_key != owner
    ):
        # A write on another owner's run needs a write grant: reading is not acting.
        if not ways_in.may_write_for_others(caller.user_key):
            raise Problem(
                403,
                "an admin cancels another owner's run only with the write grant (RBAC: verb"
                " update on resource ownerdata of achilles.io); reading it is not enough",
            )
        owner = None
    answer = request_owned_cancel(database, canceller, run_id, owner)
    if not answer.requested:
        response.status_code = 200
    return CancelRequested(
        run_id=run_id,
        agent=answer.agent,
        cancel_requested=answer.requested,
        state=answer.state,
        reason=answer.reason,
        run_url=f"/v1/runs/{run_id}",
    )
