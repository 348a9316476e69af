"""`GET /v1/agents` (the caller's agents, as `kubectl get agents` shows them) and
`POST /v1/agents/{namespace}/{name}/runs` (a manual run, as `achilles run-now` asks)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from achilles.api.dependencies import database, run_requester
from achilles.api.idempotency import once_for, replayable, response_of, stored_json
from achilles.api.identity.caller import Caller, current_caller
from achilles.api.owners import owner_scope
from achilles.api.pagination import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    decode_cursor,
    next_cursor,
)
from achilles.api.problems import PROBLEM_MEDIA_TYPE, PROBLEM_RESPONSES, Problem, ProblemDocument
from achilles.db.database import Database
from achilles.domain.gates import LockReason
from achilles.errors import NotFound, StartRefused
from achilles.services import journal_reads
from achilles.services.idempotency import StoredResponse
from achilles.services.run_requests import RunRequester, request_owned_run
from achilles.services.status import LOCK_MESSAGES

router = APIRouter(prefix="/v1", tags=["agents"], responses=PROBLEM_RESPONSES)

# A Kubernetes object name / namespace (DNS subdomain / label): checked before any lookup.
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
Namespace = Annotated[str, Path(max_length=63, pattern=NAMESPACE_PATTERN)]
Name = Annotated[str, Path(max_length=253, pattern=NAME_PATTERN)]


class LastRun(BaseModel):
    id: int
    trigger: str
    state: str
    reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    tokens_used: int


class WeeklyTokens(BaseModel):
    """The owner's budget (shared by all their agents) this week."""

    used: int
    limit: int
    window_start: datetime


class AgentDocument(BaseModel):
    id: int
    namespace: str | None
    name: str
    owner: str
    description: str | None
    enabled: bool
    admin_paused: bool
    model: str | None
    phase: str
    schedule: str
    next_run_at: datetime | None
    last_run: LastRun | None
    weekly_tokens: WeeklyTokens


class AgentPage(BaseModel):
    items: list[AgentDocument]
    next_cursor: str | None


class RunRequestBody(BaseModel):
    """Nothing to say yet: an empty object or no body at all; any field is refused."""

    model_config = ConfigDict(extra="forbid")


class RunRequested(BaseModel):
    request_key: str
    agent: str
    runs_url: str


def agent_document(view: journal_reads.AgentView) -> AgentDocument:
    agent, last = view.agent, view.last_run
    return AgentDocument(
        id=agent.id,
        namespace=agent.namespace,
        name=agent.cr_name or agent.name,
        owner=agent.owner_key,
        description=agent.description,
        enabled=agent.enabled,
        admin_paused=agent.admin_paused,
        model=agent.model,
        phase=view.phase,
        schedule=view.schedule,
        next_run_at=view.next_run_at,
        last_run=None
        if last is None
        else LastRun(
            id=last.run_id,
            trigger=last.trigger,
            state=last.state,
            reason=last.reason,
            started_at=last.started_at,
            finished_at=last.finished_at,
            tokens_used=last.tokens_used,
        ),
        weekly_tokens=WeeklyTokens(
            used=view.weekly_tokens_used,
            limit=view.weekly_token_limit,
            window_start=view.week_start,
        ),
    )


@router.get("/agents", response_model=AgentPage)
async def list_agents(
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(database)],
    owner: Annotated[str | None, Query(max_length=254)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN)] = None,
) -> AgentPage:
    """The caller's agents by id (an admin: `owner=<key>` for one owner's, `owner=*` for
    everyone's), with the columns of `kubectl get agents`."""
    # One thread-pool hop for the database and the page's models (docs/performance.md).
    return await run_in_threadpool(
        _agents_page,
        database,
        owner_scope(caller, owner),
        after_id=decode_cursor("agents", cursor),
        limit=limit,
    )


def _agents_page(
    database: Database, owner_key: str | None, *, after_id: int | None, limit: int
) -> AgentPage:
    views = journal_reads.agents_page(
        database, owner_key=owner_key, after_id=after_id, limit=limit + 1
    )
    return AgentPage(
        items=[agent_document(view) for view in views[:limit]],
        next_cursor=next_cursor("agents", [view.agent.id for view in views], limit),
    )


@router.post(
    "/agents/{namespace}/{name}/runs",
    status_code=202,
    response_model=RunRequested,
    responses={
        409: {
            "model": ProblemDocument,
            "content": {PROBLEM_MEDIA_TYPE: {}},
            "description": "A durable lock is closed: the run is refused (`reasons`)",
        }
    },
)
def request_run(
    namespace: Namespace,
    name: Name,
    request: Request,
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(database)],
    requester: Annotated[RunRequester, Depends(run_requester)],
    body: RunRequestBody | None = None,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> Response:
    """Ask for a manual run of the caller's Agent, as `achilles run-now` does: the
    operator makes a run of the request (`GET runs_url` finds it by its request key).
    With `Idempotency-Key`, a retry returns the first response and requests nothing."""

    def render(key: str) -> StoredResponse:
        document = RunRequested(
            request_key=key,
            agent=f"{namespace}/{name}",
            runs_url=f"/v1/runs?agent={namespace}/{name}&request_key={quote(key)}",
        )
        return stored_json(202, document.model_dump(mode="json"))

    once = once_for(caller, request, idempotency_key, render, body=None)

    def write() -> Response:
        key = request_owned_run(
            database, requester, namespace, name, caller.user_key, datetime.now(UTC), once=once
        )
        return response_of(render(key))

    try:
        return replayable(write)
    except NotFound:
        if caller.is_admin and _exists(database, namespace, name):
            raise Problem(
                403, "an admin reads every owner's agents but runs only their own"
            ) from None
        raise
    except StartRefused as refused:
        messages = "; ".join(LOCK_MESSAGES[LockReason(r)] for r in refused.reasons)
        raise Problem(
            409,
            f"agent {namespace}/{name} cannot run: {messages}",
            type_="run-refused",
            extra={"reasons": list(refused.reasons)},
        ) from None


def _exists(database: Database, namespace: str, name: str) -> bool:
    try:
        journal_reads.find_agent(database, namespace, name, owner_key=None)
    except NotFound:
        return False
    return True
