"""The inbox resource: an owner's items (`GET /v1/inbox`, `GET /v1/inbox/{id}`,
`POST /v1/inbox/{id}/reply`) and the approvals of their agents' tool calls
(`GET`/`POST /v1/inbox/{id}/approval`). `items` and `approvals` are the endpoints,
`schemas` the documents, `auth` whose inbox a request reads."""

from fastapi import APIRouter

from achilles.api.inbox import approvals, items

router = APIRouter()
router.include_router(items.router)
router.include_router(approvals.router)

__all__ = ["router"]
