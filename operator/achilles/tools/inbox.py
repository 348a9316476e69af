"""Optional toolset "inbox": the agent's side of the human-in-the-loop board (seed 003).

The agent asks people questions under stable keys (one question, one row),
reads the replies they gave, acknowledges each with an outcome once it acted
on it, and moves items along with a compare-and-swap on the versions it read.
An agent only ever sees and touches its own board: ids of other agents'
items are reported as not found.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field

from achilles.domain.inbox import (
    MAX_KEY_LENGTH,
    MAX_QUESTION_LENGTH,
    MAX_TEXT_LENGTH,
    AckStatus,
    ItemState,
)
from achilles.errors import (
    AchillesError,
    InboxConflict,
    NotFound,
    ToolError,
)
from achilles.inbox import service
from achilles.inbox.presentation import item_record
from achilles.tools.base import NoArgs, ToolArgs, ToolContext, tool

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

StateName = Literal["tracked", "partial", "missing", "na", "done", "blocked"]
T = TypeVar("T")

_ACK_HINTS = {
    AckStatus.ACKNOWLEDGED: "done; the reply is processed",
    AckStatus.ALREADY_ACKNOWLEDGED: "this reply was acknowledged before; nothing changed",
    AckStatus.SUPERSEDED: "a newer reply arrived; call inbox_answered and handle that one",
    AckStatus.NOT_TAKEN: "no such reply was taken; call inbox_answered first",
}


class AskArgs(ToolArgs):
    key: str = Field(
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        description="A stable name for this question, e.g. 'q3-budget-owner'. Asking again "
        "under the same key updates the question instead of adding another.",
    )
    question: str = Field(min_length=1, max_length=MAX_QUESTION_LENGTH)
    context: str | None = Field(
        default=None,
        max_length=MAX_TEXT_LENGTH,
        description="What the person needs to know to answer.",
    )
    state: StateName = Field(
        default="blocked",
        description="'blocked' asks a person and waits for them; other states track an "
        "item without asking anyone.",
    )


class AcknowledgeArgs(ToolArgs):
    item_id: int = Field(ge=1)
    reply_serial: int = Field(ge=1, description="The reply_serial of the reply you acted on.")
    outcome: str = Field(
        min_length=1, max_length=MAX_TEXT_LENGTH, description="What you did with the reply."
    )


class AdvanceArgs(ToolArgs):
    item_id: int = Field(ge=1)
    expected_revision: int = Field(ge=1, description="The item's revision as you last read it.")
    board_version: int = Field(ge=0, description="The board_version as you last read it.")
    state: StateName = Field(description="The state to move the item to.")
    context: str | None = Field(default=None, max_length=MAX_TEXT_LENGTH)


def _as_tool_error(action: Callable[[], T]) -> T:
    try:
        return action()
    except InboxConflict as conflict:
        raise ToolError(
            f"{conflict}. Current revision {conflict.current_revision}, current board_version"
            f" {conflict.current_board_version}: read the board again (inbox_board) and decide"
            " again."
        ) from conflict
    except AchillesError as refused:
        raise ToolError(str(refused)) from refused


def _own_item(session: Session, item_id: int, ctx: ToolContext) -> None:
    item, _ = service.get_item(session, item_id)
    if item.agent_id != ctx.agent_id:
        raise NotFound(f"inbox item {item_id} does not exist")


@tool("inbox_ask", args=AskArgs)
def inbox_ask(args: AskArgs, ctx: ToolContext) -> dict[str, Any]:
    """Ask a person a question (or update one you asked) on your inbox board.

    Use one stable key per question: asking again under the same key with new context
    updates the same item. People answer later; their replies are given to you at the
    start of a later run or by inbox_answered.
    """

    def act() -> dict[str, Any]:
        with ctx.transaction() as session:
            result = service.ask(
                session, ctx.agent_id, args.key, args.question, args.context, ItemState(args.state)
            )
        return {
            **item_record(result.item, board_version=result.board_version),
            "created": result.created,
            "changed": result.changed,
        }

    return _as_tool_error(act)


@tool("inbox_answered", args=NoArgs)
def inbox_answered(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Replies people gave to your inbox questions that you have not acknowledged yet.

    Reading them marks them as taken. After acting on a reply, call inbox_acknowledge
    with its item_id and reply_serial.
    """
    with ctx.transaction() as session:
        items = service.take_pending_replies(session, ctx.agent_id)
    return {"answered": [item_record(item) for item in items]}


@tool("inbox_acknowledge", args=AcknowledgeArgs)
def inbox_acknowledge(args: AcknowledgeArgs, ctx: ToolContext) -> dict[str, Any]:
    """Record what you did with a person's reply, so it is not offered to you again."""

    def act() -> dict[str, Any]:
        with ctx.transaction() as session:
            _own_item(session, args.item_id, ctx)
            result = service.acknowledge(session, args.item_id, args.reply_serial, args.outcome)
        return {
            "status": result.status.value,
            "hint": _ACK_HINTS[result.status],
            "item": item_record(result.item),
        }

    return _as_tool_error(act)


@tool("inbox_board", args=NoArgs)
def inbox_board(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Your whole inbox board: every item with its state and revision, and the board_version.

    Pass an item's revision and the board_version to inbox_advance.
    """
    with ctx.transaction() as session:
        board = service.board(session, ctx.agent_id)
    return {
        "board_version": board.version,
        "items": [item_record(item) for item in board.items],
    }


@tool("inbox_advance", args=AdvanceArgs)
def inbox_advance(args: AdvanceArgs, ctx: ToolContext) -> dict[str, Any]:
    """Move an inbox item to another state (tracked, partial, missing, na, done, blocked).

    Succeeds only if neither the item nor the board changed since you read them;
    otherwise read the board again and decide again. A blocked item with a reply you have
    not acknowledged stays blocked until you acknowledge it.
    """

    def act() -> dict[str, Any]:
        with ctx.transaction() as session:
            _own_item(session, args.item_id, ctx)
            result = service.advance(
                session,
                args.item_id,
                expected_revision=args.expected_revision,
                board_version=args.board_version,
                target=ItemState(args.state),
                context=args.context,
            )
        return item_record(result.item, board_version=result.board_version)

    return _as_tool_error(act)


INBOX_TOOLS = (inbox_ask, inbox_answered, inbox_acknowledge, inbox_board, inbox_advance)
