"""The Agent Inbox as its users call it: the runner and its tools, the CLI, later the portal API.

One function per act. The SQL decisions stay in `achilles.db.inbox.board*` (one
guarded statement each); this layer adds what sits around them — above all
whether a human's reply wakes the agent — so no caller combines the pieces by
hand. The caller owns the transaction: pass a Session inside `session.begin()`.

What the runner calls at the start of a run, when the agent has the inbox
toolset: `offer_pending_replies(database.transaction, agent_id)`, and adds the
note it returns (if any) to the run's opening messages.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from achilles.db.inbox import board as inbox_db
from achilles.db.inbox import replies as inbox_replies
from achilles.db.inbox import settings as inbox_settings
from achilles.domain.inbox import InboxItem, ReplyChannel, ReplyKind
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


# Acts the SQL decides on its own: `achilles.db.inbox.board*`'s functions under this
# layer's names (their docstrings there), so signatures and defaults are written once.
ask = inbox_db.ask
advance = inbox_db.board_advance
take_reply = inbox_replies.take_reply
acknowledge = inbox_replies.acknowledge
board = inbox_db.read_board
get_item = inbox_db.get_item_and_board_version
list_items = inbox_db.list_items
pending_replies = inbox_replies.answered_unprocessed
take_pending_replies = inbox_replies.take_unprocessed
set_wake_on_reply = inbox_settings.set_wake_on_reply


def get_listing(session: Session, item_id: int) -> ItemListing:
    found = inbox_db.list_items(session, item_id=item_id, limit=1)
    if not found:
        raise NotFound(f"inbox item {item_id} does not exist")
    return found[0]


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


def wake_settings(session: Session, agent_id: int) -> InboxSettings:
    return inbox_settings.load_inbox_settings(session, agent_id).settings
