"""Optional toolset "inbox": the agent's side of the human-in-the-loop board (seed 003).

The agent asks people questions under stable keys (one question, one row),
reads the replies they gave, acknowledges each with an outcome once it acted
on it, and moves items along with a compare-and-swap on the versions it read.
An agent only ever sees and touches its own board: ids of other agents'
items are reported as not found.

Each tool is one transaction of the run (`ctx.transaction`) around the guarded
statements of `achilles.db.inbox`. The toolset also has something to say when a run
starts: the replies people gave since the last one (`run_start_note`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field

from achilles.db.inbox import board, replies
from achilles.domain.inbox import (
    MAX_KEY_LENGTH,
    MAX_QUESTION_LENGTH,
    MAX_TEXT_LENGTH,
    AckStatus,
    InboxItem,
    ItemState,
)
from achilles.domain.inbox_records import item_record
from achilles.domain.run_trace import StepKind
from achilles.errors import (
    AchillesError,
    InboxConflict,
    NotFound,
    ToolError,
)
from achilles.tools.base import NoArgs, ToolArgs, ToolContext, tool

if TYPE_CHECKING:
    from achilles.db.database import Session

StateName = Literal["tracked", "partial", "missing", "na", "done", "blocked"]
T = TypeVar("T")

_ACK_HINTS = {
    AckStatus.ACKNOWLEDGED: "done; the reply is processed",
    AckStatus.ALREADY_ACKNOWLEDGED: "this reply was acknowledged before; nothing changed",
    AckStatus.SUPERSEDED: "a newer reply arrived; call inbox_answered and handle that one",
    AckStatus.NOT_TAKEN: "this reply was not taken yet; call inbox_answered first",
    AckStatus.NO_SUCH_REPLY: "there is no reply with this serial; call inbox_answered for"
    " the replies you have",
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
    state: StateName | None = Field(
        default=None,
        description="'blocked' asks a person and waits for them; other states track an "
        "item without asking anyone. Absent: a new item is blocked, an existing one keeps "
        "its state. Changing an existing item's state needs expected_revision and "
        "board_version, as inbox_advance does.",
    )
    expected_revision: int | None = Field(
        default=None,
        ge=1,
        description="When the state changes: the item's revision as you last read it.",
    )
    board_version: int | None = Field(
        default=None,
        ge=0,
        description="When the state changes: the board_version as you last read it.",
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
    item = board.get_item(session, item_id)
    if item.agent_id != ctx.agent_id:
        raise NotFound(f"inbox item {item_id} does not exist")


@tool("inbox_ask", args=AskArgs, step_kind=StepKind.INBOX_ASK)
def inbox_ask(args: AskArgs, ctx: ToolContext) -> dict[str, Any]:
    """Ask a person a question (or update one you asked) on your inbox board.

    Use one stable key per question: asking again under the same key with new context
    updates the same item. To change an existing item's state (e.g. ask a closed question
    again as blocked), pass the expected_revision and board_version you read. People
    answer later; their replies are given to you at the start of a later run or by
    inbox_answered.
    """

    def act() -> dict[str, Any]:
        with ctx.transaction() as session:
            result = board.ask(
                session,
                ctx.agent_id,
                args.key,
                args.question,
                args.context,
                None if args.state is None else ItemState(args.state),
                expected_revision=args.expected_revision,
                board_version=args.board_version,
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
        items = replies.take_unprocessed_replies(session, ctx.agent_id)
    return {"answered": [item_record(item) for item in items]}


@tool("inbox_acknowledge", args=AcknowledgeArgs)
def inbox_acknowledge(args: AcknowledgeArgs, ctx: ToolContext) -> dict[str, Any]:
    """Record what you did with a person's reply, so it is not offered to you again."""

    def act() -> dict[str, Any]:
        with ctx.transaction() as session:
            _own_item(session, args.item_id, ctx)
            result = replies.acknowledge(session, args.item_id, args.reply_serial, args.outcome)
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
        current = board.read_board(session, ctx.agent_id)
    return {
        "board_version": current.version,
        "items": [item_record(item) for item in current.items],
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
            result = board.board_advance(
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


def run_start_note(ctx: ToolContext) -> str | None:
    """At run start: take the unprocessed replies (in their own committed transaction)
    and return the note that tells the agent about them, or None when there are none.

    Taking before the model sees them is safe: until the agent acknowledges a reply,
    it stays unprocessed and the next run is offered it again.
    """
    with ctx.transaction() as session:
        items = replies.take_unprocessed_replies(session, ctx.agent_id)
    return unprocessed_replies_note(items)


def unprocessed_replies_note(items: Sequence[InboxItem]) -> str | None:
    """The note a run starts with when people answered; None when nobody did."""
    if not items:
        return None
    lines = [
        f"Since your last run, people answered {len(items)} of your inbox question(s)."
        " For each one, act on the reply, then call inbox_acknowledge with its item_id,"
        " reply_serial and a short outcome; a reply of kind 'clarify' asks you to explain"
        " or rephrase the question (update it with inbox_ask under the same key)."
    ]
    for item in items:
        reply = item.reply
        if reply is None:
            continue
        lines.append(
            f"- item_id={item.id} key={item.key!r} reply_serial={reply.serial}"
            f" kind={reply.kind.value} state={item.state.value}\n"
            f"  question: {item.question}\n"
            f"  reply: {reply.text}"
        )
    return "\n".join(lines)
