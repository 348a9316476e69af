"""What the inbox endpoints read and answer with (items and approvals), and how a stored
item or approval becomes one: the response models, the bodies of a reply and a decision,
the ETag of a revision.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from achilles.api.pagination import Page
from achilles.domain.inbox import (
    InboxItem,
    ItemState,
    ReplyChannel,
    ReplyKind,
)
from achilles.domain.inbox_records import item_record
from achilles.services.inbox import ItemListing, Revision
from achilles.services.tool_approvals import MAX_NOTE_LENGTH, Approval


class ReplyOut(BaseModel):
    text: str
    kind: ReplyKind
    channel: ReplyChannel
    serial: int
    handled_at: datetime
    seen_at: datetime | None
    outcome: str | None
    by: str | None = Field(description="Who replied, when known (the API's caller)")


class ItemOut(BaseModel):
    """An item as `achilles inbox show --json` prints it."""

    id: int
    agent_id: int
    key: str
    state: ItemState
    status: str = Field(description="Whose turn it is, in words")
    question: str
    context: str | None
    revision: int = Field(description="Send it back as If-Match when replying")
    reply_serial: int
    unprocessed: bool = Field(description="A reply the agent has not processed yet")
    reply: ReplyOut | None
    created_at: datetime
    updated_at: datetime


class ListedItemOut(ItemOut):
    agent_name: str
    owner: str


class InboxPage(Page[ListedItemOut]):
    pass


class RevisionOut(BaseModel):
    revision: int
    change: Literal["asked", "replied", "updated"]
    state: ItemState
    at: datetime
    question: str | None = Field(description="What the item asked (asked, updated)")
    context: str | None
    reply: str | None = Field(description="What was replied (replied)")
    reply_kind: ReplyKind | None
    reply_channel: ReplyChannel | None
    reply_serial: int
    reply_by: str | None = Field(description="Who replied, when known")


class ItemDetailOut(ListedItemOut):
    board_version: int
    wake_on_reply: bool
    history: list[RevisionOut]


def storable(value: str) -> str:
    """Text PostgreSQL can store: no NUL character, no lone UTF-16 surrogate (JSON's
    `\\u0000` and `\\ud800` parse, but are no text)."""
    if "\x00" in value:
        raise ValueError("must not contain the NUL character")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (a lone surrogate is not)") from None
    return value


class ReplyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ReplyKind = ReplyKind.ANSWER
    text: Annotated[str, AfterValidator(storable)]
    channel: ReplyChannel = ReplyChannel.INBOX


class WakeOut(BaseModel):
    requested: bool = Field(description="The owner allows it and the reply unblocked the agent")
    delivered: bool
    agent_resource: str | None
    request: str | None
    detail: str | None


class ReplyOutcome(BaseModel):
    item: ItemOut
    board_version: int
    wake: WakeOut


def utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def item_fields(item: InboxItem) -> dict[str, Any]:
    """`item_record` (what `achilles inbox show --json` prints) with the instants as UTC
    datetimes, which pydantic writes as `item_record` does: formatting each as text to
    parse it back was a third of the list's CPU per item (`achilles bench api`)."""
    return item_record(item, instant=utc)


def item_out(item: InboxItem) -> ItemOut:
    return ItemOut.model_validate(item_fields(item))


def listed_out(listing: ItemListing) -> ListedItemOut:
    return ListedItemOut.model_validate(
        {**item_fields(listing.item), "agent_name": listing.agent_name, "owner": listing.owner_key}
    )


def revision_out(revision: Revision) -> RevisionOut:
    return RevisionOut.model_validate(revision, from_attributes=True)


def etag(revision: int) -> str:
    return f'"{revision}"'


# --- approvals of agents' tool calls (issue 38) ---


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
    note: str | None = Field(default=None, max_length=MAX_NOTE_LENGTH)


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
