"""`GET /v1/runs`, `GET /v1/runs/{id}`, `GET /v1/runs/{id}/steps` and
`POST /v1/runs/{id}/cancel`: parse, call the services the CLI calls, answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import AwareDatetime
from starlette.concurrency import run_in_threadpool

from achilles.api.dependencies import (
    AuthenticatorDep,
    CurrentCaller,
    DatabaseDep,
    OwnerScope,
    ReadScope,
    RunCancellerDep,
)
from achilles.api.pagination import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    decode_cursor,
    next_cursor,
)
from achilles.api.problems import PROBLEM_RESPONSES, Problem
from achilles.api.runs.auth import cancel_scope
from achilles.api.runs.schemas import (
    OUTPUT_PREVIEW_CHARS,
    CancelRequested,
    RunDocument,
    RunPage,
    RunStep,
    RunSteps,
    RunSummary,
    run_used,
    summary_fields,
)
from achilles.db.database import Database
from achilles.domain.runs import RunState
from achilles.services import journal_reads
from achilles.services.journal_reads import RunFilter, step_record
from achilles.services.run_requests import request_owned_cancel

__all__ = ["OUTPUT_PREVIEW_CHARS", "router"]

router = APIRouter(prefix="/v1", tags=["runs"], responses=PROBLEM_RESPONSES)

# Run ids are PostgreSQL bigints.
MAX_ID = 2**63 - 1
RunId = Annotated[int, Path(ge=1, le=MAX_ID)]
# An agent's id (a bigint, so at most 18 digits here) or its Agent's `namespace/name`.
AGENT_REF_PATTERN = r"^([0-9]{1,18}|[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$"


@router.get("/runs", response_model=RunPage)
async def list_runs(
    owner_key: OwnerScope,
    database: DatabaseDep,
    agent: Annotated[
        str | None,
        Query(pattern=AGENT_REF_PATTERN, description="`namespace/name` or the agent's id"),
    ] = None,
    state: Annotated[list[RunState] | None, Query(description="repeatable")] = None,
    since: Annotated[AwareDatetime | None, Query(description="queued at or after")] = None,
    until: Annotated[AwareDatetime | None, Query(description="queued before")] = None,
    request_key: Annotated[str | None, Query(pattern=r"^[\x21-\x7e]{1,100}$")] = None,
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
        _runs_page, database, owner_key, where, agent_ref=agent, limit=limit
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
        items=[RunSummary.model_validate(summary_fields(run)) for run in found[:limit]],
        next_cursor=next_cursor("runs", [run.run.id for run in found], limit),
    )


@router.get("/runs/{run_id}", response_model=RunDocument)
async def get_run(run_id: RunId, owner_key: ReadScope, database: DatabaseDep) -> RunDocument:
    """One run: state, reason, trigger, output, error, tokens, its times, and what it
    used (model, endpoint, prompt digest, tools offered)."""
    return await run_in_threadpool(_run_document, database, run_id, owner_key)


def _run_document(database: Database, run_id: int, owner_key: str | None) -> RunDocument:
    found, trace = journal_reads.run_and_trace(database, run_id, owner_key=owner_key, steps=False)
    return RunDocument.model_validate(
        {**summary_fields(found), "output": found.run.output, "used": run_used(trace)}
    )


@router.get("/runs/{run_id}/steps", response_model=RunSteps)
async def get_run_steps(run_id: RunId, owner_key: ReadScope, database: DatabaseDep) -> RunSteps:
    """One run's steps in order (at most 200, then a `truncated` marker). Not mine: 404."""
    return await run_in_threadpool(_run_steps, database, run_id, owner_key)


def _run_steps(database: Database, run_id: int, owner_key: str | None) -> RunSteps:
    trace = journal_reads.run_trace(database, run_id, owner_key=owner_key, steps=True)
    return RunSteps(
        run_id=run_id,
        items=[RunStep.model_validate(step_record(step)) for step in trace.steps],
        truncated=any(step.kind == "truncated" for step in trace.steps),
    )


@router.post(
    "/runs/{run_id}/cancel",
    status_code=202,
    response_model=CancelRequested,
    responses={200: {"model": CancelRequested, "description": "The run had ended: nothing"}},
)
def cancel_run(
    run_id: RunId,
    response: Response,
    caller: CurrentCaller,
    database: DatabaseDep,
    canceller: RunCancellerDep,
    ways_in: AuthenticatorDep,
) -> CancelRequested:
    """Cancel one of the caller's runs while it is queued or running (an admin with the
    write grant, `update` on `ownerdata`: any run; an admin who only reads: 403), as the
    portal does: the request goes on the run's Agent (`achilles.io/cancel-run`), the
    operator ends the run `failed/cancelled` and deletes its Job; `GET run_url` follows
    it. Idempotent: asking again is harmless, and a run that had ended is left as it is
    (200, `cancel_requested: false`). Not the caller's (and not an admin's): 404."""
    owner_key = cancel_scope(database, caller, ways_in, run_id)
    answer = request_owned_cancel(database, canceller, run_id, owner_key)
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
