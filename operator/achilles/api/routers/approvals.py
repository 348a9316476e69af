"""Approvals of agents' tool calls (issue 38): `GET` and `POST /v1/inbox/{id}/approval`.

An approval is an inbox item that asks the owner to let an agent make one call of an
MCP tool, with exactly the arguments shown. Parse, call `achilles.services.tool_approvals`
(the CLI's service: the guarded decision and the wake live there once), answer.
Owner-scoped like the inbox: another owner's item is 404; an admin may read any.
docs/tools.md#approvals.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from achilles.api import dependencies
from achilles.api.identity.caller import Caller, current_caller
from achilles.api.problems import PROBLEM_RESPONSES, Problem
from achilles.db.database import Database
from achilles.db.tools.approvals import Approval
from achilles.services import tool_approvals as service
from achilles.services.run_requests import RunRequester

router = APIRouter(prefix="/v1", tags=["inbox"], responses=PROBLEM_RESPONSES)

ITEM_ID = Annotated[int, Path(ge=1, le=2**63 - 1, description="The inbox item's id")]


class ApprovalOut(BaseModel):
    """What the owner is asked, and what became of it."""

    item_id: int
    agent_id: int
    agent_tool: str = Field(description="The AgentTool (the catalogue's MCP source)")
    tool: str = Field(description="The server's tool the call is of")
    arguments: dict[str, Any] = Field(description="Exactly what the call sends (model-written)")
    reason: str | None = Field(description="The agent's reason (model-written)")
    state: Literal["pending", "approved", "rejected", "expired", "executing", "executed", "failed"]
    expires_at: datetime
    decided_at: datetime | None
    decided_by: str | None
    executed_at: datetime | None
    result: str | None = Field(description="The call's result, cut to the source's cap")
    error: str | None = Field(description="Why the approved call failed")


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject"]
    note: str | None = Field(default=None, max_length=service.MAX_NOTE_LENGTH)


class DecisionOut(BaseModel):
    approval: ApprovalOut
    wake_requested: bool = Field(description="A run of the agent was requested")
    wake_detail: str | None = Field(description="Why no run was requested, when not")


def approval_out(approval: Approval) -> ApprovalOut:
    return ApprovalOut(
        item_id=approval.item_id,
        agent_id=approval.agent_id,
        agent_tool=approval.tool_name,
        tool=approval.mcp_tool,
        arguments=approval.arguments,
        reason=approval.reason,
        state=approval.state.value,
        expires_at=approval.expires_at,
        decided_at=approval.decided_at,
        decided_by=approval.decided_by,
        executed_at=approval.executed_at,
        result=approval.result,
        error=approval.result_error,
    )


@router.get("/inbox/{item_id}/approval", response_model=ApprovalOut)
async def get_approval(
    item_id: ITEM_ID,
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(dependencies.database)],
) -> ApprovalOut:
    """The call an approval item asks: the tool, its arguments, the agent's reason, and
    its state (404: no such item of mine, or an item that asks no approval)."""
    owner = None if caller.is_admin else caller.user_key
    found = await run_in_threadpool(service.approval_of_item, database, item_id, owner_key=owner)
    return approval_out(found)


@router.post(
    "/inbox/{item_id}/approval",
    response_model=DecisionOut,
    responses={409: {"description": "Already decided, or expired; nothing written"}},
)
def decide(
    item_id: ITEM_ID,
    body: DecisionIn,
    caller: Annotated[Caller, Depends(current_caller)],
    database: Annotated[Database, Depends(dependencies.database)],
    requester: Annotated[RunRequester, Depends(dependencies.run_requester)],
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
