"""`GET /v1/agents` and `POST /v1/agents/{namespace}/{name}/runs`: parse, call the
services the CLI calls, answer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from achilles.api.agents.auth import refuse_an_admins_run_of_others
from achilles.api.agents.schemas import (
    AgentPage,
    RunRequestBody,
    RunRequested,
    agent_document,
)
from achilles.api.dependencies import CurrentCaller, DatabaseDep, OwnerScope, RunRequesterDep
from achilles.api.idempotency import once_for, replayable, response_of, stored_json
from achilles.api.pagination import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    MAX_LIMIT,
    decode_cursor,
    next_cursor,
)
from achilles.api.problems import PROBLEM_MEDIA_TYPE, PROBLEM_RESPONSES, Problem, ProblemDocument
from achilles.db.database import Database
from achilles.domain.agent_status import LOCK_MESSAGES
from achilles.domain.gates import LockReason
from achilles.errors import NotFound, StartRefused
from achilles.services import journal_reads
from achilles.services.idempotency import StoredResponse
from achilles.services.run_requests import request_owned_run

router = APIRouter(prefix="/v1", tags=["agents"], responses=PROBLEM_RESPONSES)

# A Kubernetes object name / namespace (DNS subdomain / label): checked before any lookup.
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
Namespace = Annotated[str, Path(max_length=63, pattern=NAMESPACE_PATTERN)]
Name = Annotated[str, Path(max_length=253, pattern=NAME_PATTERN)]


@router.get("/agents", response_model=AgentPage)
async def list_agents(
    owner_key: OwnerScope,
    database: DatabaseDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN)] = None,
) -> AgentPage:
    """The caller's agents by id (an admin: `owner=<key>` for one owner's, `owner=*` for
    everyone's), with the columns of `kubectl get agents`."""
    # One thread-pool hop for the database and the page's models (docs/performance.md).
    return await run_in_threadpool(
        _agents_page, database, owner_key, after_id=decode_cursor("agents", cursor), limit=limit
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
    caller: CurrentCaller,
    database: DatabaseDep,
    requester: RunRequesterDep,
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
        refuse_an_admins_run_of_others(database, caller, namespace, name)
        raise
    except StartRefused as refused:
        messages = "; ".join(LOCK_MESSAGES[LockReason(r)] for r in refused.reasons)
        raise Problem(
            409,
            f"agent {namespace}/{name} cannot run: {messages}",
            type_="run-refused",
            extra={"reasons": list(refused.reasons)},
        ) from None
