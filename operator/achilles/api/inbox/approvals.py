"""Approvals of agents' tool calls (issue 38): `GET` and `POST /v1/inbox/{id}/approval`.

An approval is an inbox item that asks the owner to let an agent make one call of an
MCP tool, with exactly the arguments shown. Parse, call `achilles.services.tool_approvals`
(the CLI's service: the guarded decision and the wake live there once), answer.
Owner-scoped like the inbox: another owner's item is 404; an admin may read any.
docs/tools.md#approvals.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.concurrency import run_in_threadpool

from achilles.api.dependencies import CurrentCaller, DatabaseDep, ReadScope, RunRequesterDep
from achilles.api.inbox.schemas import ApprovalOut, DecisionIn, DecisionOut, approval_out
from achilles.api.problems import PROBLEM_RESPONSES, Problem
from achilles.services import tool_approvals as service

router = APIRouter(prefix="/v1", tags=["inbox"], responses=PROBLEM_RESPONSES)

ITEM_ID = Annotated[int, Path(ge=1, le=2**63 - 1, description="The inbox item's id")]


@router.get("/inbox/{item_id}/approval", response_model=ApprovalOut)
async def get_approval(
    item_id: ITEM_ID,
    owner_key: ReadScope,
    database: DatabaseDep,
) -> ApprovalOut:
    """The call an approval item asks: the tool, its arguments, the agent's reason, and
    its state (404: no such item of mine, or an item that asks no approval)."""
    found = await run_in_threadpool(
        service.approval_of_item, database, item_id, owner_key=owner_key
    )
    return approval_out(found)


@router.post(
    "/inbox/{item_id}/approval",
    response_model=DecisionOut,
    responses={409: {"description": "Already decided, or expired; nothing written"}},
)
def decide(
    item_id: ITEM_ID,
    body: DecisionIn,
    caller: CurrentCaller,
    database: DatabaseDep,
    requester: RunRequesterDep,
) -> DecisionOut:
    """Approve (the call is made once, with exactly these arguments, by the agent's next
    run, which this requests) or reject (it is never made) one of my approvals."""
    receipt = service.decide(
        database,
        item_id,
        service.Decision(body.decision),
        requester=requester,
        by=caller.user_key,
        note=body.note,
        owner_key=caller.user_key,
    )
    if receipt.refusal is service.DecisionRefusal.EXPIRED:
        raise Problem(409, "this approval expired unanswered; nothing was written",
                      type_="approval-expired")  # fmt: skip
    if receipt.refusal is service.DecisionRefusal.ALREADY_DECIDED:
        raise Problem(
            409,
            f"this approval was already decided ({receipt.approval.state.value});"
            " nothing was written",
            type_="approval-decided",
        )
    return DecisionOut(
        approval=approval_out(receipt.approval),
        wake_requested=receipt.wake_requested,
        wake_detail=receipt.wake_detail,
    )
