"""The Agent Inbox as its users call it: the runner and its tools, the CLI, later the portal API.

One function per act. The SQL decisions stay in `achilles.db.inbox*` (one
guarded statement each); this layer adds what sits around them — above all
whether a human's reply wakes the agent — so no caller combines the pieces by
hand. The caller owns the transaction: pass a Session inside `session.begin()`.

What the runner calls at the start of a run, when the agent has the inbox
toolset: `offer_pending_replies(database.transaction, agent_id)`, and adds the
note it returns (if any) to the run's opening messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from achilles.db import inbox as inbox_db
from achilles.db import inbox_replies, inbox_settings
from achilles.domain.inbox import Board, InboxItem, ItemState, ReplyChannel, ReplyKind
from achilles.domain.inbox_wake import InboxSettings, should_request_run
from achilles.errors import NotFound
from achilles.inbox.presentation import pending_replies_message

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

AskResult = inbox_db.AskResult
AdvanceResult = inbox_db.AdvanceResult
AckResult = inbox_replies.AckResult
ItemListing = inbox_db.ItemListing


@dataclass(frozen=True)
class AgentResource:
    """The Agent custom resource a run request is written to."""

    namespace: str
    name: str


@dataclass(frozen=True)
class ReplyReceipt:
    accepted: bool  # False only when the chat rule refused the reply
    item: InboxItem
    board_version: int
    # The owner allows replies to wake the agent, and this reply unblocked it.
    wake_requested: bool
    # Where to request the run (None: the agent has no known Agent resource).
    agent_resource: AgentResource | None


def reply(
    session: Session,
    item_id: int,
    text: str,
    *,
    kind: ReplyKind = ReplyKind.ANSWER,
    channel: ReplyChannel = ReplyChannel.INBOX,
) -> ReplyReceipt:
    """A human's reply. Inbox replies always land; chat replies only over a taken reply."""
    written = inbox_replies.write_reply(session, item_id, text, kind, channel)
    agent = inbox_settings.load_inbox_settings(session, written.item.agent_id)
    wake = written.accepted and should_request_run(written.item.state, agent.settings)
    resource = None
    if agent.cr_namespace and agent.cr_name:
        resource = AgentResource(namespace=agent.cr_namespace, name=agent.cr_name)
    return ReplyReceipt(
        accepted=written.accepted,
        item=written.item,
        board_version=written.board_version,
        wake_requested=wake,
        agent_resource=resource,
    )


def ask(
    session: Session,
    agent_id: int,
    key: str,
    question: str,
    context: str | None = None,
    state: ItemState = ItemState.BLOCKED,
) -> AskResult:
    """Ask a human (or track a dependency) under a stable key; same key, same row."""
    return inbox_db.ask(session, agent_id, key, question, context, state)


def advance(
    session: Session,
    item_id: int,
    *,
    expected_revision: int,
    board_version: int,
    target: ItemState,
    context: str | None = None,
) -> AdvanceResult:
    """`board_advance`: compare-and-swap on the item's revision and the board version."""
    return inbox_db.board_advance(
        session,
        item_id,
        expected_revision=expected_revision,
        board_version=board_version,
        target=target,
        context=context,
    )


def take_reply(session: Session, item_id: int) -> InboxItem | None:
    """Take one item's unprocessed reply (idempotent); None when there is none."""
    return inbox_replies.take_reply(session, item_id)


def acknowledge(session: Session, item_id: int, reply_serial: int, outcome: str) -> AckResult:
    return inbox_replies.acknowledge(session, item_id, reply_serial, outcome)


def board(session: Session, agent_id: int) -> Board:
    return inbox_db.read_board(session, agent_id)


def get_item(session: Session, item_id: int) -> tuple[InboxItem, int]:
    """An item and its board's version, from one snapshot."""
    return inbox_db.get_item_and_board_version(session, item_id)


def list_items(
    session: Session,
    *,
    owner_key: str | None = None,
    agent_id: int | None = None,
    states: Sequence[ItemState] = (),
    unprocessed_only: bool = False,
    limit: int = 200,
) -> list[ItemListing]:
    """Items for people to look at, oldest first, with their agent's name and owner."""
    return inbox_db.list_items(
        session,
        owner_key=owner_key,
        agent_id=agent_id,
        states=states,
        unprocessed_only=unprocessed_only,
        limit=limit,
    )


def get_listing(session: Session, item_id: int) -> ItemListing:
    found = inbox_db.list_items(session, item_id=item_id, limit=1)
    if not found:
        raise NotFound(f"inbox item {item_id} does not exist")
    return found[0]


def pending_replies(session: Session, agent_id: int) -> list[InboxItem]:
    """Answered but not processed (taken or not), oldest reply first; reads only."""
    return inbox_replies.answered_unprocessed(session, agent_id)


def take_pending_replies(session: Session, agent_id: int) -> list[InboxItem]:
    """Take every answered-but-not-processed reply, to offer them to the agent.

    Replies a crashed run took but never acknowledged are offered again.
    """
    return inbox_replies.take_unprocessed(session, agent_id)


def offer_pending_replies(
    transaction: Callable[[], AbstractContextManager[Session]], agent_id: int
) -> str | None:
    """At run start: take the pending replies (in their own committed transaction) and
    return the note that tells the agent about them, or None when there are none.

    Taking before the model sees them is safe: until the agent acknowledges a
    reply, it stays "answered but not processed" and the next run is offered
    it again.
    """
    with transaction() as session:
        items = take_pending_replies(session, agent_id)
    return pending_replies_message(items)


def set_wake_on_reply(session: Session, agent_id: int, enabled: bool) -> InboxSettings:
    return inbox_settings.set_wake_on_reply(session, agent_id, enabled)


def wake_settings(session: Session, agent_id: int) -> InboxSettings:
    return inbox_settings.load_inbox_settings(session, agent_id).settings
